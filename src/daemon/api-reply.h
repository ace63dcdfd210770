/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What every API handler (api*.c, e2b-*.c) starts from and ends with: the
 * request's context, the reply it fills, the message of a failure, and the
 * sandbox row the caller may see. A leaf: api-reply.c calls nothing of the
 * daemon's (only lib/: the store, the log), so that any handler file may
 * use it without calling up into another.
 */

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apierror.h"
#include "macros.h"

struct daemon_config;
struct store;
struct store_sandbox;

/* the "node" of a sandbox on this machine's own airlock-node (no cluster node) */
#define API_LOCAL_NODE "local"

struct api_ctx {
        const struct daemon_config *config;
        struct store *store;
        const atomic_bool *stopping; /* set when the server shuts down */
        const char *log_ctx;         /* "req=N method=M path=P" */
        int client_fd;               /* the HTTP client's socket (only polled), or -1 */
        const char *tenant_id;       /* the key's tenant: only its sandboxes exist; NULL: admin */
        const char *key_id;          /* the API key's id (who did it, for the audit log), or NULL */
        char err[API_ERRMSG_MAX];
};

struct api_reply {
        unsigned status;                /* HTTP status on success */
        json_t *body;                   /* JSON body, or NULL */
        struct MHD_Response *response;  /* or a complete response (streams) */
};

/* Frees what a reply holds. */
void api_reply_release(struct api_reply *r);
/* A JSON reply taking body (NULL, a failed allocation: -ENOMEM); a 204. */
int api_reply_json(struct api_reply *ret, unsigned status, json_t *body);
int api_reply_empty(struct api_reply *ret);

/* Writes the message for a failed request to ctx->err; returns r. */
int api_fail(struct api_ctx *ctx, int r, const char *fmt, ...) _printf_(3, 4);

/* A failed store read (r < 0) as a handler answers it: -ENOENT with
 * "WHAT 'NAME' not found" in ctx->err (a 404), another error logged as
 * "store: failed to read WHAT". Returns r. */
int api_read_fail(struct api_ctx *ctx, int r, const char *what, const char *name);
/* A new JSON array of to_json(&rows[i]) for the n rows (an element that
 * fails to be made is left out); NULL when out of memory. */
#define api_rows_json(rows, n, to_json)                                              \
        ({                                                                           \
                json_t *_arr = json_array();                                         \
                for (size_t _i = 0; _arr && _i < (n); _i++)                          \
                        json_array_append_new(_arr, to_json(&(rows)[_i]));           \
                _arr;                                                                \
        })
/* A 200 {field: arr} taking arr (NULL, a failed allocation: -ENOMEM). */
int api_reply_list(struct api_reply *ret, const char *field, json_t *arr);

/* Formats Unix milliseconds as RFC 3339 UTC ("2026-11-29T19:40:00.123Z"). */
void api_format_time(int64_t ms, char *buf, size_t n);

/*
 * Tenant scoping. A tenant key sees only its tenant's sandboxes (and their
 * sessions, snapshots and operations): anything else answers exactly as an
 * id that does not exist. True when ctx may see a resource of tenant_id
 * (NULL: admin-owned).
 */
bool api_tenant_may_see(const struct api_ctx *ctx, const char *tenant_id);

/* Whether tenant id, which a request's field names, exists: 0; -EINVAL
 * "FIELD: no tenant 'ID'" when it does not; a store failure logged. */
int api_tenant_check(struct api_ctx *ctx, const char *field, const char *id);

/* The owner a request names: a tenant key's own tenant (another given is
 * a 403 saying a tenant key manages its own tenant's WHAT), an admin's
 * `tenant` (body field or ?tenant=; it must exist), else the admin scope
 * (NULL). *ret points into ctx or given. */
int api_scope_of(struct api_ctx *ctx, const char *given, const char *what, const char **ret);

/* A sandbox's lifecycle event as GET /v1/events and webhooks show it:
 * {id, type, sandbox_id, ts, ts_ms, state?, previous?, tenant_id?, detail?}. */
struct store_event;
json_t *api_event_json(const struct store_event *e);

/* The sandbox row id as the caller may see it (another tenant's is a 404
 * too), or an error with ctx->err set. */
int api_sandbox_lookup(struct api_ctx *ctx, const char *id, struct store_sandbox *ret);
/* A sandbox row as the API shows it (no node's view merged in). */
json_t *api_sandbox_row_json(const struct store_sandbox *sb);
