/* SPDX-License-Identifier: Apache-2.0 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "apireq.h"
#include "auth.h"
#include "e2b-api.h"
#include "console.h"
#include "e2b-envd.h"
#include "formupload.h"
#include "log.h"
#include "macros.h"
#include "nodes.h"
#include "util.h"


#define HTTP_SEGMENTS_MAX 8
#define HTTP_PARAM_MAX 64

struct http_server {
        struct MHD_Daemon *mhd;
        const struct daemon_config *config;
        struct store *store;
        atomic_bool stopping;
        atomic_uint_fast64_t next_id;
};

enum {
        M_GET = 1 << 0,
        M_POST = 1 << 1,
        M_PUT = 1 << 2,
        M_DELETE = 1 << 3,
};

enum route_id {
        R_HEALTH,
        R_METRICS,
        R_LIFECYCLE_EVENTS,
        R_SANDBOX_METRICS,
        R_TEMPLATES,
        R_TEMPLATE,
        R_TEMPLATE_LOGS,
        R_SANDBOXES,
        R_SANDBOX,
        R_EXEC,
        R_SESSIONS,
        R_FILES,
        R_LS,
        R_SESSION,
        R_EVENTS,
        R_STDIN,
        R_SIGNAL,
        R_RESIZE,
        R_PAUSE,
        R_RESUME,
        R_STOP,
        R_START,
        R_ROLLBACK,
        R_SUSPEND,
        R_WAKE,
        R_FORK,
        R_SNAPSHOTS,
        R_SANDBOX_IMAGES,
        R_IMAGES,
        R_IMAGE,
        R_OPERATION,
        R_POOLS,
        R_TENANTS,
        R_TENANT,
        R_TENANT_KEYS,
        R_TENANT_KMS,
        R_TENANT_KMS_ROTATE,
        R_TENANT_KMS_REVOKE,
        R_KEY,
        R_CAP_KEYS,
        R_NETWORK,
        R_NETWORK_LOG,
        R_TENANT_NETWORK,
        R_SECRETS,
        R_SECRET,
        R_SANDBOX_SECRETS,
        R_AUDIT,
        R_NODES,
        R_NODE_TOKENS,
        R_NODE,
        R_NODE_DRAIN,
        R_NODE_UNDRAIN,
        /* the E2B front door's control plane (e2b-api.h) */
        R_E2B_SANDBOXES,
        R_E2B_SANDBOX,
        R_E2B_TIMEOUT,
        R_E2B_PAUSE,
        R_E2B_CONNECT,
        R_E2B_NETWORK,
        R_E2B_FORK,
        R_E2B_METRICS,
        R_E2B_SNAPSHOT_CREATE,
        R_E2B_SNAPSHOTS,
        R_E2B_TEMPLATE,
};

enum auth_kind {
        AUTH_API,     /* API token: admin, or a tenant's (scoped to its sandboxes) */
        AUTH_NONE,    /* public */
        AUTH_SESSION, /* API token or the session's attach token */
        AUTH_ADMIN,   /* admin token only: a tenant key gets 403 */
        AUTH_E2B,     /* an API key in X-API-Key, as E2B's SDKs send it; E2B's error bodies */
        AUTH_METRICS, /* the scrape token (CONTROL_DIR/metrics.token) or the admin token */
};

struct route {
        enum route_id id;
        const char *seg[HTTP_SEGMENTS_MAX]; /* "*" captures the parameter (a second one: param2) */
        unsigned methods;
        enum auth_kind auth;
        enum apireq_body body; /* the fields a POST or JSON PUT may have (default: none) */
};

static const struct route routes[] = {
        { R_HEALTH, { "v1", "health" }, M_GET, AUTH_NONE, APIREQ_BODY_NONE },
        { R_METRICS, { "metrics" }, M_GET, AUTH_METRICS, APIREQ_BODY_NONE },
        { R_LIFECYCLE_EVENTS, { "v1", "events" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_SANDBOX_METRICS, { "v1", "sandboxes", "*", "metrics" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_TEMPLATES, { "v1", "templates" }, M_GET | M_POST, AUTH_API, APIREQ_BODY_TEMPLATE },
        { R_TEMPLATE, { "v1", "templates", "*" }, M_GET | M_DELETE, AUTH_API, APIREQ_BODY_NONE },
        { R_TEMPLATE_LOGS, { "v1", "templates", "*", "builds", "*", "logs" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_SANDBOXES, { "v1", "sandboxes" }, M_GET | M_POST, AUTH_API, APIREQ_BODY_CREATE },
        { R_SANDBOX, { "v1", "sandboxes", "*" }, M_GET | M_DELETE, AUTH_API, APIREQ_BODY_NONE },
        { R_EXEC, { "v1", "sandboxes", "*", "exec" }, M_POST, AUTH_API, APIREQ_BODY_EXEC },
        { R_SESSIONS, { "v1", "sandboxes", "*", "sessions" }, M_POST, AUTH_API, APIREQ_BODY_SESSION },
        { R_FILES, { "v1", "sandboxes", "*", "files" }, M_GET | M_PUT | M_DELETE, AUTH_API, APIREQ_BODY_NONE },
        { R_LS, { "v1", "sandboxes", "*", "ls" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_SESSION, { "v1", "sessions", "*" }, M_GET, AUTH_SESSION, APIREQ_BODY_NONE },
        { R_EVENTS, { "v1", "sessions", "*", "events" }, M_GET, AUTH_SESSION, APIREQ_BODY_NONE },
        { R_STDIN, { "v1", "sessions", "*", "stdin" }, M_POST, AUTH_SESSION, APIREQ_BODY_STDIN },
        { R_SIGNAL, { "v1", "sessions", "*", "signal" }, M_POST, AUTH_SESSION, APIREQ_BODY_SIGNAL },
        { R_RESIZE, { "v1", "sessions", "*", "resize" }, M_POST, AUTH_SESSION, APIREQ_BODY_RESIZE },
        { R_PAUSE, { "v1", "sandboxes", "*", "pause" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_RESUME, { "v1", "sandboxes", "*", "resume" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_STOP, { "v1", "sandboxes", "*", "stop" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_START, { "v1", "sandboxes", "*", "start" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_ROLLBACK, { "v1", "sandboxes", "*", "rollback" }, M_POST, AUTH_API, APIREQ_BODY_ROLLBACK },
        { R_SUSPEND, { "v1", "sandboxes", "*", "suspend" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_WAKE, { "v1", "sandboxes", "*", "wake" }, M_POST, AUTH_API, APIREQ_BODY_NONE },
        { R_FORK, { "v1", "sandboxes", "*", "fork" }, M_POST, AUTH_API, APIREQ_BODY_FORK },
        { R_SNAPSHOTS, { "v1", "sandboxes", "*", "snapshots" }, M_GET | M_POST, AUTH_API, APIREQ_BODY_SNAPSHOT },
        { R_SANDBOX_IMAGES, { "v1", "sandboxes", "*", "images" }, M_POST, AUTH_API, APIREQ_BODY_IMAGE },
        { R_IMAGES, { "v1", "images" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_IMAGE, { "v1", "images", "*" }, M_GET | M_DELETE, AUTH_API, APIREQ_BODY_NONE },
        { R_OPERATION, { "v1", "operations", "*" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_POOLS, { "v1", "pools" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_NETWORK, { "v1", "sandboxes", "*", "network" }, M_GET | M_PUT, AUTH_API, APIREQ_BODY_NETWORK },
        { R_NETWORK_LOG, { "v1", "sandboxes", "*", "network", "log" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_TENANTS, { "v1", "tenants" }, M_GET | M_POST, AUTH_ADMIN, APIREQ_BODY_TENANT },
        { R_TENANT, { "v1", "tenants", "*" }, M_GET | M_DELETE, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_TENANT_NETWORK, { "v1", "tenants", "*", "network" }, M_GET | M_PUT | M_DELETE, AUTH_ADMIN,
          APIREQ_BODY_NETWORK },
        { R_TENANT_KEYS, { "v1", "tenants", "*", "keys" }, M_GET | M_POST, AUTH_ADMIN, APIREQ_BODY_NAME },
        { R_TENANT_KMS, { "v1", "tenants", "*", "kms" }, M_GET | M_PUT, AUTH_ADMIN, APIREQ_BODY_KMS },
        { R_TENANT_KMS_ROTATE, { "v1", "tenants", "*", "kms", "rotate" }, M_POST, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_TENANT_KMS_REVOKE, { "v1", "tenants", "*", "kms", "revoke" }, M_POST, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_KEY, { "v1", "keys", "*" }, M_DELETE, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_CAP_KEYS, { "v1", "capability-keys" }, M_GET | M_POST, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_SECRETS, { "v1", "secrets" }, M_GET | M_POST, AUTH_API, APIREQ_BODY_SECRET },
        { R_SECRET, { "v1", "secrets", "*" }, M_GET | M_DELETE, AUTH_API, APIREQ_BODY_NONE },
        { R_SANDBOX_SECRETS, { "v1", "sandboxes", "*", "secrets" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_AUDIT, { "v1", "audit" }, M_GET, AUTH_API, APIREQ_BODY_NONE },
        { R_NODES, { "v1", "nodes" }, M_GET, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_NODE_TOKENS, { "v1", "nodes", "tokens" }, M_POST, AUTH_ADMIN, APIREQ_BODY_JOIN_TOKEN },
        { R_NODE, { "v1", "nodes", "*" }, M_GET | M_DELETE, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_NODE_DRAIN, { "v1", "nodes", "*", "drain" }, M_POST, AUTH_ADMIN, APIREQ_BODY_NONE },
        { R_NODE_UNDRAIN, { "v1", "nodes", "*", "undrain" }, M_POST, AUTH_ADMIN, APIREQ_BODY_NONE },
        /* E2B's bodies are checked by e2b-api.c (SDK versions add fields) */
        { R_E2B_SANDBOXES, { "v2", "sandboxes" }, M_GET | M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_SANDBOX, { "sandboxes", "*" }, M_GET | M_DELETE, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_TIMEOUT, { "sandboxes", "*", "timeout" }, M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_PAUSE, { "sandboxes", "*", "pause" }, M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_CONNECT, { "v2", "sandboxes", "*", "connect" }, M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_NETWORK, { "sandboxes", "*", "network" }, M_PUT, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_FORK, { "sandboxes", "*", "fork" }, M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_METRICS, { "sandboxes", "*", "metrics" }, M_GET, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_SNAPSHOT_CREATE, { "sandboxes", "*", "snapshots" }, M_POST, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_SNAPSHOTS, { "snapshots" }, M_GET, AUTH_E2B, APIREQ_BODY_NONE },
        { R_E2B_TEMPLATE, { "templates", "*" }, M_DELETE, AUTH_E2B, APIREQ_BODY_NONE },
};

/* Per-request state, from the first access-handler call to completion. */
struct request {
        struct http_server *srv;
        uint64_t id;
        uint64_t start_ns;
        char log_ctx[256];
        const struct route *route;
        char param[HTTP_PARAM_MAX + 1];
        char param2[HTTP_PARAM_MAX + 1];
        unsigned method;
        unsigned status;
        bool queued; /* a response is queued: ignore further body bytes */
        char *tenant_id; /* the API key's tenant; NULL: admin (or an attach token) */
        char *key_id;    /* the API key's id (NULL: an attach token) */

        /* JSON body */
        char *body;
        size_t body_len, body_cap;
        uint64_t discarded; /* bytes dropped after the body went over the limit */

        char *raw_uri;   /* as the client sent it (escapes, query): a service port's target */
        bool begun;

        /* a service port's request (api-ports.c): its body streams like an upload */
        unsigned port;
        char port_id[HTTP_PARAM_MAX + 1];

        /* a request for a sandbox's envd (E2b-Sandbox-Id: e2b-envd.h) */
        struct e2b_envd_request *envd;

        /* POST /v1/templates as multipart/form-data (formupload.h) */
        struct formupload *form;

        /* streamed upload (PUT files, service ports) */
        struct node_conn *upload;
        char upload_path[APIREQ_PATH_MAX + 1];
        uint64_t upload_bytes;
        int upload_r; /* first send error; the node's reply explains it */
};

static void request_free(struct request *req) {
        if (!req)
                return;
        free(req->body);
        free(req->raw_uri);
        free(req->tenant_id);
        free(req->key_id);
        node_conn_free(req->upload);
        formupload_free(req->form);
        e2b_envd_free(req->envd);
        free(req);
}

static unsigned method_bit(const char *m) {
        if (strcmp(m, "GET") == 0)
                return M_GET;
        if (strcmp(m, "POST") == 0)
                return M_POST;
        if (strcmp(m, "PUT") == 0)
                return M_PUT;
        if (strcmp(m, "DELETE") == 0)
                return M_DELETE;
        return 0;
}

static void methods_string(unsigned m, char *buf, size_t n) {
        static const char *const names[] = { "GET", "POST", "PUT", "DELETE" };
        buf[0] = 0;
        size_t off = 0;
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (m & (1u << i)) {
                        int k = snprintf(buf + off, n - off, "%s%s", off ? ", " : "", names[i]);
                        if (k < 0 || (size_t) k >= n - off)
                                return;
                        off += (size_t) k;
                }
}

/*
 * Splits url into segments and finds the route whose pattern matches.
 * ret_path_matched is true when some route has this path (for 405 vs 404).
 * Empty segments (double or trailing slashes) are ignored.
 */
static const struct route *route_match(const char *url, char *param, char *param2, size_t param_n) {
        char seg[HTTP_SEGMENTS_MAX][HTTP_PARAM_MAX + 1];
        size_t nseg = 0;
        for (const char *p = url; *p;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *e = strchrnul(p, '/');
                size_t l = (size_t) (e - p);
                if (nseg == HTTP_SEGMENTS_MAX || l > HTTP_PARAM_MAX)
                        return NULL;
                memcpy(seg[nseg], p, l);
                seg[nseg][l] = 0;
                nseg++;
                p = e;
        }
        for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
                const struct route *rt = &routes[i];
                size_t n = 0;
                while (n < HTTP_SEGMENTS_MAX && rt->seg[n])
                        n++;
                if (n != nseg)
                        continue;
                const char *captured = NULL, *captured2 = NULL;
                bool ok = true;
                for (size_t j = 0; j < n && ok; j++) {
                        if (strcmp(rt->seg[j], "*") == 0) {
                                if (captured)
                                        captured2 = seg[j];
                                else
                                        captured = seg[j];
                        } else
                                ok = strcmp(rt->seg[j], seg[j]) == 0;
                }
                if (!ok)
                        continue;
                if ((captured && !name_is_valid(captured)) || (captured2 && !name_is_valid(captured2)))
                        return NULL; /* cannot name anything we hold */
                size_t l2 = captured2 ? strnlen(captured2, param_n - 1) : 0;
                if (l2)
                        memcpy(param2, captured2, l2);
                param2[l2] = 0;
                size_t l = captured ? strnlen(captured, param_n - 1) : 0;
                if (l)
                        memcpy(param, captured, l);
                param[l] = 0;
                return rt;
        }
        return NULL;
}

/* Copies the URL path into a log-safe form: [A-Za-z0-9/._-] kept, the rest
 * as '?', at most 128 bytes. */
static void log_safe_path(const char *url, char *buf, size_t n) {
        size_t o = 0;
        for (const char *p = url; *p && o + 1 < n && o < 128; p++) {
                char c = *p;
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                          c == '.' || c == '_' || c == '-';
                buf[o++] = ok ? c : '?';
        }
        buf[o] = 0;
}

static enum MHD_Result queue(struct request *req, struct MHD_Connection *conn, unsigned status,
                             struct MHD_Response *resp) {
        if (!resp)
                return MHD_NO;
        char rid[32];
        snprintf(rid, sizeof rid, "%llu", (unsigned long long) req->id);
        MHD_add_response_header(resp, "X-Request-Id", rid);
        enum MHD_Result m = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        if (m == MHD_YES) {
                req->status = status;
                req->queued = true;
        }
        return m;
}

static enum MHD_Result queue_json(struct request *req, struct MHD_Connection *conn, unsigned status, const json_t *o) {
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (!s)
                return MHD_NO;
        size_t len = strlen(s);
        /* a trailing newline makes curl output readable */
        char *t = realloc(s, len + 2);
        if (!t) {
                free(s);
                return MHD_NO;
        }
        t[len] = '\n';
        t[len + 1] = 0;
        struct MHD_Response *resp = MHD_create_response_from_buffer(len + 1, t, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(t);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return queue(req, conn, status, resp);
}

static bool is_e2b(const struct request *req) {
        return req->route && req->route->auth == AUTH_E2B;
}

/* Queues {"error":{"code","message"}} for a negative errno; on E2B's routes
 * {"code":STATUS,"message"}, which is what its SDKs read. */
static enum MHD_Result queue_error(struct request *req, struct MHD_Connection *conn, int r, const char *msg) {
        unsigned status = api_error_status(r);
        const char *code = api_error_code(r);
        if (!msg || !*msg)
                msg = api_error_default_message(r);
        _cleanup_(json_decrefp) json_t *o =
                is_e2b(req) ? json_pack("{s:i, s:s}", "code", (int) status, "message", msg)
                            : json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        struct MHD_Response *resp = s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE)
                                      : MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
        if (!resp) {
                free(s);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (status == 401 && !is_e2b(req))
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"airlock\"");
        if (status == 405 && req->route) {
                char allow[64];
                methods_string(req->route->methods, allow, sizeof allow);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        }
        if (status >= 500)
                log_emit(LOG_LEVEL_WARN, req->log_ctx, "%s: %s", code, msg);
        return queue(req, conn, status, resp);
}

static enum MHD_Result queue_reply(struct request *req, struct MHD_Connection *conn, struct api_reply *rep) {
        enum MHD_Result m;
        if (rep->response) {
                m = MHD_queue_response(conn, rep->status, rep->response);
                if (m == MHD_YES) {
                        req->status = rep->status;
                        req->queued = true;
                }
        } else if (rep->body)
                m = queue_json(req, conn, rep->status, rep->body);
        else
                m = queue(req, conn, rep->status, MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT));
        api_reply_release(rep);
        return m;
}

/* Checks the bearer token for the route and records its scope in
 * req->tenant_id. 0 when allowed, -EACCES for no valid token, -EPERM for a
 * tenant key on an admin route. */
/* Checks an API key: token itself, or with bearer the Authorization
 * header's value it is in. Sets the request's tenant and key id. */
static int authenticate_token(struct request *req, const char *value, bool bearer) {
        const char *token = value;
        if (!value || (bearer && auth_parse_bearer(value, &token) < 0))
                return -EACCES;
        uint8_t hash[STORE_HASH_SIZE];
        auth_hash_token(token, hash);
        int r = store_api_key_lookup(req->srv->store, hash, &req->tenant_id);
        if (r == 0 && store_api_key_id(req->srv->store, hash, &req->key_id) < 0)
                req->key_id = NULL; /* only the audit log's actor: "unknown" */
        if (r == 0)
                return req->tenant_id && req->route &&
                                       (req->route->auth == AUTH_ADMIN || req->route->auth == AUTH_METRICS)
                               ? -EPERM
                               : 0;
        if (r != -EACCES) {
                /* a store failure is ours (500), not the client's: never
                 * let its errno pass for a client error such as 409 */
                log_errno(LOG_LEVEL_ERROR, r, req->log_ctx, "store: failed to check API key: %m");
                return -EIO;
        }
        return -EACCES;
}

static int authenticate(struct request *req, struct MHD_Connection *conn) {
        if (req->route && req->route->auth == AUTH_NONE)
                return 0;
        if (is_e2b(req))
                return authenticate_token(req, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-Key"), false);
        const char *hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *scrape;
        if (req->route && req->route->auth == AUTH_METRICS && auth_parse_bearer(hdr, &scrape) >= 0 &&
            api_metrics_token_ok(scrape))
                return 0;
        int r = authenticate_token(req, hdr, true);
        if (r != -EACCES)
                return r;
        const char *token;
        if (req->route && req->route->auth == AUTH_SESSION && auth_parse_bearer(hdr, &token) >= 0) {
                struct store_session ses = { 0 };
                if (store_session_get(req->srv->store, req->param, &ses) >= 0) {
                        bool ok = auth_token_matches(token, ses.token_hash);
                        store_session_release(&ses);
                        if (ok)
                                return 0;
                }
        }
        return -EACCES;
}

/* Looks up a query argument with its length (so embedded NULs are seen). */
static const char *query_arg(struct MHD_Connection *conn, const char *key, size_t *ret_len) {
        const char *v = NULL;
        size_t len = 0;
        if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v, &len) != MHD_YES)
                return NULL;
        if (ret_len)
                *ret_len = len;
        return v ? v : "";
}

static bool query_bool(struct MHD_Connection *conn, const char *key) {
        const char *v = query_arg(conn, key, NULL);
        return v && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "yes") == 0);
}

/* Reads and validates ?path=; writes the message for a 400 to err. */
static int query_path(struct MHD_Connection *conn, const char **ret, char *err) {
        size_t len = 0;
        const char *p = query_arg(conn, "path", &len);
        if (!p) {
                snprintf(err, API_ERRMSG_MAX, "query parameter 'path' is required");
                return -EINVAL;
        }
        int r = apireq_check_path(p, len, err);
        if (r < 0)
                return r;
        *ret = p;
        return 0;
}

/* Declared Content-Length, or -1 when absent or unparsable. */
static int64_t content_length(struct MHD_Connection *conn) {
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t n;
        if (!v || parse_u64(v, INT64_MAX, &n) < 0)
                return -1;
        return (int64_t) n;
}

static void api_ctx_init(struct request *req, struct MHD_Connection *conn, struct api_ctx *ctx) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *ctx = (struct api_ctx){
                .config = req->srv->config,
                .store = req->srv->store,
                .stopping = &req->srv->stopping,
                .log_ctx = req->log_ctx,
                .client_fd = ci ? ci->connect_fd : -1,
                .tenant_id = req->tenant_id,
                .key_id = req->key_id,
        };
}

/* Set while MHD parses a request line that decoded a %00 (in the path or a
 * query argument), read by that request's first on_access(): with a thread
 * per connection both run on the connection's thread, one request at a
 * time. MHD hands the path over as a C string, so without this
 * "/v1/sandboxes/ID%00anything" would route as ID. */
static __thread bool url_had_nul;

static size_t unescape_url(void *cls, struct MHD_Connection *conn, char *s) {
        size_t n = MHD_http_unescape(s);
        if (memchr(s, 0, n))
                url_had_nul = true;
        return n;
}

/* The headers a service port's server gets: the client's end-to-end ones,
 * without Airlock's credential and this hop's framing, plus where the
 * request came from. */
struct forward {
        json_t *headers;
        bool drop_authorization; /* it carried the Airlock key */
        bool drop_e2b;           /* E2B's front-door headers (its tokens) */
};

static enum MHD_Result forward_header(void *cls, enum MHD_ValueKind kind, const char *name, const char *value) {
        struct forward *f = cls;
        static const char *const hop[] = { "connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                           "transfer-encoding", "content-length", "te", "trailer", "upgrade",
                                           "expect", "x-airlock-key", "x-forwarded-for", "x-forwarded-host",
                                           "x-forwarded-proto", "forwarded" };
        (void) kind;
        if (!name || !value)
                return MHD_YES;
        for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
                if (strcasecmp(name, hop[i]) == 0)
                        return MHD_YES;
        if (f->drop_authorization && strcasecmp(name, "authorization") == 0)
                return MHD_YES;
        if (f->drop_e2b && e2b_header_is_front_door(name))
                return MHD_YES;
        /* NULL for a value that is not UTF-8 (the node protocol is JSON): dropped */
        json_t *v = json_string(value);
        if (v)
                json_array_append_new(f->headers, json_pack("[so]", name, v));
        return MHD_YES;
}

static void client_address(struct MHD_Connection *conn, char *buf, size_t n) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        buf[0] = '\0';
        if (!ci || !ci->client_addr)
                return;
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *) sa)->sin_addr, buf, (socklen_t) n);
        else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) sa)->sin6_addr, buf, (socklen_t) n);
}

/* A service port's request, its caller authorised: the head goes to the
 * node and the body follows. */
static enum MHD_Result port_forward(struct request *req, struct MHD_Connection *conn, const char *method,
                                    const char *target, bool drop_authorization, bool drop_e2b) {
        const struct daemon_config *cfg = req->srv->config;
        int r;
        int64_t clen = content_length(conn);
        if (clen > 0 && (uint64_t) clen > cfg->max_upload) {
                char err[API_ERRMSG_MAX];
                snprintf(err, sizeof err, "request body of %lld bytes exceeds the limit of %llu bytes",
                         (long long) clen, (unsigned long long) cfg->max_upload);
                return queue_error(req, conn, -EFBIG, err);
        }
        const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        struct forward f = { .headers = json_array(), .drop_authorization = drop_authorization, .drop_e2b = drop_e2b };
        if (!f.headers)
                return queue_error(req, conn, -ENOMEM, NULL);
        _cleanup_(json_decrefp) json_t *headers = f.headers;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, forward_header, &f);
        char addr[INET6_ADDRSTRLEN];
        client_address(conn, addr, sizeof addr);
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (addr[0])
                json_array_append_new(headers, json_pack("[ss]", "X-Forwarded-For", addr));
        if (host) /* (json_pack fails on a Host that is not UTF-8: then none) */
                json_array_append_new(headers, json_pack("[ss]", "X-Forwarded-Host", host));
        json_array_append_new(headers, json_pack("[ss]", "X-Forwarded-Proto", "http"));
        struct api_ctx ctx;
        api_ctx_init(req, conn, &ctx);
        /* a body without Content-Length (chunked) has a size the node does not know */
        int64_t length = clen >= 0 ? clen : te ? -1 : 0;
        r = api_port_begin(&ctx, req->port_id, req->port, method, target, headers, length, &req->upload);
        if (r < 0)
                return queue_error(req, conn, r, ctx.err);
        return MHD_YES;
}

/* A service port's request: authenticated like the API (the key in
 * Authorization, or in X-Airlock-Key so that the server gets its own
 * Authorization). */
static enum MHD_Result port_begin(struct request *req, struct MHD_Connection *conn, const char *method,
                                  const char *target) {
        const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Airlock-Key");
        int r = authenticate_token(req, key ? key : MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                             MHD_HTTP_HEADER_AUTHORIZATION),
                                   !key);
        if (r < 0) /* (-EIO: the store failed, its own 500) */
                return queue_error(req, conn, r, r == -EACCES ? "missing or invalid bearer token" : NULL);
        return port_forward(req, conn, method, target, !key, false);
}

/* A request E2B's SDK sends to a sandbox's envd: e2b-envd.c answers it,
 * errors included, in the shape the SDK reads. */
static enum MHD_Result envd_begin(struct request *req, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *sandbox_id) {
        struct api_ctx ctx;
        struct api_reply rep = { 0 };
        api_ctx_init(req, conn, &ctx);
        uint16_t port = 0;
        int r = e2b_envd_begin(&ctx, conn, url, method, sandbox_id, &req->envd, &port, &rep);
        if (r < 0)
                return queue_error(req, conn, r, ctx.err);
        if (r == 2) {
                /* the sandbox's token was its authorisation: as the admin's,
                 * for this one sandbox; its server gets the path as sent */
                req->port = port;
                snprintf(req->port_id, sizeof req->port_id, "%s", sandbox_id);
                return port_forward(req, conn, method, req->raw_uri ? req->raw_uri : url, false, true);
        }
        return r > 0 ? queue_reply(req, conn, &rep) : MHD_YES;
}

/* First call for a request: route, authenticate, and start uploads. */
static enum MHD_Result request_begin(struct request *req, struct MHD_Connection *conn, const char *url,
                                     const char *method) {
        const struct daemon_config *cfg = req->srv->config;
        req->method = method_bit(method);
        if (url_had_nul) {
                url_had_nul = false;
                return queue_error(req, conn, -EINVAL, "the URL has an encoded NUL byte (%00)");
        }
        const char *e2b_sandbox = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
        if (e2b_sandbox)
                return envd_begin(req, conn, url, method, e2b_sandbox);
        /* E2B's signed /files URLs, fetched without any header: the
         * signature says which sandbox (e2b-envd.c) */
        size_t ul = strlen(url);
        if (ul >= 6 && strcmp(url + ul - 6, "/files") == 0 && strncmp(url, "/v1/", 4) != 0 &&
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "signature"))
                return envd_begin(req, conn, url, method, "");
        const char *target = NULL;
        char port_err[API_ERRMSG_MAX] = "";
        int p = api_port_target(req->raw_uri, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
                                req->port_id, sizeof req->port_id, &req->port, &target, port_err, sizeof port_err);
        if (p < 0)
                return queue_error(req, conn, p, port_err);
        /* E2B's host names: 49983-ID.DOMAIN is the sandbox's envd */
        if (p > 0 && req->port == E2B_ENVD_PORT) {
                req->port = 0;
                return envd_begin(req, conn, url, method, req->port_id);
        }
        if (p > 0 && (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2B-Traffic-Access-Token") ||
                      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token"))) {
                /* an E2B client at a sandbox's service: its token, not a key */
                if (!e2b_port_token_ok(conn, req->port_id))
                        return queue_error(req, conn, -EACCES, "missing or invalid access token for this sandbox");
                return port_forward(req, conn, method, target, false, true);
        }
        if (p > 0)
                return port_begin(req, conn, method, target);
        if (req->method == M_GET && console_is_path(url)) {
                /* the web console's files: public, like any page that asks
                 * for a key (console.h) */
                unsigned status = 0;
                struct MHD_Response *resp = console_response(cfg, url, &status);
                return queue(req, conn, status, resp);
        }
        req->route = route_match(url, req->param, req->param2, sizeof req->param);

        int r = authenticate(req, conn);
        if (r < 0)
                return queue_error(req, conn, r,
                                   r == -EACCES && is_e2b(req) ? "missing or invalid API key (X-API-Key)"
                                   : r == -EACCES               ? "missing or invalid bearer token"
                                   : r == -EPERM ? "tenants and keys are managed with the admin token" : NULL);
        if (!req->route)
                return queue_error(req, conn, -ENOENT, "no such endpoint");
        if (!(req->route->methods & req->method)) {
                char msg[128], allow[64];
                methods_string(req->route->methods, allow, sizeof allow);
                snprintf(msg, sizeof msg, "method %.16s not allowed here (allowed: %s)", method, allow);
                return queue_error(req, conn, -EOPNOTSUPP, msg);
        }

        int64_t clen = content_length(conn);
        if (req->route->id == R_FILES && req->method == M_PUT) {
                char err[API_ERRMSG_MAX] = "";
                const char *path;
                if ((r = query_path(conn, &path, err)) < 0)
                        return queue_error(req, conn, r, err);
                if (clen > 0 && (uint64_t) clen > cfg->max_upload) {
                        snprintf(err, sizeof err, "upload of %lld bytes exceeds the limit of %llu bytes",
                                 (long long) clen, (unsigned long long) cfg->max_upload);
                        return queue_error(req, conn, -EFBIG, err);
                }
                uint32_t mode = 0644;
                const char *m = query_arg(conn, "mode", NULL);
                if (m) {
                        char *end = (char *) m;
                        unsigned long v = 0;
                        /* digits only: strtoul() would take "-1", "+7" or " 7" */
                        if (strspn(m, "01234567") == strlen(m))
                                v = strtoul(m, &end, 8);
                        if (!*m || *end || v > 07777)
                                return queue_error(req, conn, -EINVAL, "query parameter 'mode' must be octal, at most 7777");
                        mode = (uint32_t) v;
                }
                snprintf(req->upload_path, sizeof req->upload_path, "%s", path);
                struct api_ctx ctx;
                api_ctx_init(req, conn, &ctx);
                r = api_upload_begin(&ctx, req->param, path, mode, &req->upload);
                if (r < 0)
                        return queue_error(req, conn, r, ctx.err);
                return MHD_YES;
        }
        if (req->route->id == R_TEMPLATES && req->method == M_POST && formupload_is_multipart(conn)) {
                /* a spec and its build context: the context goes to a
                 * temporary file as it arrives */
                if (clen > 0 && (uint64_t) clen > API_TEMPLATE_CONTEXT_MAX + cfg->max_json_body)
                        return queue_error(req, conn, -EFBIG, "the build context exceeds the limit of 256 MiB");
                r = formupload_new(conn, "request", "context", cfg->control_dir, cfg->max_json_body,
                                   API_TEMPLATE_CONTEXT_MAX, &req->form);
                if (r < 0 && r != -EINVAL)
                        log_errno(LOG_LEVEL_ERROR, r, req->log_ctx, "cannot take a build context in %s: %m",
                                  cfg->control_dir);
                if (r < 0)
                        return queue_error(req, conn, r == -EINVAL ? r : -EIO,
                                           r == -EINVAL ? "cannot read the multipart/form-data body" : NULL);
                return MHD_YES;
        }
        if (clen > 0 && (uint64_t) clen > cfg->max_json_body) {
                char err[API_ERRMSG_MAX];
                snprintf(err, sizeof err, "request body of %lld bytes exceeds the limit of %llu bytes", (long long) clen,
                         (unsigned long long) cfg->max_json_body);
                return queue_error(req, conn, -EFBIG, err);
        }
        return MHD_YES;
}

static enum MHD_Result request_finish(struct request *req, struct MHD_Connection *conn);

/* A chunk of request body. */
static enum MHD_Result request_data(struct request *req, struct MHD_Connection *conn, const char *data, size_t len) {
        const struct daemon_config *cfg = req->srv->config;
        if (req->envd) {
                struct api_ctx ctx;
                struct api_reply rep = { 0 };
                api_ctx_init(req, conn, &ctx);
                int r = e2b_envd_data(req->envd, &ctx, data, len, &rep);
                if (r < 0)
                        return queue_error(req, conn, r, ctx.err);
                return r > 0 ? queue_reply(req, conn, &rep) : MHD_YES;
        }
        if (req->form) {
                char err[API_ERRMSG_MAX] = "";
                int r = formupload_data(req->form, data, len, err, sizeof err);
                if (r < 0)
                        return queue_error(req, conn, r, err);
                return MHD_YES;
        }
        if (req->upload) {
                req->upload_bytes += len;
                if (req->upload_bytes > cfg->max_upload) {
                        (void) node_conn_send_end(req->upload, true);
                        node_conn_free(TAKE_PTR(req->upload));
                        char err[API_ERRMSG_MAX];
                        snprintf(err, sizeof err, "upload exceeds the limit of %llu bytes",
                                 (unsigned long long) cfg->max_upload);
                        /* stop reading: answer now, or drop the connection */
                        return queue_error(req, conn, -EFBIG, err);
                }
                if (req->upload_r == 0)
                        req->upload_r = api_upload_chunk(req->upload, data, len);
                /* The node stopped reading: it has answered (and hung up) or
                 * died. Answer now instead of taking in up to max_upload
                 * more bytes that can go nowhere. */
                if (req->upload_r < 0)
                        return request_finish(req, conn);
                return MHD_YES;
        }
        if (req->discarded > 0 || req->body_len + len > cfg->max_json_body) {
                /* Over the limit without a Content-Length (chunked): MHD
                 * cannot answer mid-body, so drop the bytes and answer 413
                 * at the end, or hang up once the sender goes far past it. */
                free(req->body);
                req->body = NULL;
                req->body_len = req->body_cap = 0;
                req->discarded += len;
                if (req->discarded > 4 * cfg->max_json_body)
                        return MHD_NO;
                return MHD_YES;
        }
        if (req->body_len + len > req->body_cap) {
                size_t ncap = MAX(req->body_cap * 2, req->body_len + len);
                ncap = MIN(ncap, (size_t) cfg->max_json_body);
                char *nb = realloc(req->body, ncap);
                if (!nb)
                        return queue_error(req, conn, -ENOMEM, NULL);
                req->body = nb;
                req->body_cap = ncap;
        }
        memcpy(req->body + req->body_len, data, len);
        req->body_len += len;
        return MHD_YES;
}

/* The whole body is in: run the handler and queue its reply. */
static enum MHD_Result request_finish(struct request *req, struct MHD_Connection *conn) {
        struct api_ctx ctx;
        struct api_reply rep = { 0 };
        _cleanup_(json_decrefp) json_t *body = NULL;
        const char *id = req->param;
        const char *path = NULL;
        const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
        int r;

        api_ctx_init(req, conn, &ctx);
        if (req->envd) {
                e2b_envd_finish(req->envd, &ctx, &rep);
                return queue_reply(req, conn, &rep);
        }
        if (req->port) {
                if (!req->upload)
                        return MHD_NO; /* already answered */
                r = api_port_finish(&ctx, &req->upload, &rep);
                node_conn_free(TAKE_PTR(req->upload));
                if (r < 0) {
                        api_reply_release(&rep);
                        return queue_error(req, conn, r, ctx.err);
                }
                return queue_reply(req, conn, &rep);
        }
        if (req->discarded > 0) {
                snprintf(ctx.err, sizeof ctx.err, "request body exceeds the limit of %llu bytes",
                         (unsigned long long) req->srv->config->max_json_body);
                return queue_error(req, conn, -EFBIG, ctx.err);
        }
        /* every body but a file upload's is one JSON object (a form's
         * "request" part) */
        const char *body_text = req->body;
        size_t body_len = req->body_len;
        if (req->form && (r = formupload_finish(req->form, ctx.err, sizeof ctx.err)) < 0)
                return queue_error(req, conn, r, ctx.err);
        if (req->form && !(body_text = formupload_json(req->form, &body_len)))
                return queue_error(req, conn, -EINVAL, "the form has no 'request' part (the JSON request)");
        if (req->method == M_POST || (req->method == M_PUT && req->route->id != R_FILES)) {
                r = apireq_parse_object(body_text, body_len, &body, ctx.err);
                /* strict: a field no handler reads is the client's mistake
                 * (a misspelt security setting must not just be dropped) */
                if (r >= 0 && !is_e2b(req))
                        r = apireq_check_body(body, req->route->body, false, ctx.err);
                if (r < 0)
                        return queue_error(req, conn, r, ctx.err);
        }

        switch (req->route->id) {
        case R_HEALTH:
                r = api_health(&ctx, &rep);
                break;
        case R_METRICS:
                r = api_metrics_get(&ctx, query_bool(conn, "per_sandbox"), &rep);
                break;
        case R_SANDBOX_METRICS:
                r = api_sandbox_metrics(&ctx, id, &rep);
                break;
        case R_LIFECYCLE_EVENTS:
                r = api_events(&ctx, query_arg(conn, "sandbox_id", NULL), query_arg(conn, "after", NULL),
                               MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID"), &rep);
                break;
        case R_TEMPLATES:
                if (req->method == M_GET) {
                        r = api_templates_list(&ctx, &rep);
                        break;
                }
                char context_sha[65];
                const char *context = req->form ? formupload_file(req->form, context_sha) : NULL;
                r = api_template_create(&ctx, body, context, context ? context_sha : NULL, &rep);
                break;
        case R_TEMPLATE:
                r = req->method == M_GET ? api_template_get(&ctx, id, &rep) : api_template_delete(&ctx, id, &rep);
                break;
        case R_TEMPLATE_LOGS:
                r = api_template_logs(&ctx, id, req->param2, &rep);
                break;
        case R_POOLS:
                r = api_pools_list(&ctx, &rep);
                break;
        case R_SANDBOXES:
                r = req->method == M_POST ? api_sandbox_create(&ctx, body, key, &rep) : api_sandbox_list(&ctx, &rep);
                break;
        case R_SANDBOX:
                r = req->method == M_DELETE ? api_sandbox_delete(&ctx, id, key, query_bool(conn, "keep_snapshots"), &rep)
                                            : api_sandbox_get(&ctx, id, &rep);
                break;
        case R_EXEC:
                r = api_exec(&ctx, id, body, &rep);
                break;
        case R_SESSIONS:
                r = api_session_create(&ctx, id, body, &rep);
                break;
        case R_FILES:
                if (req->method == M_PUT) {
                        if (!req->upload)
                                return MHD_NO; /* already answered */
                        r = api_upload_finish(&ctx, req->upload, req->upload_path, req->upload_bytes, &rep);
                        node_conn_free(TAKE_PTR(req->upload));
                        break;
                }
                if ((r = query_path(conn, &path, ctx.err)) < 0)
                        break;
                r = req->method == M_GET ? api_file_read(&ctx, id, path, NULL, &rep)
                                         : api_file_remove(&ctx, id, path, query_bool(conn, "recursive"), &rep);
                break;
        case R_LS:
                if ((r = query_path(conn, &path, ctx.err)) < 0)
                        break;
                r = api_file_list(&ctx, id, path, &rep);
                break;
        case R_SESSION:
                r = api_session_get(&ctx, id, &rep);
                break;
        case R_EVENTS:
                r = api_session_events(&ctx, id, &rep);
                break;
        case R_STDIN:
                r = api_session_stdin(&ctx, id, body, &rep);
                break;
        case R_SIGNAL:
                r = api_session_signal(&ctx, id, body, &rep);
                break;
        case R_RESIZE:
                r = api_session_resize(&ctx, id, body, &rep);
                break;
        case R_PAUSE:
        case R_RESUME:
        case R_STOP:
        case R_START:
        case R_ROLLBACK:
        case R_SUSPEND:
        case R_WAKE:
        case R_FORK: {
                static const char *const verbs[] = { [R_PAUSE - R_PAUSE] = "pause", [R_RESUME - R_PAUSE] = "resume",
                                                     [R_STOP - R_PAUSE] = "stop", [R_START - R_PAUSE] = "start",
                                                     [R_ROLLBACK - R_PAUSE] = "rollback",
                                                     [R_SUSPEND - R_PAUSE] = "suspend", [R_WAKE - R_PAUSE] = "wake",
                                                     [R_FORK - R_PAUSE] = "fork" };
                r = api_sandbox_verb(&ctx, id, verbs[req->route->id - R_PAUSE], body, key, query_bool(conn, "wait"),
                                     &rep);
                break;
        }
        case R_SNAPSHOTS:
                r = req->method == M_POST ? api_snapshot_create(&ctx, id, body, &rep) : api_snapshot_list(&ctx, id, &rep);
                break;
        case R_SANDBOX_IMAGES:
                r = api_image_create(&ctx, id, body, &rep);
                break;
        case R_IMAGES:
                r = api_image_list(&ctx, query_arg(conn, "sandbox_id", NULL), &rep);
                break;
        case R_IMAGE:
                r = req->method == M_GET ? api_image_get(&ctx, id, &rep) : api_image_delete(&ctx, id, &rep);
                break;
        case R_OPERATION:
                r = api_operation_get(&ctx, id, &rep);
                break;
        case R_NODES:
                r = api_node_list(&ctx, &rep);
                break;
        case R_NODE_TOKENS:
                r = api_node_token_create(&ctx, body, &rep);
                break;
        case R_NODE:
                r = req->method == M_GET ? api_node_get(&ctx, id, &rep) : api_node_delete(&ctx, id, &rep);
                break;
        case R_NODE_DRAIN:
        case R_NODE_UNDRAIN:
                r = api_node_drain(&ctx, id, req->route->id == R_NODE_DRAIN, &rep);
                break;
        case R_TENANTS:
                r = req->method == M_POST ? api_tenant_create(&ctx, body, &rep) : api_tenant_list(&ctx, &rep);
                break;
        case R_TENANT:
                r = req->method == M_GET ? api_tenant_get(&ctx, id, &rep) : api_tenant_delete(&ctx, id, &rep);
                break;
        case R_TENANT_NETWORK:
                r = req->method == M_GET   ? api_tenant_network_get(&ctx, id, &rep)
                    : req->method == M_PUT ? api_tenant_network_put(&ctx, id, body, &rep)
                                           : api_tenant_network_delete(&ctx, id, &rep);
                break;
        case R_NETWORK:
                r = req->method == M_PUT ? api_sandbox_network_put(&ctx, id, body, &rep)
                                         : api_sandbox_network_get(&ctx, id, &rep);
                break;
        case R_NETWORK_LOG:
                r = api_sandbox_network_log(&ctx, id, query_arg(conn, "limit", NULL), &rep);
                break;
        case R_TENANT_KEYS:
                r = req->method == M_POST ? api_key_create(&ctx, id, body, &rep) : api_key_list(&ctx, id, &rep);
                break;
        case R_KEY:
                r = api_key_delete(&ctx, id, &rep);
                break;
        case R_TENANT_KMS:
                r = req->method == M_PUT ? api_tenant_kms_put(&ctx, id, body, &rep) : api_tenant_kms_get(&ctx, id, &rep);
                break;
        case R_TENANT_KMS_ROTATE:
                r = api_tenant_kms_rotate(&ctx, id, &rep);
                break;
        case R_TENANT_KMS_REVOKE:
                r = api_tenant_kms_revoke(&ctx, id, &rep);
                break;
        case R_CAP_KEYS:
                r = req->method == M_POST ? api_capability_keys_rotate(&ctx, &rep) : api_capability_keys_get(&ctx, &rep);
                break;
        case R_SECRETS:
                r = req->method == M_POST ? api_secret_create(&ctx, body, &rep)
                                          : api_secret_list(&ctx, query_arg(conn, "tenant", NULL), &rep);
                break;
        case R_SECRET:
                r = req->method == M_DELETE ? api_secret_delete(&ctx, id, query_arg(conn, "tenant", NULL), &rep)
                                            : api_secret_get(&ctx, id, query_arg(conn, "tenant", NULL), &rep);
                break;
        case R_SANDBOX_SECRETS:
                r = api_sandbox_secrets_get(&ctx, id, &rep);
                break;
        case R_AUDIT:
                r = api_audit_get(&ctx, query_arg(conn, "sandbox", NULL), query_arg(conn, "secret", NULL),
                                  query_arg(conn, "limit", NULL), &rep);
                break;
        case R_E2B_SANDBOXES:
                if (req->method == M_POST)
                        r = e2b_sandbox_create(&ctx, body, &rep);
                else {
                        struct e2b_list_query q = {
                                .state = query_arg(conn, "state", NULL),
                                .metadata = query_arg(conn, "metadata", NULL),
                                .limit = query_arg(conn, "limit", NULL),
                                .next_token = query_arg(conn, "nextToken", NULL),
                                .order = query_arg(conn, "order", NULL),
                        };
                        r = e2b_sandbox_list(&ctx, &q, &rep);
                }
                break;
        case R_E2B_SANDBOX:
                r = req->method == M_DELETE ? e2b_sandbox_kill(&ctx, id, &rep) : e2b_sandbox_get(&ctx, id, &rep);
                break;
        case R_E2B_TIMEOUT:
                r = e2b_sandbox_set_timeout(&ctx, id, body, &rep);
                break;
        case R_E2B_PAUSE:
                r = e2b_sandbox_pause(&ctx, id, body, &rep);
                break;
        case R_E2B_CONNECT:
                r = e2b_sandbox_connect(&ctx, id, body, &rep);
                break;
        case R_E2B_METRICS:
                r = e2b_sandbox_metrics(&ctx, id, query_arg(conn, "start", NULL), query_arg(conn, "end", NULL), &rep);
                break;
        case R_E2B_FORK:
                r = e2b_sandbox_fork(&ctx, id, body, &rep);
                break;
        case R_E2B_NETWORK:
                r = e2b_sandbox_update_network(&ctx, id, body, &rep);
                break;
        case R_E2B_SNAPSHOT_CREATE:
                r = e2b_snapshot_create(&ctx, id, body, &rep);
                break;
        case R_E2B_SNAPSHOTS: {
                struct e2b_list_query q = {
                        .sandbox_id = query_arg(conn, "sandboxID", NULL),
                        .name = query_arg(conn, "name", NULL),
                        .limit = query_arg(conn, "limit", NULL),
                        .next_token = query_arg(conn, "nextToken", NULL),
                };
                r = e2b_snapshot_list(&ctx, &q, &rep);
                break;
        }
        case R_E2B_TEMPLATE:
                r = e2b_snapshot_delete(&ctx, id, &rep);
                break;
        default:
                r = -ENOENT;
        }
        if (r < 0) {
                api_reply_release(&rep);
                return queue_error(req, conn, r, ctx.err);
        }
        return queue_reply(req, conn, &rep);
}

static struct request *request_new(struct http_server *srv, const char *raw_uri) {
        struct request *req = calloc(1, sizeof *req);
        if (!req)
                return NULL;
        req->srv = srv;
        req->id = atomic_fetch_add(&srv->next_id, 1) + 1;
        req->start_ns = now_monotonic_ns();
        if (raw_uri && !(req->raw_uri = strdup(raw_uri))) {
                free(req);
                return NULL;
        }
        return req;
}

/* Before anything else of a request: its URI as sent (MHD unescapes the
 * one on_access() gets, and cuts the query off). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
        (void) conn;
        return request_new(cls, uri);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
        struct http_server *srv = cls;
        struct request *req = *con_cls;

        if (!req || !req->begun) {
                if (!req && !(req = request_new(srv, NULL)))
                        return MHD_NO;
                req->begun = true;
                char safe[160];
                log_safe_path(url, safe, sizeof safe);
                snprintf(req->log_ctx, sizeof req->log_ctx, "req=%llu method=%.16s path=%s",
                         (unsigned long long) req->id, method_bit(method) ? method : "other", safe);
                *con_cls = req;
                return request_begin(req, conn, url, method);
        }
        if (req->queued) {
                *upload_data_size = 0; /* answered already: discard */
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                return request_data(req, conn, upload_data, n);
        }
        return request_finish(req, conn);
}

/* A route as the metrics name it: "/v1/sandboxes/{id}/exec" (a path of no
 * route: "unmatched", so a scanner cannot make a series per URL). */
static char route_patterns[ARRAY_SIZE(routes)][HTTP_SEGMENTS_MAX * 24];
static pthread_once_t route_patterns_once = PTHREAD_ONCE_INIT;

static void route_patterns_make(void) {
        for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
                char *p = route_patterns[i];
                size_t n = sizeof route_patterns[i], len = 0;
                for (size_t k = 0; k < HTTP_SEGMENTS_MAX && routes[i].seg[k] && len < n; k++)
                        len += (size_t) snprintf(p + len, n - len, "/%s",
                                                 strcmp(routes[i].seg[k], "*") == 0 ? "{id}" : routes[i].seg[k]);
        }
}

static const char *route_pattern(const struct route *r) {
        if (!r)
                return "unmatched";
        pthread_once(&route_patterns_once, route_patterns_make);
        return route_patterns[r - routes];
}

static const char *method_label(unsigned m) {
        return m == M_GET ? "GET" : m == M_POST ? "POST" : m == M_PUT ? "PUT" : m == M_DELETE ? "DELETE" : "other";
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        struct request *req = *con_cls;
        if (!req)
                return;
        uint64_t ns = now_monotonic_ns() - req->start_ns, ms = ns / 1000000ULL;
        api_metrics_http(route_pattern(req->route), method_label(req->method), req->status, (double) ns / 1e9);
        log_emit(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? LOG_LEVEL_INFO : LOG_LEVEL_WARN, req->log_ctx,
                 "done status=%u ms=%llu%s", req->status, (unsigned long long) ms,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
        request_free(req);
        *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
        char msg[512];
        vsnprintf(msg, sizeof msg, fmt, ap);
        size_t n = strlen(msg);
        while (n > 0 && msg[n - 1] == '\n')
                msg[--n] = 0;
        log_emit(LOG_LEVEL_WARN, "component=microhttpd", "%s", msg);
}

int http_server_start(const struct daemon_config *config, struct store *store, struct http_server **ret) {
        nodes_init(config, store); /* where requests about sandboxes go */
        struct http_server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->config = config;
        s->store = store;
        atomic_init(&s->stopping, false);
        atomic_init(&s->next_id, 0);

        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                         MHD_USE_ITC;
        if (config->listen_addr.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        uint16_t port = config->listen_addr.ss_family == AF_INET6
                                ? ntohs(((const struct sockaddr_in6 *) &config->listen_addr)->sin6_port)
                                : ntohs(((const struct sockaddr_in *) &config->listen_addr)->sin_port);
        s->mhd = MHD_start_daemon(flags, port, NULL, NULL, on_access, s,
                                  MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                                  MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) &config->listen_addr,
                                  MHD_OPTION_CONNECTION_LIMIT, config->max_connections,
                                  MHD_OPTION_CONNECTION_TIMEOUT, config->conn_timeout_s,
                                  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (128u << 10),
                                  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                  MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, s,
                                  MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                  MHD_OPTION_END);
        if (!s->mhd) {
                free(s);
                return -EADDRNOTAVAIL;
        }
        *ret = s;
        return 0;
}

uint16_t http_server_port(struct http_server *s) {
        const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
        return i ? i->port : 0;
}

void http_server_quiesce(struct http_server *s) {
        if (!s)
                return;
        atomic_store(&s->stopping, true);
        MHD_socket fd = MHD_quiesce_daemon(s->mhd);
        if (fd != MHD_INVALID_SOCKET)
                close(fd);
}

void http_server_stop(struct http_server *s) {
        if (!s)
                return;
        atomic_store(&s->stopping, true);
        MHD_stop_daemon(s->mhd);
        free(s);
}
