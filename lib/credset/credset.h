/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The credential objects airlockd hands the node and the node hands the
 * gateway (docs/node-protocol.md, sandbox.secrets.set): one parser and one
 * set of limits for both, and for the API that makes them (src/daemon/
 * secretreq.c takes its limits from here), so what one side accepts the
 * next one does too. No I/O; the fuzzer drives it (tests/fuzz/fuzz-credset.c).
 *
 *   {"name","placeholder","value","hosts":[...],"ports"?:[...],
 *    "inject":{"header","template"} | {"basic"},"methods"?:[...],
 *    "paths"?:[...],"expires_at"?,"rate_per_min"?}
 *
 * The parse borrows: every string of an entry points into the JSON, which
 * must outlive it.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CREDSET_MAX 16           /* credentials per sandbox */
#define CREDSET_NAME_MAX 64      /* [a-z0-9_-] */
#define CREDSET_PLACEHOLDER_PREFIX "airlock_ph_"
#define CREDSET_PLACEHOLDER_LEN (sizeof CREDSET_PLACEHOLDER_PREFIX - 1 + 32) /* and 32 hex digits */
#define CREDSET_VALUE_MAX 8192
#define CREDSET_HOSTS_MAX 16
#define CREDSET_HOST_MAX 255     /* "*." and a lowercase host name */
#define CREDSET_PORTS_MAX 8
#define CREDSET_METHODS_MAX 16
#define CREDSET_METHOD_MAX 16    /* capitals */
#define CREDSET_PATHS_MAX 16
#define CREDSET_PATH_MAX 1024    /* a prefix from '/': no space, '?', '#' or control */
#define CREDSET_HEADER_NAME_MAX 64
#define CREDSET_TEMPLATE_MAX 1024 /* holds {value} exactly once */
#define CREDSET_USER_MAX 256     /* basic auth: no ':' */
#define CREDSET_RATE_MAX 100000  /* uses a minute */

struct credset_entry {
        const char *name, *placeholder;
        const char *value;
        size_t value_len;
        const char *hosts[CREDSET_HOSTS_MAX]; /* "*.x" is a wildcard */
        size_t n_hosts;
        uint16_t ports[CREDSET_PORTS_MAX]; /* none given: 443 */
        size_t n_ports;
        const char *header;   /* the header it goes into ("Authorization" for basic) */
        const char *template; /* with {value}; NULL for basic */
        const char *user;     /* basic auth's user, or NULL */
        const char *methods[CREDSET_METHODS_MAX];
        size_t n_methods;
        const char *paths[CREDSET_PATHS_MAX];
        size_t n_paths;
        int64_t expires_at;    /* Unix seconds; 0: never */
        unsigned rate_per_min; /* 0: unlimited */
};

/* Whether a value may go into a header line: 1..CREDSET_VALUE_MAX bytes,
 * none of them NUL, CR, LF or another control character but tab. */
bool credset_value_ok(const char *value, size_t n);

/* Whether a header name may carry a credential: a token of letters,
 * digits, '-' and '_', and none the gateway owns or that frames a request
 * (Host, Content-Length, Transfer-Encoding, Connection, ...). */
bool credset_header_name_ok(const char *name, size_t n);

/* Parses a set: an array of at most CREDSET_MAX credential objects with
 * distinct names and placeholders, into ret[] (CREDSET_MAX entries) and
 * *ret_n. 0, or -EINVAL with a message naming the entry and the field in
 * err (n bytes) that never quotes a value. */
int credset_parse(const json_t *a, struct credset_entry ret[CREDSET_MAX], size_t *ret_n, char *err, size_t n);

/*
 * A request target's path as an origin reads it (RFC 3986 6.2.2): escapes
 * of unreserved characters decoded, the other escapes' hex in capitals,
 * dot segments removed (5.2.4); the query, from the first '?', kept as it
 * came. A credential's path rule is decided on this, and this is what the
 * gateway forwards. Refused with -EINVAL and *ret_why (a static string):
 * a target not from '/', what origins read two ways (an escaped '/' or
 * '\', a '\', a ';' of path parameters), an escape that is not two hex
 * digits, an escaped control character, a byte outside printable ASCII or
 * a '#', and a ".." above the root. -ENOBUFS when outsz < len + 1 (never
 * longer than the input). in needs no NUL; out gets one.
 */
int credset_path_canonical(const char *in, size_t len, char *out, size_t outsz, const char **ret_why);
