/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * guest_lib: the pure logic of the guest agent, kept apart from the
 * syscalls so that unit tests and fuzzers can drive it on the host.
 *
 * Every parser takes one untrusted JSON payload exactly as it came off the
 * channel (not NUL-terminated), checks it against the limits of
 * docs/guest-protocol.md and returns 0 or a negative errno (-EINVAL for
 * anything malformed, -E2BIG for a list over its limit). Out-parameters are
 * written only on success; what they own is released with the matching
 * *_free() or guest_strv_free().
 */

#include "util.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "macros.h"

#define GUEST_AGENT_NAME "airlock-guest 0.1.0"
#define GUEST_MAX_PATH PATH_SAFE_MAX         /* bytes, without the NUL */
#define GUEST_MAX_ARGV 4096u          /* argv entries */
#define GUEST_MAX_ENV 4096u           /* env entries per object */
#define GUEST_MAX_STRING (128u << 10) /* any string the host sends */
#define GUEST_MAX_NONCE 256u          /* HELLO nonce */
#define GUEST_MAX_HOSTNAME 64u        /* HOST_NAME_MAX on Linux */
#define GUEST_MAX_PROCESSES 256u      /* live processes */
#define GUEST_MAX_TRANSFERS 64u       /* open file transfers */
#define GUEST_MAX_LIST_ENTRIES 10000u /* LIST entries before "truncated" */
#define GUEST_SEED_SIZE 32u           /* IDENTITY seed, bytes */
#define GUEST_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define GUEST_DEFAULT_FILE_MODE 0644u

/* Frees a NULL-terminated string vector and its strings; NULL is fine. */
void guest_strv_free(char **v);
/* Number of entries of a NULL-terminated vector (NULL counts as 0). */
size_t guest_strv_length(char *const *v);

/* Accepts an absolute path of at most GUEST_MAX_PATH bytes without a ".."
 * component, the rule for every path the host names. 0 or -EINVAL. */
int guest_path_validate(const char *path);

/* Parses payload as one JSON object. -EINVAL when it is not valid JSON or
 * not an object. The caller owns *ret (json_decref). */
int guest_json_parse(const void *payload, size_t len, json_t **ret);

/* HELLO {"nonce":s,"version":1}: returns the nonce (at most GUEST_MAX_NONCE
 * bytes). A version other than 1 gives -EPROTONOSUPPORT. */
int guest_hello_parse(const void *payload, size_t len, char **ret_nonce);

struct guest_identity {
        char *sandbox_id; /* NULL when absent */
        char *hostname;   /* NULL when absent */
        char **env;       /* "K=V" vector, NULL when absent */
        bool has_time;
        uint64_t time_ns;
        bool has_seed;
        uint8_t seed[GUEST_SEED_SIZE];
};
/* IDENTITY {"sandbox_id","hostname","env","time_ns","seed"}: every field is
 * optional, every present field is type- and range-checked (sandbox_id a
 * safe name, hostname 1..64 bytes of [A-Za-z0-9.-], seed 64 hex digits). */
int guest_identity_parse(const void *payload, size_t len, struct guest_identity **ret);
void guest_identity_free(struct guest_identity *id);

struct guest_exec_request {
        char **argv; /* >= 1 entry */
        char **env;  /* "K=V", never NULL (may be empty) */
        char *cwd;   /* "/" by default */
        bool has_uid, has_gid;
        uint32_t uid, gid; /* 0 by default */
        bool pty;
        uint16_t rows, cols; /* 24x80 by default */
};
/* EXEC {"argv","env","cwd","uid","gid","pty","rows","cols"}: argv 1..4096
 * strings, env at most 4096 entries, every string <= 128 KiB without NUL
 * bytes, env keys non-empty without '=', cwd a valid path. */
int guest_exec_request_parse(const void *payload, size_t len, struct guest_exec_request **ret);
void guest_exec_request_free(struct guest_exec_request *req);

/* SIGNAL {"signal":n}, 1 <= n <= 64. */
int guest_signal_parse(const void *payload, size_t len, int *ret_signal);
/* RESIZE {"rows":n,"cols":n}, 1..65535 each. */
int guest_resize_parse(const void *payload, size_t len, uint16_t *ret_rows, uint16_t *ret_cols);
/* FILE_END {} or {"abort":b}. */
int guest_file_end_parse(const void *payload, size_t len, bool *ret_abort);

/* The file requests: path (and "to" for RENAME) validated paths, mode <= 07777
 * (FILE_WRITE, default 0644), flag = "recursive" (REMOVE) or "parents"
 * (MKDIR), false by default. */
struct guest_path_request {
        char *path;
        char *to;
        uint32_t mode;
        bool flag;
};
/* type is one of PROTO_FILE_READ, _FILE_WRITE, _LIST, _STAT, _RENAME,
 * _REMOVE, _MKDIR; anything else is -EOPNOTSUPP. */
int guest_path_request_parse(uint8_t type, const void *payload, size_t len, struct guest_path_request *ret);
void guest_path_request_release(struct guest_path_request *req);

/* Converts a JSON object of string values into a "K=V" vector (at most
 * GUEST_MAX_ENV entries, keys non-empty without '=' or NUL). */
int guest_env_from_json(json_t *obj, char ***ret);

/*
 * Builds the environment of a new process: base (the IDENTITY env), then
 * overlay (the EXEC env) replacing entries with the same key, then PATH
 * (GUEST_DEFAULT_PATH) and HOME (home) where still missing. Either vector
 * may be NULL.
 */
int guest_env_merge(char *const *base, char *const *overlay, const char *home, char ***ret);

/* Copies s (n bytes) into a NUL-terminated string where every byte
 * sequence that is not well-formed UTF-8 (and every NUL) becomes U+FFFD, so
 * any file name can be put into JSON. */
int guest_utf8_sanitize(const char *s, size_t n, char **ret);

/* Renders obj as compact JSON. -EMSGSIZE when longer than max bytes. */
int guest_json_dump(json_t *obj, size_t max, char **ret, size_t *ret_len);

DEFINE_TRIVIAL_CLEANUP_FUNC(char **, guest_strv_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_identity *, guest_identity_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_exec_request *, guest_exec_request_free)
/* jansson provides json_decrefp() (NULL-safe) for json_auto_t */
#define _cleanup_json_ _cleanup_(json_decrefp)
