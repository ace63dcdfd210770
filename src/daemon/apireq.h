/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Parsing and strict validation of API request bodies and parameters. Every
 * function takes untrusted bytes, returns 0 or -EINVAL (-EFBIG for data
 * over a limit), and on failure writes a message for the client that names
 * the offending field into err (API_ERRMSG_MAX bytes). Bodies are strict:
 * apireq_check_body() refuses a field the body's handler would not read
 * (http.c calls it for every body before the handler runs, so a misspelt
 * setting is an error, never silently dropped); the parsers below then
 * reject known fields of the wrong type. Results are written only on
 * success and owned by the caller. No function here does I/O, so the fuzzer
 * drives them directly (tests/fuzz/fuzz-http-json.c).
 */

#include "util.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "apierror.h"
#include "retention.h"

#define APIREQ_PATH_MAX PATH_SAFE_MAX
#define APIREQ_CMD_MAX_ARGS 4096
#define APIREQ_ENV_MAX 1024
#define APIREQ_METADATA_MAX 64
#define APIREQ_METADATA_VALUE_MAX 1024
#define APIREQ_STDIN_MAX (512u << 10) /* decoded bytes per stdin request */
#define APIREQ_DEFAULT_TEMPLATE "python"
#define APIREQ_DEFAULT_EXEC_TIMEOUT_S 60

/* The kinds of request body, each with the list of fields its handler
 * reads (apireq.c); every POST and JSON PUT route names one (http.c). */
enum apireq_body {
        APIREQ_BODY_NONE,     /* no fields: empty or {} (most lifecycle verbs, key rotation) */
        APIREQ_BODY_CREATE,   /* POST /v1/sandboxes, also its nested "snapshot_policy" */
        APIREQ_BODY_EXEC,     /* POST /v1/sandboxes/{id}/exec */
        APIREQ_BODY_SESSION,  /* POST /v1/sandboxes/{id}/sessions */
        APIREQ_BODY_STDIN,    /* POST /v1/sessions/{sid}/stdin */
        APIREQ_BODY_SIGNAL,   /* POST /v1/sessions/{sid}/signal */
        APIREQ_BODY_RESIZE,   /* POST /v1/sessions/{sid}/resize {"rows","cols"} */
        APIREQ_BODY_ROLLBACK, /* {"snapshot"} */
        APIREQ_BODY_SNAPSHOT, /* {"kind"} */
        APIREQ_BODY_NAME,     /* {"name"}: an API key */
        APIREQ_BODY_IMAGE,    /* {"name","snapshot"}: an image */
        APIREQ_BODY_TENANT,   /* {"name","network"}: a tenant */
        APIREQ_BODY_NETWORK,  /* an egress policy (PUT .../network): its top-level fields; lib/netpolicy the
                                 rest */
        APIREQ_BODY_SECRET,   /* POST /v1/secrets (api-secrets.c checks each field) */
        APIREQ_BODY_FORK,     /* POST /v1/sandboxes/{id}/fork {"secrets"} */
        APIREQ_BODY_JOIN_TOKEN, /* POST /v1/nodes/tokens {"ttl_s"} */
        APIREQ_BODY_KMS,        /* PUT /v1/tenants/{id}/kms {"kind","label","generate"} */
        APIREQ_BODY_TEMPLATE,   /* POST /v1/templates: {"spec"} or {"dockerfile","name",sizes}
                                   (api-templates.c) */
        APIREQ_BODY_VOLUME,     /* POST /v1/volumes: {"name","size"} (api-volumes.c) */
        APIREQ_BODY_WEBHOOK,    /* POST /v1/webhooks: {"url","events","secret","tenant"} (api-webhooks.c) */
        _APIREQ_BODY_MAX,
};

/* Refuses a key of object o that is not in the NULL-terminated list known:
 * -EINVAL with `unknown field "K" in the request body` (where NULL) or
 * `unknown field "K" in "WHERE"` (where names the nested object, e.g.
 * "snapshot_policy.tiers[0]"), the key shown as printable ASCII, at most 64
 * bytes. A non-object o is -EINVAL. lenient allows unknown keys (for a door
 * whose clients send fields we do not know, such as the E2B SDKs). */
int apireq_check_fields(const json_t *o, const char *const *known, const char *where, bool lenient, char *err);
/* Checks a whole body of kind (NULL counts as {}) with
 * apireq_check_fields(), its nested objects too. Unknown kinds are -EINVAL. */
int apireq_check_body(const json_t *o, enum apireq_body kind, bool lenient, char *err);

struct apireq_create {
        char *template_name;
        char *image;             /* "image" given: made from that image (not checked to exist); NULL when absent */
        json_t *env;             /* object of strings (never NULL) */
        json_t *metadata;        /* object of strings (never NULL) */
        json_t *snapshot_policy; /* an object, not yet checked as a policy; NULL when absent */
        bool has_idle_timeout;   /* "idle_timeout_s" given: seconds idle before suspend, 0 = never */
        int64_t idle_timeout_s;
        const char *recovery;    /* "recovery" given: "boot" or "checkpoint" (static); NULL when absent */
        json_t *network;         /* an object, not yet checked as a policy; NULL when absent or null */
        char *node;              /* "node": placed on this node of the cluster, or NULL */
        json_t *node_labels;     /* "node_labels": an object of strings its node must have, or NULL */
        int64_t memory_mib;      /* "memory_mib": its own size within the template's; 0: the template's */
        int64_t vcpus;           /* "vcpus": likewise; 0: the template's */
        json_t *volumes;         /* "volumes": [{"name","path","read_only"?}] checked in form, or NULL */
        int64_t template_wait_s; /* "template_wait_s": how long to wait for a template still building; 0: the
                                    node's default (15 minutes) */
};
#define APIREQ_TEMPLATE_WAIT_MAX_S (15 * 60)
#define APIREQ_VOLUMES_MAX 4     /* the machine's volume slots */
#define APIREQ_MEMORY_MIN_MIB 64 /* the node's SANDBOX_MEMORY_MIN_MIB */

struct apireq_exec {
        json_t *cmd; /* non-empty array of strings */
        json_t *env; /* object of strings (never NULL) */
        char *cwd;
        char *stdin_data; /* NULL when absent */
        uint32_t timeout_s;
};

struct apireq_session {
        json_t *cmd;
        json_t *env;
        char *cwd;
        bool pty;
        uint32_t rows, cols;
};

struct apireq_stdin {
        uint8_t *data; /* decoded bytes, NULL when len == 0 */
        size_t len;
        bool close;
};

/* Parses a request body that must be one JSON object; an empty body counts
 * as {}. */
int apireq_parse_object(const char *body, size_t len, json_t **ret, char *err);

int apireq_parse_create(const json_t *o, struct apireq_create *ret, char *err);
void apireq_create_release(struct apireq_create *c);
/* Checks a create's "snapshot_policy" as a policy over base (the global
 * one, which may change later: what is stored are the overrides, not the
 * merged policy). *ret_text gets the object as compact JSON with sorted
 * keys to store, or NULL when policy is NULL. */
int apireq_check_snapshot_policy(const json_t *policy, const struct retention_policy *base, char **ret_text,
                                 char *err);

/* max_timeout_s bounds timeout_s (the config's exec_max_timeout_s). */
int apireq_parse_exec(const json_t *o, uint32_t max_timeout_s, struct apireq_exec *ret, char *err);
void apireq_exec_release(struct apireq_exec *e);

int apireq_parse_session(const json_t *o, struct apireq_session *ret, char *err);
void apireq_session_release(struct apireq_session *s);

/* {"data":"<base64>"} or {"text":"..."}, optional "close":true. */
int apireq_parse_stdin(const json_t *o, struct apireq_stdin *ret, char *err);
void apireq_stdin_release(struct apireq_stdin *s);

/* {"signal": 9} or {"signal":"KILL"} / "SIGKILL" / "sigkill". */
int apireq_parse_signal(const json_t *o, int *ret, char *err);
/* {"rows","cols"}: both, each 1..APIREQ_TERMINAL_MAX. */
#define APIREQ_TERMINAL_MAX 1000
int apireq_parse_resize(const json_t *o, unsigned *ret_rows, unsigned *ret_cols, char *err);
/* Signal number for a name with or without "SIG"; -EINVAL if unknown. */
int apireq_signal_from_name(const char *name);

/* A path inside a sandbox: absolute, 1..4096 bytes, no NUL, no ".."
 * component. len is the byte length (so embedded NULs are caught). */
int apireq_check_path(const char *path, size_t len, char *err);

/* Validates env: an object whose keys are variable names
 * ([A-Za-z_][A-Za-z0-9_]*, at most 256 bytes) and values strings. */
int apireq_check_env(const json_t *env, const char *field, char *err);
/* Validates cmd: a non-empty array (at most APIREQ_CMD_MAX_ARGS) of
 * strings, the first non-empty. */
int apireq_check_cmd(const json_t *cmd, char *err);

/* Decodes standard base64 (with padding) into a new buffer; -EINVAL when
 * malformed, -EFBIG when the result would exceed max bytes. */
int apireq_base64_decode(const char *s, size_t len, size_t max, uint8_t **ret, size_t *ret_len);
/* Encodes bytes as standard base64 into a new NUL-terminated string. */
int apireq_base64_encode(const uint8_t *data, size_t len, char **ret);
