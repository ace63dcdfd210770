/* SPDX-License-Identifier: Apache-2.0 */
#include "replica.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "apierror.h"
#include "cap.h"
#include "cluster.h"
#include "datakey.h"
#include "dataplane.h"
#include "lifecycle.h"
#include "link.h"
#include "log.h"
#include "macros.h"
#include "mtls.h"
#include "nodeclient.h"
#include "nodes.h"
#include "proto.h"
#include "util.h"
#include "worker.h"

#define CERT_DAYS 365
#define HANDSHAKE_TIMEOUT_MS 10000
#define REQUEST_TIMEOUT_MS 10000
#define CONNS_MAX 64 /* node connections served at once */
/* a replica not seen for this many beats is left out of the addresses
 * nodes are given */
#define REPLICA_STALE_BEATS 10
/* how often (in beats) a replica asks the nodes it owns for sandboxes the
 * store has no row of */
#define ORPHAN_SWEEP_BEATS 5

struct replica {
        const struct daemon_config *config;
        struct store *store;
        char id[32]; /* rep-…: the CN of this run's certificate */
        char *ca_cert, *ca_key;
        char ca_digest[MTLS_DIGEST_HEX + 1];
        struct mtls_ctx *server_tls, *client_tls;
        int listen_fd;
        int stop_pipe[2];
        pthread_t accept_thread;
        bool accept_started;
        struct worker *beat; /* the beat's thread */
        unsigned beats;      /* its own: the beats so far */
        bool hooked;         /* dataplane.c calls keys_rotated() */
        atomic_int conns;
        int64_t started_at;
};

static struct replica *self;

struct replica *replica_self(void) {
        return self;
}

/* Reads who is alive (seen within a few beats), for replica_owns()
 * (replica-share.c). */
static void live_refresh(struct replica *rp) {
        struct store_replica *reps = NULL;
        size_t n = 0;
        int64_t since = now_unix_ms() - (int64_t) REPLICA_STALE_BEATS * rp->config->heartbeat_ms;
        if (store_replica_list(rp->store, since, STORE_LIST_MAX, &reps, &n) < 0)
                return; /* keep the last split */
        unsigned index = 0;
        bool found = false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(reps[i].id, rp->id) == 0) {
                        index = (unsigned) i; /* the list is by id: every replica sorts it alike */
                        found = true;
                }
        store_replica_array_free(reps, n);
        replica_share_set_live(found ? index : 0, found ? (unsigned) n : 1);
}

/* ---- what replies carry ---- */

/* The cluster addresses of the replicas seen lately. */
static json_t *control_json(struct replica *rp) {
        json_t *a = json_array();
        struct store_replica *reps = NULL;
        size_t n = 0;
        int64_t since = now_unix_ms() - (int64_t) REPLICA_STALE_BEATS * rp->config->heartbeat_ms;
        if (a && store_replica_list(rp->store, since, CLUSTER_CONTROL_MAX, &reps, &n) >= 0)
                for (size_t i = 0; i < n; i++)
                        if (reps[i].cluster_address)
                                json_array_append_new(a, json_string(reps[i].cluster_address));
        store_replica_array_free(reps, n);
        return a;
}

static json_t *cap_keys_json(struct replica *rp) {
        json_t *a = json_array();
        struct store_cap_key *keys = NULL;
        size_t n = 0;
        if (a && store_cap_key_list(rp->store, CLUSTER_KEYS_MAX, &keys, &n) >= 0)
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(a, json_pack("{s:s, s:s}", "kid", keys[i].kid, "public",
                                                           keys[i].public_key));
        store_cap_key_array_free(keys, n);
        return a;
}

/* What a node's row keeps of its heartbeat: labels, capacity, usage and
 * templates (the request less what has columns of its own). */
static char *info_text(const json_t *req) {
        _cleanup_(json_decrefp) json_t *o = json_pack(
                "{s:O?, s:O?, s:O?, s:O?, s:O?}", "labels", json_object_get(req, "labels"), "capacity",
                json_object_get(req, "capacity"), "usage", json_object_get(req, "usage"), "templates",
                json_object_get(req, "templates"), "cpu", json_object_get(req, "cpu"));
        return o ? json_dumps(o, JSON_COMPACT) : NULL;
}

static int send_reply(struct link *l, json_t *o) {
        if (!o)
                return -ENOMEM;
        _cleanup_free_ char *body = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!body)
                return -ENOMEM;
        int r = link_write_frame(l, PROTO_NODE_REPLY, 0, body, strlen(body));
        explicit_bzero(body, strlen(body)); /* a heartbeat's may hold the templates key */
        return r;
}

static int send_error(struct link *l, int r, const char *fmt, ...) {
        char msg[API_ERRMSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        return send_reply(l, json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", api_error_code(r), "message",
                                       msg));
}

/* ---- cluster.join ---- */

static int handle_join(struct replica *rp, struct link *l, const json_t *req, const char *peer) {
        const char *token_text, *csr;
        _cleanup_(cluster_node_info_release) struct cluster_node_info info = { 0 };
        char err[256];
        if (cluster_join_parse(req, &token_text, &csr, &info, err) < 0)
                return send_error(l, -EINVAL, "%s", err);
        struct cluster_token t;
        if (cluster_token_parse(token_text, &t) < 0)
                return send_error(l, -EINVAL, "the join token is malformed");
        if (strcmp(t.ca_digest, rp->ca_digest) != 0)
                return send_error(l, -EACCES, "the join token is of another cluster");
        uint8_t hash[STORE_HASH_SIZE];
        crypto_hash_sha256(hash, (const uint8_t *) t.secret, strlen(t.secret));
        sodium_memzero(&t.secret, sizeof t.secret);
        int r = store_join_token_check(rp->store, t.id, hash, now_unix_ms());
        if (r == -EKEYEXPIRED)
                return send_error(l, -EACCES, "the join token has expired: make a new one (`airlock nodes token`)");
        if (r < 0)
                return send_error(l, r == -ENOENT ? -EACCES : r, "%s",
                                  r == -ENOENT ? "the join token is not valid"
                                               : "the store cannot check the join token");
        if (!mtls_name_valid(info.name))
                return send_error(l, -EINVAL, "node name %s must be 1-63 of [a-z0-9-]", info.name);
        _cleanup_free_ char *cert = NULL;
        if ((r = mtls_cert_issue(rp->ca_cert, rp->ca_key, csr, MTLS_ROLE_NODE, info.name, CERT_DAYS, &cert)) < 0)
                return send_error(l, -EINVAL, "cannot issue a certificate for this CSR");
        _cleanup_free_ char *addr = strdup_printf("tls:%s@%s", info.name, info.address);
        _cleanup_free_ char *text = info_text(req);
        if (!addr || !text)
                return -ENOMEM;
        struct store_node n = { .name = info.name, .address = addr, .boot_id = info.boot_id, .info = text };
        r = store_node_insert(rp->store, &n);
        if (r == -EEXIST) {
                /* the same node process asking again (its first answer was
                 * lost) gets a certificate; another machine under a taken
                 * name does not */
                _cleanup_(store_node_release) struct store_node old = { 0 };
                if (store_node_get(rp->store, info.name, &old) < 0 || strcmp(old.boot_id ?: "", info.boot_id) != 0)
                        return send_error(l, -EEXIST,
                                          "a node named %s is a member already: remove it first (`airlock nodes "
                                          "remove %s`), or start this one with another --node-name",
                                          info.name, info.name);
                r = 0;
        }
        if (r < 0)
                return send_error(l, r, "the store cannot add the node: %s", strerror(-r));
        log_info("node %s joined from %s (%s)", info.name, info.address, peer);
        return send_reply(l, json_pack("{s:b, s:s, s:s, s:o, s:o}", "ok", 1, "cert", cert, "ca", rp->ca_cert,
                                       "control", control_json(rp), "cap_keys", cap_keys_json(rp)));
}

/* ---- cluster.heartbeat ---- */

/* Deletes on node name what it runs that the store has no row of, or
 * places on another node (list: its sandbox.list): sandboxes deleted while
 * it was lost, or whose delete it refused then (busy recovering them), and
 * suspended ones woken elsewhere meanwhile. Rows come before VMs (a create
 * or a fork inserts its row, with its node, first), so such a VM is no
 * one's, and a sandbox runs on one node only. */
static void remove_orphans(struct replica *rp, const char *name, const char *addr, const json_t *list) {
        size_t k;
        json_t *s;
        json_array_foreach(list, k, s) {
                const char *id = json_string_value(json_object_get(s, "id"));
                _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
                int r = id ? store_sandbox_get(rp->store, id, &sb) : -EINVAL;
                if (r != -ENOENT && !(r >= 0 && sb.node && strcmp(sb.node, name) != 0))
                        continue;
                char err[API_ERRMSG_MAX] = "";
                _cleanup_(json_decrefp) json_t *del = json_pack("{s:s, s:s}", "op", "sandbox.delete", "id", id);
                const char *why = sb.node ? "runs on another node now" : "has no row any more";
                r = del ? node_call(addr, rp->config->node_timeout_s, del, NULL, err) : -ENOMEM;
                if (r >= 0 || r == -ENOENT)
                        log_info("sandbox %s on node %s %s: removed there", id, name, why);
                else
                        log_info("sandbox %s on node %s %s; removing it there failed (%s): the next sweep tries "
                                 "again", id, name, why, err);
        }
}

/* Every few beats: the orphan sweep over the nodes this replica owns. */
static void sweep_orphans(struct replica *rp) {
        struct store_node *nodes = NULL;
        size_t n = 0;
        if (store_node_list(rp->store, STORE_LIST_MAX, &nodes, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (nodes[i].lost_at || !replica_owns(nodes[i].name))
                        continue;
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "sandbox.list");
                _cleanup_(json_decrefp) json_t *rep = NULL;
                char err[API_ERRMSG_MAX] = "";
                if (req && node_call(nodes[i].address, rp->config->node_timeout_s, req, &rep, err) >= 0)
                        remove_orphans(rp, nodes[i].name, nodes[i].address, json_object_get(rep, "sandboxes"));
        }
        store_node_array_free(nodes, n);
}

/* A node that was lost beats again: its sandboxes marked lost take the
 * state it reports; those it does not have any more failed; what it runs
 * that the store deleted meanwhile is deleted there. */
static void reconcile_node(struct replica *rp, const char *name, const char *addr) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "sandbox.list");
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        if (!req || node_call(addr, rp->config->node_timeout_s, req, &rep, err) < 0) {
                log_warn("node %s is back, but listing its sandboxes failed: %s", name, err);
                return;
        }
        json_t *list = json_object_get(rep, "sandboxes");
        struct store_sandbox *rows = NULL;
        size_t n = 0;
        if (store_sandbox_list_node(rp->store, name, STORE_LIST_MAX, &rows, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(rows[i].state, "lost") != 0)
                        continue;
                const char *state = NULL;
                size_t k;
                json_t *s;
                json_array_foreach(list, k, s)
                        if (strcmp(json_string_value(json_object_get(s, "id")) ?: "", rows[i].id) == 0)
                                state = json_string_value(json_object_get(s, "state"));
                if (state && lifecycle_state_is_valid(state))
                        (void) store_sandbox_transition(rp->store, rows[i].id, "lost", state, NULL);
                else {
                        (void) store_sandbox_transition(rp->store, rows[i].id, "lost", "failed", NULL);
                        char why[160];
                        snprintf(why, sizeof why, "node %s came back without it", name);
                        (void) store_sandbox_update_state(rp->store, rows[i].id, "failed", why);
                }
                log_info("sandbox %s on node %s: lost -> %s", rows[i].id, name, state ?: "failed");
        }
        store_sandbox_array_free(rows, n);
        remove_orphans(rp, name, addr, list);
}

/* The cluster's templates key, for a node that asked: it seals the
 * templates the nodes share through the object store. */
static void templates_key_add(json_t *rep, const char *node) {
        static atomic_bool said;
        struct datakey k;
        int r = datakey_templates(&k);
        if (r < 0) {
                if (!atomic_exchange(&said, true))
                        log_warn("no templates key for node %s (%s): nodes build their own templates", node,
                                 strerror(-r));
                return;
        }
        atomic_store(&said, false);
        char b64[sodium_base64_ENCODED_LEN(DATAKEY_SIZE, sodium_base64_VARIANT_ORIGINAL)];
        sodium_bin2base64(b64, sizeof b64, k.key, sizeof k.key, sodium_base64_VARIANT_ORIGINAL);
        json_object_set_new(rep, "templates_key", json_pack("{s:s, s:s}", "key", b64, "wrapped", k.wrapped));
        sodium_memzero(b64, sizeof b64);
        sodium_memzero(k.key, sizeof k.key);
}

static int handle_heartbeat(struct replica *rp, struct link *l, const json_t *req, const char *peer,
                            enum mtls_role role) {
        if (!peer[0] || role != MTLS_ROLE_NODE)
                return send_error(l, -EACCES, "a heartbeat needs the node's certificate: join first");
        _cleanup_(cluster_node_info_release) struct cluster_node_info info = { 0 };
        char err[256];
        if (cluster_heartbeat_parse(req, &info, err) < 0)
                return send_error(l, -EINVAL, "%s", err);
        if (strcmp(info.name, peer) != 0)
                return send_error(l, -EACCES, "node %s cannot beat for %s", peer, info.name);
        _cleanup_free_ char *addr = strdup_printf("tls:%s@%s", info.name, info.address);
        _cleanup_free_ char *text = info_text(req);
        if (!addr || !text)
                return -ENOMEM;
        struct store_node n = { .name = info.name, .address = addr, .boot_id = info.boot_id, .info = text };
        bool was_lost = false, draining = false;
        int r = store_node_heartbeat(rp->store, &n, &was_lost, &draining);
        if (r == -ENOENT)
                return send_error(l, -ENOENT, "node %s is not a member of this cluster (removed?)", info.name);
        if (r < 0)
                return send_error(l, r, "the store cannot record the heartbeat: %s", strerror(-r));
        json_t *rep = json_pack("{s:b, s:s, s:i, s:o, s:o}", "ok", 1, "state", draining ? "draining" : "ready",
                                "heartbeat_ms", (json_int_t) rp->config->heartbeat_ms, "control", control_json(rp),
                                "cap_keys", cap_keys_json(rp));
        if (rep && info.wants_templates_key)
                templates_key_add(rep, info.name);
        r = send_reply(l, rep);
        if (was_lost) {
                log_info("node %s is back; reconciling its sandboxes", info.name);
                nodes_addr_forget(info.name);
                reconcile_node(rp, info.name, addr);
        }
        return r;
}

/* ---- the port ---- */

struct conn_start {
        struct replica *rp;
        int fd;
};

static void serve(struct replica *rp, struct link *l) {
        enum mtls_role role = MTLS_ROLE_NODE;
        const char *peer = link_peer(l, &role);
        struct proto_reader rd;
        if (proto_reader_init(&rd) < 0)
                return;
        struct proto_header h;
        const uint8_t *p;
        int r = link_read_frame(l, &rd, &h, &p);
        if (r <= 0 || h.type != PROTO_NODE_REQUEST || h.length > CLUSTER_REQUEST_MAX) {
                if (r > 0)
                        (void) send_error(l, -EINVAL, "expected one node-request frame of at most %u bytes",
                                          CLUSTER_REQUEST_MAX);
                proto_reader_release(&rd);
                return;
        }
        _cleanup_(json_decrefp) json_t *req = json_loadb((const char *) p, h.length, JSON_REJECT_DUPLICATES, NULL);
        proto_reader_release(&rd);
        const char *op = json_string_value(json_object_get(req, "op"));
        if (!op)
                r = send_error(l, -EINVAL, "the request is not a JSON object with an op");
        else if (strcmp(op, "cluster.join") == 0)
                r = handle_join(rp, l, req, peer[0] ? peer : "no certificate");
        else if (strcmp(op, "cluster.heartbeat") == 0)
                r = handle_heartbeat(rp, l, req, peer, role);
        else
                r = send_error(
                        l, -EINVAL,
                        "a replica's cluster port serves cluster.join and cluster.heartbeat, not %.40s", op);
        if (r < 0)
                log_debug("cluster request %s from %s: %s", op ?: "?", peer[0] ? peer : "?", strerror(-r));
}

static void *conn_thread(void *arg) {
        struct conn_start st = *(struct conn_start *) arg;
        free(arg);
        struct link l = LINK_NULL;
        if (link_accept(st.fd, st.rp->server_tls, HANDSHAKE_TIMEOUT_MS, &l) >= 0) {
                (void) link_set_timeout(&l, REQUEST_TIMEOUT_MS);
                serve(st.rp, &l);
        }
        link_close(&l);
        atomic_fetch_sub(&st.rp->conns, 1);
        return NULL;
}

static void *accept_main(void *arg) {
        struct replica *rp = arg;
        struct pollfd p[2] = {{.fd = rp->listen_fd, .events = POLLIN},
                              {.fd = rp->stop_pipe[0], .events = POLLIN}};
        for (;;) {
                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        break;
                if (p[1].revents)
                        break;
                if (!(p[0].revents & POLLIN))
                        continue;
                int fd = accept4(rp->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                if (atomic_fetch_add(&rp->conns, 1) >= CONNS_MAX) {
                        atomic_fetch_sub(&rp->conns, 1);
                        close(fd);
                        continue;
                }
                struct conn_start *st = malloc(sizeof *st);
                pthread_t t;
                pthread_attr_t attr;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                if (!st || (*st = (struct conn_start){ rp, fd }, pthread_create(&t, &attr, conn_thread, st)) != 0) {
                        free(st);
                        close(fd);
                        atomic_fetch_sub(&rp->conns, 1);
                }
                pthread_attr_destroy(&attr);
        }
        return NULL;
}

/* ---- the beat ---- */

/* how long the public keys of a replica that is gone stay in the store:
 * capabilities it signed may still be carried that long */
#define GONE_REPLICA_KEYS_MS (3600 * 1000)

/* Puts this replica's capability public keys (DIR/public/KID.pub) in the
 * store, where nodes get them with their next heartbeat; takes out the
 * ones it retired (a rotation removes the one before the previous from
 * DIR/public), and those of replicas not seen for an hour. */
static void publish_cap_keys_locked(struct replica *rp);
static void publish_cap_keys(struct replica *rp) {
        /* One at a time: the beat's pass reads the key dir, then deletes
         * its keys the store has but the dir had not; a rotation
         * publishing in between would lose its new key until the next
         * beat, and the nodes would refuse its capabilities. */
        static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&publish_lock);
        publish_cap_keys_locked(rp);
        pthread_mutex_unlock(&publish_lock);
}

static void publish_cap_keys_locked(struct replica *rp) {
        _cleanup_free_ char *dir = strdup_printf("%s/public", rp->config->cap_keys_dir);
        DIR *d = dir ? opendir(dir) : NULL;
        if (!d)
                return;
        char kids[CLUSTER_KEYS_MAX][CAP_KID_MAX + 1];
        size_t n_kids = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n_kids < CLUSTER_KEYS_MAX) {
                size_t len = strlen(e->d_name);
                if (len < 5 || len - 4 > CAP_KID_MAX || strcmp(e->d_name + len - 4, ".pub") != 0)
                        continue;
                char *kid = kids[n_kids];
                snprintf(kid, CAP_KID_MAX + 1, "%.*s", (int) (len - 4), e->d_name);
                _cleanup_free_ char *path = strdup_printf("%s/%s", dir, e->d_name), *hex = NULL;
                if (!path || file_read_all(path, 256, &hex, NULL) < 0)
                        continue;
                hex[strcspn(hex, "\r\n")] = 0;
                struct store_cap_key k = { .kid = kid, .public_key = hex, .replica = rp->id };
                if (store_cap_key_publish(rp->store, &k) >= 0)
                        n_kids++;
        }
        closedir(d);

        struct store_cap_key *keys = NULL;
        struct store_replica *reps = NULL;
        size_t n = 0, n_reps = 0;
        if (store_cap_key_list(rp->store, STORE_LIST_MAX, &keys, &n) < 0 ||
            store_replica_list(rp->store, now_unix_ms() - GONE_REPLICA_KEYS_MS, STORE_LIST_MAX, &reps, &n_reps) < 0)
                goto out;
        for (size_t i = 0; i < n; i++) {
                bool mine = keys[i].replica && strcmp(keys[i].replica, rp->id) == 0, keep = !mine;
                for (size_t k = 0; mine && k < n_kids && !keep; k++)
                        keep = strcmp(kids[k], keys[i].kid) == 0;
                /* another's: kept while its replica was seen within the grace */
                if (!mine) {
                        keep = false;
                        for (size_t k = 0; k < n_reps && !keep; k++)
                                keep = keys[i].replica && strcmp(reps[k].id, keys[i].replica) == 0;
                }
                if (!keep && store_cap_key_delete(rp->store, keys[i].kid) >= 0)
                        log_info("capability key %s retired from the cluster (%s)", keys[i].kid,
                                 mine ? "rotated out here" : "its replica is gone");
        }
out:
        store_cap_key_array_free(keys, n);
        store_replica_array_free(reps, n_reps);
}

/* dataplane.c's key publisher: a rotation puts the new key in the store
 * before it signs. */
static void keys_rotated(void *userdata) {
        publish_cap_keys(userdata);
}

/* Marks the nodes silent past the grace lost, and their sandboxes: a
 * sandbox of a lost node is not running anywhere we can see, and must
 * not be started twice. Suspended ones stay: their image may be in the
 * object store, from where another node can wake them. */
static void mark_lost(struct replica *rp) {
        char **names = NULL;
        size_t n = 0;
        int64_t cutoff = now_unix_ms() - (int64_t) rp->config->node_lost_after_s * 1000;
        if (store_nodes_mark_lost(rp->store, cutoff, &names, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                log_warn("node %s sent no heartbeat for %us: lost", names[i], rp->config->node_lost_after_s);
                struct store_sandbox *rows = NULL;
                size_t m = 0;
                if (store_sandbox_list_node(rp->store, names[i], STORE_LIST_MAX, &rows, &m) < 0)
                        continue;
                for (size_t k = 0; k < m; k++) {
                        const char *st = rows[k].state;
                        if (strcmp(st, "suspended") == 0 || strcmp(st, "archived") == 0 || strcmp(st, "lost") == 0)
                                continue;
                        if (store_sandbox_transition(rp->store, rows[k].id, st, "lost", NULL) >= 0)
                                log_info("sandbox %s on lost node %s: %s -> lost", rows[k].id, names[i], st);
                }
                store_sandbox_array_free(rows, m);
        }
        store_string_array_free(names, n);
}

/* Renews the leases of the operations this replica carries, and takes
 * over those whose replica stopped renewing theirs. */
static void leases(struct replica *rp) {
        int64_t now = now_unix_ms();
        (void) store_operation_lease_renew(rp->store, rp->id, now + REPLICA_LEASE_MS, NULL);
        struct store_operation *ops = NULL;
        size_t n = 0;
        if (store_operation_list_expired(rp->store, now, 16, &ops, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (store_operation_take_over(rp->store, ops[i].id, rp->id, now, now + REPLICA_LEASE_MS) < 0)
                        continue; /* another replica was first */
                log_warn("operation %s (%s of %s) was carried by %s, which stopped renewing it: settling it",
                         ops[i].id, ops[i].verb, ops[i].sandbox_id, ops[i].owner ?: "a replica");
                api_operation_settle_orphan(rp->config, rp->store, &ops[i]);
        }
        store_operation_array_free(ops, n);
}

static int replica_seen(struct replica *rp) {
        struct store_replica me = { .id = rp->id, .started_at = rp->started_at };
        if (rp->config->advertise[0])
                me.cluster_address = (char *) rp->config->advertise;
        return store_replica_seen(rp->store, &me);
}

/* One beat, every heartbeat_ms (replica_stop() deletes our row after the last). */
static int beat_pass(void *arg) {
        struct replica *rp = arg;
        unsigned beat = rp->beats++;
        (void) replica_seen(rp);
        live_refresh(rp);
        if (beat % 10 == 0)
                publish_cap_keys(rp);
        if (rp->config->shared_store)
                leases(rp);
        mark_lost(rp);
        if (beat % ORPHAN_SWEEP_BEATS == ORPHAN_SWEEP_BEATS - 1)
                sweep_orphans(rp);
        return 0;
}

/* ---- start, stop ---- */

/* This run's key and a certificate for it from the cluster's CA. */
static int identity(struct replica *rp, char **ret_cert, char **ret_key) {
        _cleanup_free_ char *ca = NULL, *ca_key = NULL, *key = NULL, *csr = NULL;
        int r = mtls_ca_create(&ca, &ca_key);
        if (r < 0)
                return r;
        r = store_cluster_ca(rp->store, ca, ca_key, &rp->ca_cert, &rp->ca_key);
        explicit_bzero(ca_key, strlen(ca_key));
        if (r < 0)
                return log_error_errno(r, "Failed to read the cluster's CA from the store: %m");
        if ((r = mtls_cert_digest(rp->ca_cert, rp->ca_digest)) < 0 || (r = mtls_key_create(&key)) < 0 ||
            (r = mtls_csr_create(key, &csr)) < 0 ||
            (r = mtls_cert_issue(rp->ca_cert, rp->ca_key, csr, MTLS_ROLE_CONTROL, rp->id, CERT_DAYS, ret_cert)) < 0)
                return log_error_errno(r, "Failed to make this replica's certificate: %m");
        *ret_key = TAKE_PTR(key);
        return 0;
}

static int listen_on(const char *addr) {
        struct sockaddr_storage ss;
        socklen_t len;
        if (config_parse_listen(addr, &ss, &len) < 0)
                return -EINVAL;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, 128) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

int replica_start(const struct daemon_config *config, struct store *store, struct replica **ret) {
        *ret = NULL;
        if (!config->cluster_listen[0] && !config->shared_store)
                return 0;
        struct replica *rp = calloc(1, sizeof *rp);
        if (!rp)
                return -ENOMEM;
        rp->config = config;
        rp->store = store;
        rp->listen_fd = rp->stop_pipe[0] = rp->stop_pipe[1] = -1;
        _cleanup_free_ char *cert = NULL, *key = NULL;
        int r = random_id("rep-", 8, rp->id, sizeof rp->id);
        if (r >= 0)
                r = identity(rp, &cert, &key);
        if (r >= 0 && (r = mtls_ctx_new(true, rp->ca_cert, cert, key, MTLS_ROLE_NODE, &rp->server_tls)) >= 0 &&
            (r = mtls_ctx_new(false, rp->ca_cert, cert, key, MTLS_ROLE_NODE, &rp->client_tls)) >= 0)
                mtls_ctx_allow_anonymous(rp->server_tls); /* joining nodes have no certificate yet */
        if (key)
                explicit_bzero(key, strlen(key));
        if (r >= 0 && pipe2(rp->stop_pipe, O_CLOEXEC) < 0)
                r = -errno;
        if (r >= 0 && config->cluster_listen[0] && (rp->listen_fd = listen_on(config->cluster_listen)) < 0) {
                r = rp->listen_fd;
                log_error_errno(r, "Failed to listen for nodes on %s: %m", config->cluster_listen);
        }
        if (r < 0) {
                replica_stop(rp);
                return r;
        }
        node_client_set_tls(rp->client_tls);
        /* Seen before its keys are published: another replica's beat
         * retires the keys of replicas it has not seen, and would take
         * ours out between the two. */
        rp->started_at = now_unix_ms();
        if ((r = replica_seen(rp)) < 0) {
                log_error_errno(r, "Failed to register this replica in the store: %m");
                replica_stop(rp);
                return r;
        }
        publish_cap_keys(rp);
        replica_share_set_self(rp->id, config->shared_store);
        dataplane_set_key_publisher(keys_rotated, rp);
        rp->hooked = true;
        self = rp; /* before the threads: the beat settles operations */
        if (rp->listen_fd >= 0) {
                if ((r = -pthread_create(&rp->accept_thread, NULL, accept_main, rp)) < 0) {
                        replica_stop(rp);
                        return r;
                }
                rp->accept_started = true;
        }
        if ((r = worker_start(beat_pass, rp, rp->config->heartbeat_ms, 0, &rp->beat)) < 0) {
                replica_stop(rp);
                return r;
        }
        if (rp->listen_fd >= 0)
                log_info("replica %s serves nodes on %s (CA %.16s…)", rp->id, config->cluster_listen, rp->ca_digest);
        else
                log_info("replica %s of a shared store, without a cluster port (CA %.16s…)", rp->id, rp->ca_digest);
        *ret = rp;
        return 0;
}

void replica_stop(struct replica *rp) {
        if (!rp)
                return;
        if (rp->stop_pipe[1] >= 0)
                (void) write(rp->stop_pipe[1], "x", 1);
        if (rp->accept_started)
                pthread_join(rp->accept_thread, NULL);
        worker_stop(rp->beat);
        if (rp->started_at) /* after the last beat, or seen, then failed to start */
                (void) store_replica_delete(rp->store, rp->id);
        /* connection threads finish within their timeouts; wait for them */
        for (unsigned i = 0; i < 2000 && atomic_load(&rp->conns) > 0; i++)
                usleep(10000);
        if (self == rp)
                self = NULL;
        replica_share_forget(rp->id);
        if (rp->hooked)
                dataplane_set_key_publisher(NULL, NULL);
        if (rp->listen_fd >= 0)
                close(rp->listen_fd);
        if (rp->stop_pipe[0] >= 0)
                close(rp->stop_pipe[0]);
        if (rp->stop_pipe[1] >= 0)
                close(rp->stop_pipe[1]);
        mtls_ctx_free(rp->server_tls);
        mtls_ctx_free(rp->client_tls);
        free(rp->ca_cert);
        if (rp->ca_key)
                explicit_bzero(rp->ca_key, strlen(rp->ca_key));
        free(rp->ca_key);
        free(rp);
}

int replica_join_token(struct replica *rp, int64_t ttl_s, char *out, size_t n, char ret_id[17],
                       int64_t *ret_expires_at) {
        if (!rp)
                return -ENOTCONN;
        struct cluster_token t = { 0 };
        uint8_t id[8], secret[16];
        int r;
        if ((r = random_bytes(id, sizeof id)) < 0 || (r = random_bytes(secret, sizeof secret)) < 0)
                return r;
        snprintf(t.ca_digest, sizeof t.ca_digest, "%s", rp->ca_digest);
        sodium_bin2hex(t.id, sizeof t.id, id, sizeof id);
        sodium_bin2hex(t.secret, sizeof t.secret, secret, sizeof secret);
        uint8_t hash[STORE_HASH_SIZE];
        crypto_hash_sha256(hash, (const uint8_t *) t.secret, strlen(t.secret));
        int64_t expires_at = now_unix_ms() + ttl_s * 1000;
        if ((r = store_join_token_insert(rp->store, t.id, hash, expires_at)) < 0)
                return r;
        cluster_token_format(&t, out, n);
        memcpy(ret_id, t.id, 17);
        sodium_memzero(&t, sizeof t);
        sodium_memzero(secret, sizeof secret);
        *ret_expires_at = expires_at;
        return 0;
}
