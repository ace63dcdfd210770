/* SPDX-License-Identifier: Apache-2.0 */
#include "nodes.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "apierror.h"
#include "macros.h"
#include "nodeclient.h"
#include "util.h"

/* how long a node's address is trusted without reading the store again */
#define ADDR_TTL_MS 5000
#define ADDR_CACHE_SLOTS 1024 /* direct-mapped by name: a list across a thousand nodes stays in it */
/* sandboxes one node is assumed to take per CPU when it sets no maximum */
#define SANDBOXES_PER_CPU 8

static const struct daemon_config *config;
static struct store *store;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
        char name[STORE_NODE_NAME_MAX + 1];
        char addr[NODES_ADDR_MAX];
        int64_t until;
} cache[ADDR_CACHE_SLOTS];

void nodes_init(const struct daemon_config *c, struct store *s) {
        config = c;
        store = s;
}

static size_t slot_of(const char *name) {
        uint32_t h = 2166136261u;
        for (const char *p = name; *p; p++)
                h = (h ^ (uint8_t) *p) * 16777619u;
        return h % ADDR_CACHE_SLOTS;
}

int nodes_addr(const char *name, char out[NODES_ADDR_MAX]) {
        if (!name) {
                snprintf(out, NODES_ADDR_MAX, "%s", config->node_socket);
                return 0;
        }
        int64_t now = now_unix_ms();
        size_t i = slot_of(name);
        pthread_mutex_lock(&cache_lock);
        bool hit = strcmp(cache[i].name, name) == 0 && cache[i].until > now;
        if (hit)
                snprintf(out, NODES_ADDR_MAX, "%s", cache[i].addr);
        pthread_mutex_unlock(&cache_lock);
        if (hit)
                return 0;
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int r = store_node_get(store, name, &n);
        if (r < 0)
                return r;
        pthread_mutex_lock(&cache_lock);
        snprintf(cache[i].name, sizeof cache[i].name, "%s", name);
        snprintf(cache[i].addr, sizeof cache[i].addr, "%s", n.address);
        cache[i].until = now + ADDR_TTL_MS;
        pthread_mutex_unlock(&cache_lock);
        snprintf(out, NODES_ADDR_MAX, "%s", n.address);
        return 0;
}

void nodes_addr_forget(const char *name) {
        size_t i = slot_of(name);
        pthread_mutex_lock(&cache_lock);
        if (strcmp(cache[i].name, name) == 0)
                cache[i].name[0] = 0;
        pthread_mutex_unlock(&cache_lock);
}

int nodes_addr_of(const struct store_sandbox *sb, char out[NODES_ADDR_MAX]) {
        return nodes_addr(sb->node, out);
}

int nodes_addr_of_id(const char *sandbox_id, char out[NODES_ADDR_MAX]) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(store, sandbox_id, &sb);
        return r < 0 ? r : nodes_addr_of(&sb, out);
}

/* ---- placement ---- */

struct candidate {
        const char *name; /* NULL: the local node */
        double score;     /* weighted free capacity, 0..1 */
};

static int64_t count_of(char **names, int64_t *counts, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if ((!names[i] && !name) || (names[i] && name && strcmp(names[i], name) == 0))
                        return counts[i];
        return 0;
}

static bool holds_template(const json_t *info, const char *template_name) {
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(info, "templates"), i, t)
                if (json_is_string(t) && strcmp(json_string_value(t), template_name) == 0)
                        return true;
        return false;
}

static bool labels_match(const json_t *info, const json_t *want) {
        const char *k;
        json_t *v;
        const json_t *have = json_object_get(info, "labels");
        json_object_foreach((json_t *) want, k, v) {
                const char *h = json_string_value(json_object_get(have, k));
                if (!h || !json_is_string(v) || strcmp(h, json_string_value(v)) != 0)
                        return false;
        }
        return true;
}

static uint64_t info_u64(const json_t *info, const char *group, const char *key) {
        json_int_t v = json_integer_value(json_object_get(json_object_get(info, group), key));
        return v > 0 ? (uint64_t) v : 0;
}

/* Free capacity of a node, 0..1, or < 0 when it has no room: sandbox
 * slots weigh more than memory (a node's max is a hard limit; its memory
 * is overcommitted by design: the VMs share their template's pages). */
static double free_capacity(uint64_t sandboxes, uint64_t max_sandboxes, uint64_t mem_used, uint64_t mem_total) {
        if (max_sandboxes && sandboxes >= max_sandboxes)
                return -1;
        double slots = 1.0 - (double) sandboxes / (double) (max_sandboxes ? max_sandboxes : 1);
        double mem = mem_total ? 1.0 - (double) (mem_used < mem_total ? mem_used : mem_total) / (double) mem_total : 0;
        return 0.6 * slots + 0.4 * mem;
}

int nodes_place(const struct nodes_want *w, char **ret_node, char *err) {
        struct store_node *nodes = NULL;
        size_t n_nodes = 0, n_counts = 0;
        char **names = NULL;
        int64_t *counts = NULL;
        int r = store_node_list(store, STORE_LIST_MAX, &nodes, &n_nodes);
        if (r >= 0)
                r = store_sandbox_count_by_node(store, &names, &counts, &n_counts);
        if (r < 0) {
                store_node_array_free(nodes, n_nodes);
                return r;
        }
        struct candidate *cand = calloc(n_nodes + 1, sizeof *cand);
        size_t n_cand = 0;
        if (!cand) {
                r = -ENOMEM;
                goto out;
        }
        int64_t fresh = now_unix_ms() - (int64_t) config->node_lost_after_s * 1000;
        bool pinned_seen = false;
        /* nodes left out for their CPU alone, for the refusal */
        char other_cpus[API_ERRMSG_MAX / 2] = "";
        size_t n_other = 0;
        /* nodes that hold the template ready first; when none does, any
         * node that fits builds it on demand, as one machine does */
        for (int pass = 0; pass < 2 && n_cand == 0; pass++) {
                for (size_t i = 0; i < n_nodes; i++) {
                        const struct store_node *n = &nodes[i];
                        if (w->node && strcmp(w->node, n->name) != 0)
                                continue;
                        pinned_seen = true;
                        _cleanup_(json_decrefp) json_t *info = json_loads(n->info ?: "{}", 0, NULL);
                        if (n->draining || n->lost_at || n->heartbeat_at < fresh || !info ||
                            (pass == 0 && !holds_template(info, w->template_name)) ||
                            (w->labels && !labels_match(info, w->labels)))
                                continue;
                        const char *cpu = json_string_value(json_object_get(info, "cpu"));
                        if (w->cpu && (!cpu || strcmp(cpu, w->cpu) != 0)) {
                                if (pass == 1) { /* the pass that looks at every node */
                                        size_t at = strlen(other_cpus);
                                        if (at + 2 < sizeof other_cpus)
                                                snprintf(other_cpus + at, sizeof other_cpus - at, "%s%s runs %s",
                                                         n_other ? ", " : "", n->name, cpu ?: "an unknown CPU");
                                        n_other++;
                                }
                                continue;
                        }
                        uint64_t used = info_u64(info, "usage", "sandboxes");
                        uint64_t stored = (uint64_t) count_of(names, counts, n_counts, n->name);
                        uint64_t max = info_u64(info, "capacity", "max_sandboxes");
                        if (!max)
                                max = info_u64(info, "capacity", "cpus") * SANDBOXES_PER_CPU;
                        double s = free_capacity(used > stored ? used : stored, max,
                                                 info_u64(info, "usage", "memory_mib"),
                                                 info_u64(info, "capacity", "memory_mib"));
                        if (s >= 0)
                                cand[n_cand++] = (struct candidate){ .name = n->name, .score = s };
                }
        }
        if (config->local_node && !w->node && !w->labels) {
                /* this machine's node: its sandboxes against its CPUs */
                long cpus = sysconf(_SC_NPROCESSORS_ONLN);
                uint64_t max = (uint64_t) (cpus > 0 ? cpus : 1) * SANDBOXES_PER_CPU;
                uint64_t used = (uint64_t) count_of(names, counts, n_counts, NULL);
                cand[n_cand++] = (struct candidate){.name = NULL,
                                                    .score = used >= max ? 0 : 1.0 - (double) used / max};
        }
        if (w->node && !pinned_seen) {
                snprintf(err, API_ERRMSG_MAX, "node %s is not a node of this cluster (see GET /v1/nodes)", w->node);
                r = -ENOENT;
                goto out;
        }
        if (n_cand == 0 && n_other) {
                snprintf(err, API_ERRMSG_MAX,
                         "no ready node's VMs have CPU %s, which its saved VM needs (%s): bring back a node of that "
                         "CPU, or give every node one AIRLOCK_CPU_MODEL",
                         w->cpu, other_cpus);
                r = -EXDEV; /* 409: more nodes of the same kind will not change it */
                goto out;
        }
        if (n_cand == 0) {
                snprintf(err, API_ERRMSG_MAX,
                         "no node can take a sandbox of template %s%s%s: none is ready (not draining, not "
                         "lost) with room (see GET /v1/nodes)",
                         w->template_name, w->node ? " on node " : "", w->node ?: "");
                r = -EHOSTDOWN; /* 503: none now; a node may join or free up */
                goto out;
        }
        /* the best of a few chosen at random: spreads like the best of
         * all, without every replica sending the next burst to one node */
        size_t best = randombytes_uniform((uint32_t) n_cand);
        for (unsigned k = 1; k < NODES_PLACE_CHOICES && n_cand > 1; k++) {
                size_t j = randombytes_uniform((uint32_t) n_cand);
                if (cand[j].score > cand[best].score)
                        best = j;
        }
        char *name = NULL;
        if (cand[best].name && !(name = strdup(cand[best].name))) {
                r = -ENOMEM;
                goto out;
        }
        *ret_node = name;
        r = 0;
out:
        free(cand);
        store_node_array_free(nodes, n_nodes);
        store_string_array_free(names, n_counts);
        free(counts);
        return r;
}

int nodes_targets(struct nodes_target **ret, size_t *ret_n) {
        struct store_node *nodes = NULL;
        size_t n_nodes = 0;
        int r = store_node_list(store, STORE_LIST_MAX, &nodes, &n_nodes);
        if (r < 0)
                return r;
        struct nodes_target *a = calloc(n_nodes + 1, sizeof *a);
        size_t n = 0;
        if (!a) {
                store_node_array_free(nodes, n_nodes);
                return -ENOMEM;
        }
        if (config->local_node)
                snprintf(a[n++].addr, NODES_ADDR_MAX, "%s", config->node_socket);
        for (size_t i = 0; i < n_nodes; i++) {
                if (nodes[i].lost_at)
                        continue;
                a[n].name = TAKE_PTR(nodes[i].name);
                snprintf(a[n++].addr, NODES_ADDR_MAX, "%s", nodes[i].address);
        }
        store_node_array_free(nodes, n_nodes);
        *ret = a;
        *ret_n = n;
        return 0;
}

void nodes_targets_free(struct nodes_target *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                free(a[i].name);
        free(a);
}

int nodes_sandbox_call(const char *sandbox_id, unsigned timeout_s, const json_t *req, json_t **ret, char *err) {
        char addr[NODES_ADDR_MAX];
        int r = nodes_addr_of_id(sandbox_id, addr);
        if (r < 0) {
                snprintf(err, API_ERRMSG_MAX, "sandbox %s has no node to ask", sandbox_id);
                return r;
        }
        return node_call(addr, timeout_s, req, ret, err);
}

int nodes_any_addr(char out[NODES_ADDR_MAX]) {
        struct nodes_target *t = NULL;
        size_t n = 0;
        int r = nodes_targets(&t, &n);
        if (r < 0)
                return r;
        if (n > 0)
                snprintf(out, NODES_ADDR_MAX, "%s", t[0].addr);
        nodes_targets_free(t, n);
        return n > 0 ? 0 : -EHOSTDOWN;
}
