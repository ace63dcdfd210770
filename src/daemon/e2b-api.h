/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The E2B front door's control plane (docs/e2b.md): the REST API that E2B's
 * SDKs call (/v2/sandboxes, /sandboxes/ID/...), translated onto the /v1
 * handlers of api.c, so the same checks, tenants, operations and lifecycle
 * run underneath; what comes back is E2B's shape: its fields, its two
 * states ("running", "paused") and, through http.c, its error bodies
 * ({"code":404,"message":...}). E2B's pause is Airlock's suspend, its
 * connect a wake (or a resume or start, whatever brings the sandbox back);
 * its sandbox timeout is the sandbox's lifetime (store expires_at), which
 * the idle watcher enforces (idle.c).
 */

#include <jansson.h>

#include "api.h"

/* What the front door tells the SDK it implements: the SDK's feature gates
 * on this version (docs/e2b.md) must match what Airlock does. */
#define E2B_ENVD_VERSION "0.5.7"
/* the port E2B's SDKs address a sandbox's envd at */
#define E2B_ENVD_PORT 49983

/* A lifetime longer than a year is a mistake */
#define E2B_TIMEOUT_S_MAX (365 * 24 * 3600)

/* The query of GET /v2/sandboxes and GET /snapshots, as MHD decoded it
 * (each may be NULL). */
struct e2b_list_query {
        const char *state;      /* "running,paused" */
        const char *metadata;   /* form-encoded pairs, each part percent-encoded once more */
        const char *sandbox_id; /* snapshots: of this sandbox only */
        const char *name;       /* snapshots: of this name only */
        const char *limit;      /* decimal, 1..E2B_LIST_LIMIT_MAX */
        const char *next_token; /* what X-Next-Token said */
        const char *order;      /* "asc" or "desc" (default) */
};

#define E2B_LIST_LIMIT_DEFAULT 100
#define E2B_LIST_LIMIT_MAX 1000

/* Loads the key envd access tokens are derived with (CONTROL_DIR/e2b.key,
 * made on first start). Call once before serving. */
int e2b_init(const struct daemon_config *config);

/* The sandbox's envdAccessToken (64 hex and a NUL): an HMAC of its id under
 * the front door's key, so that it needs no storage and a connect hands out
 * the same one again. */
int e2b_access_token(const char *sandbox_id, char out[65]);
/* A volume's token for E2B's volume content API (e2b-volume-content.c),
 * made the same way under another purpose; and its check (constant time). */
int e2b_volume_token(const char *volume_id, char out[65]);
bool e2b_volume_token_ok(const char *volume_id, const char *token);

int e2b_sandbox_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int e2b_sandbox_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int e2b_sandbox_list(struct api_ctx *ctx, const struct e2b_list_query *q, struct api_reply *ret);
int e2b_sandbox_kill(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int e2b_sandbox_set_timeout(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
int e2b_sandbox_pause(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
int e2b_sandbox_connect(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
/* GET /sandboxes/ID/metrics?start&end: the guest's CPU, memory and disk
 * use now, as a one-sample series (empty when not running or outside the
 * window). */
/* E2B's snapshots are Airlock's images (api-images.c): POST
 * /sandboxes/ID/snapshots {"name"?} -> 201 {"snapshotID","names"}; GET
 * /snapshots?sandboxID&name&limit&nextToken -> [{"snapshotID","names"}]
 * newest first, X-Next-Token; DELETE /templates/ID (an image's id or name)
 * -> 204. Sandbox.create() takes an image's id or name as its template. */
int e2b_snapshot_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret);
int e2b_snapshot_list(struct api_ctx *ctx, const struct e2b_list_query *q, struct api_reply *ret);
int e2b_snapshot_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);

/* ---- Volumes (e2b-volumes.c) ---- */

int e2b_volume_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int e2b_volume_list(struct api_ctx *ctx, struct api_reply *ret);
int e2b_volume_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int e2b_volume_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* A create's "volumeMounts" [{name, path}] as Airlock's "volumes" (*ret
 * NULL: none); a sandbox's "volumes" as E2B's volumeMounts. */
int e2b_volume_mounts(struct api_ctx *ctx, const json_t *mounts, json_t **ret);
json_t *e2b_volume_mounts_info(struct api_ctx *ctx, const json_t *volumes);
int e2b_sandbox_metrics(struct api_ctx *ctx, const char *id, const char *start, const char *end,
                        struct api_reply *ret);
/* POST /sandboxes/ID/fork {timeout, count}: count forks, each a Sandbox
 * object or an {"error"} in the 201's array. */
int e2b_sandbox_fork(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
/* PUT /sandboxes/ID/network: E2B's allowOut/denyOut as the sandbox's egress
 * policy, which replaces the one it had (the /v1 PUT underneath). */
int e2b_sandbox_update_network(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);

/* Decodes %XX escapes of s[0..len) into out (at least len + 1 bytes), '+'
 * as a space when form is set; -EINVAL for a bad escape or a NUL. Exposed
 * for the unit test. */
int e2b_percent_decode(const char *s, size_t len, bool form, char *out, size_t *ret_len);
