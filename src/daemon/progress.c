/* SPDX-License-Identifier: Apache-2.0 */
#include "progress.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "apierror.h"
#include "auth.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "util.h"
#include "worker.h"

#define NS_PER_S 1000000000ULL
#define POLL_MS 1000
#define HEALTH_TIMEOUT_S 5
#define DEFAULT_URL "http://127.0.0.1:7420"
#define DEFAULT_DATA_DIR "/var/lib/airlock"

/* Appends to out (size n) as snprintf would, never past its end. */
static void appendf(char *out, size_t n, const char *fmt, ...) _printf_(3, 4);
static void appendf(char *out, size_t n, const char *fmt, ...) {
        size_t len = strnlen(out, n);
        if (len + 1 >= n)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out + len, n - len, fmt, ap);
        va_end(ap);
}

void progress_format_duration(uint64_t ms, char *buf, size_t n) {
        uint64_t s = ms / 1000;
        if (ms < 10000)
                snprintf(buf, n, "%llu.%llus", (unsigned long long) s,
                         (unsigned long long) (ms % 1000) / 100);
        else if (s < 60)
                snprintf(buf, n, "%llus", (unsigned long long) s);
        else if (s < 3600)
                snprintf(buf, n, "%llum%02llus", (unsigned long long) s / 60, (unsigned long long) s % 60);
        else
                snprintf(buf, n, "%lluh%02llum%02llus", (unsigned long long) s / 3600,
                         (unsigned long long) (s / 60) % 60, (unsigned long long) s % 60);
}

static const char *str_field(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

void progress_describe(const json_t *t, char *buf, size_t n) {
        const char *name = str_field(t, "name") ?: "?";
        const char *state = str_field(t, "state") ?: "unknown";
        const char *log = str_field(t, "log");
        buf[0] = 0;
        if (strcmp(state, "building") == 0) {
                char took[32] = "";
                json_t *ms = json_object_get(t, "elapsed_ms");
                if (json_is_integer(ms) && json_integer_value(ms) >= 0)
                        progress_format_duration((uint64_t) json_integer_value(ms), took, sizeof took);
                appendf(buf, n, "building template %s", name);
                const char *step = str_field(t, "step");
                json_t *num = json_object_get(t, "step_number"), *steps = json_object_get(t, "steps");
                if (step && json_is_integer(num) && json_is_integer(steps))
                        appendf(buf, n, ": step %lld/%lld %s", (long long) json_integer_value(num),
                                (long long) json_integer_value(steps), step);
                else if (step)
                        appendf(buf, n, ": step %s", step);
                if (took[0] || log)
                        appendf(buf, n, " (%s%s%s%s%s)", took, took[0] ? " elapsed" : "",
                                took[0] && log ? "; " : "", log ? "log " : "", log ?: "");
        } else if (strcmp(state, "failed") == 0) {
                const char *error = str_field(t, "error") ?: "build failed";
                /* a step's error names its kept log already */
                bool say_log = log && !strstr(error, log);
                appendf(buf, n, "template %s failed: %s%s%s", name, error, say_log ? "; build log " : "",
                        say_log ? log : "");
        } else
                appendf(buf, n, "template %s %s", name, state);
}

void progress_init(struct progress *p, const struct daemon_config *c, const char *url, uint64_t start_ns) {
        *p = (struct progress){ .start_ns = start_ns,
                                .data_dir = c->data_dir,
                                .control_dir = c->control_dir,
                                .advertise = c->advertise };
        snprintf(p->url, sizeof p->url, "%s", url);
        p->default_url = strcmp(url, DEFAULT_URL) == 0;
        p->default_data_dir = strcmp(c->data_dir, DEFAULT_DATA_DIR) == 0;
}

/* The last state seen of template name, or NULL; with add, a new slot. */
static char *seen_sig(struct progress *p, const char *name, bool add) {
        for (size_t i = 0; i < p->n_seen; i++)
                if (strcmp(p->seen[i].name, name) == 0)
                        return p->seen[i].sig;
        if (!add || p->n_seen == ARRAY_SIZE(p->seen))
                return NULL;
        snprintf(p->seen[p->n_seen].name, sizeof p->seen[p->n_seen].name, "%s", name);
        p->seen[p->n_seen].sig[0] = 0;
        return p->seen[p->n_seen++].sig;
}

/* The lines to paste once the node is ready: the CLI (python if it is one
 * of the templates, else the first ready one) and the same over HTTP. */
static void ready_lines(const struct progress *p, const json_t *templates, uint64_t now_ns, char *out,
                        size_t n) {
        char took[32];
        progress_format_duration((now_ns - p->start_ns) / 1000000ULL, took, sizeof took);
        const char *tpl = NULL;
        size_t i;
        json_t *t;
        json_array_foreach(templates, i, t) {
                const char *name = str_field(t, "name");
                if (!name || strcmp(str_field(t, "state") ?: "", "ready") != 0)
                        continue;
                if (!tpl || strcmp(name, "python") == 0)
                        tpl = name;
        }
        appendf(out, n, "airlock: ready after %s — try:\n", took);
        /* an installed airlock is on PATH already */
        bool path = !AIRLOCK_INSTALLED, exports = path || !p->default_url || !p->default_data_dir;
        if (exports)
                appendf(out, n, "  export");
        if (path)
                appendf(out, n, " PATH=%s:$PATH", AIRLOCK_CLI_DIR_PATH);
        if (!p->default_url)
                appendf(out, n, " AIRLOCK_URL=%s", p->url);
        if (!p->default_data_dir)
                appendf(out, n, " AIRLOCK_DATA_DIR=%s", p->data_dir);
        if (exports)
                appendf(out, n, "\n");
        if (!tpl || strcmp(tpl, "python") == 0)
                appendf(out, n, "  sbx=$(airlock create) && airlock exec $sbx -- python3 -c 'print(6*7)'\n");
        else
                appendf(out, n, "  sbx=$(airlock create --template %s) && airlock exec $sbx -- uname -a\n",
                        tpl);
        appendf(out, n, "  curl -s -H \"Authorization: Bearer $(cat %s/%s)\" %s/v1/sandboxes\n",
                p->control_dir, AUTH_ADMIN_TOKEN_FILE, p->url);
}

bool progress_feed(struct progress *p, const json_t *health, const char *err, uint64_t now_ns, char *out,
                   size_t n) {
        out[0] = 0;
        if (p->done)
                return true;
        bool quiet = p->printed && now_ns - p->last_line_ns < PROGRESS_STILL_S * NS_PER_S;
        char took[32];

        if (!health) {
                /* a node that is starting (or restarting) is normal for a
                 * moment; say so only when it lasts */
                if (!p->node_down_since)
                        p->node_down_since = now_ns;
                progress_format_duration((now_ns - p->node_down_since) / 1000000ULL, took, sizeof took);
                if (!p->node_down_said && now_ns - p->node_down_since >= PROGRESS_NODE_WAIT_S * NS_PER_S) {
                        appendf(out, n, "airlock: waiting for airlock-node to answer (%s)\n",
                                err ?: "no answer");
                        p->node_down_said = true;
                } else if (p->node_down_said && !quiet)
                        appendf(out, n,
                                "airlock: still waiting for airlock-node (%s for %s; its log lines say "
                                "why)\n",
                                err ?: "no answer", took);
        } else {
                p->node_down_since = 0;
                p->node_down_said = false;
                const json_t *templates = json_object_get(health, "templates");
                bool ready = json_is_true(json_object_get(health, "ready"));
                bool building = false, pending = false, changed = false, background_left = false;
                char failed[256] = "";
                size_t i;
                json_t *t;
                json_array_foreach(templates, i, t) {
                        const char *name = str_field(t, "name");
                        const char *state = str_field(t, "state") ?: "unknown";
                        if (!name)
                                continue;
                        bool background = json_is_true(json_object_get(t, "background"));
                        if (background) {
                                background_left = background_left || strcmp(state, "building") == 0 ||
                                                  strcmp(state, "available") == 0;
                                /* said after the ready lines, not before */
                                if (!p->ready_said)
                                        continue;
                        }
                        building = building || strcmp(state, "building") == 0;
                        pending = pending || strcmp(state, "available") == 0;
                        if (strcmp(state, "failed") == 0)
                                appendf(failed, sizeof failed, "%s%s", failed[0] ? ", " : "", name);
                        char sig[80];
                        snprintf(sig, sizeof sig, "%s:%s", state, str_field(t, "step") ?: "");
                        char *last = seen_sig(p, name, true);
                        if (!last || strcmp(last, sig) == 0)
                                continue;
                        bool was_building = strncmp(last, "building:", 9) == 0;
                        snprintf(last, sizeof p->seen[0].sig, "%s", sig);
                        char d[1024];
                        progress_describe(t, d, sizeof d);
                        if (strcmp(state, "building") == 0) {
                                appendf(out, n, "airlock: %s\n", d);
                                changed = true;
                        } else if (strcmp(state, "failed") == 0) {
                                appendf(out, n,
                                        "airlock: error: %s\n"
                                        "airlock: read the build log and fix the cause; then restart "
                                        "airlockd, or "
                                        "create a %s sandbox, to build it again\n",
                                        d, name);
                                changed = true;
                        } else if (strcmp(state, "ready") == 0 && was_building && (!ready || background)) {
                                /* the last one's end is the ready line */
                                appendf(out, n, "airlock: %s%s\n", d, background ? " (built in the background)" : "");
                                changed = true;
                        }
                }
                if (ready && !p->ready_said) {
                        ready_lines(p, templates, now_ns, out, n);
                        p->ready_said = true;
                        json_array_foreach(templates, i, t) {
                                const char *state = str_field(t, "state") ?: "";
                                if (json_is_true(json_object_get(t, "background")) &&
                                    (strcmp(state, "building") == 0 || strcmp(state, "available") == 0))
                                        appendf(out, n,
                                                "airlock: template %s is being built in the background (E2B's code "
                                                "interpreter and MCP's run_code use it); a line says when it is "
                                                "ready\n",
                                                str_field(t, "name") ?: "?");
                        }
                }
                if (ready) {
                        /* done once what builds in the background is, too */
                        p->done = !background_left;
                } else if (!json_is_array(templates)) {
                        /* a node without per-template progress */
                        progress_format_duration((now_ns - p->start_ns) / 1000000ULL, took, sizeof took);
                        if (!quiet)
                                appendf(out, n, "airlock: %s the default templates (%s elapsed)\n",
                                        p->printed ? "still building" : "building", took);
                } else if (failed[0] && !building && !pending) {
                        appendf(out, n,
                                "airlock: not ready: template %s failed (GET /v1/health says 503 "
                                "template_failed); "
                                "the others can be used\n",
                                failed);
                        p->done = true;
                } else if (!changed && building && !quiet) {
                        json_array_foreach(templates, i, t) {
                                if (strcmp(str_field(t, "state") ?: "", "building") != 0)
                                        continue;
                                char d[1024];
                                progress_describe(t, d, sizeof d);
                                appendf(out, n, "airlock: still %s\n", d);
                        }
                }
        }
        if (out[0]) {
                p->printed = true;
                p->last_line_ns = now_ns;
        }
        return p->done;
}

bool progress_feed_nodes(struct progress *p, size_t ready, size_t joined, uint64_t now_ns, char *out, size_t n) {
        out[0] = 0;
        if (p->done)
                return true;
        char took[32];
        progress_format_duration((now_ns - p->start_ns) / 1000000ULL, took, sizeof took);
        if (ready > 0) {
                appendf(out, n, "airlock: %zu node%s of the cluster ready\n", ready, ready == 1 ? "" : "s");
                ready_lines(p, NULL, now_ns, out, n);
                p->done = true;
        } else if (!p->nodes_said && now_ns - p->start_ns >= PROGRESS_NODE_WAIT_S * NS_PER_S) {
                appendf(out, n, "airlock: no node is ready (%zu joined): this replica runs none of its own "
                                "(--no-local-node), sandboxes wait for nodes to join.\n", joined);
                if (p->advertise && p->advertise[0])
                        appendf(out, n,
                                "airlock: to add one: `airlock nodes token > join.token` here, then as root on "
                                "the worker:\n"
                                "  airlock-node --join %s --join-token-file join.token --cluster-listen "
                                "0.0.0.0:7421 --advertise WORKER:7421\n"
                                "  (docs/cluster.md)\n",
                                p->advertise);
                else
                        appendf(out, n, "airlock: this replica has no cluster port (--cluster-listen): nodes join "
                                        "the replicas that have one (docs/cluster.md)\n");
                p->nodes_said = true;
        } else if (p->nodes_said && now_ns - p->last_line_ns >= PROGRESS_STILL_S * NS_PER_S)
                appendf(out, n, "airlock: still no node ready (%zu joined; %s since the start)\n", joined, took);
        if (out[0]) {
                p->printed = true;
                p->last_line_ns = now_ns;
        }
        return p->done;
}

struct progress_watch {
        struct worker *worker;
        const struct daemon_config *config;
        struct progress p;
};

/* A replica without a node of its own: the cluster's nodes. */
static bool watch_nodes(struct progress_watch *w, char *out, size_t n) {
        struct nodes_target *t = NULL;
        size_t ready = 0;
        if (nodes_targets(&t, &ready) < 0)
                return false; /* the store is away: the next pass */
        nodes_targets_free(t, ready);
        return progress_feed_nodes(&w->p, ready, ready, now_monotonic_ns(), out, n);
}

/* One look at the node agent's health: 1 once progress_feed() says the
 * start is over. */
static int watch_pass(void *arg) {
        struct progress_watch *w = arg;
        const struct daemon_config *c = w->config;
        char out[4096];
        if (!c->local_node && !c->join_local) {
                bool done = watch_nodes(w, out, sizeof out);
                if (out[0])
                        (void) fd_write_all(STDERR_FILENO, out, strlen(out));
                return done ? 1 : 0;
        }
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "health");
        if (!req)
                return 1;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "", addr[NODES_ADDR_MAX];
        int r = nodes_addr(c->local_node ? NULL : c->local_node_name, addr);
        if (r == -ENOENT)
                snprintf(err, sizeof err, "this machine's node %s has not joined the cluster yet",
                         c->local_node_name);
        else if (r >= 0)
                r = node_call(addr, HEALTH_TIMEOUT_S, req, &rep, err);
        if (r < 0 && !err[0])
                snprintf(err, sizeof err, "%s", strerror(-r));
        bool done = progress_feed(&w->p, r < 0 ? NULL : rep, err, now_monotonic_ns(), out, sizeof out);
        /* one write: the log lines of other threads go to stderr too */
        if (out[0])
                (void) fd_write_all(STDERR_FILENO, out, strlen(out));
        return done ? 1 : 0;
}

int progress_watch_start(const struct daemon_config *c, const char *url, uint64_t start_ns,
                         struct progress_watch **ret) {
        struct progress_watch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->config = c;
        progress_init(&w->p, c, url, start_ns);
        int r = worker_start(watch_pass, w, POLL_MS, 0, &w->worker);
        if (r < 0) {
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

void progress_watch_stop(struct progress_watch *w) {
        if (!w)
                return;
        worker_stop(w->worker);
        free(w);
}
