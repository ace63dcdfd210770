/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A cluster's control plane at scale, without the machines
 * (docs/benchmarks.md, "Cluster"): placement decisions as a replica makes
 * them, and simulated nodes that join and heartbeat to a replica as real
 * ones do.
 *
 *   build/bench/cluster-sim --store postgres://… [--join HOST:PORT --token-file FILE]
 *                           [--threads 8] [--address 127.0.0.1:9] [--prefix sim]
 *                           [--period-ms 2000] [--place N]
 *
 * With --place N it times N placements and exits. Otherwise it reads
 * commands on stdin and answers each with one JSON line on stdout (what
 * bench/cluster.py drives):
 *
 *   place N        N calls of nodes_place() for template minimal (the
 *                  replica's code: daemon_lib, on the same store), and
 *                  apart from them the two store reads it is made of
 *   join N         N more simulated nodes join: each its own key and CSR,
 *                  cluster.join over TLS with the join token (as
 *                  src/node/membership.c joins), a client TLS context
 *                  with the certificate the reply brought
 *   beat S         every joined node heartbeats once per period (2 s, the
 *                  replicas' default), the nodes spread evenly over it,
 *                  from the threads, for S seconds: cluster.heartbeat on a
 *                  new mutual-TLS connection each, as a node sends it
 *   beat-start     the same until beat-stop, which reports
 *   quit
 *
 * The simulated nodes advertise --address, where nothing listens
 * (127.0.0.1:9: refused at once), with 32 CPUs, 64 GiB, room for 256
 * sandboxes and the minimal template: they are load, not nodes. A
 * heartbeat's latency is from the connect to the reply read; its lateness
 * how long after its turn it started (a client that cannot keep up falls
 * behind, and a node that falls behind far enough is marked lost).
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "apierror.h"
#include "cluster.h"
#include "config.h"
#include "link.h"
#include "log.h"
#include "macros.h"
#include "mtls.h"
#include "nodes.h"
#include "proto.h"
#include "store.h"
#include "util.h"

#define CONNECT_TIMEOUT_MS 10000
#define THREADS_MAX 64
#define NODES_MAX 100000

struct sim_node {
        char name[64];
        char boot_id[33];
        struct mtls_ctx *tls; /* with its certificate; NULL until joined */
};

static struct store *sim_store;
static const char *join_addr, *advertise = "127.0.0.1:9", *prefix = "sim";
static char token[CLUSTER_TOKEN_MAX];
static struct sim_node *nodes;
static size_t n_nodes;
static unsigned n_threads = 8, period_ms = 2000;

/* ---- samples ---- */

struct samples {
        uint64_t *v; /* ns */
        size_t n, cap;
};

static int samples_add(struct samples *s, uint64_t ns) {
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 1024;
                uint64_t *v = realloc(s->v, cap * sizeof *v);
                if (!v)
                        return -ENOMEM;
                s->v = v;
                s->cap = cap;
        }
        s->v[s->n++] = ns;
        return 0;
}

static int samples_merge(struct samples *into, const struct samples *from) {
        for (size_t i = 0; i < from->n; i++)
                if (samples_add(into, from->v[i]) < 0)
                        return -ENOMEM;
        return 0;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

/* The p-th percentile of sorted s in ms: the sample nearest to rank
 * p/100 * (n - 1), as bench/cluster.py's pct(). */
static double pct_ms(const struct samples *s, unsigned p) {
        size_t k = (size_t) ((double) p / 100.0 * (double) (s->n - 1) + 0.5);
        return (double) s->v[k < s->n ? k : s->n - 1] / 1e6;
}

/* {"n", "median_ms", "p90_ms", "p99_ms", "max_ms"} of s (sorted here). */
static json_t *samples_json(struct samples *s) {
        if (s->n == 0)
                return json_pack("{s:i}", "n", 0);
        qsort(s->v, s->n, sizeof *s->v, cmp_u64);
        return json_pack("{s:I, s:f, s:f, s:f, s:f}", "n", (json_int_t) s->n, "median_ms", pct_ms(s, 50), "p90_ms",
                         pct_ms(s, 90), "p99_ms", pct_ms(s, 99), "max_ms", pct_ms(s, 100));
}

static void samples_release(struct samples *s) {
        free(s->v);
        *s = (struct samples){ 0 };
}

static void emit(json_t *o) {
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        printf("%s\n", text ? text : "{\"error\":\"out of memory\"}");
        fflush(stdout);
        free(text);
        json_decref(o);
}

static void sleep_until(uint64_t t_ns) {
        uint64_t now = now_monotonic_ns();
        if (t_ns <= now)
                return;
        uint64_t d = t_ns - now;
        struct timespec ts = { .tv_sec = (time_t) (d / 1000000000ULL), .tv_nsec = (long) (d % 1000000000ULL) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* ---- placement ---- */

static void cmd_place(unsigned n) {
        struct samples total = { 0 }, list = { 0 }, counts = { 0 };
        struct nodes_want want = { .template_name = "minimal" };
        unsigned failed = 0;
        size_t listed = 0;
        int64_t rows = 0;
        char first_err[API_ERRMSG_MAX] = "";
        for (unsigned i = 0; i < n; i++) {
                char err[API_ERRMSG_MAX] = "";
                char *node = NULL;
                uint64_t t0 = now_monotonic_ns();
                int r = nodes_place(&want, &node, err);
                uint64_t t1 = now_monotonic_ns();
                free(node);
                if (r < 0 && failed++ == 0)
                        snprintf(first_err, sizeof first_err, "%s", err[0] ? err : strerror(-r));
                (void) samples_add(&total, t1 - t0);
                /* the two reads placement is made of, interleaved with it */
                struct store_node *a = NULL;
                size_t na = 0, nc = 0;
                char **names = NULL;
                int64_t *cnt = NULL;
                uint64_t t2 = now_monotonic_ns();
                if (store_node_list(sim_store, STORE_LIST_MAX, &a, &na) >= 0)
                        listed = na;
                uint64_t t3 = now_monotonic_ns();
                if (store_sandbox_count_by_node(sim_store, &names, &cnt, &nc) >= 0) {
                        rows = 0;
                        for (size_t k = 0; k < nc; k++)
                                rows += cnt[k];
                }
                uint64_t t4 = now_monotonic_ns();
                store_node_array_free(a, na);
                store_string_array_free(names, nc);
                free(cnt);
                (void) samples_add(&list, t3 - t2);
                (void) samples_add(&counts, t4 - t3);
        }
        json_t *o = json_pack("{s:s, s:I, s:I, s:i, s:o, s:o, s:o}", "cmd", "place", "nodes", (json_int_t) listed,
                              "sandbox_rows", (json_int_t) rows, "failed", failed, "place", samples_json(&total),
                              "store_node_list", samples_json(&list), "store_sandbox_count_by_node",
                              samples_json(&counts));
        if (o && failed)
                json_object_set_new(o, "first_error", json_string(first_err));
        emit(o);
        samples_release(&total);
        samples_release(&list);
        samples_release(&counts);
}

/* ---- talking to the replica ---- */

/* One request on a new connection to the replica; *ret the reply object
 * when it says ok, *ret_connect_ns (when not NULL) how long the connection
 * and its TLS handshake took. */
static int call(struct mtls_ctx *tls, json_t *req, json_t **ret, uint64_t *ret_connect_ns, char *err,
                size_t errlen) {
        char spec[CLUSTER_ADDR_MAX + 8];
        snprintf(spec, sizeof spec, "tls:%s", join_addr);
        _cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
        if (!body)
                return -ENOMEM;
        struct proto_reader rd;
        int r = proto_reader_init(&rd);
        if (r < 0)
                return r;
        struct link l = LINK_NULL;
        struct proto_header h;
        const uint8_t *p;
        uint64_t t0 = now_monotonic_ns();
        r = link_connect(spec, tls, CONNECT_TIMEOUT_MS, &l);
        if (ret_connect_ns)
                *ret_connect_ns = now_monotonic_ns() - t0;
        if (r < 0)
                snprintf(err, errlen, "connect: %s", strerror(-r));
        else if ((r = link_write_frame(&l, PROTO_NODE_REQUEST, 0, body, strlen(body))) < 0)
                snprintf(err, errlen, "send: %s", strerror(-r));
        else if ((r = link_read_frame(&l, &rd, &h, &p)) <= 0) {
                snprintf(err, errlen, "no reply: %s", r == 0 ? "closed" : strerror(-r));
                r = r == 0 ? -ECONNRESET : r;
        } else if (h.type != PROTO_NODE_REPLY) {
                snprintf(err, errlen, "a %s frame", proto_type_name(h.type));
                r = -EBADMSG;
        } else {
                json_t *o = json_loadb((const char *) p, h.length, 0, NULL);
                if (!json_is_true(json_object_get(o, "ok"))) {
                        const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
                        snprintf(err, errlen, "refused: %s", m ?: "(malformed reply)");
                        json_decref(o);
                        r = -EPERM;
                } else {
                        *ret = o;
                        r = 0;
                }
        }
        proto_reader_release(&rd);
        link_close(&l);
        return r;
}

static char *templates_minimal[] = { "minimal", NULL };

static void node_info(const struct sim_node *n, struct cluster_node_info *ret) {
        *ret = (struct cluster_node_info){ 0 };
        snprintf(ret->name, sizeof ret->name, "%s", n->name);
        snprintf(ret->address, sizeof ret->address, "%s", advertise);
        snprintf(ret->boot_id, sizeof ret->boot_id, "%s", n->boot_id);
        ret->capacity = (struct cluster_capacity){ .cpus = 32, .memory_mib = 65536, .disk_bytes = 1ULL << 40,
                                                   .max_sandboxes = 256 };
        ret->usage = (struct cluster_usage){ .sandboxes = 0, .memory_mib = 0, .disk_free_bytes = 1ULL << 39 };
        ret->templates = templates_minimal; /* borrowed: never released */
        ret->n_templates = 1;
}

/* ---- join ---- */

struct join_job {
        size_t from, to;           /* nodes[from..to) */
        struct mtls_ctx *jctx;
        struct samples lat;
        unsigned failed;
        char err[256];
};

static int join_one(struct sim_node *n, struct mtls_ctx *jctx, char *err, size_t errlen) {
        _cleanup_free_ char *key = NULL, *csr = NULL;
        int r;
        if ((r = mtls_key_create(&key)) < 0 || (r = mtls_csr_create(key, &csr)) < 0) {
                snprintf(err, errlen, "key: %s", strerror(-r));
                return r;
        }
        struct cluster_node_info info;
        node_info(n, &info);
        _cleanup_(json_decrefp) json_t *req = cluster_join_request(token, csr, &info);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if (!req)
                return -ENOMEM;
        if ((r = call(jctx, req, &rep, NULL, err, errlen)) < 0)
                return r;
        const char *cert = json_string_value(json_object_get(rep, "cert"));
        const char *ca = json_string_value(json_object_get(rep, "ca"));
        if (!cert || !ca || (r = mtls_ctx_new(false, ca, cert, key, MTLS_ROLE_CONTROL, &n->tls)) < 0) {
                snprintf(err, errlen, "the join reply holds no usable certificate");
                return -EBADMSG;
        }
        return 0;
}

static void *join_main(void *arg) {
        struct join_job *j = arg;
        for (size_t i = j->from; i < j->to; i++) {
                uint64_t t0 = now_monotonic_ns();
                char err[256] = "";
                if (join_one(&nodes[i], j->jctx, err, sizeof err) < 0) {
                        if (j->failed++ == 0)
                                snprintf(j->err, sizeof j->err, "%s: %s", nodes[i].name, err);
                        continue;
                }
                (void) samples_add(&j->lat, now_monotonic_ns() - t0);
        }
        return NULL;
}

static void cmd_join(size_t n) {
        if (!join_addr || !token[0]) {
                emit(json_pack("{s:s, s:s}", "cmd", "join", "error", "join needs --join and --token-file"));
                return;
        }
        if (n_nodes + n > NODES_MAX) {
                emit(json_pack("{s:s, s:s}", "cmd", "join", "error", "too many nodes"));
                return;
        }
        struct cluster_token t;
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *jctx = NULL;
        if (cluster_token_parse(token, &t) < 0 || mtls_ctx_new_join(t.ca_digest, &jctx) < 0) {
                emit(json_pack("{s:s, s:s}", "cmd", "join", "error", "the join token is not one"));
                return;
        }
        sodium_memzero(&t, sizeof t);
        struct sim_node *a = realloc(nodes, (n_nodes + n) * sizeof *a);
        if (!a) {
                emit(NULL);
                return;
        }
        nodes = a;
        size_t from = n_nodes;
        for (size_t i = from; i < from + n; i++) {
                nodes[i] = (struct sim_node){ 0 };
                snprintf(nodes[i].name, sizeof nodes[i].name, "%s-%05zu", prefix, i);
                (void) random_id("", 16, nodes[i].boot_id, sizeof nodes[i].boot_id);
        }
        n_nodes += n;
        struct join_job jobs[THREADS_MAX] = { 0 };
        pthread_t th[THREADS_MAX];
        bool started[THREADS_MAX] = { false };
        unsigned k = n_threads;
        uint64_t t0 = now_monotonic_ns();
        for (unsigned i = 0; i < k; i++) {
                jobs[i].from = from + n * i / k;
                jobs[i].to = from + n * (i + 1) / k;
                jobs[i].jctx = jctx;
                started[i] = pthread_create(&th[i], NULL, join_main, &jobs[i]) == 0;
                if (!started[i])
                        join_main(&jobs[i]); /* in this thread, then */
        }
        struct samples lat = { 0 };
        unsigned failed = 0;
        const char *err = NULL;
        for (unsigned i = 0; i < k; i++) {
                if (started[i])
                        pthread_join(th[i], NULL);
                (void) samples_merge(&lat, &jobs[i].lat);
                failed += jobs[i].failed;
                if (!err && jobs[i].failed)
                        err = jobs[i].err;
        }
        double wall_s = (double) (now_monotonic_ns() - t0) / 1e9;
        json_t *o = json_pack("{s:s, s:I, s:I, s:i, s:f, s:f, s:o}", "cmd", "join", "joined",
                              (json_int_t) lat.n, "nodes", (json_int_t) n_nodes, "failed", failed, "wall_s", wall_s,
                              "joins_per_s", (double) lat.n / wall_s, "latency", samples_json(&lat));
        if (o && err)
                json_object_set_new(o, "first_error", json_string(err));
        emit(o);
        samples_release(&lat);
        for (unsigned i = 0; i < k; i++)
                samples_release(&jobs[i].lat);
}

/* ---- heartbeats ---- */

struct beat_job {
        unsigned index;
        uint64_t start_ns;
        struct samples lat, late, handshake;
        unsigned failed;
        char err[256];
};

static struct beat_state {
        atomic_bool stop;
        bool running;
        uint64_t start_ns;
        unsigned k;
        pthread_t th[THREADS_MAX];
        struct beat_job jobs[THREADS_MAX];
} beats;

static int beat_one(struct sim_node *n, uint64_t *ret_connect_ns, char *err, size_t errlen) {
        struct cluster_node_info info;
        node_info(n, &info);
        _cleanup_(json_decrefp) json_t *req = cluster_heartbeat_request(&info);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if (!req)
                return -ENOMEM;
        return call(n->tls, req, &rep, ret_connect_ns, err, errlen);
}

/* Thread index's nodes are every k-th; node i beats at start + i*period/N
 * + m*period, m = 0, 1, …: spread evenly, as N real nodes started at
 * random times would be. */
static void *beat_main(void *arg) {
        struct beat_job *j = arg;
        uint64_t period = (uint64_t) period_ms * 1000000ULL;
        size_t n = n_nodes;
        for (uint64_t m = 0; !atomic_load(&beats.stop); m++)
                for (size_t i = j->index; i < n && !atomic_load(&beats.stop); i += beats.k) {
                        if (!nodes[i].tls)
                                continue;
                        uint64_t due = j->start_ns + m * period + period * i / n;
                        /* sleep in slices: a stop is seen within 50 ms */
                        for (uint64_t now = now_monotonic_ns(); now < due && !atomic_load(&beats.stop);
                             now = now_monotonic_ns())
                                sleep_until(due - now > 50000000ULL ? now + 50000000ULL : due);
                        if (atomic_load(&beats.stop))
                                break;
                        uint64_t t0 = now_monotonic_ns();
                        char err[256] = "";
                        uint64_t connect_ns = 0;
                        int r = beat_one(&nodes[i], &connect_ns, err, sizeof err);
                        uint64_t t1 = now_monotonic_ns();
                        (void) samples_add(&j->late, t0 > due ? t0 - due : 0);
                        if (r < 0) {
                                if (j->failed++ == 0)
                                        snprintf(j->err, sizeof j->err, "%s: %s", nodes[i].name, err);
                                continue;
                        }
                        (void) samples_add(&j->lat, t1 - t0);
                        (void) samples_add(&j->handshake, connect_ns);
                }
        return NULL;
}

static int beat_start(void) {
        if (beats.running)
                return -EBUSY;
        if (n_nodes == 0)
                return -ENOENT;
        atomic_store(&beats.stop, false);
        beats.k = n_threads;
        beats.start_ns = now_monotonic_ns();
        for (unsigned i = 0; i < beats.k; i++) {
                beats.jobs[i] = (struct beat_job){ .index = i, .start_ns = beats.start_ns };
                if (pthread_create(&beats.th[i], NULL, beat_main, &beats.jobs[i]) != 0) {
                        atomic_store(&beats.stop, true);
                        for (unsigned k = 0; k < i; k++)
                                pthread_join(beats.th[k], NULL);
                        return -EAGAIN;
                }
        }
        beats.running = true;
        return 0;
}

static void beat_stop(void) {
        if (!beats.running) {
                emit(json_pack("{s:s, s:s}", "cmd", "beat", "error", "no heartbeats running"));
                return;
        }
        atomic_store(&beats.stop, true);
        uint64_t stopped = now_monotonic_ns();
        struct samples lat = { 0 }, late = { 0 }, handshake = { 0 };
        unsigned failed = 0;
        const char *err = NULL;
        for (unsigned i = 0; i < beats.k; i++) {
                pthread_join(beats.th[i], NULL);
                (void) samples_merge(&lat, &beats.jobs[i].lat);
                (void) samples_merge(&late, &beats.jobs[i].late);
                (void) samples_merge(&handshake, &beats.jobs[i].handshake);
                failed += beats.jobs[i].failed;
                if (!err && beats.jobs[i].failed)
                        err = beats.jobs[i].err;
        }
        beats.running = false;
        double seconds = (double) (stopped - beats.start_ns) / 1e9;
        json_t *o = json_pack("{s:s, s:I, s:i, s:i, s:f, s:I, s:i, s:f, s:f, s:o, s:o}", "cmd", "beat", "nodes",
                              (json_int_t) n_nodes, "threads", beats.k, "period_ms", period_ms, "seconds", seconds,
                              "heartbeats", (json_int_t) lat.n, "failed", failed, "offered_per_s",
                              (double) n_nodes * 1000.0 / period_ms, "served_per_s", (double) lat.n / seconds,
                              "latency", samples_json(&lat), "lateness", samples_json(&late));
        if (o)
                json_object_set_new(o, "handshake", samples_json(&handshake));
        if (o && err)
                json_object_set_new(o, "first_error", json_string(err));
        emit(o);
        samples_release(&lat);
        samples_release(&late);
        samples_release(&handshake);
        for (unsigned i = 0; i < beats.k; i++) {
                samples_release(&beats.jobs[i].lat);
                samples_release(&beats.jobs[i].late);
                samples_release(&beats.jobs[i].handshake);
        }
}

static void beat_error(int r) {
        emit(json_pack("{s:s, s:s}", "cmd", "beat", "error",
                       r == -EBUSY ? "heartbeats are running already" : r == -ENOENT ? "no node has joined" : strerror(-r)));
}

/* ---- main ---- */

static int usage(void) {
        fprintf(stderr, "usage: cluster-sim --store URL [--join HOST:PORT --token-file FILE] [--threads N] "
                        "[--address HOST:PORT] [--prefix NAME] [--period-ms MS] [--place N]\n"
                        "then commands on stdin: place N | join N | beat SECONDS | beat-start | beat-stop | quit\n");
        return 2;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "store", required_argument, NULL, 's' },    { "join", required_argument, NULL, 'j' },
                { "token-file", required_argument, NULL, 't' }, { "threads", required_argument, NULL, 'T' },
                { "address", required_argument, NULL, 'a' },  { "prefix", required_argument, NULL, 'p' },
                { "period-ms", required_argument, NULL, 'P' }, { "place", required_argument, NULL, 'n' },
                { NULL, 0, NULL, 0 },
        };
        const char *store_url = NULL, *token_file = NULL;
        unsigned long place_only = 0;
        for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
                switch (c) {
                case 's': store_url = optarg; break;
                case 'j': join_addr = optarg; break;
                case 't': token_file = optarg; break;
                case 'T': n_threads = (unsigned) strtoul(optarg, NULL, 10); break;
                case 'a': advertise = optarg; break;
                case 'p': prefix = optarg; break;
                case 'P': period_ms = (unsigned) strtoul(optarg, NULL, 10); break;
                case 'n': place_only = strtoul(optarg, NULL, 10); break;
                default: return usage();
                }
        }
        if (!store_url || optind < argc || n_threads == 0 || n_threads > THREADS_MAX || period_ms < 10 ||
            !cluster_address_valid(advertise) || strlen(prefix) > 40)
                return usage();
        if (sodium_init() < 0)
                return 1;
        log_setup("cluster-sim", LOG_LEVEL_WARN);
        if (token_file) {
                _cleanup_free_ char *text = NULL;
                struct cluster_token t;
                if (file_read_all(token_file, CLUSTER_TOKEN_MAX, &text, NULL) < 0 || cluster_token_parse(text, &t) < 0) {
                        fprintf(stderr, "cluster-sim: %s holds no join token\n", token_file);
                        return 1;
                }
                cluster_token_format(&t, token, sizeof token);
                sodium_memzero(&t, sizeof t);
                sodium_memzero(text, strlen(text));
        }

        /* the replica's own configuration and placement code, on the same
         * store: no local node, nodes fresh for an hour (the simulated
         * ones beat only while told to) */
        char *cargv[] = { "cluster-sim", "--store", (char *) store_url, "--no-local-node", "--node-lost-after-s",
                          "3600", NULL };
        static struct daemon_config config;
        char cerr[512];
        if (config_load((int) ARRAY_SIZE(cargv) - 1, cargv, &config, cerr, sizeof cerr) < 0) {
                fprintf(stderr, "cluster-sim: %s\n", cerr);
                return 1;
        }
        _cleanup_(store_closep) struct store *store = NULL;
        int r = store_open(config.database, &store);
        if (r < 0) {
                fprintf(stderr, "cluster-sim: cannot open the store: %s\n", strerror(-r));
                return 1;
        }
        nodes_init(&config, store);
        sim_store = store;

        if (place_only) {
                cmd_place((unsigned) place_only);
                return 0;
        }
        char line[256];
        while (fgets(line, sizeof line, stdin)) {
                line[strcspn(line, "\r\n")] = 0;
                char cmd[32] = "";
                unsigned long arg = 0;
                if (sscanf(line, "%31s %lu", cmd, &arg) < 1)
                        continue;
                if (strcmp(cmd, "place") == 0 && arg > 0)
                        cmd_place((unsigned) arg);
                else if (strcmp(cmd, "join") == 0 && arg > 0)
                        cmd_join(arg);
                else if (strcmp(cmd, "beat") == 0 && arg > 0) {
                        if ((r = beat_start()) < 0)
                                beat_error(r);
                        else {
                                sleep_until(beats.start_ns + arg * 1000000000ULL);
                                beat_stop();
                        }
                } else if (strcmp(cmd, "beat-start") == 0) {
                        r = beat_start();
                        emit(r < 0 ? json_pack("{s:s, s:s}", "cmd", "beat-start", "error", strerror(-r))
                                   : json_pack("{s:s, s:I}", "cmd", "beat-start", "nodes", (json_int_t) n_nodes));
                } else if (strcmp(cmd, "beat-stop") == 0)
                        beat_stop();
                else if (strcmp(cmd, "quit") == 0)
                        break;
                else
                        emit(json_pack("{s:s, s:s}", "cmd", cmd, "error", "unknown command"));
        }
        if (beats.running) {
                atomic_store(&beats.stop, true);
                for (unsigned i = 0; i < beats.k; i++)
                        pthread_join(beats.th[i], NULL);
        }
        for (size_t i = 0; i < n_nodes; i++)
                mtls_ctx_free(nodes[i].tls);
        free(nodes);
        return 0;
}
