/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the parts of the envd front door share. e2b-envd.c routes and runs
 * the unary RPCs; it calls e2b-stream.c (server streams) and e2b-files.c
 * (POST /files); all three call e2b-envd-call.c (answers, paths and users,
 * node calls), which calls none of them: the calls go one way. */

#include <jansson.h>
#include <microhttpd.h>

#include "api.h"
#include "e2b-connect.h"
#include "e2b-envd.h"
#include "macros.h"

#define HTTP_ID_MAX 65 /* a sandbox or session id, with its NUL */

struct node_conn;

/* One call on one sandbox, its token checked. */
struct envd_call {
        struct api_ctx *api; /* err is where messages go */
        const char *sandbox_id;
        const char *tenant_id; /* the sandbox's owner (capabilities name it) */
        const char *user;      /* "" : the template's default */
        uint64_t timeout_ms;   /* Connect-Timeout-Ms */
        unsigned keepalive_s;  /* Keepalive-Ping-Interval */
};

typedef void (*stream_fn)(struct envd_call *c, const json_t *req, struct api_reply *reply);

void e2b_envd_free(struct e2b_envd_request *r);
static inline void e2b_envd_freep(struct e2b_envd_request **r) {
        e2b_envd_free(*r);
}

/* answers (e2b-envd-call.c, as the rest down to e2b_pty_size()) */
void e2b_rest_error(struct api_reply *reply, unsigned status, const char *message);
/* A stream that fails before it starts: 200, the end-stream envelope
 * carrying the error (what the SDK reads best, E2B-PROTOCOL.md 4.3). */
void e2b_stream_error(struct api_reply *reply, enum connect_code code, const char *message);
enum connect_code e2b_connect_code(int r);

/* A file op's node request with c's user in it (none given: the node's
 * default, root); req is consumed, NULL stays NULL. */
json_t *e2b_file_req(const struct envd_call *c, json_t *req);
/* Whether r with api->err is the node's "unknown user 'NAME'" (invalid):
 * envd's unauthenticated / 401, so api->err becomes its "invalid
 * username: 'user'". */
bool e2b_unknown_user(struct api_ctx *api, const char *user, int r);

/* A node op for c's sandbox ("id" added); req is consumed. */
int e2b_node_call(struct envd_call *c, uint32_t access, json_t *req, json_t **rep, struct node_conn **conn);
/* The node session of the process req selects ({"process":{"pid"|"tag"}}),
 * bound anew (session.adopt) to a process an earlier execution started. */
int e2b_process_session(struct envd_call *c, const json_t *req, json_int_t *ret_pid, char *sid, size_t sid_size);
/* {"size":{"rows","cols"}} of a PTY, 1..1000 each. */
int e2b_pty_size(struct envd_call *c, const json_t *pty, json_int_t *rows, json_int_t *cols);
/* An E2B path as the guest takes it: relative ones from the user's home. */
int e2b_resolve_path(const struct envd_call *c, const char *path, char *out, size_t out_size);
/* A node directory entry as envd's EntryInfo (e2b-envd.c). */
json_t *e2b_entry_info(const json_t *e, const char *path);

/* server streams (e2b-stream.c) */
void e2b_process_start(struct envd_call *c, const json_t *req, struct api_reply *reply);
void e2b_process_connect(struct envd_call *c, const json_t *req, struct api_reply *reply);
void e2b_watch_dir(struct envd_call *c, const json_t *req, struct api_reply *reply);

/* POST /files (e2b-files.c): multipart parts or one octet-stream body,
 * each streamed to the node as a file.write. begin: 0 to take the body,
 * 1 with *reply the answer already. */
struct e2b_upload;
int e2b_upload_begin(struct api_ctx *ctx, struct MHD_Connection *conn, const char *sandbox_id, const char *user,
                     const char *path, struct e2b_upload **ret, struct api_reply *reply);
int e2b_upload_data(struct e2b_upload *u, struct api_ctx *ctx, const char *data, size_t len, struct api_reply *reply);
void e2b_upload_finish(struct e2b_upload *u, struct api_ctx *ctx, struct api_reply *reply);
void e2b_upload_free(struct e2b_upload *u);
