/* SPDX-License-Identifier: Apache-2.0 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
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
#include "e2b-volume-content.h"
#include "formupload.h"
#include "log.h"
#include "macros.h"
#include "mcp.h"
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
        M_PATCH = 1 << 4,
};

enum auth_kind {
        AUTH_API,     /* API token: admin, or a tenant's (scoped to its sandboxes) */
        AUTH_NONE,    /* public */
        AUTH_SESSION, /* API token or the session's attach token */
        AUTH_ADMIN,   /* admin token only: a tenant key gets 403 */
        AUTH_E2B,     /* an API key in X-API-Key, as E2B's SDKs send it; E2B's error bodies */
        AUTH_METRICS, /* the scrape token (CONTROL_DIR/metrics.token) or the admin token */
        AUTH_VOLUME,  /* the volume's token (e2b_volume_token()) as a bearer; E2B's error bodies */
};

enum {
        ROUTE_UPLOAD = 1 << 0, /* the body streams to the node as a file (PUT .../files), no JSON */
        ROUTE_FORM = 1 << 1,   /* multipart/form-data too: a spec and its build context */
        ROUTE_PATH = 1 << 2,   /* ?path= is required, a checked guest path (call.path) */
        ROUTE_RAW = 1 << 3,    /* the body goes to the handler as it came (call.raw): JSON-RPC's own errors */
};

struct call;
struct api_ctx;
struct api_reply;

/* One endpoint (the table is below its handlers, "the routes"). */
struct route {
        unsigned method;       /* one M_* */
        const char *path;      /* "/v1/sandboxes/{id}/exec" */
        enum auth_kind auth;   /* the same on every line of one path */
        enum apireq_body body; /* the fields a POST or JSON PUT may have (default: none) */
        unsigned flags;        /* ROUTE_* */
        /* the handler, one of: */
        int (*run)(struct api_ctx *ctx, struct api_reply *ret);
        int (*run_id)(struct api_ctx *ctx, const char *id, struct api_reply *ret);
        int (*run_body)(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
        int (*run_id_body)(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
        int (*call)(const struct call *c, struct api_reply *ret);
        /* ROUTE_UPLOAD: opens the node's upload the body streams into */
        int (*upload)(const struct call *c, struct node_conn **ret);
        const char *verb; /* h_verb()'s lifecycle verb */
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

        /* E2B's volume content API: the guest with the volume mounted */
        struct e2b_volume_use *volume_use;

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
        /* after the upload's connection and any streamed body: a helper
         * sandbox may go with it */
        e2b_volume_use_end(req->volume_use);
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
        if (strcmp(m, "PATCH") == 0)
                return M_PATCH;
        return 0;
}

static void methods_string(unsigned m, char *buf, size_t n) {
        static const char *const names[] = {"GET", "POST", "PUT", "DELETE", "PATCH"};
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

static unsigned route_methods(const struct route *rt);

static bool is_e2b(const struct request *req) {
        return req->route && (req->route->auth == AUTH_E2B || req->route->auth == AUTH_VOLUME);
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
                methods_string(route_methods(req->route), allow, sizeof allow);
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

/* A volume's token for the volume in the path: the request is then its
 * owner's, for that volume's files alone (its routes). */
static int authenticate_volume(struct request *req, const char *value) {
        const char *token;
        if (!value || auth_parse_bearer(value, &token) < 0 || !e2b_volume_token_ok(req->param, token))
                return -EACCES;
        struct store_volume v = {0};
        int r = store_volume_get(req->srv->store, req->param, &v);
        if (r >= 0 && v.tenant_id && !(req->tenant_id = strdup(v.tenant_id)))
                r = -ENOMEM;
        store_volume_release(&v);
        if (r == -ENOENT)
                return -EACCES; /* deleted since: its token is worth nothing */
        if (r < 0 && r != -ENOMEM)
                log_errno(LOG_LEVEL_ERROR, r, req->log_ctx, "store: failed to read a volume: %m");
        return r < 0 ? -EIO : 0;
}

static int authenticate(struct request *req, struct MHD_Connection *conn) {
        if (req->route && req->route->auth == AUTH_NONE)
                return 0;
        if (req->route && req->route->auth == AUTH_VOLUME)
                return authenticate_volume(req, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                            MHD_HTTP_HEADER_AUTHORIZATION));
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

/* ---- the routes ---- */

/* What a route's handler gets. */
struct call {
        struct request *req;
        struct MHD_Connection *conn;
        struct api_ctx *ctx;
        const char *id;  /* the path's first {id} */
        json_t *body;    /* the JSON body of a POST or JSON PUT, else NULL */
        const char *key; /* the Idempotency-Key header, or NULL */
        const char *path; /* ?path= of a ROUTE_PATH route */
        const char *raw;  /* the body of a ROUTE_RAW route (raw_len bytes; NULL: none) */
        size_t raw_len;
};

/* MCP (mcp.h): the headers its transport reads. */
static struct mcp_http mcp_headers(const struct call *c) {
        return (struct mcp_http){
                .body = c->raw,
                .body_len = c->raw_len,
                .session = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Mcp-Session-Id"),
                .version = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "MCP-Protocol-Version"),
                .accept = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT),
                .origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Origin"),
                .host = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
                .proto = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "X-Forwarded-Proto"),
        };
}

static int h_mcp_post(const struct call *c, struct api_reply *ret) {
        struct mcp_http h = mcp_headers(c);
        return mcp_http_post(c->ctx, &h, ret);
}

static int h_mcp_delete(const struct call *c, struct api_reply *ret) {
        struct mcp_http h = mcp_headers(c);
        return mcp_http_delete(c->ctx, &h, ret);
}

static int h_metrics(const struct call *c, struct api_reply *ret) {
        return api_metrics_get(c->ctx, query_bool(c->conn, "per_sandbox"), ret);
}

static int h_sandbox_list(const struct call *c, struct api_reply *ret) {
        return api_sandbox_list(c->ctx, query_arg(c->conn, "agent", NULL), ret);
}

static int h_events(const struct call *c, struct api_reply *ret) {
        return api_events(c->ctx, query_arg(c->conn, "sandbox_id", NULL), query_arg(c->conn, "after", NULL),
                          MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Last-Event-ID"), ret);
}

static int h_template_create(const struct call *c, struct api_reply *ret) {
        char context_sha[65];
        const char *context = c->req->form ? formupload_file(c->req->form, context_sha) : NULL;
        return api_template_create(c->ctx, c->body, context, context ? context_sha : NULL, ret);
}

static int h_template_logs(const struct call *c, struct api_reply *ret) {
        return api_template_logs(c->ctx, c->id, c->req->param2, ret);
}

static int h_sandbox_create(const struct call *c, struct api_reply *ret) {
        return api_sandbox_create(c->ctx, c->body, c->key, ret);
}

static int h_sandbox_delete(const struct call *c, struct api_reply *ret) {
        return api_sandbox_delete(c->ctx, c->id, c->key, query_bool(c->conn, "keep_snapshots"), ret);
}

/* PUT /v1/sandboxes/ID/files?path&mode (octal): the upload opened */
static int h_file_upload(const struct call *c, struct node_conn **ret) {
        struct request *req = c->req;
        const char *path;
        int r = query_path(c->conn, &path, c->ctx->err);
        if (r < 0)
                return r;
        uint32_t mode = 0644;
        const char *m = query_arg(c->conn, "mode", NULL);
        if (m) {
                char *end = (char *) m;
                unsigned long v = 0;
                /* digits only: strtoul() would take "-1", "+7" or " 7" */
                if (strspn(m, "01234567") == strlen(m))
                        v = strtoul(m, &end, 8);
                if (!*m || *end || v > 07777)
                        return api_fail(c->ctx, -EINVAL,
                                        "query parameter 'mode' must be octal, at most 7777");
                mode = (uint32_t) v;
        }
        snprintf(req->upload_path, sizeof req->upload_path, "%s", path);
        return api_upload_begin(c->ctx, req->param, path, mode, ret);
}

/* (request_finish() saw that the upload is still open) */
static int h_file_put(const struct call *c, struct api_reply *ret) {
        struct request *req = c->req;
        int r = api_upload_finish(c->ctx, req->upload, req->upload_path, req->upload_bytes, ret);
        node_conn_free(TAKE_PTR(req->upload));
        return r;
}

static int h_file_get(const struct call *c, struct api_reply *ret) {
        return api_file_read(c->ctx, c->id, c->path, NULL, ret);
}

static int h_file_delete(const struct call *c, struct api_reply *ret) {
        return api_file_remove(c->ctx, c->id, c->path, query_bool(c->conn, "recursive"), ret);
}

static int h_ls(const struct call *c, struct api_reply *ret) {
        return api_file_list(c->ctx, c->id, c->path, ret);
}

/* E2B's volume content API (e2b-volume-content.h): the query, then a use
 * of the volume for writing or reading that the request keeps. */
static int volume_begin(const struct call *c, bool write, char path[APIREQ_PATH_MAX + 1],
                        struct e2b_volume_query *q) {
        int r = e2b_volume_path(query_arg(c->conn, "path", NULL), path, c->ctx->err);
        if (r < 0)
                return r;
        *q = (struct e2b_volume_query){.path = path,
                                       .depth = query_arg(c->conn, "depth", NULL),
                                       .uid = query_arg(c->conn, "uid", NULL),
                                       .gid = query_arg(c->conn, "gid", NULL),
                                       .mode = query_arg(c->conn, "mode", NULL),
                                       .force = query_bool(c->conn, "force"),
                                       .body = c->body};
        return e2b_volume_use_begin(c->ctx, c->id, write, &c->req->volume_use);
}

/* The endpoints but PUT's, whose body streams. */
typedef int volume_endpoint(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                            struct api_reply *ret);

static int volume_run(const struct call *c, bool write, volume_endpoint *run, struct api_reply *ret) {
        char path[APIREQ_PATH_MAX + 1];
        struct e2b_volume_query q;
        int r = volume_begin(c, write, path, &q);
        return r < 0 ? r : run(c->ctx, c->req->volume_use, &q, ret);
}

static int h_volume_dir_list(const struct call *c, struct api_reply *ret) {
        return volume_run(c, false, e2b_volume_dir_list, ret);
}

static int h_volume_dir_make(const struct call *c, struct api_reply *ret) {
        return volume_run(c, true, e2b_volume_dir_make, ret);
}

static int h_volume_stat(const struct call *c, struct api_reply *ret) {
        return volume_run(c, false, e2b_volume_path_stat, ret);
}

static int h_volume_remove(const struct call *c, struct api_reply *ret) {
        return volume_run(c, true, e2b_volume_path_remove, ret);
}

static int h_volume_read(const struct call *c, struct api_reply *ret) {
        return volume_run(c, false, e2b_volume_file_read, ret);
}

static int h_volume_update(const struct call *c, struct api_reply *ret) {
        return volume_run(c, true, e2b_volume_path_update, ret);
}

static int h_volume_upload(const struct call *c, struct node_conn **ret) {
        char path[APIREQ_PATH_MAX + 1];
        struct e2b_volume_query q;
        int r = volume_begin(c, true, path, &q);
        return r < 0 ? r : e2b_volume_file_write_begin(c->ctx, c->req->volume_use, &q, ret);
}

static int h_volume_put(const struct call *c, struct api_reply *ret) {
        struct request *req = c->req;
        int r = e2b_volume_file_write_end(c->ctx, req->volume_use, req->upload, ret);
        node_conn_free(TAKE_PTR(req->upload));
        return r;
}

/* a lifecycle verb: the route's verb */
static int h_verb(const struct call *c, struct api_reply *ret) {
        return api_sandbox_verb(c->ctx, c->id, c->req->route->verb, c->body, c->key, query_bool(c->conn, "wait"),
                                ret);
}

static int h_image_list(const struct call *c, struct api_reply *ret) {
        return api_image_list(c->ctx, query_arg(c->conn, "sandbox_id", NULL), ret);
}

static int h_node_drain(const struct call *c, struct api_reply *ret) {
        return api_node_drain(c->ctx, c->id, true, ret);
}

static int h_node_undrain(const struct call *c, struct api_reply *ret) {
        return api_node_drain(c->ctx, c->id, false, ret);
}

static int h_network_log(const struct call *c, struct api_reply *ret) {
        return api_sandbox_network_log(c->ctx, c->id, query_arg(c->conn, "limit", NULL), ret);
}

static int h_secret_list(const struct call *c, struct api_reply *ret) {
        return api_secret_list(c->ctx, query_arg(c->conn, "tenant", NULL), ret);
}

static int h_secret_get(const struct call *c, struct api_reply *ret) {
        return api_secret_get(c->ctx, c->id, query_arg(c->conn, "tenant", NULL), ret);
}

static int h_secret_delete(const struct call *c, struct api_reply *ret) {
        return api_secret_delete(c->ctx, c->id, query_arg(c->conn, "tenant", NULL), ret);
}

static int h_webhook_list(const struct call *c, struct api_reply *ret) {
        return api_webhook_list(c->ctx, query_arg(c->conn, "tenant", NULL), ret);
}

static int h_webhook_deliveries(const struct call *c, struct api_reply *ret) {
        return api_webhook_deliveries(c->ctx, c->id, query_arg(c->conn, "limit", NULL),
                                      query_arg(c->conn, "before", NULL), ret);
}

static int h_audit(const struct call *c, struct api_reply *ret) {
        return api_audit_get(c->ctx, query_arg(c->conn, "sandbox", NULL), query_arg(c->conn, "secret", NULL),
                             query_arg(c->conn, "limit", NULL), ret);
}

static int h_e2b_sandbox_list(const struct call *c, struct api_reply *ret) {
        struct e2b_list_query q = {
                .state = query_arg(c->conn, "state", NULL),
                .metadata = query_arg(c->conn, "metadata", NULL),
                .limit = query_arg(c->conn, "limit", NULL),
                .next_token = query_arg(c->conn, "nextToken", NULL),
                .order = query_arg(c->conn, "order", NULL),
        };
        return e2b_sandbox_list(c->ctx, &q, ret);
}

static int h_e2b_metrics(const struct call *c, struct api_reply *ret) {
        return e2b_sandbox_metrics(c->ctx, c->id, query_arg(c->conn, "start", NULL), query_arg(c->conn, "end", NULL),
                                   ret);
}

static int h_e2b_snapshot_list(const struct call *c, struct api_reply *ret) {
        struct e2b_list_query q = {
                .sandbox_id = query_arg(c->conn, "sandboxID", NULL),
                .name = query_arg(c->conn, "name", NULL),
                .limit = query_arg(c->conn, "limit", NULL),
                .next_token = query_arg(c->conn, "nextToken", NULL),
        };
        return e2b_snapshot_list(c->ctx, &q, ret);
}

/*
 * Every endpoint, one line each: method, path ({id}: a parameter, a name),
 * who may call it, the fields its body may have (POST and JSON PUT), flags,
 * and its handler (the api_* function itself when it takes nothing but the
 * context, the id and the body; else an h_* above). A path is matched in
 * this order, the first pattern that fits wins, then the method among that
 * pattern's lines (none: 405 with their methods). The path is also the
 * route's name in the metrics.
 */
static const struct route routes[] = {
        { M_GET, "/v1/health", AUTH_NONE, .run = api_health },
        { M_GET, "/metrics", AUTH_METRICS, .call = h_metrics },
        { M_GET, "/v1/events", AUTH_API, .call = h_events },
        { M_GET, "/v1/sandboxes/{id}/metrics", AUTH_API, .run_id = api_sandbox_metrics },
        { M_POST, "/v1/mcp", AUTH_API, .flags = ROUTE_RAW, .call = h_mcp_post },
        { M_DELETE, "/v1/mcp", AUTH_API, .call = h_mcp_delete },
        { M_GET, "/v1/templates", AUTH_API, .run = api_templates_list },
        { M_POST, "/v1/templates", AUTH_API, APIREQ_BODY_TEMPLATE, ROUTE_FORM, .call = h_template_create },
        { M_GET, "/v1/templates/{id}", AUTH_API, .run_id = api_template_get },
        { M_DELETE, "/v1/templates/{id}", AUTH_API, .run_id = api_template_delete },
        { M_GET, "/v1/templates/{id}/builds/{id}/logs", AUTH_API, .call = h_template_logs },
        { M_GET, "/v1/sandboxes", AUTH_API, .call = h_sandbox_list },
        { M_POST, "/v1/sandboxes", AUTH_API, APIREQ_BODY_CREATE, .call = h_sandbox_create },
        { M_GET, "/v1/sandboxes/{id}", AUTH_API, .run_id = api_sandbox_get },
        { M_DELETE, "/v1/sandboxes/{id}", AUTH_API, .call = h_sandbox_delete },
        { M_POST, "/v1/sandboxes/{id}/exec", AUTH_API, APIREQ_BODY_EXEC, .run_id_body = api_exec },
        { M_POST, "/v1/sandboxes/{id}/sessions", AUTH_API, APIREQ_BODY_SESSION, .run_id_body = api_session_create },
        { M_GET, "/v1/sandboxes/{id}/files", AUTH_API, .flags = ROUTE_PATH, .call = h_file_get },
        { M_PUT, "/v1/sandboxes/{id}/files", AUTH_API, .flags = ROUTE_UPLOAD, .upload = h_file_upload, .call = h_file_put },
        { M_DELETE, "/v1/sandboxes/{id}/files", AUTH_API, .flags = ROUTE_PATH, .call = h_file_delete },
        { M_GET, "/v1/sandboxes/{id}/ls", AUTH_API, .flags = ROUTE_PATH, .call = h_ls },
        { M_GET, "/v1/sessions/{id}", AUTH_SESSION, .run_id = api_session_get },
        { M_GET, "/v1/sessions/{id}/events", AUTH_SESSION, .run_id = api_session_events },
        { M_POST, "/v1/sessions/{id}/stdin", AUTH_SESSION, APIREQ_BODY_STDIN, .run_id_body = api_session_stdin },
        { M_POST, "/v1/sessions/{id}/signal", AUTH_SESSION, APIREQ_BODY_SIGNAL, .run_id_body = api_session_signal },
        { M_POST, "/v1/sessions/{id}/resize", AUTH_SESSION, APIREQ_BODY_RESIZE, .run_id_body = api_session_resize },
        { M_POST, "/v1/sandboxes/{id}/pause", AUTH_API, .call = h_verb, .verb = "pause" },
        { M_POST, "/v1/sandboxes/{id}/resume", AUTH_API, .call = h_verb, .verb = "resume" },
        { M_POST, "/v1/sandboxes/{id}/stop", AUTH_API, .call = h_verb, .verb = "stop" },
        { M_POST, "/v1/sandboxes/{id}/start", AUTH_API, .call = h_verb, .verb = "start" },
        { M_POST, "/v1/sandboxes/{id}/agent/upgrade", AUTH_API, .run_id = api_sandbox_agent_upgrade },
        { M_POST, "/v1/sandboxes/{id}/rollback", AUTH_API, APIREQ_BODY_ROLLBACK, .call = h_verb, .verb = "rollback" },
        { M_POST, "/v1/sandboxes/{id}/suspend", AUTH_API, .call = h_verb, .verb = "suspend" },
        { M_POST, "/v1/sandboxes/{id}/wake", AUTH_API, .call = h_verb, .verb = "wake" },
        { M_POST, "/v1/sandboxes/{id}/fork", AUTH_API, APIREQ_BODY_FORK, .call = h_verb, .verb = "fork" },
        { M_GET, "/v1/sandboxes/{id}/snapshots", AUTH_API, .run_id = api_snapshot_list },
        { M_POST, "/v1/sandboxes/{id}/snapshots", AUTH_API, APIREQ_BODY_SNAPSHOT, .run_id_body = api_snapshot_create },
        { M_POST, "/v1/sandboxes/{id}/images", AUTH_API, APIREQ_BODY_IMAGE, .run_id_body = api_image_create },
        { M_GET, "/v1/images", AUTH_API, .call = h_image_list },
        { M_POST, "/v1/volumes", AUTH_API, APIREQ_BODY_VOLUME, .run_body = api_volume_create },
        { M_GET, "/v1/volumes", AUTH_API, .run = api_volume_list },
        { M_GET, "/v1/volumes/{id}", AUTH_API, .run_id = api_volume_get },
        { M_DELETE, "/v1/volumes/{id}", AUTH_API, .run_id = api_volume_delete },
        { M_POST, "/v1/volumes/{id}/snapshot", AUTH_API, APIREQ_BODY_NAME, .run_id_body = api_volume_snapshot },
        { M_GET, "/v1/images/{id}", AUTH_API, .run_id = api_image_get },
        { M_DELETE, "/v1/images/{id}", AUTH_API, .run_id = api_image_delete },
        { M_GET, "/v1/operations/{id}", AUTH_API, .run_id = api_operation_get },
        { M_GET, "/v1/pools", AUTH_API, .run = api_pools_list },
        { M_GET, "/v1/sandboxes/{id}/network", AUTH_API, .run_id = api_sandbox_network_get },
        { M_PUT, "/v1/sandboxes/{id}/network", AUTH_API, APIREQ_BODY_NETWORK, .run_id_body = api_sandbox_network_put },
        { M_GET, "/v1/sandboxes/{id}/network/log", AUTH_API, .call = h_network_log },
        { M_GET, "/v1/tenants", AUTH_ADMIN, .run = api_tenant_list },
        { M_POST, "/v1/tenants", AUTH_ADMIN, APIREQ_BODY_TENANT, .run_body = api_tenant_create },
        { M_GET, "/v1/tenants/{id}", AUTH_ADMIN, .run_id = api_tenant_get },
        { M_DELETE, "/v1/tenants/{id}", AUTH_ADMIN, .run_id = api_tenant_delete },
        { M_GET, "/v1/tenants/{id}/network", AUTH_ADMIN, .run_id = api_tenant_network_get },
        { M_PUT, "/v1/tenants/{id}/network", AUTH_ADMIN, APIREQ_BODY_NETWORK, .run_id_body = api_tenant_network_put },
        { M_DELETE, "/v1/tenants/{id}/network", AUTH_ADMIN, .run_id = api_tenant_network_delete },
        { M_GET, "/v1/tenants/{id}/keys", AUTH_ADMIN, .run_id = api_key_list },
        { M_POST, "/v1/tenants/{id}/keys", AUTH_ADMIN, APIREQ_BODY_NAME, .run_id_body = api_key_create },
        { M_GET, "/v1/tenants/{id}/kms", AUTH_ADMIN, .run_id = api_tenant_kms_get },
        { M_PUT, "/v1/tenants/{id}/kms", AUTH_ADMIN, APIREQ_BODY_KMS, .run_id_body = api_tenant_kms_put },
        { M_POST, "/v1/tenants/{id}/kms/rotate", AUTH_ADMIN, .run_id = api_tenant_kms_rotate },
        { M_POST, "/v1/tenants/{id}/kms/revoke", AUTH_ADMIN, .run_id = api_tenant_kms_revoke },
        { M_DELETE, "/v1/keys/{id}", AUTH_ADMIN, .run_id = api_key_delete },
        { M_GET, "/v1/capability-keys", AUTH_ADMIN, .run = api_capability_keys_get },
        { M_POST, "/v1/capability-keys", AUTH_ADMIN, .run = api_capability_keys_rotate },
        { M_GET, "/v1/secrets", AUTH_API, .call = h_secret_list },
        { M_POST, "/v1/secrets", AUTH_API, APIREQ_BODY_SECRET, .run_body = api_secret_create },
        { M_GET, "/v1/secrets/{id}", AUTH_API, .call = h_secret_get },
        { M_DELETE, "/v1/secrets/{id}", AUTH_API, .call = h_secret_delete },
        { M_GET, "/v1/sandboxes/{id}/secrets", AUTH_API, .run_id = api_sandbox_secrets_get },
        { M_GET, "/v1/audit", AUTH_API, .call = h_audit },
        { M_GET, "/v1/webhooks", AUTH_API, .call = h_webhook_list },
        { M_POST, "/v1/webhooks", AUTH_API, APIREQ_BODY_WEBHOOK, .run_body = api_webhook_create },
        { M_GET, "/v1/webhooks/{id}", AUTH_API, .run_id = api_webhook_get },
        { M_DELETE, "/v1/webhooks/{id}", AUTH_API, .run_id = api_webhook_delete },
        { M_GET, "/v1/webhooks/{id}/deliveries", AUTH_API, .call = h_webhook_deliveries },
        { M_GET, "/v1/nodes", AUTH_ADMIN, .run = api_node_list },
        { M_POST, "/v1/nodes/tokens", AUTH_ADMIN, APIREQ_BODY_JOIN_TOKEN, .run_body = api_node_token_create },
        { M_GET, "/v1/nodes/{id}", AUTH_ADMIN, .run_id = api_node_get },
        { M_DELETE, "/v1/nodes/{id}", AUTH_ADMIN, .run_id = api_node_delete },
        { M_POST, "/v1/nodes/{id}/drain", AUTH_ADMIN, .call = h_node_drain },
        { M_POST, "/v1/nodes/{id}/undrain", AUTH_ADMIN, .call = h_node_undrain },
        /* the E2B front door's control plane (e2b-api.h); its bodies are
         * checked by e2b-api.c (SDK versions add fields) */
        { M_GET, "/v2/sandboxes", AUTH_E2B, .call = h_e2b_sandbox_list },
        { M_POST, "/v2/sandboxes", AUTH_E2B, .run_body = e2b_sandbox_create },
        { M_GET, "/sandboxes/{id}", AUTH_E2B, .run_id = e2b_sandbox_get },
        { M_DELETE, "/sandboxes/{id}", AUTH_E2B, .run_id = e2b_sandbox_kill },
        { M_POST, "/sandboxes/{id}/timeout", AUTH_E2B, .run_id_body = e2b_sandbox_set_timeout },
        { M_POST, "/sandboxes/{id}/pause", AUTH_E2B, .run_id_body = e2b_sandbox_pause },
        { M_POST, "/v2/sandboxes/{id}/connect", AUTH_E2B, .run_id_body = e2b_sandbox_connect },
        { M_PUT, "/sandboxes/{id}/network", AUTH_E2B, .run_id_body = e2b_sandbox_update_network },
        { M_POST, "/sandboxes/{id}/fork", AUTH_E2B, .run_id_body = e2b_sandbox_fork },
        { M_GET, "/sandboxes/{id}/metrics", AUTH_E2B, .call = h_e2b_metrics },
        { M_POST, "/sandboxes/{id}/snapshots", AUTH_E2B, .run_id_body = e2b_snapshot_create },
        { M_GET, "/snapshots", AUTH_E2B, .call = h_e2b_snapshot_list },
        { M_POST, "/volumes", AUTH_E2B, .run_body = e2b_volume_create },
        { M_GET, "/volumes", AUTH_E2B, .run = e2b_volume_list },
        { M_GET, "/volumes/{id}", AUTH_E2B, .run_id = e2b_volume_get },
        { M_DELETE, "/volumes/{id}", AUTH_E2B, .run_id = e2b_volume_delete },
        { M_DELETE, "/templates/{id}", AUTH_E2B, .run_id = e2b_snapshot_delete },
        /* E2B's volume content API (e2b-volume-content.h): the volume's
         * token; its queries and bodies checked there */
        { M_GET, "/volumecontent/{id}/dir", AUTH_VOLUME, .call = h_volume_dir_list },
        { M_POST, "/volumecontent/{id}/dir", AUTH_VOLUME, .call = h_volume_dir_make },
        { M_GET, "/volumecontent/{id}/path", AUTH_VOLUME, .call = h_volume_stat },
        { M_PATCH, "/volumecontent/{id}/path", AUTH_VOLUME, .call = h_volume_update },
        { M_DELETE, "/volumecontent/{id}/path", AUTH_VOLUME, .call = h_volume_remove },
        { M_GET, "/volumecontent/{id}/file", AUTH_VOLUME, .call = h_volume_read },
        { M_PUT, "/volumecontent/{id}/file", AUTH_VOLUME, .flags = ROUTE_UPLOAD, .upload = h_volume_upload, .call = h_volume_put },
};

/* Runs a route's handler, whichever kind it has. */
static int route_run(const struct route *rt, const struct call *c, struct api_reply *ret) {
        if (rt->call)
                return rt->call(c, ret);
        if (rt->run_id_body)
                return rt->run_id_body(c->ctx, c->id, c->body, ret);
        if (rt->run_id)
                return rt->run_id(c->ctx, c->id, ret);
        if (rt->run_body)
                return rt->run_body(c->ctx, c->body, ret);
        return rt->run(c->ctx, ret);
}

/* The methods of rt's path (every line of the table with it). */
static unsigned route_methods(const struct route *rt) {
        unsigned m = 0;
        for (size_t i = 0; i < ARRAY_SIZE(routes); i++)
                if (strcmp(routes[i].path, rt->path) == 0)
                        m |= routes[i].method;
        return m;
}

/* Splits a path into its segments; empty ones (double or trailing
 * slashes) are ignored. -E2BIG: too many, or one too long. */
static int path_split(const char *path, char seg[HTTP_SEGMENTS_MAX][HTTP_PARAM_MAX + 1], size_t *ret_n) {
        size_t n = 0;
        for (const char *p = path; *p;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *e = strchrnul(p, '/');
                size_t l = (size_t) (e - p);
                if (n == HTTP_SEGMENTS_MAX || l > HTTP_PARAM_MAX)
                        return -E2BIG;
                memcpy(seg[n], p, l);
                seg[n][l] = 0;
                n++;
                p = e;
        }
        *ret_n = n;
        return 0;
}

/* Whether url's segments fit rt's path; then its parameters ("{...}"
 * segments) in order in *ret_captured (at most two). */
static bool route_fits(const struct route *rt, char seg[HTTP_SEGMENTS_MAX][HTTP_PARAM_MAX + 1], size_t nseg,
                       const char *ret_captured[2]) {
        char pat[HTTP_SEGMENTS_MAX][HTTP_PARAM_MAX + 1];
        size_t n, k = 0;
        if (path_split(rt->path, pat, &n) < 0 || n != nseg)
                return false;
        ret_captured[0] = ret_captured[1] = NULL;
        for (size_t j = 0; j < n; j++) {
                if (pat[j][0] == '{') {
                        if (k < 2)
                                ret_captured[k++] = seg[j];
                } else if (strcmp(pat[j], seg[j]) != 0)
                        return false;
        }
        return true;
}

/*
 * Finds the route of url and method: the first line of the table whose path
 * fits, then the line of that path with the method; when it has none, its
 * first line (the caller answers 405). NULL when no path fits, or the
 * parameters cannot be names.
 */
static const struct route *route_match(const char *url, unsigned method, char *param, char *param2,
                                       size_t param_n) {
        char seg[HTTP_SEGMENTS_MAX][HTTP_PARAM_MAX + 1];
        size_t nseg;
        if (path_split(url, seg, &nseg) < 0)
                return NULL;
        const struct route *found = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
                const struct route *rt = &routes[i];
                if (found) {
                        if (strcmp(rt->path, found->path) == 0 && (rt->method & method))
                                return rt;
                        continue;
                }
                const char *captured[2];
                if (!route_fits(rt, seg, nseg, captured))
                        continue;
                if ((captured[0] && !name_is_valid(captured[0])) || (captured[1] && !name_is_valid(captured[1])))
                        return NULL; /* cannot name anything we hold */
                size_t l2 = captured[1] ? strnlen(captured[1], param_n - 1) : 0;
                if (l2)
                        memcpy(param2, captured[1], l2);
                param2[l2] = 0;
                size_t l = captured[0] ? strnlen(captured[0], param_n - 1) : 0;
                if (l)
                        memcpy(param, captured[0], l);
                param[l] = 0;
                if (rt->method & method)
                        return rt;
                found = rt;
        }
        return found;
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
        req->route = route_match(url, req->method, req->param, req->param2, sizeof req->param);

        int r = authenticate(req, conn);
        if (r < 0)
                return queue_error(req, conn, r,
                                   r == -EACCES && req->route && req->route->auth == AUTH_VOLUME
                                           ? "missing or invalid volume token (Authorization: Bearer)"
                                   : r == -EACCES && is_e2b(req) ? "missing or invalid API key (X-API-Key)"
                                   : r == -EACCES                ? "missing or invalid bearer token"
                                   : r == -EPERM ? "tenants and keys are managed with the admin token"
                                                 : NULL);
        if (!req->route)
                return queue_error(req, conn, -ENOENT, "no such endpoint");
        if (!(req->route->method & req->method)) {
                char msg[128], allow[64];
                methods_string(route_methods(req->route), allow, sizeof allow);
                snprintf(msg, sizeof msg, "method %.16s not allowed here (allowed: %s)", method, allow);
                return queue_error(req, conn, -EOPNOTSUPP, msg);
        }

        int64_t clen = content_length(conn);
        if (req->route->flags & ROUTE_UPLOAD) {
                struct api_ctx ctx;
                api_ctx_init(req, conn, &ctx);
                if (clen > 0 && (uint64_t) clen > cfg->max_upload) {
                        snprintf(ctx.err, sizeof ctx.err,
                                 "upload of %lld bytes exceeds the limit of %llu bytes", (long long) clen,
                                 (unsigned long long) cfg->max_upload);
                        return queue_error(req, conn, -EFBIG, ctx.err);
                }
                struct call c = {.req = req, .conn = conn, .ctx = &ctx, .id = req->param};
                r = req->route->upload(&c, &req->upload);
                if (r < 0)
                        return queue_error(req, conn, r, ctx.err);
                return MHD_YES;
        }
        if ((req->route->flags & ROUTE_FORM) && formupload_is_multipart(conn)) {
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
        if ((req->method & (M_POST | M_PUT | M_PATCH)) &&
            !(req->route->flags & (ROUTE_UPLOAD | ROUTE_RAW))) {
                r = apireq_parse_object(body_text, body_len, &body, ctx.err);
                /* strict: a field no handler reads is the client's mistake
                 * (a misspelt security setting must not just be dropped) */
                if (r >= 0 && !is_e2b(req))
                        r = apireq_check_body(body, req->route->body, false, ctx.err);
                if (r < 0)
                        return queue_error(req, conn, r, ctx.err);
        }

        if ((req->route->flags & ROUTE_UPLOAD) && !req->upload)
                return MHD_NO; /* already answered */
        struct call c = { .req = req, .conn = conn, .ctx = &ctx, .id = req->param, .body = body, .key = key,
                          .raw = body_text, .raw_len = body_len };
        r = req->route->flags & ROUTE_PATH ? query_path(conn, &c.path, ctx.err) : 0;
        if (r >= 0)
                r = route_run(req->route, &c, &rep);
        /* a volume's helper sandbox goes before the answer (the client's
         * next request may want the volume), but after a streamed body */
        if (!rep.response) {
                e2b_volume_use_end(req->volume_use);
                req->volume_use = NULL;
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

/* A route as the metrics name it: its path, "/v1/sandboxes/{id}/exec" (a
 * path of no route: "unmatched", so a scanner cannot make a series per URL). */
static const char *route_pattern(const struct route *r) {
        return r ? r->path : "unmatched";
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
