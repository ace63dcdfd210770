/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Starts the real HTTP server on an ephemeral port, with a fake airlock-node
 * (threads serving the node protocol on a temporary Unix socket), and talks
 * to it over plain TCP sockets.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"
#include "auth.h"
#include "cap-keydir.h"
#include "config.h"
#include "dataplane.h"
#include "macros.h"
#include "privsep.h"
#include "http.h"
#include "proto.h"
#include "store.h"
#include "util.h"

static char dir[64];
static struct daemon_config config;
static struct store *store;
static struct http_server *server;
static uint16_t port;
static char token[300];
static int node_fd = -1;
static pthread_t node_thread;
static sem_t sse_go;
/* the "slow" create: the node got it (slow_in), may answer (slow_go), was
 * told to delete that sandbox (slow_forgotten) */
static sem_t slow_in, slow_go, slow_forgotten;
static char slow_id[32];

/* ---------- fake node ---------- */

static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static char known[16][32]; /* sandboxes the fake node holds */
static uint64_t last_upload_size;
/* what the fake node was last sent: a create's or set's "network", the
 * log's "limit" (known_lock) */
static char *last_network;
static json_int_t last_log_limit;

static void last_network_set(json_t *req) {
        json_t *n = json_object_get(req, "network");
        pthread_mutex_lock(&known_lock);
        free(last_network);
        last_network = n ? json_dumps(n, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        pthread_mutex_unlock(&known_lock);
}

/* The network the fake node got last (a copy to free), or NULL. */
static char *last_network_take(void) {
        pthread_mutex_lock(&known_lock);
        char *s = TAKE_PTR(last_network);
        pthread_mutex_unlock(&known_lock);
        return s;
}

static void known_set(const char *id, bool on) {
        pthread_mutex_lock(&known_lock);
        for (size_t i = 0; i < 16; i++) {
                if (on && !known[i][0]) {
                        snprintf(known[i], sizeof known[i], "%s", id);
                        break;
                }
                if (!on && strcmp(known[i], id) == 0) {
                        known[i][0] = 0;
                        break;
                }
        }
        pthread_mutex_unlock(&known_lock);
}

static bool known_has(const char *id) {
        bool r = false;
        pthread_mutex_lock(&known_lock);
        for (size_t i = 0; i < 16; i++)
                r |= strcmp(known[i], id) == 0;
        pthread_mutex_unlock(&known_lock);
        return r;
}

static void send_json(int fd, uint8_t type, json_t *o) {
        char *s = json_dumps(o, JSON_COMPACT);
        proto_write_frame(fd, type, 0, s, strlen(s));
        free(s);
        json_decref(o);
}

static void send_error(int fd, const char *code, const char *msg) {
        send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", msg));
}

/* The request carries a capability, signed with a key of the data dir's
 * public keys, for this sandbox's route (the fake node's "fake", 1). */
static bool cap_ok(json_t *req, const char *sandbox, uint32_t access) {
        json_t *tok = json_object_get(req, "cap");
        _cleanup_free_ char *keys = strdup_printf("%s/control/keys", dir);
        struct cap_keyring *kr = NULL;
        struct cap_claims c;
        bool ok = json_is_string(tok) && keys && cap_keydir_load_public(keys, &kr, NULL) >= 0 &&
                  cap_parse_verify(kr, json_string_value(tok), json_string_length(tok), time(NULL), &c) >= 0 &&
                  strcmp(c.sandbox, sandbox) == 0 && strcmp(c.node, "fake") == 0 && c.execution == 1 &&
                  strcmp(c.tenant, "admin") == 0 && (c.access & access) == access;
        cap_keyring_free(kr);
        return ok;
}

static void *node_conn_thread(void *arg) {
        int fd = (int) (intptr_t) arg;
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        proto_reader_init(&r);
        if (proto_reader_read(&r, fd, &h, &p) != 1 || h.type != PROTO_NODE_REQUEST)
                goto out;
        json_t *req = json_loadb((const char *) p, h.length, 0, NULL);
        proto_reader_pop(&r, &h);
        const char *op = json_string_value(json_object_get(req, "op"));
        const char *id = json_string_value(json_object_get(req, "id"));
        if (strcmp(op, "health") == 0)
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b, s:b, s:s}", "ok", 1, "ready", 1, "accel", "tcg"));
        else if (strcmp(op, "template.list") == 0)
                send_json(fd, PROTO_NODE_REPLY,
                          json_pack("{s:b, s:[{s:s, s:s}]}", "ok", 1, "templates", "name", "python", "state", "ready"));
        else if (strcmp(op, "sandbox.create") == 0) {
                const char *t = json_string_value(json_object_get(req, "template"));
                if (strcmp(t, "slow") == 0) { /* a create the client gives up on */
                        pthread_mutex_lock(&known_lock);
                        snprintf(slow_id, sizeof slow_id, "%s", id);
                        pthread_mutex_unlock(&known_lock);
                        sem_post(&slow_in);
                        sem_wait(&slow_go);
                }
                if (strcmp(t, "python") != 0 && strcmp(t, "slow") != 0)
                        send_error(fd, "not_found", "unknown template");
                else {
                        known_set(id, true);
                        last_network_set(req);
                        send_json(fd, PROTO_NODE_REPLY,
                                  json_pack("{s:b, s:{s:s, s:s, s:s, s:i, s:s}}", "ok", 1, "sandbox", "id", id,
                                            "template", t, "state", "running", "execution", 1, "node", "fake"));
                }
        } else if (strcmp(op, "sandbox.get") == 0) {
                if (known_has(id))
                        send_json(fd, PROTO_NODE_REPLY,
                                  json_pack("{s:b, s:{s:s, s:s, s:i, s:s}}", "ok", 1, "sandbox", "id", id, "state",
                                            "running", "execution", 1, "node", "fake"));
                else
                        send_error(fd, "not_found", "no such sandbox");
        } else if (strcmp(op, "sandbox.list") == 0) {
                json_t *arr = json_array();
                pthread_mutex_lock(&known_lock);
                for (size_t i = 0; i < 16; i++)
                        if (known[i][0])
                                json_array_append_new(arr, json_pack("{s:s, s:s}", "id", known[i], "state", "running"));
                pthread_mutex_unlock(&known_lock);
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b, s:o}", "ok", 1, "sandboxes", arr));
        } else if (strcmp(op, "sandbox.delete") == 0) {
                known_set(id, false);
                pthread_mutex_lock(&known_lock);
                bool slow = slow_id[0] && strcmp(id, slow_id) == 0;
                pthread_mutex_unlock(&known_lock);
                if (slow)
                        sem_post(&slow_forgotten);
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b}", "ok", 1));
        } else if (strcmp(op, "exec") == 0) {
                bool ok = json_is_array(json_object_get(req, "cmd")) && json_object_get(req, "timeout_s") &&
                          cap_ok(req, id, CAP_ACCESS_EXEC);
                send_json(fd, PROTO_NODE_REPLY,
                          json_pack("{s:b, s:i, s:s, s:s, s:b, s:b, s:b}", "ok", 1, "exit_code", ok ? 0 : 99, "stdout",
                                    "42\n", "stderr", "", "stdout_truncated", 0, "stderr_truncated", 0, "timed_out", 0));
        } else if (strcmp(op, "sandbox.network.set") == 0) {
                last_network_set(req);
                if (known_has(id))
                        send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b}", "ok", 1));
                else
                        send_error(fd, "not_found", "no such sandbox");
        } else if (strcmp(op, "sandbox.network.log") == 0) {
                pthread_mutex_lock(&known_lock);
                last_log_limit = json_integer_value(json_object_get(req, "limit"));
                pthread_mutex_unlock(&known_lock);
                send_json(fd, PROTO_NODE_REPLY,
                          json_pack("{s:b, s:[{s:I, s:s, s:s, s:s, s:s}]}", "ok", 1, "entries", "ts_ms",
                                    (json_int_t) 1700000000000, "kind", "dns", "name", "e.test", "action", "deny",
                                    "reason", "no allow rule matches"));
        } else if (strcmp(op, "session.start") == 0 || strcmp(op, "session.stdin") == 0 ||
                   strcmp(op, "session.signal") == 0 || strcmp(op, "file.remove") == 0)
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b}", "ok", 1));
        else if (strcmp(op, "session.attach") == 0) {
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b}", "ok", 1));
                send_json(fd, PROTO_NODE_EVENT, json_pack("{s:s, s:s}", "type", "stdout", "data", "aGkK"));
                sem_wait(&sse_go); /* the client must see stdout before the command ends */
                send_json(fd, PROTO_NODE_EVENT, json_pack("{s:s, s:s}", "type", "stderr", "data", "ZXJy"));
                send_json(fd, PROTO_NODE_EVENT, json_pack("{s:s, s:i}", "type", "exit", "exit_code", 3));
                send_json(fd, PROTO_NODE_END, json_object());
        } else if (strcmp(op, "file.write") == 0) {
                uint64_t n = 0;
                for (;;) {
                        if (proto_reader_read(&r, fd, &h, &p) != 1)
                                break;
                        uint8_t type = h.type;
                        if (type == PROTO_NODE_DATA)
                                n += h.length;
                        proto_reader_pop(&r, &h);
                        if (type == PROTO_NODE_END)
                                break;
                }
                last_upload_size = n;
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b, s:I}", "ok", 1, "size", (json_int_t) n));
        } else if (strcmp(op, "file.read") == 0) {
                send_json(fd, PROTO_NODE_REPLY, json_pack("{s:b, s:i, s:i}", "ok", 1, "size", 11, "mode", 0644));
                proto_write_frame(fd, PROTO_NODE_DATA, 0, "hello ", 6);
                proto_write_frame(fd, PROTO_NODE_DATA, 0, "world", 5);
                send_json(fd, PROTO_NODE_END, json_object());
        } else if (strcmp(op, "file.list") == 0)
                send_json(fd, PROTO_NODE_REPLY,
                          json_pack("{s:b, s:[{s:s, s:s, s:i}]}", "ok", 1, "entries", "name", "a.txt", "type", "file",
                                    "size", 3));
        else
                send_error(fd, "invalid", "unknown op");
        json_decref(req);
out:
        proto_reader_release(&r);
        close(fd);
        return NULL;
}

static void *node_main(void *arg) {
        for (;;) {
                int c = accept4(node_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                pthread_t t;
                pthread_create(&t, NULL, node_conn_thread, (void *) (intptr_t) c);
                pthread_detach(t);
        }
}

/* ---------- HTTP client ---------- */

static int http_connect(void) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        struct timeval tv = { .tv_sec = 20 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        return fd;
}

static void send_head(int fd, const char *method, const char *path, const char *tok, const char *extra, size_t body_len) {
        char head[2048];
        int n = snprintf(head, sizeof head,
                         "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s%s%s%sContent-Length: %zu\r\n\r\n",
                         method, path, tok ? "Authorization: Bearer " : "", tok ? tok : "", tok ? "\r\n" : "",
                         extra ? extra : "", body_len);
        assert_int_equal(fd_write_all(fd, head, (size_t) n), 0);
}

/* Reads until EOF; returns the status, *ret_resp the whole response. */
static unsigned read_response(int fd, char **ret_resp) {
        size_t cap = 1 << 16, len = 0;
        char *buf = malloc(cap + 1);
        for (;;) {
                if (len == cap)
                        buf = realloc(buf, (cap *= 2) + 1);
                ssize_t k = read(fd, buf + len, cap - len);
                if (k <= 0)
                        break;
                len += (size_t) k;
        }
        buf[len] = 0;
        unsigned status = 0;
        sscanf(buf, "HTTP/1.%*d %u", &status);
        *ret_resp = buf;
        return status;
}

static unsigned request(const char *method, const char *path, const char *tok, const char *body, char **ret) {
        int fd = http_connect();
        size_t blen = body ? strlen(body) : 0;
        send_head(fd, method, path, tok, NULL, blen);
        if (blen)
                assert_int_equal(fd_write_all(fd, body, blen), 0);
        unsigned st = read_response(fd, ret);
        close(fd);
        return st;
}

static json_t *body_json(const char *resp) {
        const char *b = strstr(resp, "\r\n\r\n");
        assert_non_null(b);
        json_t *o = json_loads(b + 4, 0, NULL);
        assert_non_null(o);
        return o;
}

static void assert_error(const char *resp, const char *code) {
        json_t *o = body_json(resp);
        assert_string_equal(json_string_value(json_object_get(json_object_get(o, "error"), "code")), code);
        json_decref(o);
}

/* ---------- fixtures ---------- */

static int setup(void **state) {
        signal(SIGPIPE, SIG_IGN);
        log_setup("test-http", LOG_LEVEL_WARN);
        snprintf(dir, sizeof dir, "/tmp/test-http-XXXXXX");
        if (!mkdtemp(dir))
                return -1;
        char sock[100], dd[100];
        snprintf(sock, sizeof sock, "%s/node.sock", dir);
        snprintf(dd, sizeof dd, "%s", dir);
        char *argv[] = { (char *) "airlockd", (char *) "--data-dir", dd, (char *) "--listen", (char *) "127.0.0.1:0",
                         (char *) "--node-socket", sock, (char *) "--no-spawn-node", NULL };
        char err[256];
        if (config_load(8, argv, &config, err, sizeof err) < 0)
                return -1;

        node_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
        if (bind(node_fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(node_fd, 16) < 0)
                return -1;
        sem_init(&sse_go, 0, 0);
        sem_init(&slow_in, 0, 0);
        sem_init(&slow_go, 0, 0);
        sem_init(&slow_forgotten, 0, 0);
        pthread_create(&node_thread, NULL, node_main, NULL);

        if (privsep_control_dir(&config) < 0 || store_open(config.database, &store) < 0 ||
            auth_admin_token_init(store, config.control_dir, false, NULL) < 0 ||
            dataplane_init(&config) < 0)
                return -1;
        char path[sizeof config.control_dir + 16], *t = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/admin.token", config.control_dir);
        if (file_read_all(path, 256, &t, &len) < 0)
                return -1;
        t[strcspn(t, "\n")] = 0;
        snprintf(token, sizeof token, "%s", t);
        free(t);
        if (strncmp(token, "alk_", 4) != 0 || strlen(token) != 68)
                return -1;
        if (http_server_start(&config, store, &server) < 0)
                return -1;
        port = http_server_port(server);
        return port ? 0 : -1;
}

static int teardown(void **state) {
        http_server_stop(server);
        shutdown(node_fd, SHUT_RDWR);
        close(node_fd);
        pthread_join(node_thread, NULL);
        store_close(store);
        rm_rf(dir);
        return 0;
}

/* ---------- tests ---------- */

/* Tenants and keys: admin-only endpoints (403 for a tenant key), keys shown
 * once, a revoked key fails at once, another tenant's ids are 404. */
static void test_tenant_auth(void **state) {
        char *resp;
        assert_int_equal(request("POST", "/v1/tenants", token, "{\"name\":\"acme\"}", &resp), 201);
        json_t *t = body_json(resp);
        free(resp);
        char path[128], tid[64];
        snprintf(tid, sizeof tid, "%s", json_string_value(json_object_get(t, "id")));
        json_decref(t);
        assert_int_equal(request("POST", "/v1/tenants", token, "{\"name\":\"a b\"}", &resp), 400);
        free(resp);
        assert_int_equal(request("POST", "/v1/tenants", token, "{\"name\":\"acme\"}", &resp), 409);
        free(resp);

        snprintf(path, sizeof path, "/v1/tenants/%s/keys", tid);
        assert_int_equal(request("POST", path, token, "{}", &resp), 201);
        json_t *k = body_json(resp);
        free(resp);
        char key[128], kid[64];
        snprintf(key, sizeof key, "%s", json_string_value(json_object_get(k, "key")));
        snprintf(kid, sizeof kid, "%s", json_string_value(json_object_get(k, "id")));
        json_decref(k);
        assert_int_equal(strlen(key), 68);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_null(strstr(resp, key));
        assert_null(strstr(resp, "\"key\""));
        free(resp);

        /* the tenant key: admin endpoints 403, the rest scoped */
        assert_int_equal(request("GET", "/v1/tenants", key, NULL, &resp), 403);
        assert_error(resp, "forbidden");
        free(resp);
        assert_int_equal(request("POST", path, key, "{}", &resp), 403);
        free(resp);
        assert_int_equal(request("GET", "/v1/operations/op-0123456789abcdef", key, NULL, &resp), 404);
        free(resp);
        assert_int_equal(request("GET", "/v1/sessions/ses-0123456789abcdef", key, NULL, &resp), 404);
        free(resp);

        /* revoked: 401 from the next request on */
        snprintf(path, sizeof path, "/v1/keys/%s", kid);
        assert_int_equal(request("DELETE", path, key, NULL, &resp), 403);
        free(resp);
        assert_int_equal(request("DELETE", path, token, NULL, &resp), 204);
        free(resp);
        assert_int_equal(request("GET", "/v1/sessions/ses-0123456789abcdef", key, NULL, &resp), 401);
        free(resp);
        snprintf(path, sizeof path, "/v1/tenants/%s", tid);
        assert_int_equal(request("DELETE", path, token, NULL, &resp), 204);
        free(resp);
        assert_int_equal(request("DELETE", path, token, NULL, &resp), 404);
        free(resp);
}

static void test_auth(void **state) {
        char *resp;
        assert_int_equal(request("GET", "/v1/sandboxes", NULL, NULL, &resp), 401);
        assert_non_null(strstr(resp, "WWW-Authenticate: Bearer"));
        assert_error(resp, "unauthorized");
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes", "alk_wrong", NULL, &resp), 401);
        free(resp);
        assert_int_equal(request("GET", "/v1/nothing", NULL, NULL, &resp), 401); /* no route probing */
        free(resp);
        assert_int_equal(request("GET", "/v1/health", NULL, NULL, &resp), 200); /* public */
        json_t *o = body_json(resp);
        assert_string_equal(json_string_value(json_object_get(o, "status")), "ok");
        assert_string_equal(json_string_value(json_object_get(o, "accel")), "tcg");
        json_decref(o);
        free(resp);
}

static void test_routing_errors(void **state) {
        char *resp;
        assert_int_equal(request("GET", "/v1/nothing", token, NULL, &resp), 404);
        assert_error(resp, "not_found");
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes/sbx-unknown", token, NULL, &resp), 404);
        assert_error(resp, "not_found");
        free(resp);
        assert_int_equal(request("DELETE", "/v1/sandboxes/sbx-unknown", token, NULL, &resp), 404);
        free(resp);
        assert_int_equal(request("PATCH", "/v1/sandboxes", token, NULL, &resp), 405);
        assert_non_null(strstr(resp, "Allow: GET, POST"));
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{not json", &resp), 400);
        assert_error(resp, "invalid");
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"template\":7}", &resp), 400);
        assert_non_null(strstr(resp, "field 'template'"));
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"template\":\"nope\"}", &resp), 404);
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes/sbx-x/files?path=/a/../etc", token, NULL, &resp), 400);
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes/sbx-x/ls?path=rel", token, NULL, &resp), 400);
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes/sbx-x/ls", token, NULL, &resp), 400);
        free(resp);
}

/* Every POST route refuses a field its handler does not read, before the
 * handler runs (the sandbox and session ids need not exist: 400, not 404). */
static void test_unknown_fields(void **state) {
        static const char *const paths[] = {
                "/v1/sandboxes",
                "/v1/sandboxes/sbx-x/exec",
                "/v1/sandboxes/sbx-x/sessions",
                "/v1/sessions/ses-x/stdin",
                "/v1/sessions/ses-x/signal",
                "/v1/sandboxes/sbx-x/pause",
                "/v1/sandboxes/sbx-x/resume",
                "/v1/sandboxes/sbx-x/stop",
                "/v1/sandboxes/sbx-x/start",
                "/v1/sandboxes/sbx-x/rollback",
                "/v1/sandboxes/sbx-x/suspend",
                "/v1/sandboxes/sbx-x/wake",
                "/v1/sandboxes/sbx-x/fork",
                "/v1/sandboxes/sbx-x/snapshots",
                "/v1/tenants",
                "/v1/tenants/ten-x/keys",
                "/v1/capability-keys",
        };
        char *resp;
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                assert_int_equal(request("POST", paths[i], token, "{\"bogus\":1}", &resp), 400);
                json_t *o = body_json(resp);
                json_t *e = json_object_get(o, "error");
                assert_string_equal(json_string_value(json_object_get(e, "code")), "invalid");
                assert_string_equal(json_string_value(json_object_get(e, "message")),
                                    "unknown field \"bogus\" in the request body");
                json_decref(o);
                free(resp);
        }
        /* the control: the same routes past the check (to the handler's 404) */
        assert_int_equal(request("POST", "/v1/sandboxes/sbx-x/exec", token, "{\"cmd\":[\"true\"]}", &resp), 404);
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes/sbx-x/pause", token, "{}", &resp), 404);
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"snapshot_policy\":{\"tiers\":[{\"fro\":1}]}}",
                                 &resp),
                         400);
        assert_non_null(strstr(resp, "unknown field \\\"fro\\\" in \\\"snapshot_policy.tiers[0]\\\""));
        free(resp);
        /* inside "network" the policy parser is as strict, naming the field */
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"network\":{\"mode\":\"deny-all\",\"prots\":1}}",
                                 &resp),
                         400);
        assert_non_null(strstr(resp, "network: unknown field \\\"prots\\\""));
        free(resp);
        /* and a PUT of a policy at its top level */
        assert_int_equal(request("PUT", "/v1/sandboxes/sbx-x/network", token, "{\"mode\":\"deny-all\",\"bogus\":1}",
                                 &resp),
                         400);
        assert_non_null(strstr(resp, "unknown field \\\"bogus\\\" in the request body"));
        free(resp);
        assert_int_equal(request("PUT", "/v1/sandboxes/sbx-x/network", token, "{\"mode\":\"deny-all\"}", &resp), 404);
        free(resp);
}

/* The body of a 2xx or 4xx reply as compact JSON with sorted keys. */
static char *body_canonical(const char *resp) {
        json_t *o = body_json(resp);
        char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(o);
        return s;
}

static void expect_body(const char *resp, const char *want) {
        _cleanup_free_ char *got = body_canonical(resp);
        assert_string_equal(got, want);
}

/* Network policies: a create's is checked, canonical, stored and sent to
 * the node; without one the tenant's default, else the node default; PUT
 * replaces and forwards it; the log comes from the node. */
static void test_network(void **state) {
        char *resp, path[128], id[64];
        static const char allowlist[] = "{\"allow\":[{\"host\":\"pypi.org\",\"ports\":[80,443]}],"
                                        "\"mode\":\"allowlist\"}";
        /* refused: nothing made, the node never asked */
        free(last_network_take());
        assert_int_equal(request("POST", "/v1/sandboxes", token,
                                 "{\"network\":{\"mode\":\"deny-all\",\"allow\":[{\"host\":\"a.org\"}]}}", &resp),
                         400);
        assert_non_null(strstr(resp, "mode \\\"deny-all\\\" takes no rules"));
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token,
                                 "{\"network\":{\"allow\":[{\"host\":\"*.github.io\"}]}}", &resp),
                         400);
        assert_non_null(strstr(resp, "public suffix"));
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"network\":{\"allow\":[{\"cidr\":\"10.0.0.1/8\"}]}}",
                                 &resp),
                         400);
        free(resp);
        assert_null(last_network_take());

        /* given: canonical on the node and in GET */
        assert_int_equal(request("POST", "/v1/sandboxes", token,
                                 "{\"network\":{\"allow\":[{\"host\":\"PyPI.org.\"}]}}", &resp),
                         201);
        json_t *o = body_json(resp);
        snprintf(id, sizeof id, "%s", json_string_value(json_object_get(o, "id")));
        json_decref(o);
        free(resp);
        _cleanup_free_ char *sent = last_network_take();
        assert_string_equal(sent, allowlist);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        expect_body(resp, allowlist);
        free(resp);

        /* PUT: {} says nothing, a policy replaces it and goes to the node */
        assert_int_equal(request("PUT", path, token, "{}", &resp), 400);
        assert_non_null(strstr(resp, "the policy is empty"));
        free(resp);
        assert_int_equal(request("PUT", path, token, "{\"mode\":\"deny-all\"}", &resp), 200);
        expect_body(resp, "{\"mode\":\"deny-all\"}");
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, "{\"mode\":\"deny-all\"}");
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        expect_body(resp, "{\"mode\":\"deny-all\"}");
        free(resp);
        assert_int_equal(request("POST", path, token, "{\"mode\":\"deny-all\"}", &resp), 405);
        free(resp);

        /* the log: limits checked, the node's entries passed on */
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network/log?limit=0", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 400);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network/log?limit=1001", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 400);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network/log?limit=7", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        expect_body(resp, "{\"entries\":[{\"action\":\"deny\",\"kind\":\"dns\",\"name\":\"e.test\","
                          "\"reason\":\"no allow rule matches\",\"ts_ms\":1700000000000}]}");
        free(resp);
        assert_int_equal(last_log_limit, 7);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network/log", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        free(resp);
        assert_int_equal(last_log_limit, 100);

        /* none given: the node default; {} is none */
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{\"network\":{}}", &resp), 201);
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, "{\"mode\":\"allow-all\"}");

        /* a tenant's default, for its sandboxes only */
        assert_int_equal(request("POST", "/v1/tenants", token,
                                 "{\"name\":\"netco\",\"network\":{\"mode\":\"deny-all\",\"deny\":[]}}", &resp),
                         201);
        o = body_json(resp);
        char tid[64], body[160];
        snprintf(tid, sizeof tid, "%s", json_string_value(json_object_get(o, "id")));
        assert_string_equal(json_string_value(json_object_get(json_object_get(o, "network"), "mode")), "deny-all");
        json_decref(o);
        free(resp);
        snprintf(body, sizeof body, "{\"tenant\":\"%s\"}", tid);
        assert_int_equal(request("POST", "/v1/sandboxes", token, body, &resp), 201);
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, "{\"mode\":\"deny-all\"}");
        snprintf(path, sizeof path, "/v1/tenants/%s/network", tid);
        assert_int_equal(request("PUT", path, token, "{}", &resp), 400);
        free(resp);
        assert_int_equal(request("PUT", path, token, allowlist, &resp), 200);
        free(resp);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        expect_body(resp, allowlist);
        free(resp);
        snprintf(path, sizeof path, "/v1/tenants/%s", tid);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_non_null(strstr(resp, "pypi.org"));
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, body, &resp), 201);
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, allowlist);
        /* the admin's own sandbox is nobody's tenant: the node default */
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{}", &resp), 201);
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, "{\"mode\":\"allow-all\"}");
        snprintf(path, sizeof path, "/v1/tenants/%s/network", tid);
        assert_int_equal(request("DELETE", path, token, NULL, &resp), 204);
        free(resp);
        assert_int_equal(request("GET", path, token, NULL, &resp), 404);
        free(resp);
        assert_int_equal(request("POST", "/v1/sandboxes", token, body, &resp), 201);
        free(resp);
        free(sent);
        sent = last_network_take();
        assert_string_equal(sent, "{\"mode\":\"allow-all\"}");

        /* a tenant key: another's sandbox does not exist, tenant admin is 403 */
        snprintf(path, sizeof path, "/v1/tenants/%s/keys", tid);
        assert_int_equal(request("POST", path, token, "{}", &resp), 201);
        o = body_json(resp);
        char key[128];
        snprintf(key, sizeof key, "%s", json_string_value(json_object_get(o, "key")));
        json_decref(o);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network", id);
        assert_int_equal(request("GET", path, key, NULL, &resp), 404);
        free(resp);
        assert_int_equal(request("PUT", path, key, "{\"mode\":\"allow-all\"}", &resp), 404);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network/log", id);
        assert_int_equal(request("GET", path, key, NULL, &resp), 404);
        free(resp);
        snprintf(path, sizeof path, "/v1/tenants/%s/network", tid);
        assert_int_equal(request("PUT", path, key, "{\"mode\":\"allow-all\"}", &resp), 403);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/network", id);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200); /* the control: still deny-all */
        expect_body(resp, "{\"mode\":\"deny-all\"}");
        free(resp);
}

static void test_too_large(void **state) {
        /* declared too large: answered before the body is sent */
        int fd = http_connect();
        send_head(fd, "POST", "/v1/sandboxes", token, NULL, 2u << 20);
        char *resp;
        assert_int_equal(read_response(fd, &resp), 413);
        assert_error(resp, "too_large");
        free(resp);
        close(fd);

        /* chunked, no length: answered after the limit is passed */
        fd = http_connect();
        char head[512];
        int n = snprintf(head, sizeof head,
                         "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer %s\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n", token);
        fd_write_all(fd, head, (size_t) n);
        static char chunk[65536];
        memset(chunk, ' ', sizeof chunk);
        for (int i = 0; i < 20; i++) {
                fd_write_all(fd, "10000\r\n", 7);
                fd_write_all(fd, chunk, sizeof chunk);
                fd_write_all(fd, "\r\n", 2);
        }
        fd_write_all(fd, "0\r\n\r\n", 5);
        assert_int_equal(read_response(fd, &resp), 413);
        free(resp);
        close(fd);
}

static void test_sandbox_lifecycle(void **state) {
        char *resp, path[128];
        assert_int_equal(request("POST", "/v1/sandboxes", token,
                                 "{\"template\":\"python\",\"env\":{\"SECRET\":\"hunter2\"},\"metadata\":{\"a\":\"b\"}}",
                                 &resp),
                         201);
        assert_null(strstr(resp, "hunter2")); /* env values are never echoed */
        json_t *o = body_json(resp);
        free(resp);
        const char *id = json_string_value(json_object_get(o, "id"));
        assert_int_equal(strlen(id), 20);
        assert_memory_equal(id, "sbx-", 4);
        assert_string_equal(json_string_value(json_object_get(o, "state")), "running");
        assert_string_equal(json_string_value(json_object_get(json_object_get(o, "metadata"), "a")), "b");
        assert_string_equal(json_string_value(json_array_get(json_object_get(o, "env_keys"), 0)), "SECRET");
        const char *ts = json_string_value(json_object_get(o, "created_at"));
        assert_int_equal(strlen(ts), 24);
        assert_int_equal(ts[23], 'Z');
        char sid[32];
        snprintf(sid, sizeof sid, "%s", id);
        json_decref(o);

        snprintf(path, sizeof path, "/v1/sandboxes/%s", sid);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_non_null(strstr(resp, "\"state\":\"running\""));
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes", token, NULL, &resp), 200);
        assert_non_null(strstr(resp, sid));
        free(resp);

        /* exec relays the node's reply */
        snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", sid);
        assert_int_equal(request("POST", path, token, "{\"cmd\":[\"python3\",\"-c\",\"print(6*7)\"]}", &resp), 200);
        o = body_json(resp);
        free(resp);
        assert_int_equal(json_integer_value(json_object_get(o, "exit_code")), 0);
        assert_string_equal(json_string_value(json_object_get(o, "stdout")), "42\n");
        assert_string_equal(json_string_value(json_object_get(o, "stderr")), "");
        assert_true(json_is_false(json_object_get(o, "timed_out")));
        assert_true(json_is_false(json_object_get(o, "stdout_truncated")));
        json_decref(o);
        assert_int_equal(request("POST", path, token, "{\"cmd\":[]}", &resp), 400);
        assert_non_null(strstr(resp, "non-empty array of strings"));
        free(resp);

        /* files */
        snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/root/x.txt", sid);
        assert_int_equal(request("PUT", path, token, "some bytes", &resp), 200);
        assert_int_equal(last_upload_size, 10);
        free(resp);
        /* a bigger body streams through in several frames */
        char *big = malloc(300001);
        memset(big, 'x', 300000);
        big[300000] = 0;
        assert_int_equal(request("PUT", path, token, big, &resp), 200);
        assert_non_null(strstr(resp, "\"size\":300000"));
        assert_int_equal(last_upload_size, 300000);
        free(resp);
        free(big);
        /* declared over the upload limit: refused before any byte is read */
        int fd = http_connect();
        send_head(fd, "PUT", path, token, NULL, (size_t) config.max_upload + 1);
        assert_int_equal(read_response(fd, &resp), 413);
        free(resp);
        close(fd);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_non_null(strstr(resp, "application/octet-stream"));
        assert_non_null(strstr(resp, "hello "));
        assert_non_null(strstr(resp, "world"));
        free(resp);
        assert_int_equal(request("DELETE", path, token, NULL, &resp), 204);
        free(resp);
        snprintf(path, sizeof path, "/v1/sandboxes/%s/ls?path=/root", sid);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_non_null(strstr(resp, "\"name\":\"a.txt\""));
        free(resp);

        /* the node forgets the sandbox: it is failed, and that sticks */
        known_set(sid, false);
        snprintf(path, sizeof path, "/v1/sandboxes/%s", sid);
        assert_int_equal(request("GET", path, token, NULL, &resp), 200);
        assert_non_null(strstr(resp, "\"state\":\"failed\""));
        assert_non_null(strstr(resp, "\"error\":"));
        free(resp);
        struct store_sandbox sb = { 0 };
        assert_int_equal(store_sandbox_get(store, sid, &sb), 0);
        assert_string_equal(sb.state, "failed");
        store_sandbox_release(&sb);

        assert_int_equal(request("DELETE", path, token, NULL, &resp), 204);
        free(resp);
        assert_int_equal(request("GET", path, token, NULL, &resp), 404);
        free(resp);
}

static void test_sessions_sse(void **state) {
        char *resp, path[160];
        assert_int_equal(request("POST", "/v1/sandboxes", token, "{}", &resp), 201);
        json_t *o = body_json(resp);
        free(resp);
        char sbx[32];
        snprintf(sbx, sizeof sbx, "%s", json_string_value(json_object_get(o, "id")));
        json_decref(o);

        snprintf(path, sizeof path, "/v1/sandboxes/%s/sessions", sbx);
        assert_int_equal(request("POST", path, token, "{\"cmd\":[\"bash\",\"-c\",\"echo hi\"]}", &resp), 201);
        o = body_json(resp);
        free(resp);
        char ses[32], attach[80];
        snprintf(ses, sizeof ses, "%s", json_string_value(json_object_get(o, "id")));
        snprintf(attach, sizeof attach, "%s", json_string_value(json_object_get(o, "attach_token")));
        assert_memory_equal(ses, "ses-", 4);
        assert_int_equal(strlen(attach), 64);
        json_decref(o);

        /* the attach token works for session endpoints, and only there */
        snprintf(path, sizeof path, "/v1/sessions/%s/stdin", ses);
        assert_int_equal(request("POST", path, attach, "{\"text\":\"ls\\n\",\"close\":true}", &resp), 204);
        free(resp);
        assert_int_equal(request("POST", path, attach, "{\"data\":\"***\"}", &resp), 400);
        free(resp);
        snprintf(path, sizeof path, "/v1/sessions/%s/signal", ses);
        assert_int_equal(request("POST", path, token, "{\"signal\":\"TERM\"}", &resp), 204);
        free(resp);
        assert_int_equal(request("GET", "/v1/sandboxes", attach, NULL, &resp), 401);
        free(resp);
        assert_int_equal(request("POST", "/v1/sessions/ses-nope/signal", token, "{\"signal\":9}", &resp), 404);
        free(resp);

        /* events stream live: stdout arrives before the command ends */
        int fd = http_connect();
        snprintf(path, sizeof path, "/v1/sessions/%s/events", ses);
        send_head(fd, "GET", path, attach, NULL, 0);
        char buf[8192];
        size_t len = 0;
        while (!strstr(buf, "\n\n") || !strstr(buf, "event: stdout")) {
                ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
                assert_true(k > 0);
                len += (size_t) k;
                buf[len] = 0;
        }
        assert_non_null(strstr(buf, "text/event-stream"));
        assert_non_null(strstr(buf, "event: stdout\ndata: {\"data\":\"aGkK\"}\n\n"));
        assert_null(strstr(buf, "event: exit"));
        sem_post(&sse_go);
        char *rest;
        read_response(fd, &rest);
        close(fd);
        assert_non_null(strstr(rest, "event: stderr\ndata: {\"data\":\"ZXJy\"}\n\n"));
        assert_non_null(strstr(rest, "event: exit\ndata: {\"exit_code\":3}\n\n"));
        free(rest);
}

static size_t known_count(void) {
        size_t n = 0;
        pthread_mutex_lock(&known_lock);
        for (size_t i = 0; i < 16; i++)
                n += known[i][0] != 0;
        pthread_mutex_unlock(&known_lock);
        return n;
}

static size_t store_count(void) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_list(store, 100, &a, &n), 0);
        store_sandbox_array_free(a, n);
        return n;
}

/* Waits for sem, failing the test with what after 10 s. */
static void sem_wait_or_fail(sem_t *sem, const char *what) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 10;
        while (sem_timedwait(sem, &ts) < 0)
                if (errno != EINTR)
                        fail_msg("%s (waited 10 s)", what);
}

/* airlockd's end of our connection fd: the server runs in this process. */
static int server_end_of(int fd) {
        struct sockaddr_in mine, a;
        socklen_t l = sizeof mine;
        assert_int_equal(getsockname(fd, (struct sockaddr *) &mine, &l), 0);
        DIR *d = opendir("/proc/self/fd");
        assert_non_null(d);
        int found = -1;
        for (struct dirent *de; found < 0 && (de = readdir(d));) {
                int k = atoi(de->d_name);
                if (de->d_name[0] == '.' || k == fd || k == dirfd(d))
                        continue;
                l = sizeof a;
                if (getpeername(k, (struct sockaddr *) &a, &l) < 0 || a.sin_family != AF_INET ||
                    a.sin_port != mine.sin_port)
                        continue;
                l = sizeof a;
                if (getsockname(k, (struct sockaddr *) &a, &l) == 0 && a.sin_port == htons(port))
                        found = k;
        }
        closedir(d);
        return found;
}

static size_t store_count_within(size_t want, int ms) {
        size_t n = store_count();
        for (int i = 0; i < ms / 10 && n != want; i++) {
                usleep(10 * 1000);
                n = store_count();
        }
        return n;
}

/* A client that hangs up during a create must not leave a sandbox behind
 * that nobody knows the id of. The fake node holds the create until the
 * hang-up is there for airlockd to see, then answers: no sleep decides
 * what came first. */
static void test_create_client_gone(void **state) {
        size_t node_before = known_count(), store_before = store_count();
        int fd = http_connect();
        const char *body = "{\"template\":\"slow\"}";
        send_head(fd, "POST", "/v1/sandboxes", token, NULL, strlen(body));
        assert_int_equal(fd_write_all(fd, body, strlen(body)), 0);
        sem_wait_or_fail(&slow_in, "the create never reached the node");
        /* the row is there while the node creates: its removal below is real */
        assert_int_equal(store_count(), store_before + 1);
        int srv = server_end_of(fd);
        if (srv < 0)
                fail_msg("airlockd's end of the connection is not among this process's fds");
        close(fd);
        struct pollfd p = { .fd = srv, .events = POLLRDHUP };
        if (poll(&p, 1, 10000) != 1 || !(p.revents & (POLLRDHUP | POLLHUP)))
                fail_msg("airlockd's end of the connection never saw the hang-up");
        sem_post(&slow_go);
        sem_wait_or_fail(&slow_forgotten,
                         "airlockd did not tell the node to delete the sandbox of a client that hung up");
        if (store_count_within(store_before, 10000) != store_before)
                fail_msg("the row of the sandbox of a client that hung up is still in the store after 10 s");
        assert_int_equal(known_count(), node_before);
}

static void test_sse_format(void **state) {
        char *s;
        size_t n;
        bool last = true;
        json_t *ev = json_pack("{s:s, s:s}", "type", "stdout", "data", "QUJD");
        assert_int_equal(api_sse_from_node_event(ev, &s, &n, &last), 1);
        assert_string_equal(s, "event: stdout\ndata: {\"data\":\"QUJD\"}\n\n");
        assert_int_equal(n, strlen(s));
        assert_false(last);
        free(s);
        json_decref(ev);
        ev = json_pack("{s:s, s:i}", "type", "exit", "exit_code", 0);
        assert_int_equal(api_sse_from_node_event(ev, &s, &n, &last), 1);
        assert_string_equal(s, "event: exit\ndata: {\"exit_code\":0}\n\n");
        assert_true(last);
        free(s);
        json_decref(ev);
        /* a session that ended without its process's exit says why */
        ev = json_pack("{s:s, s:i, s:s}", "type", "exit", "exit_code", -1, "error", "guest channel closed");
        assert_int_equal(api_sse_from_node_event(ev, &s, &n, &last), 1);
        assert_string_equal(s, "event: exit\ndata: {\"exit_code\":-1,\"error\":\"guest channel closed\"}\n\n");
        free(s);
        json_decref(ev);
        ev = json_pack("{s:s}", "type", "mystery");
        assert_int_equal(api_sse_from_node_event(ev, &s, &n, &last), 0);
        json_decref(ev);
}

/* Which requests are a service port's, and what its server gets. */
static void test_port_target(void **state) {
        (void) state;
        char id[65], err[256];
        unsigned got_port = 0;
        const char *target = NULL;
        struct {
                const char *uri, *host;
                int r;
                const char *id;
                unsigned port;
                const char *target;
        } cases[] = {
                { "/v1/sandboxes/sbx-1/ports/8000/a/b?x=%2F", "api:1", 1, "sbx-1", 8000, "/a/b?x=%2F" },
                { "/v1/sandboxes/sbx-1/ports/8000", NULL, 1, "sbx-1", 8000, "/" },
                { "/v1/sandboxes/sbx-1/ports/8000/", NULL, 1, "sbx-1", 8000, "/" },
                { "/v1/sandboxes/sbx-1/ports/8000?q", NULL, 1, "sbx-1", 8000, "?q" },
                { "/v1/sandboxes/sbx-1/ports/65535/", NULL, 1, "sbx-1", 65535, "/" },
                { "/v1/sandboxes/sbx-1/ports/0/", NULL, -EINVAL, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/ports/65536/", NULL, -EINVAL, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/ports/080/", NULL, -EINVAL, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/ports/8a/", NULL, -EINVAL, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/ports/", NULL, -EINVAL, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/exec", NULL, 0, NULL, 0, NULL },
                { "/v1/sandboxes/sbx-1/portsX/80", NULL, 0, NULL, 0, NULL },
                { "/v1/sandboxes/sbx%2F1/ports/80/", NULL, 0, NULL, 0, NULL },
                /* by host name: the first label PORT-ID */
                { "/x?y", "8000-sbx-1.example.com", 1, "sbx-1", 8000, "/x?y" },
                { "/", "3000-sbx-ab12.localhost:8080", 1, "sbx-ab12", 3000, "/" },
                { "/", "8000-sbx-1", 0, NULL, 0, NULL },       /* no domain */
                { "/", "x8000-sbx-1.example", 0, NULL, 0, NULL },
                { "/", "8000.example", 0, NULL, 0, NULL },
                { "/", "8000-.example", 0, NULL, 0, NULL },
                { "/", "8000-sb_x!.example", 0, NULL, 0, NULL },
                { "/", "99999-sbx-1.example", -EINVAL, NULL, 0, NULL },
                { "/v1/health", "api.example.com", 0, NULL, 0, NULL },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                int r = api_port_target(cases[i].uri, cases[i].host, id, sizeof id, &got_port, &target, err, sizeof err);
                assert_int_equal(r, cases[i].r);
                if (r == 1) {
                        assert_string_equal(id, cases[i].id);
                        assert_int_equal(got_port, cases[i].port);
                        assert_string_equal(target, cases[i].target);
                }
                if (r < 0)
                        assert_non_null(strstr(err, "is not a port"));
        }
        /* an id longer than the buffer is no port request */
        char small[4];
        assert_int_equal(api_port_target("/v1/sandboxes/sbx-1/ports/80/", NULL, small, sizeof small, &got_port, &target,
                                         err, sizeof err),
                         0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_port_target),
                cmocka_unit_test(test_auth),
                cmocka_unit_test(test_tenant_auth),
                cmocka_unit_test(test_routing_errors),
                cmocka_unit_test(test_unknown_fields),
                cmocka_unit_test(test_network),
                cmocka_unit_test(test_too_large),
                cmocka_unit_test(test_sandbox_lifecycle),
                cmocka_unit_test(test_sessions_sse),
                cmocka_unit_test(test_create_client_gone),
                cmocka_unit_test(test_sse_format),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
