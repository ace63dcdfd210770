/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the parts of the envd front door share (e2b-envd-internal.h): the
 * REST error, paths and users, the node calls for the request's sandbox,
 * the process a request selects. Below e2b-envd.c (routing, unary RPCs),
 * e2b-stream.c (server streams) and e2b-files.c (POST /files): it calls
 * none of them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "apireq.h"
#include "cap.h"
#include "dataplane.h"
#include "e2b-envd-internal.h"
#include "macros.h"
#include "util.h"

/* ---- answers ---- */

/* A REST error as envd sends it: {"code":N,"message":...}. */
void e2b_rest_error(struct api_reply *reply, unsigned status, const char *message) {
        *reply = (struct api_reply){ .status = status, .body = json_pack("{s:i, s:s}", "code", (int) status, "message", message) };
}

enum connect_code e2b_connect_code(int r) {
        return connect_code_from_api(api_error_code(r));
}

/* ---- paths and users ---- */

/* The home directory of an E2B user: relative paths start there. */
static void user_home(const char *user, char *buf, size_t n) {
        if (!*user || strcmp(user, "root") == 0)
                snprintf(buf, n, "/root");
        else
                snprintf(buf, n, "/home/%s", user);
}

int e2b_resolve_path(const struct envd_call *c, const char *path, char *out, size_t out_size) {
        if (!path || !*path)
                return -EINVAL;
        int n;
        if (path[0] == '/')
                n = snprintf(out, out_size, "%s", path);
        else {
                char home[64];
                user_home(c->user, home, sizeof home);
                n = snprintf(out, out_size, "%s/%s", home, path);
        }
        if (n < 0 || (size_t) n >= out_size)
                return -ENAMETOOLONG;
        char err[API_ERRMSG_MAX];
        return apireq_check_path(out, (size_t) n, err);
}

json_t *e2b_file_req(const struct envd_call *c, json_t *req) {
        if (req && c->user && c->user[0] && json_object_set_new(req, "user", json_string(c->user)) < 0) {
                json_decref(req);
                return NULL;
        }
        return req;
}

bool e2b_unknown_user(struct api_ctx *api, const char *user, int r) {
        if (r != -EINVAL || strncmp(api->err, "unknown user", 12) != 0)
                return false;
        snprintf(api->err, sizeof api->err, "invalid username: '%s'", user && *user ? user : "root");
        return true;
}

/* ---- node calls for the request's sandbox ---- */

int e2b_node_call(struct envd_call *c, uint32_t access, json_t *req, json_t **rep, struct node_conn **conn) {
        _cleanup_(json_decrefp) json_t *owned = req;
        if (!req)
                return -ENOMEM;
        if (!json_object_get(req, "id")) /* (session ops ignore it) */
                json_object_set_new(req, "id", json_string(c->sandbox_id));
        return dataplane_call(c->api->config, c->tenant_id, c->sandbox_id, access, req, c->api->config->node_timeout_s,
                              conn, rep, c->api->err);
}

/* {"process":{"pid":N}} or {"process":{"tag":"t"}}: the process, found in
 * the guest's list (session.list); *ret_entry is a reference. */
static int find_process(struct envd_call *c, const json_t *req, json_t **ret_entry) {
        const json_t *sel = json_object_get(req, "process");
        const json_t *pid = json_object_get(sel, "pid"), *tag = json_object_get(sel, "tag");
        if (!json_is_object(sel) || (!json_is_integer(pid) && !json_is_string(tag)))
                return snprintf(c->api->err, sizeof c->api->err, "'process' must select a pid or a tag"), -EINVAL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = e2b_node_call(c, CAP_ACCESS_EXEC, json_pack("{s:s}", "op", "session.list"), &rep, NULL);
        if (r < 0)
                return r;
        const json_t *e;
        size_t i;
        json_array_foreach(json_object_get(rep, "sessions"), i, e) {
                bool match = json_is_integer(pid) ? json_equal(json_object_get(e, "pid"), pid)
                                                  : json_equal(json_object_get(e, "tag"), tag);
                if (match) {
                        *ret_entry = json_incref((json_t *) e);
                        return 0;
                }
        }
        if (json_is_integer(pid))
                snprintf(c->api->err, sizeof c->api->err, "process with pid %lld not found",
                         (long long) json_integer_value(pid));
        else
                snprintf(c->api->err, sizeof c->api->err, "process with tag '%.64s' not found", json_string_value(tag));
        return -ENOENT;
}

int e2b_process_session(struct envd_call *c, const json_t *req, json_int_t *ret_pid, char *sid, size_t sid_size) {
        _cleanup_(json_decrefp) json_t *e = NULL;
        int r = find_process(c, req, &e);
        if (r < 0)
                return r;
        *ret_pid = json_integer_value(json_object_get(e, "pid"));
        const char *have = json_string_value(json_object_get(e, "session_id"));
        if (have) {
                snprintf(sid, sid_size, "%s", have);
                return 0;
        }
        /* started by an earlier execution (before a pause): the node binds
         * a new session to the process, which kept running */
        if ((r = random_id("ses-", 8, sid, sid_size)) < 0)
                return r;
        return e2b_node_call(c, CAP_ACCESS_EXEC,
                             json_pack("{s:s, s:s, s:I}", "op", "session.adopt", "session_id", sid, "pid", *ret_pid),
                             NULL, NULL);
}

/* ---- process.Process, unary ---- */

/* ---- process.Process ---- */

int e2b_pty_size(struct envd_call *c, const json_t *pty, json_int_t *rows, json_int_t *cols) {
        const json_t *size = json_object_get(pty, "size");
        const json_t *r = json_object_get(size, "rows"), *k = json_object_get(size, "cols");
        if (!json_is_integer(r) || !json_is_integer(k) || json_integer_value(r) < 1 || json_integer_value(r) > 1000 ||
            json_integer_value(k) < 1 || json_integer_value(k) > 1000)
                return snprintf(c->api->err, sizeof c->api->err, "'pty.size' must have rows and cols, 1 to 1000"),
                       -EINVAL;
        *rows = json_integer_value(r);
        *cols = json_integer_value(k);
        return 0;
}
