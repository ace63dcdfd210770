/* SPDX-License-Identifier: Apache-2.0 */
#include "e2b-envd.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "apireq.h"
#include "cap.h"
#include "e2b-api.h"
#include "e2b-connect.h"
#include "e2b-envd-internal.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "util.h"

#define LIST_DEPTH_MAX 16      /* ListDir depth */
#define LIST_ENTRIES_MAX 10000 /* entries of one ListDir, all levels */

enum envd_kind {
        ENVD_HEALTH,
        ENVD_FILES_GET,
        ENVD_FILES_POST,
        ENVD_RPC,
};

typedef int (*unary_fn)(struct envd_call *c, const json_t *req, json_t **resp);

struct rpc {
        const char *path;
        unary_fn unary;  /* NULL: a server stream */
        stream_fn stream;
};

static int process_list(struct envd_call *c, const json_t *req, json_t **resp);
static int process_send_input(struct envd_call *c, const json_t *req, json_t **resp);
static int process_send_signal(struct envd_call *c, const json_t *req, json_t **resp);
static int process_close_stdin(struct envd_call *c, const json_t *req, json_t **resp);
static int process_update(struct envd_call *c, const json_t *req, json_t **resp);
static int fs_stat(struct envd_call *c, const json_t *req, json_t **resp);
static int fs_make_dir(struct envd_call *c, const json_t *req, json_t **resp);
static int fs_move(struct envd_call *c, const json_t *req, json_t **resp);
static int fs_list_dir(struct envd_call *c, const json_t *req, json_t **resp);
static int fs_remove(struct envd_call *c, const json_t *req, json_t **resp);

static const struct rpc rpcs[] = {
        { "/process.Process/Start", NULL, e2b_process_start },
        { "/process.Process/Connect", NULL, e2b_process_connect },
        { "/process.Process/List", process_list, NULL },
        { "/process.Process/SendInput", process_send_input, NULL },
        { "/process.Process/SendSignal", process_send_signal, NULL },
        { "/process.Process/CloseStdin", process_close_stdin, NULL },
        { "/process.Process/Update", process_update, NULL },
        { "/filesystem.Filesystem/Stat", fs_stat, NULL },
        { "/filesystem.Filesystem/MakeDir", fs_make_dir, NULL },
        { "/filesystem.Filesystem/Move", fs_move, NULL },
        { "/filesystem.Filesystem/ListDir", fs_list_dir, NULL },
        { "/filesystem.Filesystem/Remove", fs_remove, NULL },
        { "/filesystem.Filesystem/WatchDir", NULL, e2b_watch_dir },
};

struct e2b_envd_request {
        enum envd_kind kind;
        const struct rpc *rpc;
        char sandbox_id[HTTP_ID_MAX];
        char user[33];
        uint64_t timeout_ms;   /* Connect-Timeout-Ms, 0: none */
        unsigned keepalive_s;  /* Keepalive-Ping-Interval, 0: none */
        char *body;
        size_t body_len, body_cap;
        bool body_too_large;
        /* /files */
        char path[APIREQ_PATH_MAX + 1]; /* ?path=, resolved ("" when absent) */
        struct e2b_upload *upload;      /* POST /files */
};

/* ---- answers ---- */

static void reply_json_status(struct api_reply *reply, unsigned status, json_t *body) {
        *reply = (struct api_reply){ .status = status, .body = body };
}

/* A unary RPC's error: the Connect code's HTTP status, its JSON body. */
static void rpc_error(struct api_reply *reply, enum connect_code code, const char *message) {
        reply_json_status(reply, connect_code_http_status(code), connect_error_json(code, message));
}

static int process_list(struct envd_call *c, const json_t *req, json_t **resp) {
        (void) req;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = e2b_node_call(c, CAP_ACCESS_EXEC, json_pack("{s:s}", "op", "session.list"), &rep, NULL);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *out = json_array();
        const json_t *e;
        size_t i;
        json_array_foreach(json_object_get(rep, "sessions"), i, e) {
                /* a process a request is waiting on (a /v1 exec) is not
                 * one anybody can connect to: those with a session are,
                 * and those an earlier execution left running */
                if (!json_object_get(e, "session_id") && json_is_true(json_object_get(e, "attached")))
                        continue;
                const json_t *argv = json_object_get(e, "argv");
                json_t *args = json_array();
                for (size_t k = 1; args && k < json_array_size(argv); k++)
                        json_array_append(args, json_array_get(argv, k));
                json_t *cfg = json_pack("{s:O?, s:o, s:O?}", "cmd", json_array_get(argv, 0), "args", args, "envs",
                                        json_object_get(e, "env"));
                const json_t *cwd = json_object_get(e, "cwd");
                if (cfg && json_is_string(cwd))
                        json_object_set(cfg, "cwd", (json_t *) cwd);
                json_t *p = cfg ? json_pack("{s:O, s:o}", "pid", json_object_get(e, "pid"), "config", cfg) : NULL;
                const json_t *tag = json_object_get(e, "tag");
                if (p && json_is_string(tag))
                        json_object_set(p, "tag", (json_t *) tag);
                if (!out || !p || json_array_append_new(out, p) < 0)
                        return -ENOMEM;
        }
        *resp = json_pack("{s:O}", "processes", out);
        return *resp ? 0 : -ENOMEM;
}

static int process_send_input(struct envd_call *c, const json_t *req, json_t **resp) {
        const json_t *in = json_object_get(req, "input");
        const json_t *data = json_object_get(in, "stdin") ?: json_object_get(in, "pty");
        if (!json_is_string(data))
                return snprintf(c->api->err, sizeof c->api->err, "'input' must have stdin or pty bytes"), -EINVAL;
        /* checked here, so a bad one is the client's 400, not the node's */
        size_t len = json_string_length(data);
        _cleanup_free_ uint8_t *raw = malloc(len + 1);
        size_t n = 0;
        if (!raw)
                return -ENOMEM;
        if (sodium_base642bin(raw, len + 1, json_string_value(data), len, NULL, &n, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 &&
            sodium_base642bin(raw, len + 1, json_string_value(data), len, NULL, &n, NULL,
                              sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
                return snprintf(c->api->err, sizeof c->api->err, "input bytes must be base64"), -EINVAL;
        _cleanup_free_ char *b64 = NULL;
        int r = apireq_base64_encode(raw, n, &b64);
        json_int_t pid;
        char sid[32];
        if (r < 0 || (r = e2b_process_session(c, req, &pid, sid, sizeof sid)) < 0)
                return r;
        r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                          json_pack("{s:s, s:s, s:s, s:b}", "op", "session.stdin", "session_id", sid, "data", b64,
                                    "close", false),
                          NULL, NULL);
        return r < 0 ? r : (*resp = json_object()) ? 0 : -ENOMEM;
}

static int process_send_signal(struct envd_call *c, const json_t *req, json_t **resp) {
        const json_t *s = json_object_get(req, "signal");
        int sig = 0;
        if (json_is_string(s) && strcmp(json_string_value(s), "SIGNAL_SIGKILL") == 0)
                sig = 9;
        else if (json_is_string(s) && strcmp(json_string_value(s), "SIGNAL_SIGTERM") == 0)
                sig = 15;
        else if (json_is_integer(s) && (json_integer_value(s) == 9 || json_integer_value(s) == 15))
                sig = (int) json_integer_value(s);
        else
                return snprintf(c->api->err, sizeof c->api->err, "'signal' must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"),
                       -EINVAL;
        json_int_t pid;
        char sid[32];
        int r = e2b_process_session(c, req, &pid, sid, sizeof sid);
        if (r < 0)
                return r;
        r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                          json_pack("{s:s, s:s, s:i}", "op", "session.signal", "session_id", sid, "signal", sig), NULL,
                          NULL);
        if (r == -EEXIST) /* it ended meanwhile: nothing left to signal */
                return snprintf(c->api->err, sizeof c->api->err, "process %lld has exited", (long long) pid), -ENOENT;
        return r < 0 ? r : (*resp = json_object()) ? 0 : -ENOMEM;
}

static int process_close_stdin(struct envd_call *c, const json_t *req, json_t **resp) {
        json_int_t pid;
        char sid[32];
        int r = e2b_process_session(c, req, &pid, sid, sizeof sid);
        if (r < 0)
                return r;
        r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                          json_pack("{s:s, s:s, s:s, s:b}", "op", "session.stdin", "session_id", sid, "data", "",
                                    "close", true),
                          NULL, NULL);
        return r < 0 ? r : (*resp = json_object()) ? 0 : -ENOMEM;
}

static int process_update(struct envd_call *c, const json_t *req, json_t **resp) {
        const json_t *pty = json_object_get(req, "pty");
        json_int_t rows, cols, pid;
        char sid[32];
        int r = pty ? e2b_pty_size(c, pty, &rows, &cols) : 0;
        if (r < 0 || (r = e2b_process_session(c, req, &pid, sid, sizeof sid)) < 0)
                return r;
        if (pty && (r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                                      json_pack("{s:s, s:s, s:I, s:I}", "op", "session.resize", "session_id", sid,
                                                "rows", rows, "cols", cols),
                                      NULL, NULL)) < 0)
                return r;
        return (*resp = json_object()) ? 0 : -ENOMEM;
}

/* ---- filesystem.Filesystem ---- */

/* ls-style permissions of a mode's type and bits */
static void permissions(const char *type, uint32_t mode, char out[11]) {
        out[0] = strcmp(type, "dir") == 0 ? 'd' : strcmp(type, "symlink") == 0 ? 'l' : '-';
        static const char rwx[] = "rwxrwxrwx";
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
        out[10] = 0;
}

/* A node entry ({name,type,size,mode,mtime,owner,group,symlink_target}) as
 * envd's EntryInfo for the absolute path it has. */
json_t *e2b_entry_info(const json_t *e, const char *path) {
        const char *type = json_string_value(json_object_get(e, "type")) ?: "other";
        uint32_t mode = (uint32_t) json_integer_value(json_object_get(e, "mode")) & 07777;
        const char *ft = strcmp(type, "file") == 0      ? "FILE_TYPE_FILE"
                         : strcmp(type, "dir") == 0     ? "FILE_TYPE_DIRECTORY"
                         : strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                                                        : "FILE_TYPE_UNSPECIFIED";
        /* Go's os.FileMode, which envd sends: the type in the high bits */
        uint32_t fmode = mode | (strcmp(type, "dir") == 0 ? 1u << 31 : strcmp(type, "symlink") == 0 ? 1u << 27 : 0);
        char perms[11], mtime[48];
        permissions(type, mode, perms);
        api_format_time((int64_t) json_integer_value(json_object_get(e, "mtime")) * 1000, mtime, sizeof mtime);
        const char *name = strrchr(path, '/');
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:s}", "name", name && name[1] ? name + 1 : path,
                              "type", ft, "path", path, "size", json_integer_value(json_object_get(e, "size")), "mode",
                              (json_int_t) fmode, "permissions", perms, "owner",
                              json_string_value(json_object_get(e, "owner")) ?: "", "group",
                              json_string_value(json_object_get(e, "group")) ?: "", "modifiedTime", mtime);
        const char *target = json_string_value(json_object_get(e, "symlink_target"));
        if (o && target)
                json_object_set_new(o, "symlinkTarget", json_string(target));
        return o;
}

/* The request's "path" (or another field), resolved. */
static int req_path(struct envd_call *c, const json_t *req, const char *field, char *out, size_t n) {
        const json_t *p = json_object_get(req, field);
        int r = json_is_string(p) ? e2b_resolve_path(c, json_string_value(p), out, n) : -EINVAL;
        if (r < 0)
                snprintf(c->api->err, sizeof c->api->err, "'%s' must be a path of at most %d bytes, without '..'",
                         field, APIREQ_PATH_MAX);
        return r < 0 ? -EINVAL : 0;
}

/* A file op (req, consumed) about path for c's sandbox, as the guest's
 * user: a path that is not there is said as envd says it. */
static int file_call(struct envd_call *c, uint32_t access, const char *path, json_t *req, json_t **rep) {
        int r = e2b_node_call(c, access, e2b_file_req(c, req), rep, NULL);
        if (r == -ENOENT)
                snprintf(c->api->err, sizeof c->api->err, "path '%.200s' does not exist", path);
        return r;
}

/* {"entry": entry}, taking entry. */
static int entry_reply(json_t *entry, json_t **resp) {
        *resp = json_pack("{s:o}", "entry", entry);
        return *resp ? 0 : -ENOMEM;
}

static int stat_path(struct envd_call *c, const char *path, json_t **ret_entry) {
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = file_call(c, CAP_ACCESS_FILES_READ, path, json_pack("{s:s, s:s}", "op", "file.stat", "path", path),
                          &rep);
        if (r < 0)
                return r;
        *ret_entry = e2b_entry_info(json_object_get(rep, "entry"), path);
        return *ret_entry ? 0 : -ENOMEM;
}

static int fs_stat(struct envd_call *c, const json_t *req, json_t **resp) {
        char path[APIREQ_PATH_MAX + 1];
        json_t *entry = NULL;
        int r = req_path(c, req, "path", path, sizeof path);
        if (r < 0 || (r = stat_path(c, path, &entry)) < 0)
                return r;
        return entry_reply(entry, resp);
}

/* The entry a node op's reply carries (file.mkdir, file.rename give the
 * one they made), else a stat of path: one guest call, not two. */
static int reply_entry(struct envd_call *c, const json_t *rep, const char *path, json_t **ret_entry) {
        const json_t *e = json_object_get(rep, "entry");
        if (!json_is_object(e))
                return stat_path(c, path, ret_entry);
        *ret_entry = e2b_entry_info(e, path);
        return *ret_entry ? 0 : -ENOMEM;
}

static int fs_make_dir(struct envd_call *c, const json_t *req, json_t **resp) {
        char path[APIREQ_PATH_MAX + 1];
        int r = req_path(c, req, "path", path, sizeof path);
        if (r < 0)
                return r;
        json_t *entry = NULL;
        if (stat_path(c, path, &entry) >= 0) {
                json_decref(entry);
                snprintf(c->api->err, sizeof c->api->err, "path '%.200s' already exists", path);
                return -EEXIST;
        }
        c->api->err[0] = 0;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = e2b_node_call(c, CAP_ACCESS_FILES_WRITE,
                          e2b_file_req(c, json_pack("{s:s, s:s, s:b}", "op", "file.mkdir", "path", path, "parents", true)),
                          &rep, NULL);
        if (r < 0 || (r = reply_entry(c, rep, path, &entry)) < 0)
                return r;
        return entry_reply(entry, resp);
}

static int fs_move(struct envd_call *c, const json_t *req, json_t **resp) {
        char from[APIREQ_PATH_MAX + 1], to[APIREQ_PATH_MAX + 1];
        int r = req_path(c, req, "source", from, sizeof from);
        if (r < 0 || (r = req_path(c, req, "destination", to, sizeof to)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = file_call(c, CAP_ACCESS_FILES_WRITE, from,
                      json_pack("{s:s, s:s, s:s}", "op", "file.rename", "from", from, "to", to), &rep);
        json_t *entry = NULL;
        if (r < 0 || (r = reply_entry(c, rep, to, &entry)) < 0)
                return r;
        return entry_reply(entry, resp);
}

static int fs_remove(struct envd_call *c, const json_t *req, json_t **resp) {
        char path[APIREQ_PATH_MAX + 1];
        int r = req_path(c, req, "path", path, sizeof path);
        if (r < 0)
                return r;
        r = file_call(c, CAP_ACCESS_FILES_WRITE, path,
                      json_pack("{s:s, s:s, s:b}", "op", "file.remove", "path", path, "recursive", true), NULL);
        return r < 0 ? r : (*resp = json_object()) ? 0 : -ENOMEM;
}

/* Appends the entries of dir (and, while depth > 1, of its directories). */
static int list_into(struct envd_call *c, const char *dir, unsigned depth, json_t *out) {
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = file_call(c, CAP_ACCESS_FILES_READ, dir, json_pack("{s:s, s:s}", "op", "file.list", "path", dir),
                          &rep);
        if (r < 0)
                return r;
        const json_t *e;
        size_t i;
        json_array_foreach(json_object_get(rep, "entries"), i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                char path[APIREQ_PATH_MAX + 1];
                if (!name || snprintf(path, sizeof path, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name) >=
                                     (int) sizeof path)
                        continue; /* too deep to name */
                if (json_array_size(out) >= LIST_ENTRIES_MAX)
                        return snprintf(c->api->err, sizeof c->api->err, "more than %d entries", LIST_ENTRIES_MAX),
                               -EMSGSIZE;
                json_t *info = e2b_entry_info(e, path);
                if (!info || json_array_append_new(out, info) < 0)
                        return -ENOMEM;
                const char *type = json_string_value(json_object_get(e, "type"));
                if (depth > 1 && type && strcmp(type, "dir") == 0 && (r = list_into(c, path, depth - 1, out)) < 0)
                        return r;
        }
        return 0;
}

static int fs_list_dir(struct envd_call *c, const json_t *req, json_t **resp) {
        char path[APIREQ_PATH_MAX + 1];
        int r = req_path(c, req, "path", path, sizeof path);
        if (r < 0)
                return r;
        const json_t *d = json_object_get(req, "depth");
        json_int_t depth = json_is_integer(d) ? json_integer_value(d) : 1;
        if (d && !json_is_integer(d))
                return snprintf(c->api->err, sizeof c->api->err, "'depth' must be a number"), -EINVAL;
        if (depth == 0)
                depth = 1;
        if (depth < 0 || depth > LIST_DEPTH_MAX)
                return snprintf(c->api->err, sizeof c->api->err, "'depth' must be 1 to %d", LIST_DEPTH_MAX), -EINVAL;
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        if ((r = list_into(c, path, (unsigned) depth, out)) < 0)
                return r;
        *resp = json_pack("{s:O}", "entries", out);
        return *resp ? 0 : -ENOMEM;
}

/* ---- the request ---- */

bool e2b_header_is_front_door(const char *name) {
        static const char *const h[] = { "e2b-sandbox-id", "e2b-sandbox-port", "x-access-token",
                                         "e2b-traffic-access-token" };
        for (size_t i = 0; i < ARRAY_SIZE(h); i++)
                if (strcasecmp(name, h[i]) == 0)
                        return true;
        return false;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The signature E2B's uploadUrl() and downloadUrl() put on a /files URL:
 * "v1_" + base64(sha256("PATH:OP:USER:TOKEN[:EXPIRATION]")), unpadded
 * (E2B-PROTOCOL.md 4.9). */
static bool signature_matches(const char *sandbox_id, const char *path, const char *op, const char *user,
                              const char *expiration, const char *signature) {
        char token[65], want[64];
        if (e2b_access_token(sandbox_id, token) < 0)
                return false;
        crypto_hash_sha256_state st;
        crypto_hash_sha256_init(&st);
        const char *parts[] = { path, ":", op, ":", user, ":", token, expiration ? ":" : "", expiration ?: "" };
        for (size_t i = 0; i < ARRAY_SIZE(parts); i++)
                crypto_hash_sha256_update(&st, (const uint8_t *) parts[i], strlen(parts[i]));
        uint8_t h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(&st, h);
        memcpy(want, "v1_", 3);
        sodium_bin2base64(want + 3, sizeof want - 3, h, sizeof h, sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
        sodium_memzero(token, sizeof token);
        return strlen(signature) == strlen(want) && sodium_memcmp(signature, want, strlen(want)) == 0;
}

/*
 * A signed /files URL (no token header: a browser's plain fetch). With
 * E2B_SANDBOX_URL the URL does not name its sandbox: the signature does,
 * being made with that sandbox's token, so the running sandboxes are tried
 * (an HMAC and a SHA-256 each). 0 with the sandbox in id; -EACCES.
 */
static int signed_files(struct api_ctx *ctx, struct MHD_Connection *conn, const char *method, char *id,
                        size_t id_size) {
        const char *sig = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "signature");
        const char *exp = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "signature_expiration");
        const char *path = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path") ?: "";
        const char *user = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "username") ?: "";
        const char *op = strcmp(method, "POST") == 0 ? "write" : "read";
        uint64_t until;
        if (!sig || strncmp(sig, "v1_", 3) != 0)
                return -EACCES;
        if (exp && (parse_u64(exp, INT64_MAX, &until) < 0 || until < now_realtime_ns() / 1000000000ULL))
                return -EACCES; /* expired, or not a time */
        if (id[0])
                return signature_matches(id, path, op, user, exp, sig) ? 0 : -EACCES;
        struct store_sandbox *a = NULL;
        size_t n = 0;
        int r = -EACCES;
        if (store_sandbox_list(ctx->store, STORE_LIST_MAX, &a, &n) < 0)
                return -EIO;
        for (size_t i = 0; i < n && r < 0; i++)
                if (signature_matches(a[i].id, path, op, user, exp, sig)) {
                        snprintf(id, id_size, "%s", a[i].id);
                        r = 0;
                }
        store_sandbox_array_free(a, n);
        return r;
}

static bool token_ok(struct MHD_Connection *conn, const char *sandbox_id, bool traffic) {
        const char *got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
        /* a sandbox port's traffic may carry the traffic token instead (the
         * code interpreter's requests but /execute do) */
        if (!got && traffic)
                got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token");
        char want[65];
        return got && strlen(got) == 64 && e2b_access_token(sandbox_id, want) >= 0 &&
               sodium_memcmp(got, want, 64) == 0;
}

bool e2b_port_token_ok(struct MHD_Connection *conn, const char *sandbox_id) {
        return token_ok(conn, sandbox_id, true);
}

int e2b_envd_begin(struct api_ctx *ctx, struct MHD_Connection *conn, const char *url, const char *method,
                   const char *sandbox_id, struct e2b_envd_request **ret, uint16_t *ret_port, struct api_reply *reply) {
        const char *port = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Port");
        uint64_t p = E2B_ENVD_PORT;
        if (port && (parse_u64(port, 65535, &p) < 0 || p == 0))
                return e2b_rest_error(reply, 400, "E2b-Sandbox-Port must be a port number"), 1;
        char sbx[HTTP_ID_MAX] = "";
        if (!*sandbox_id && ends_with(url, "/files")) {
                /* a signed URL that does not name its sandbox */
                int k = signed_files(ctx, conn, method, sbx, sizeof sbx);
                if (k < 0)
                        return e2b_rest_error(reply, 401, "the URL's signature is not valid (or expired)"), 1;
                sandbox_id = sbx;
        }
        if (strlen(sandbox_id) >= HTTP_ID_MAX || !name_is_valid(sandbox_id))
                return e2b_rest_error(reply, 502, "no such sandbox"), 1;
        if (p != E2B_ENVD_PORT) {
                /* another port: the server in the sandbox answers, through
                 * the service-port path (http.c) */
                if (!token_ok(conn, sandbox_id, true))
                        return e2b_rest_error(reply, 401, "missing or invalid access token for this sandbox"), 1;
                *ret_port = (uint16_t) p;
                return 2;
        }
        bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;

        _cleanup_(e2b_envd_freep) struct e2b_envd_request *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        snprintf(r->sandbox_id, sizeof r->sandbox_id, "%s", sandbox_id);
        if (ends_with(url, "/health")) {
                if (!get)
                        return e2b_rest_error(reply, 405, "GET /health only"), 1;
                r->kind = ENVD_HEALTH;
                *ret = TAKE_PTR(r);
                return 0;
        }
        /* everything else needs the sandbox's token, or for /files a
         * signature made with it */
        bool files = ends_with(url, "/files");
        if (!token_ok(conn, sandbox_id, false) &&
            !(files && (sbx[0] || signed_files(ctx, conn, method, r->sandbox_id, sizeof r->sandbox_id) >= 0)))
                return e2b_rest_error(reply, 401, "missing or invalid X-Access-Token for this sandbox"), 1;
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (connect_basic_user(auth, r->user, sizeof r->user) < 0)
                return e2b_rest_error(reply, 401, "Authorization must be Basic base64(user:) with a user name"), 1;

        if (files) {
                const char *user = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "username");
                if (user && *user) {
                        if (!connect_user_is_valid(user))
                                return e2b_rest_error(reply, 401, "'username' is not a user name"), 1;
                        snprintf(r->user, sizeof r->user, "%s", user);
                }
                const char *path = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
                struct envd_call c = { .api = ctx, .user = r->user };
                if (path && e2b_resolve_path(&c, path, r->path, sizeof r->path) < 0)
                        return e2b_rest_error(reply, 400, "'path' must be a path of at most 4096 bytes, without '..'"),
                               1;
                if (get) {
                        if (!path)
                                return e2b_rest_error(reply, 400, "query parameter 'path' is required"), 1;
                        r->kind = ENVD_FILES_GET;
                } else if (post) {
                        r->kind = ENVD_FILES_POST;
                        int k = e2b_upload_begin(ctx, conn, r->sandbox_id, r->user, r->path, &r->upload, reply);
                        if (k != 0)
                                return k;
                } else
                        return e2b_rest_error(reply, 405, "GET or POST /files"), 1;
                *ret = TAKE_PTR(r);
                return 0;
        }

        for (size_t i = 0; i < ARRAY_SIZE(rpcs) && !r->rpc; i++)
                if (ends_with(url, rpcs[i].path))
                        r->rpc = &rpcs[i];
        if (!r->rpc)
                return rpc_error(reply, CONNECT_UNIMPLEMENTED, "no such envd method"), 1;
        if (!post)
                return rpc_error(reply, CONNECT_UNIMPLEMENTED, "Connect calls are POSTs"), 1;
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *want = r->rpc->unary ? "application/json" : "application/connect+json";
        if (!ct || strncasecmp(ct, want, strlen(want)) != 0 || (ct[strlen(want)] && ct[strlen(want)] != ';'))
                return rpc_error(reply, CONNECT_INVALID_ARGUMENT, r->rpc->unary
                                                                         ? "a unary call's Content-Type is application/json"
                                                                         : "a stream's Content-Type is application/connect+json"),
                       1;
        if (connect_parse_timeout(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Connect-Timeout-Ms"),
                                  &r->timeout_ms) < 0)
                return rpc_error(reply, CONNECT_INVALID_ARGUMENT, "Connect-Timeout-Ms must be 1 to 10 digits"), 1;
        uint64_t ka = 0;
        const char *kav = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
        if (kav && parse_u64(kav, 3600, &ka) >= 0)
                r->keepalive_s = (unsigned) ka;
        r->kind = ENVD_RPC;
        *ret = TAKE_PTR(r);
        return 0;
}

int e2b_envd_data(struct e2b_envd_request *r, struct api_ctx *ctx, const char *data, size_t len,
                  struct api_reply *reply) {
        if (r->kind == ENVD_FILES_POST)
                return e2b_upload_data(r->upload, ctx, data, len, reply);
        if (r->body_too_large)
                return 0;
        size_t max = CONNECT_MESSAGE_MAX + CONNECT_ENVELOPE_HEADER;
        if (r->kind != ENVD_RPC || r->body_len + len > max) {
                r->body_too_large = true;
                free(r->body);
                r->body = NULL;
                r->body_len = r->body_cap = 0;
                return 0; /* answered at the end */
        }
        if (r->body_len + len > r->body_cap) {
                size_t cap = MIN(MAX(r->body_cap * 2, r->body_len + len), max);
                char *b = realloc(r->body, cap);
                if (!b)
                        return -ENOMEM;
                r->body = b;
                r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, data, len);
        r->body_len += len;
        return 0;
}

static void health(struct e2b_envd_request *r, struct api_ctx *ctx, struct api_reply *reply) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        /* a dead or unknown sandbox is 502: what the SDK's isRunning() reads */
        if (store_sandbox_get(ctx->store, r->sandbox_id, &sb) < 0 || strcmp(sb.state, "running") != 0)
                return e2b_rest_error(reply, 502, "the sandbox is not running");
        *reply = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
}

/* The sandbox the token named, running (a suspended one is woken first, as
 * /v1's data plane does: E2B's autoResume). */
static int open_call(struct e2b_envd_request *r, struct api_ctx *ctx, struct envd_call *c,
                     struct store_sandbox *sb) {
        *c = (struct envd_call){ .api = ctx, .sandbox_id = r->sandbox_id, .user = r->user,
                                 .timeout_ms = r->timeout_ms, .keepalive_s = r->keepalive_s };
        int r2 = api_sandbox_lookup(ctx, r->sandbox_id, sb);
        if (r2 < 0 || (r2 = api_sandbox_require_running(ctx, sb)) < 0)
                return r2;
        c->tenant_id = sb->tenant_id;
        return 0;
}

static void run_rpc(struct e2b_envd_request *r, struct api_ctx *ctx, struct api_reply *reply) {
        if (r->body_too_large)
                return rpc_error(reply, CONNECT_RESOURCE_EXHAUSTED, "the request message is over 1 MiB");
        _cleanup_(json_decrefp) json_t *req = NULL;
        int k = r->rpc->unary ? apireq_parse_object(r->body, r->body_len, &req, ctx->err)
                              : connect_parse_stream_request((const uint8_t *) r->body, r->body_len, &req, ctx->err);
        if (k < 0)
                return r->rpc->unary ? rpc_error(reply, CONNECT_INVALID_ARGUMENT, ctx->err)
                                     : e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, ctx->err);
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        struct envd_call c;
        k = open_call(r, ctx, &c, &sb);
        if (k < 0) {
                /* gone: what the SDK reads as "sandbox not running" */
                const char *msg = ctx->err[0] ? ctx->err : api_error_default_message(k);
                if (!r->rpc->unary)
                        return e2b_stream_error(reply, CONNECT_UNAVAILABLE, msg);
                return k == -ENOENT ? e2b_rest_error(reply, 502, msg) : rpc_error(reply, e2b_connect_code(k), msg);
        }
        if (!r->rpc->unary)
                return r->rpc->stream(&c, req, reply);
        json_t *resp = NULL;
        k = r->rpc->unary(&c, req, &resp);
        if (k < 0) {
                enum connect_code code = e2b_unknown_user(ctx, c.user, k) ? CONNECT_UNAUTHENTICATED
                                         : k == -EEXIST && r->rpc->unary == fs_make_dir ? CONNECT_ALREADY_EXISTS
                                                                                        : e2b_connect_code(k);
                return rpc_error(reply, code, ctx->err[0] ? ctx->err : api_error_default_message(k));
        }
        reply_json_status(reply, MHD_HTTP_OK, resp);
}

void e2b_envd_finish(struct e2b_envd_request *r, struct api_ctx *ctx, struct api_reply *reply) {
        switch (r->kind) {
        case ENVD_HEALTH:
                return health(r, ctx, reply);
        case ENVD_FILES_GET: {
                int k = api_file_read(ctx, r->sandbox_id, r->path, r->user, reply);
                if (k == -ENOENT && !ctx->err[0])
                        snprintf(ctx->err, sizeof ctx->err, "path '%.200s' does not exist", r->path);
                if (k < 0)
                        e2b_rest_error(reply, e2b_unknown_user(ctx, r->user, k) ? 401 : api_error_status(k),
                                       ctx->err[0] ? ctx->err : api_error_default_message(k));
                return;
        }
        case ENVD_FILES_POST:
                return e2b_upload_finish(r->upload, ctx, reply);
        case ENVD_RPC:
                return run_rpc(r, ctx, reply);
        }
}

void e2b_envd_free(struct e2b_envd_request *r) {
        if (!r)
                return;
        e2b_upload_free(r->upload);
        free(r->body);
        free(r);
}
