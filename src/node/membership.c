/* SPDX-License-Identifier: Apache-2.0 */
#include "membership.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <sodium.h>

#include "cap.h"
#include "cluster.h"
#include "config.h"
#include "link.h"
#include "log.h"
#include "mtls.h"
#include "nodeutil.h"
#include "sandbox.h"
#include "server.h"
#include "template-store.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

#define CONNECT_TIMEOUT_MS 5000
#define HEARTBEAT_DEFAULT_MS 2000
#define HEARTBEAT_MIN_MS 200
#define HEARTBEAT_MAX_MS 60000
#define KEYS_REFRESH_MIN_NS (1000ULL * 1000 * 1000)
#define STATE_FILE_MAX (64 << 10)

static const struct node_config *mcfg;
static char dir[4200];                   /* DATA_DIR/cluster */
static struct mtls_ctx *server_tls, *client_tls;
static int listen_fd = -1, stop_fd = -1;
static pthread_t listener, beater;
static bool running;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char control[CLUSTER_CONTROL_MAX][CLUSTER_ADDR_MAX]; /* under lock */
static size_t n_control, next_control;
static int heartbeat_ms = HEARTBEAT_DEFAULT_MS;
static bool draining;
static uint64_t keys_refreshed_ns;
static char boot_id[33];
static struct cluster_label labels[CLUSTER_LABELS_MAX];
static size_t n_labels;
static uint16_t listen_port;

static char *path_in(const char *name) {
        return strdup_printf("%s/%s", dir, name);
}

/* ---- what the node keeps ---- */

static int read_text(const char *name, char **ret) {
        _cleanup_free_ char *p = path_in(name);
        if (!p)
                return -ENOMEM;
        return file_read_all(p, MTLS_PEM_MAX, ret, NULL);
}

static int write_text(const char *name, const char *text, mode_t mode) {
        _cleanup_free_ char *p = path_in(name);
        if (!p)
                return -ENOMEM;
        return file_write_atomic(p, text, strlen(text), mode);
}

/* Replaces the replicas' addresses (from a reply: at most
 * CLUSTER_CONTROL_MAX valid HOST:PORT strings; anything else is ignored). */
static void control_set(const json_t *list) {
        if (!json_is_array(list) || json_array_size(list) == 0)
                return;
        char text[CLUSTER_CONTROL_MAX * CLUSTER_ADDR_MAX] = "";
        size_t n = 0, i;
        json_t *v;
        pthread_mutex_lock(&lock);
        json_array_foreach(list, i, v) {
                if (n == CLUSTER_CONTROL_MAX)
                        break;
                if (!json_is_string(v) || !cluster_address_valid(json_string_value(v)))
                        continue;
                snprintf(control[n], sizeof control[n], "%s", json_string_value(v));
                size_t used = strlen(text);
                snprintf(text + used, sizeof text - used, "%s\n", control[n]);
                n++;
        }
        if (n > 0) {
                n_control = n;
                next_control %= n;
        }
        pthread_mutex_unlock(&lock);
        if (n > 0) {
                int r = write_text("control", text, 0600);
                if (r < 0)
                        log_warn_errno(r, "cannot write %s/control: %m", dir);
        }
}

static void control_load(const char *text) {
        pthread_mutex_lock(&lock);
        n_control = 0;
        for (const char *p = text; p && *p && n_control < CLUSTER_CONTROL_MAX;) {
                const char *end = strchr(p, '\n');
                size_t len = end ? (size_t) (end - p) : strlen(p);
                char a[CLUSTER_ADDR_MAX];
                if (len > 0 && len < sizeof a) {
                        memcpy(a, p, len);
                        a[len] = 0;
                        if (cluster_address_valid(a))
                                snprintf(control[n_control++], sizeof control[0], "%s", a);
                }
                p = end ? end + 1 : p + len;
        }
        pthread_mutex_unlock(&lock);
}

/* Writes the capability public keys of a reply ([{kid, public}]) into
 * keys/public and removes the ones not in it; capcheck reloads on the
 * directory's change. An empty or malformed list changes nothing. */
static int keys_apply(const json_t *keys) {
        if (!json_is_array(keys) || json_array_size(keys) == 0 || json_array_size(keys) > CLUSTER_KEYS_MAX)
                return -EBADMSG;
        _cleanup_free_ char *pub = strdup_printf("%s/public", mcfg->cap_keys_dir);
        if (!pub)
                return -ENOMEM;
        int r = mkdir_p(pub, 0755);
        if (r < 0)
                return r;
        size_t i;
        json_t *k;
        char kids[CLUSTER_KEYS_MAX][CAP_KID_MAX + 1];
        size_t n = 0;
        json_array_foreach(keys, i, k) {
                const char *kid = json_string_value(json_object_get(k, "kid"));
                const char *hex = json_string_value(json_object_get(k, "public"));
                uint8_t raw[CAP_PUBLIC_KEY_SIZE];
                char name[CAP_KID_MAX + 8];
                if (!kid || !hex || strlen(kid) > CAP_KID_MAX || !name_is_valid(kid) ||
                    cap_key_from_hex(hex, raw, sizeof raw) < 0)
                        continue;
                snprintf(kids[n++], sizeof kids[0], "%s", kid);
                snprintf(name, sizeof name, "%s.pub", kid);
                _cleanup_free_ char *path = strdup_printf("%s/%s", pub, name);
                _cleanup_free_ char *old = NULL;
                /* unchanged files stay: a rewrite would move the stamp */
                if (path && file_read_all(path, 256, &old, NULL) >= 0 && strncmp(old, hex, strlen(hex)) == 0)
                        continue;
                _cleanup_free_ char *line = strdup_printf("%s\n", hex);
                if (!path || !line || (r = file_write_atomic(path, line, strlen(line), 0644)) < 0)
                        return r < 0 ? r : -ENOMEM;
        }
        if (n == 0)
                return -EBADMSG;
        DIR *d = opendir(pub);
        for (struct dirent *e; d && (e = readdir(d));) {
                size_t len = strlen(e->d_name);
                if (len < 5 || strcmp(e->d_name + len - 4, ".pub") != 0)
                        continue;
                bool keep = false;
                for (size_t j = 0; j < n && !keep; j++)
                        keep = len - 4 == strlen(kids[j]) && strncmp(e->d_name, kids[j], len - 4) == 0;
                if (!keep)
                        (void) unlinkat(dirfd(d), e->d_name, 0);
        }
        if (d)
                closedir(d);
        return 0;
}

/* ---- this node, as the requests describe it ---- */

/* The address replicas reach our TLS port at: the configured one, else
 * the local address of a connection that reached a replica. */
static void own_address(int fd, char *out, size_t n) {
        if (mcfg->advertise) {
                snprintf(out, n, "%s", mcfg->advertise);
                return;
        }
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        char host[INET6_ADDRSTRLEN] = "127.0.0.1";
        if (fd >= 0 && getsockname(fd, (struct sockaddr *) &ss, &len) == 0) {
                if (ss.ss_family == AF_INET)
                        inet_ntop(AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, host, sizeof host);
                else if (ss.ss_family == AF_INET6) {
                        char h6[INET6_ADDRSTRLEN];
                        inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, h6, sizeof h6);
                        snprintf(out, n, "[%s]:%u", h6, listen_port);
                        return;
                }
        }
        snprintf(out, n, "%s:%u", host, listen_port);
}

static int node_info(int fd, bool with_templates, struct cluster_node_info *ret) {
        struct cluster_node_info n = { 0 };
        snprintf(n.name, sizeof n.name, "%s", mcfg->node_name);
        snprintf(n.boot_id, sizeof n.boot_id, "%s", boot_id);
        snprintf(n.cpu, sizeof n.cpu, "%s", vmm_cpu_id());
        own_address(fd, n.address, sizeof n.address);
        memcpy(n.labels, labels, n_labels * sizeof *labels);
        n.n_labels = n_labels;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n.capacity.cpus = cpus > 0 ? (uint32_t) cpus : 1;
        n.capacity.memory_mib = node_meminfo_kib("MemTotal") / 1024;
        n.capacity.max_sandboxes = mcfg->max_sandboxes;
        struct statvfs sv;
        if (statvfs(mcfg->data_dir, &sv) == 0) {
                n.capacity.disk_bytes = (uint64_t) sv.f_blocks * sv.f_frsize;
                n.usage.disk_free_bytes = (uint64_t) sv.f_bavail * sv.f_frsize;
        }

        /* templates: ready ones, and their memory, which the sandboxes use */
        _cleanup_(json_decrefp) json_t *tpls = template_list_json(), *sbxs = sandbox_list_json();
        if (!tpls || !sbxs)
                return -ENOMEM;
        size_t i, j;
        json_t *t, *s;
        if (with_templates) {
                n.templates = calloc(json_array_size(tpls) + 1, sizeof *n.templates);
                if (!n.templates)
                        return -ENOMEM;
                json_array_foreach(tpls, i, t) {
                        const char *name = json_string_value(json_object_get(t, "name"));
                        const char *state = json_string_value(json_object_get(t, "state"));
                        if (name && state && strcmp(state, "ready") == 0 && n.n_templates < CLUSTER_TEMPLATES_MAX &&
                            (n.templates[n.n_templates] = strdup(name)))
                                n.n_templates++;
                }
        }
        json_array_foreach(sbxs, i, s) {
                const char *state = json_string_value(json_object_get(s, "state"));
                if (!state || strcmp(state, "stopped") == 0 || strcmp(state, "suspended") == 0)
                        continue;
                n.usage.sandboxes++;
                const char *tname = json_string_value(json_object_get(s, "template"));
                json_array_foreach(tpls, j, t)
                        if (tname && strcmp(tname, json_string_value(json_object_get(t, "name")) ?: "") == 0)
                                n.usage.memory_mib += (uint64_t) json_integer_value(json_object_get(t, "memory_mib"));
        }
        *ret = n;
        return 0;
}

/* ---- requests to a replica ---- */

/* Builds a request once connected: fd is the connection's socket (its
 * local address is ours as the replica sees it). */
typedef json_t *(*request_fn)(int fd, void *userdata);

/* One request on a fresh connection to addr; *ret the reply object. */
static int call(struct mtls_ctx *tls, const char *addr, request_fn build, void *userdata, json_t **ret, char *err,
                size_t errlen) {
        char spec[CLUSTER_ADDR_MAX + 8];
        snprintf(spec, sizeof spec, "tls:%s", addr);
        struct link l = LINK_NULL;
        struct proto_reader rd;
        int r = proto_reader_init(&rd);
        if (r < 0)
                return r;
        if ((r = link_connect(spec, tls, CONNECT_TIMEOUT_MS, &l)) < 0)
                snprintf(err, errlen, "cannot reach %s: %s", addr,
                         r == -EACCES ? "its certificate is not the cluster's" : strerror(-r));
        _cleanup_(json_decrefp) json_t *req = r >= 0 ? build(l.fd, userdata) : NULL;
        _cleanup_free_ char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
        if (r >= 0 && !body)
                r = -ENOMEM;
        if (r >= 0 && (r = link_write_frame(&l, PROTO_NODE_REQUEST, 0, body, strlen(body))) < 0)
                snprintf(err, errlen, "cannot send to %s: %s", addr, strerror(-r));
        struct proto_header h;
        const uint8_t *p;
        if (r >= 0 && (r = link_read_frame(&l, &rd, &h, &p)) <= 0) {
                snprintf(err, errlen, "%s did not answer%s", addr,
                         r == 0 ? " (it closed the connection: not a node of its cluster?)" : "");
                r = r == 0 ? -ECONNRESET : r;
        } else if (r >= 0 && h.type != PROTO_NODE_REPLY) {
                snprintf(err, errlen, "%s sent a %s frame", addr, proto_type_name(h.type));
                r = -EBADMSG;
        } else if (r >= 0) {
                json_t *o = json_loadb((const char *) p, h.length, 0, NULL);
                if (!json_is_object(o)) {
                        snprintf(err, errlen, "%s sent a malformed reply", addr);
                        r = -EBADMSG;
                } else if (!json_is_true(json_object_get(o, "ok"))) {
                        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
                        snprintf(err, errlen, "%s refused: %s", addr, m ? m : "(no reason)");
                        r = -EPERM;
                } else {
                        *ret = o;
                        o = NULL;
                        r = 0;
                }
                json_decref(o);
        }
        proto_reader_release(&rd);
        link_close(&l);
        return r;
}

struct join_args {
        const char *token, *csr;
};

static json_t *build_join(int fd, void *userdata) {
        struct join_args *a = userdata;
        struct cluster_node_info n;
        if (node_info(fd, false, &n) < 0)
                return NULL;
        json_t *o = cluster_join_request(a->token, a->csr, &n);
        cluster_node_info_release(&n);
        return o;
}

static json_t *build_heartbeat(int fd, void *userdata) {
        struct cluster_node_info n;
        if (node_info(fd, true, &n) < 0)
                return NULL;
        n.wants_templates_key = template_store_wants_key();
        json_t *o = cluster_heartbeat_request(&n);
        cluster_node_info_release(&n);
        return o;
}

/* The join token airlock-nodemgr passed, taken out of the environment at
 * start (membership_take_token), until the join uses it. */
static char *env_token;

int membership_take_token(void) {
        char *env = getenv("AIRLOCK_JOIN_TOKEN");
        if (!env)
                return 0;
        if (*env && !env_token && !(env_token = strdup(env)))
                return -ENOMEM;
        /* wiped where /proc/PID/environ shows it */
        sodium_memzero(env, strlen(env));
        unsetenv("AIRLOCK_JOIN_TOKEN");
        return 0;
}

static void env_token_drop(void) {
        if (env_token)
                sodium_memzero(env_token, strlen(env_token));
        free(env_token);
        env_token = NULL;
}

/* The join token: airlock-nodemgr's, else the file of --join-token-file. */
static int join_token(struct cluster_token *ret) {
        _cleanup_free_ char *text = TAKE_PTR(env_token);
        if (!text && !mcfg->join_token_file) {
                log_error("joining the cluster needs a join token (--join-token-file; `airlock nodes token` makes one)");
                return -ENOKEY;
        }
        int r;
        if (!text && (r = file_read_all(mcfg->join_token_file, CLUSTER_TOKEN_MAX, &text, NULL)) < 0)
                return log_error_errno(r, "Cannot read the join token %s: %m", mcfg->join_token_file);
        r = cluster_token_parse(text, ret);
        sodium_memzero(text, strlen(text));
        if (r < 0)
                log_error("the join token is not one (`airlock nodes token` prints alj1-...)");
        return r;
}

/* The first start of a joining node: key, CSR, token; the certificate. */
static int join(void) {
        struct cluster_token t;
        int r = join_token(&t);
        if (r < 0)
                return r;
        _cleanup_free_ char *key = NULL, *csr = NULL;
        if ((r = mtls_key_create(&key)) < 0 || (r = mtls_csr_create(key, &csr)) < 0)
                return log_error_errno(r, "Failed to make this node's key: %m");
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *jctx = NULL;
        if ((r = mtls_ctx_new_join(t.ca_digest, &jctx)) < 0)
                return log_error_errno(r, "Failed to set up TLS: %m");
        char token[CLUSTER_TOKEN_MAX];
        cluster_token_format(&t, token, sizeof token);
        struct join_args args = { .token = token, .csr = csr };
        char err[512] = "";
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = -EHOSTDOWN;
        for (size_t i = 0; i < n_control && r < 0; i++) {
                /* the CA comes with the replica's certificate; the join
                 * context accepted it only if it hashes to the token's */
                r = call(jctx, control[i], build_join, &args, &rep, err, sizeof err);
                if (r < 0)
                        log_warn("join through %s failed: %s", control[i], err);
        }
        sodium_memzero(token, sizeof token);
        if (r < 0)
                return log_error_errno(r, "Failed to join the cluster: %s", err);
        const char *cert = json_string_value(json_object_get(rep, "cert"));
        const char *ca = json_string_value(json_object_get(rep, "ca"));
        char digest[MTLS_DIGEST_HEX + 1];
        if (!cert || !ca || mtls_cert_digest(ca, digest) < 0 || strcmp(digest, t.ca_digest) != 0 ||
            mtls_cert_verify(ca, cert, MTLS_ROLE_NODE, mcfg->node_name) < 0)
                return log_error_errno(-EBADMSG, "the replica's join reply holds no certificate for %s of the token's CA",
                                       mcfg->node_name);
        /* the key first, the certificate last: a node.crt means joined */
        if ((r = write_text("node.key", key, 0600)) < 0 || (r = write_text("ca.crt", ca, 0644)) < 0 ||
            (r = write_text("node.crt", cert, 0644)) < 0)
                return log_error_errno(r, "Failed to write this node's identity to %s: %m", dir);
        control_set(json_object_get(rep, "control"));
        (void) keys_apply(json_object_get(rep, "cap_keys"));
        log_info("joined the cluster as %s (CA %.16s…)", mcfg->node_name, digest);
        return 0;
}

/* The cluster's templates key, when the heartbeat asked for it:
 * {"key":BASE64,"wrapped":STRING}. */
static void templates_key_apply(const json_t *o) {
        if (!o)
                return;
        const char *b64 = json_string_value(json_object_get(o, "key"));
        const char *wrapped = json_string_value(json_object_get(o, "wrapped"));
        uint8_t key[OBJSTORE_DATA_KEY_SIZE];
        size_t len = 0;
        bool ok = b64 && wrapped && *wrapped && strlen(wrapped) <= OBJSTORE_WRAPPED_KEY_MAX &&
                  sodium_base642bin(key, sizeof key, b64, strlen(b64), NULL, &len, NULL,
                                    sodium_base64_VARIANT_ORIGINAL) == 0 &&
                  len == sizeof key;
        for (const char *p = wrapped; ok && *p; p++)
                ok = *p >= 0x21 && *p <= 0x7e;
        if (ok)
                template_store_set_key(key, wrapped);
        else
                log_warn("a replica sent a malformed templates key: ignored");
        sodium_memzero(key, sizeof key);
}

/* Applies a heartbeat's reply. */
static void heartbeat_apply(const json_t *rep) {
        const char *state = json_string_value(json_object_get(rep, "state"));
        json_t *hb = json_object_get(rep, "heartbeat_ms");
        pthread_mutex_lock(&lock);
        bool was = draining;
        draining = state && strcmp(state, "draining") == 0;
        if (json_is_integer(hb) && json_integer_value(hb) >= HEARTBEAT_MIN_MS &&
            json_integer_value(hb) <= HEARTBEAT_MAX_MS)
                heartbeat_ms = (int) json_integer_value(hb);
        bool now = draining;
        pthread_mutex_unlock(&lock);
        if (was != now)
                log_info("the control plane says this node is %s", now ? "draining" : "ready");
        control_set(json_object_get(rep, "control"));
        int r = keys_apply(json_object_get(rep, "cap_keys"));
        if (r < 0 && r != -EBADMSG)
                log_warn_errno(r, "cannot write the capability keys: %m");
        templates_key_apply(json_object_get(rep, "templates_key"));
}

/* One heartbeat, to the replicas in turn until one answers. */
static int heartbeat_once(void) {
        char err[512] = "";
        int r = -EHOSTDOWN;
        size_t tries;
        pthread_mutex_lock(&lock);
        tries = n_control;
        pthread_mutex_unlock(&lock);
        for (size_t i = 0; i < tries; i++) {
                char addr[CLUSTER_ADDR_MAX];
                pthread_mutex_lock(&lock);
                snprintf(addr, sizeof addr, "%s", control[next_control % (n_control ? n_control : 1)]);
                pthread_mutex_unlock(&lock);
                _cleanup_(json_decrefp) json_t *rep = NULL;
                r = call(client_tls, addr, build_heartbeat, NULL, &rep, err, sizeof err);
                if (r >= 0) {
                        heartbeat_apply(rep);
                        return 0;
                }
                log_emit(LOG_LEVEL_INFO, NULL, "heartbeat to %s failed: %s", addr, err);
                pthread_mutex_lock(&lock);
                next_control++; /* the next one, also for the next beat */
                pthread_mutex_unlock(&lock);
        }
        return r;
}

/* One key refresh at a time (refresh_lock); a caller within a second of
 * the last one waits out the rest of that second, then refreshes unless
 * another did since it asked: a flood of unknown keys costs one heartbeat
 * a second, and two rotations in a second cost no refused request. */
static pthread_mutex_t refresh_lock = PTHREAD_MUTEX_INITIALIZER;
static bool nap(int ms);

int membership_refresh_keys(void) {
        if (!running)
                return -ENOTCONN;
        uint64_t asked = now_monotonic_ns();
        int r = 0;
        pthread_mutex_lock(&refresh_lock);
        pthread_mutex_lock(&lock);
        uint64_t last = keys_refreshed_ns;
        pthread_mutex_unlock(&lock);
        if (last < asked) {
                uint64_t now = now_monotonic_ns();
                if (last && now - last < KEYS_REFRESH_MIN_NS)
                        (void) nap((int) ((KEYS_REFRESH_MIN_NS - (now - last)) / 1000000) + 1);
                pthread_mutex_lock(&lock);
                keys_refreshed_ns = now_monotonic_ns();
                pthread_mutex_unlock(&lock);
                r = heartbeat_once();
        }
        pthread_mutex_unlock(&refresh_lock);
        return r;
}

bool membership_draining(void) {
        pthread_mutex_lock(&lock);
        bool d = draining;
        pthread_mutex_unlock(&lock);
        return d;
}

/* Sleeps ms unless stopped: false when stopping. */
static bool nap(int ms) {
        struct pollfd p = { .fd = stop_fd, .events = POLLIN };
        return poll(&p, 1, ms) == 0;
}

static void *beat_thread(void *arg) {
        bool failing = false;
        do {
                int r = heartbeat_once();
                if (r < 0 && !failing)
                        log_warn("no replica answered this node's heartbeat; trying on");
                else if (r >= 0 && failing)
                        log_info("heartbeats answered again");
                failing = r < 0;
                pthread_mutex_lock(&lock);
                int ms = heartbeat_ms;
                pthread_mutex_unlock(&lock);
                if (!nap(ms))
                        break;
        } while (true);
        return NULL;
}

static void *listen_thread(void *arg) {
        for (;;) {
                struct pollfd p[2] = { { .fd = listen_fd, .events = POLLIN }, { .fd = stop_fd, .events = POLLIN } };
                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        break;
                if (p[1].revents)
                        break;
                if (p[0].revents & POLLIN)
                        server_accept(listen_fd, server_tls, mcfg);
        }
        return NULL;
}

/* ---- start and stop ---- */

/* The TLS contexts from what the join left. */
static int load_identity(void) {
        _cleanup_free_ char *key = NULL, *cert = NULL, *ca = NULL;
        int r;
        if ((r = read_text("node.key", &key)) < 0 || (r = read_text("node.crt", &cert)) < 0 ||
            (r = read_text("ca.crt", &ca)) < 0)
                return log_error_errno(r, "Cannot read this node's identity in %s: %m", dir);
        enum mtls_role role;
        char name[MTLS_NAME_MAX + 1];
        int64_t not_after;
        if ((r = mtls_cert_info(cert, &role, name, &not_after)) < 0 || role != MTLS_ROLE_NODE)
                return log_error_errno(-EBADMSG, "%s/node.crt is not a node's certificate", dir);
        if (strcmp(name, mcfg->node_name) != 0)
                return log_error_errno(-EINVAL,
                                       "this node joined the cluster as %s, not %s (--node-name): keep its name, "
                                       "or remove %s to join again",
                                       name, mcfg->node_name, dir);
        if ((r = mtls_ctx_new(true, ca, cert, key, MTLS_ROLE_CONTROL, &server_tls)) < 0 ||
            (r = mtls_ctx_new(false, ca, cert, key, MTLS_ROLE_CONTROL, &client_tls)) < 0)
                return log_error_errno(r, "Failed to set up this node's TLS: %m");
        sodium_memzero(key, strlen(key));
        return 0;
}

int membership_start(const struct node_config *cfg) {
        if (!cfg->join) {
                env_token_drop();
                return 0;
        }
        mcfg = cfg;
        snprintf(dir, sizeof dir, "%s/cluster", cfg->data_dir);
        int r = mkdir_p(dir, 0700);
        if (r < 0)
                return log_error_errno(r, "Cannot create %s: %m", dir);
        (void) random_id("", 16, boot_id, sizeof boot_id);
        if (cfg->labels && cluster_labels_parse(cfg->labels, labels, &n_labels) < 0)
                return log_error_errno(-EINVAL, "Bad --labels '%s' (k=v,k2=v2 of [A-Za-z0-9._-])", cfg->labels);

        /* the replicas: those the join named, then what replies said */
        _cleanup_free_ char *known = NULL;
        if (read_text("control", &known) >= 0)
                control_load(known);
        if (n_control == 0) {
                _cleanup_free_ char *list = strdup(cfg->join);
                if (!list)
                        return -ENOMEM;
                for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
                        if (cluster_address_valid(a) && n_control < CLUSTER_CONTROL_MAX)
                                snprintf(control[n_control++], sizeof control[0], "%s", a);
                if (n_control == 0)
                        return log_error_errno(-EINVAL, "--join '%s' names no replica (HOST:PORT[,HOST:PORT])", cfg->join);
        }

        if ((r = server_listen_tcp(cfg->cluster_listen, &listen_fd)) < 0)
                return r;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getsockname(listen_fd, (struct sockaddr *) &ss, &len) == 0)
                listen_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *) &ss)->sin6_port
                                                              : ((struct sockaddr_in *) &ss)->sin_port);

        _cleanup_free_ char *crt = path_in("node.crt");
        if (!crt)
                return -ENOMEM;
        if (access(crt, F_OK) < 0 && (r = join()) < 0)
                return r;
        env_token_drop(); /* joined before: not needed */
        if ((r = load_identity()) < 0)
                return r;
        stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (stop_fd < 0)
                return log_error_errno(negative_errno(), "Failed to create an eventfd: %m");
        running = true;
        /* one heartbeat before we say we are up: the keys, our state */
        if (heartbeat_once() < 0)
                log_warn("no replica answered the first heartbeat; the node goes on and tries again");
        if ((r = -pthread_create(&listener, NULL, listen_thread, NULL)) < 0 ||
            (r = -pthread_create(&beater, NULL, beat_thread, NULL)) < 0) {
                running = false;
                return log_error_errno(r, "Failed to start the cluster threads: %m");
        }
        log_info("cluster: node %s serves the replicas on %s (TLS), heartbeats every %d ms", cfg->node_name,
                 cfg->cluster_listen, heartbeat_ms);
        return 0;
}

void membership_stop(void) {
        if (!running)
                return;
        uint64_t one = 1;
        (void) !write(stop_fd, &one, sizeof one);
        pthread_join(listener, NULL);
        pthread_join(beater, NULL);
        running = false;
        close(listen_fd);
        close(stop_fd);
        listen_fd = stop_fd = -1;
        mtls_ctx_free(server_tls);
        mtls_ctx_free(client_tls);
        server_tls = client_tls = NULL;
}
