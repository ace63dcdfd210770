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

#define SECRETREQ_HOSTS_MAX 16
#define SECRETREQ_PORTS_MAX 8
#define SECRETREQ_METHODS_MAX 16
#define SECRETREQ_PATHS_MAX 16
#define SECRETREQ_PATH_MAX 1024
#define SECRETREQ_HEADER_NAME_MAX 64
#define SECRETREQ_TEMPLATE_MAX 1024
#define SECRETREQ_USER_MAX 256
#define SECRETREQ_RATE_MAX 100000
#define SECRETREQ_PLACEHOLDER_PREFIX "airlock_ph_"
#define SECRETREQ_PLACEHOLDER_LEN (sizeof SECRETREQ_PLACEHOLDER_PREFIX - 1 + 32)

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
