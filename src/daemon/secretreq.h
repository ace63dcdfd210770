/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The body of POST /v1/secrets, checked strictly (docs/api.md,
 * "Credentials"): no I/O, so the fuzzer drives it (tests/fuzz/fuzz-secretreq.c).
 * Every function returns 0 or -EINVAL with a message naming the field in err
 * (API_ERRMSG_MAX bytes); results are written only on success.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "credset.h"

/* the limits of the credential objects the node and the gateway take: what
 * the API accepts goes through them (lib/credset) */
#define SECRETREQ_HOSTS_MAX CREDSET_HOSTS_MAX
#define SECRETREQ_PORTS_MAX CREDSET_PORTS_MAX
#define SECRETREQ_METHODS_MAX CREDSET_METHODS_MAX
#define SECRETREQ_PATHS_MAX CREDSET_PATHS_MAX
#define SECRETREQ_PATH_MAX CREDSET_PATH_MAX
#define SECRETREQ_HEADER_NAME_MAX CREDSET_HEADER_NAME_MAX
#define SECRETREQ_TEMPLATE_MAX CREDSET_TEMPLATE_MAX
#define SECRETREQ_USER_MAX CREDSET_USER_MAX
#define SECRETREQ_RATE_MAX CREDSET_RATE_MAX
#define SECRETREQ_PLACEHOLDER_PREFIX CREDSET_PLACEHOLDER_PREFIX
#define SECRETREQ_PLACEHOLDER_LEN CREDSET_PLACEHOLDER_LEN

struct secretreq {
        char *name;
        char *value; /* value_len bytes + NUL; wiped by secretreq_release() */
        size_t value_len;
        char *tenant;       /* "tenant" given (an admin's choice of scope), else NULL */
        char *sandbox;      /* "sandbox" given: the scope narrowed to it, else NULL */
        int64_t expires_at; /* Unix seconds, 0: never */
        json_t *spec;       /* {"hosts","ports","inject","methods","paths","rate_per_min"}: canonical */
};

/* now_s: the current Unix time (an expiry at or before it is refused). */
int secretreq_parse(const json_t *o, int64_t now_s, struct secretreq *ret, char *err);
void secretreq_release(struct secretreq *r);

/* RFC 3339 ("2026-12-31T23:59:59Z", "...+01:00", fractions ignored) to Unix
 * seconds; -EINVAL when malformed. */
int secretreq_parse_rfc3339(const char *s, int64_t *ret);

/* The env variable of a secret: its name upper-cased, '-' as '_' ("gh-app"
 * -> "GH_APP"). out: at least 65 bytes. */
void secretreq_env_name(const char *name, char *out, size_t n);

/* The credential object the node and the gateway take (docs/node-protocol.md,
 * sandbox.secrets.set) from a stored spec text: a new object, NULL when
 * spec_text is not a spec or out of memory. */
json_t *secretreq_credential(const char *name, const char *placeholder, const char *value, size_t value_len,
                             const char *spec_text, int64_t expires_at);
