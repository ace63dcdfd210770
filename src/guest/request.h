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

/* The agent's version, in HELLO as "airlock-guest VERSION"; a build may
 * set it (-DGUEST_AGENT_VERSION=...): the tests build a bumped agent to
 * upgrade to. 0.2.0 is the first that upgrades in place. */
#ifndef GUEST_AGENT_VERSION
#define GUEST_AGENT_VERSION "0.2.0"
#endif
#define GUEST_AGENT_NAME "airlock-guest " GUEST_AGENT_VERSION
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
#define GUEST_MAX_USER 32u            /* EXEC user name, bytes */
#define GUEST_MAX_TAG 256u            /* EXEC tag, bytes */
#define GUEST_MAX_PROCESS_INFO (64u << 10) /* JSON a process's PROCESSES entry keeps */
#define GUEST_MAX_WATCHES 16u         /* WATCH streams per host connection */
#define GUEST_MAX_WATCH_DIRS 8192u    /* directories one (recursive) WATCH watches */
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
/* The same for a request that takes no members ({}; any given are
 * ignored): 0 or -EINVAL. */
int guest_json_check(const void *payload, size_t len);

/* HELLO {"nonce":s,"version":1}: returns the nonce (at most GUEST_MAX_NONCE
 * bytes). A version other than 1 gives -EPROTONOSUPPORT. */
int guest_hello_parse(const void *payload, size_t len, char **ret_nonce);

/* What the agent does beyond the first protocol, for HELLO's and an
 * UPGRADE's "features": a new array (NULL on ENOMEM). */
json_t *guest_features_json(void);

/* VOLUME_MOUNT {"slot":n,"path":s,"read_only":b,"wait_ms":n}: mount the
 * volume in slot n (the virtio-blk disk with serial "volN") at path, made
 * if missing. path must pass proto_volume_path_is_allowed(); wait_ms (at
 * most GUEST_VOLUME_WAIT_MS_MAX) bounds the wait for the disk's size to
 * show (the host resizes a slot restored empty). ret->path is the
 * caller's to free. */
#define GUEST_VOLUME_SLOTS 4u
#define GUEST_VOLUME_WAIT_MS_DEFAULT 5000u
#define GUEST_VOLUME_WAIT_MS_MAX 60000u
struct guest_volume_mount {
        unsigned slot;
        char *path;
        bool read_only;
        uint64_t wait_ms;
};
int guest_volume_mount_parse(const void *payload, size_t len, struct guest_volume_mount *ret);

/* UPGRADE {"path":s,"idle_ms":n}: the staged agent binary (a valid
 * path), and the idle time the agent is to keep (staging it was no use of
 * the sandbox); -1 without one. */
int guest_upgrade_parse(const void *payload, size_t len, char **ret_path, int64_t *ret_idle_ms);

/*
 * The bytes an upgrade's state carries beside its JSON (output rings,
 * pending stdin, unread frames): appended to one area and named in the
 * JSON as {"off":n,"len":n}.
 */
struct guest_blob {
        uint8_t *data;
        size_t len, cap;
};
/* Appends n bytes; returns their {"off","len"} (NULL on ENOMEM). */
json_t *guest_blob_add(struct guest_blob *b, const void *data, size_t n);
/* The bytes ref names in data[0..size): -EINVAL when ref is malformed or
 * reaches outside, or longer than max. */
int guest_blob_get(const uint8_t *data, size_t size, json_t *ref, size_t max, const uint8_t **ret,
                   size_t *ret_len);
void guest_blob_release(struct guest_blob *b);

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
        bool has_cwd;
        bool has_uid, has_gid;
        uint32_t uid, gid; /* 0 by default */
        char *user;        /* NULL: uid/gid as given */
        char *tag;         /* NULL: none */
        bool pty;
        uint16_t rows, cols; /* 24x80 by default */
};
/* EXEC {"argv","env","cwd","uid","gid","user","tag","pty","rows","cols"}:
 * argv 1..4096 strings, env at most 4096 entries, every string <= 128 KiB
 * without NUL bytes, env keys non-empty without '=', cwd a valid path, user
 * a valid user name (guest_user_name_is_valid(); not with uid or gid), tag
 * at most GUEST_MAX_TAG bytes. */
int guest_exec_request_parse(const void *payload, size_t len, struct guest_exec_request **ret);
void guest_exec_request_free(struct guest_exec_request *req);

/* [a-z_][a-z0-9_-]{0,31}: the user names EXEC accepts ("root" is one). */
bool guest_user_name_is_valid(const char *name);

/* ADOPT {"pid":n}, 1 <= n <= INT32_MAX. */
int guest_adopt_parse(const void *payload, size_t len, int32_t *ret_pid);

/*
 * What PROCESSES reports of a process, built at EXEC: {"argv","cwd","env"
 * (the request's own, not the defaults),"tag"?,"pty"}. guest_process_info()
 * builds it from a parsed request and the cwd the process got;
 * guest_process_info_fit() returns it (a new reference) in at most max
 * bytes of JSON: argv and env strings are cut on UTF-8 character
 * boundaries, then entries dropped, then cwd shortened to a parent
 * directory, and "truncated":true says so. tag and pty are always kept
 * (max must leave room for them and a short cwd: 4 KiB does). NULL on
 * ENOMEM.
 */
json_t *guest_process_info(const struct guest_exec_request *req, const char *cwd);
json_t *guest_process_info_fit(json_t *info, size_t max);

/* SIGNAL {"signal":n}, 1 <= n <= 64. */
int guest_signal_parse(const void *payload, size_t len, int *ret_signal);
/* RESIZE {"rows":n,"cols":n}, 1..65535 each. */
int guest_resize_parse(const void *payload, size_t len, uint16_t *ret_rows, uint16_t *ret_cols);
/* FILE_END {} or {"abort":b}. */
int guest_file_end_parse(const void *payload, size_t len, bool *ret_abort);

/* The file requests: path (and "to" for RENAME) validated paths, mode <= 07777
 * (FILE_WRITE, default 0644), flag = "recursive" (REMOVE, WATCH) or
 * "parents" (MKDIR), false by default, user (optional, every type) a valid
 * user name (guest_user_name_is_valid()) the request runs as. */
struct guest_path_request {
        char *path;
        char *to;
        uint32_t mode;
        bool flag;
        char *user; /* NULL: as the agent (root) */
        char *root; /* NULL: "/"; else the directory the paths are in (a volume's mount) */
        /* SETATTR: what changes (mode, when has_mode, is in mode) */
        int64_t uid, gid; /* -1: unchanged */
        bool has_mode;
};
/* type is one of PROTO_FILE_READ, _FILE_WRITE, _LIST, _STAT, _RENAME,
 * _REMOVE, _MKDIR, _SETATTR, _WATCH; anything else is -EOPNOTSUPP. "root"
 * is refused for WATCH. */
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

/*
 * The guest's users and groups, read from its own passwd(5) and group(5)
 * files (users.c) without NSS: the agent is static, and glibc's getpwnam()
 * would load the NSS modules of the guest's own, other glibc. Files are
 * read whole, at most GUEST_MAX_ACCOUNTS_FILE bytes each.
 */
#define GUEST_PASSWD_PATH "/etc/passwd"
#define GUEST_GROUP_PATH "/etc/group"
#define GUEST_MAX_ACCOUNTS_FILE (4u << 20)
#define GUEST_MAX_GROUPS 1024u /* supplementary groups set for a user */

struct guest_user {
        char *name;
        uint32_t uid, gid;
        char *home;  /* "/" when the file leaves it empty */
        char *shell; /* "/bin/sh" when the file leaves it empty */
        uint32_t *groups; /* gid first, then every group that lists the user */
        size_t n_groups;
};
/* Looks user name up in passwd_path (first entry wins) and its groups in
 * group_path (missing: only the primary group). -ESRCH when there is no
 * such user (also when passwd_path is missing), -EFBIG for a file over the
 * limit. */
int guest_user_lookup(const char *passwd_path, const char *group_path, const char *name,
                      struct guest_user **ret);
void guest_user_free(struct guest_user *u);

/* uid -> user name and gid -> group name, for STAT and LIST entries: both
 * files read once per request (a missing or oversized one maps nothing). */
struct guest_idmap;
int guest_idmap_load(const char *passwd_path, const char *group_path, struct guest_idmap **ret);
/* The name of uid / gid, or NULL when the files do not name it. */
const char *guest_idmap_user(const struct guest_idmap *m, uint32_t uid);
const char *guest_idmap_group(const struct guest_idmap *m, uint32_t gid);
void guest_idmap_free(struct guest_idmap *m);

/* Copies s (n bytes) into a NUL-terminated string where every byte
 * sequence that is not well-formed UTF-8 (and every NUL) becomes U+FFFD, so
 * any file name can be put into JSON. */
int guest_utf8_sanitize(const char *s, size_t n, char **ret);

/* Renders obj as compact JSON. -EMSGSIZE when longer than max bytes. */
int guest_json_dump(json_t *obj, size_t max, char **ret, size_t *ret_len);

DEFINE_TRIVIAL_CLEANUP_FUNC(char **, guest_strv_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_identity *, guest_identity_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_exec_request *, guest_exec_request_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_user *, guest_user_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_idmap *, guest_idmap_free)
/* jansson provides json_decrefp() (NULL-safe) for json_auto_t */
#define _cleanup_json_ _cleanup_(json_decrefp)
