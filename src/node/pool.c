/* SPDX-License-Identifier: Apache-2.0 */
#include "pool.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "log.h"
#include "macros.h"
#include "nodemetrics.h"
#include "nodeutil.h"
#include "pooldemand.h"
#include "qmp.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

/* Same bounds as a cold create (sandbox.c). */
#define GUEST_CONNECT_MS 5000
#define GUEST_HELLO_MS 10000
#define QMP_MS 5000
/* How often the filler looks at the waiting VMs (and at templates that are
 * not ready yet) when nothing wakes it. */
#define WATCH_INTERVAL_MS 250
/* Backoff after failed refills: 1 s, doubling, at most a minute. */
#define RETRY_MIN_MS 1000
#define RETRY_MAX_MS 60000
/* Filler threads, one refill each at a time: at most one per CPU, and
 * only as many at once as the CPUs have a whole core idle for (the
 * running sandboxes come first). */
#define FILLERS_MAX 4
#define CPU_SAMPLE_MS 250
/* A pool grows past its size only while the host has this much memory
 * available. */
#define GROW_HEADROOM_KIB (2048ULL * 1024)

struct pool {
        char name[65];
        char build[65];        /* template hash it refills from, "" before the first refill */
        struct pool_vm *ready; /* paused, HELLO done; newest first */
        unsigned n_ready;
        unsigned n_starting;   /* being restored by the filler now */
        uint64_t starts_ns[FILLERS_MAX]; /* when each of those began (0: a free slot) */
        unsigned n_waiting;    /* claims waiting for one of them */
        uint64_t refill_ms;    /* moving average of a refill (0: none yet) */
        unsigned failures;     /* refills failed in a row */
        uint64_t retry_at_ns;  /* no refill before (CLOCK_MONOTONIC) */
        uint64_t hits, misses, waited; /* waited: hits that waited for a refill in flight */
        struct pool_demand demand;
};

static const struct node_config *pcfg;
static char *pdir;

static pthread_mutex_t plock = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static pthread_cond_t pcond;                              /* CLOCK_MONOTONIC: wakes the fillers */
static pthread_cond_t ready_cond;                         /* CLOCK_MONOTONIC: a refill ended */
static struct pool *pools;
static size_t n_pools;
static bool kicked;   /* a claim happened since the fillers last looked */
static bool stopping; /* no claims and no refills any more */
static pthread_t fillers[FILLERS_MAX];
static unsigned n_fillers;
static unsigned vm_counter; /* names pool directories */
/* the host's CPUs over the last CPU_SAMPLE_MS or more */
static struct {
        uint64_t at_ns, idle, total;
        double idle_cores;
} cpu;

void pool_vm_free(struct pool_vm *pv) {
        if (!pv)
                return;
        /* the channel first: its reader must not outlive the socket's peer */
        guestconn_free(pv->gc);
        vmm_destroy(pv->vmm);
        if (pv->run_dir)
                rm_rf(pv->run_dir);
        if (pv->dir) {
                int r = rm_rf(pv->dir);
                if (r < 0)
                        log_errno(LOG_LEVEL_WARN, r, pv->ctx, "Failed to remove %s: %m", pv->dir);
        }
        free(pv->template_name);
        free(pv->hash);
        free(pv->dir);
        free(pv->run_dir);
        free(pv);
}

static void free_list(struct pool_vm *l) {
        while (l) {
                struct pool_vm *next = l->next;
                pool_vm_free(l);
                l = next;
        }
}

/* (plock held) */
static struct pool *pool_find(const char *name) {
        for (size_t i = 0; i < n_pools; i++)
                if (strcmp(pools[i].name, name) == 0)
                        return &pools[i];
        return NULL;
}

static uint64_t now_s(uint64_t now_ns) {
        return now_ns / 1000000000ULL;
}

/* What p should hold now (plock held): its size, more while creates come
 * faster than that (pooldemand.h), at most its max. */
static unsigned pool_target(struct pool *p, uint64_t now_ns) {
        return pool_demand_target(pool_demand_peak(&p->demand, now_s(now_ns)), pcfg->pool_size, pcfg->pool_max);
}

static void publish(struct pool *p, uint64_t now_ns) {
        nodemetrics_pool_state(p->name, pool_target(p, now_ns), p->n_ready);
}

/* Moves the VMs of p for which drop() is true onto *out (plock held). */
static void pool_take_if(struct pool *p, bool (*drop)(struct pool_vm *, const void *), const void *arg,
                         struct pool_vm **out) {
        for (struct pool_vm **pp = &p->ready; *pp;) {
                struct pool_vm *x = *pp;
                if (!drop(x, arg)) {
                        pp = &x->next;
                        continue;
                }
                *pp = x->next;
                p->n_ready--;
                x->next = *out;
                *out = x;
        }
}

static bool vm_dead(struct pool_vm *x, const void *arg) {
        return vmm_exited(x->vmm) || !guestconn_alive(x->gc);
}

static bool vm_other_build(struct pool_vm *x, const void *hash) {
        return strcmp(x->hash, hash) != 0;
}

/* Restores one VM of template t, says HELLO, rehearses a claim and pauses
 * it. */
static int fill_one(const struct template_info *t, struct pool_vm **ret, char **ret_error) {
        struct pool_vm *pv = calloc(1, sizeof *pv);
        if (!pv)
                return -ENOMEM;
        unsigned n = __atomic_add_fetch(&vm_counter, 1, __ATOMIC_SEQ_CST);
        snprintf(pv->ctx, sizeof pv->ctx, "pool=%s-%u", t->name, n);
        pv->template_name = strdup(t->name);
        pv->hash = strdup(t->hash);
        pv->dir = strdup_printf("%s/%s-%u", pdir, t->name, n);
        _cleanup_free_ char *rootfs = strdup_printf("%s/%s-%u/rootfs.img", pdir, t->name, n);
        if (!pv->template_name || !pv->hash || !pv->dir || !rootfs) {
                pool_vm_free(pv);
                return -ENOMEM;
        }

        const char *step = "creating its directory";
        int r = rm_rf(pv->dir); /* a name of ours, unused in this run */
        if (r >= 0 && mkdir(pv->dir, 0700) < 0)
                r = negative_errno();
        if (r >= 0) {
                step = "creating its run directory";
                r = node_vm_run_dir(pcfg->data_dir, &pv->run_dir);
        }
        if (r >= 0) {
                step = "cloning the template disk";
                r = file_clone_or_copy(t->rootfs, rootfs, NULL);
        }
        _cleanup_free_ char *disk = NULL, *vmm_error = NULL;
        if (r >= 0) {
                step = "linking its disk";
                r = node_run_link(pv->run_dir, "disk.img", rootfs, &disk);
        }
        if (r >= 0) {
                struct vmm_config vc = template_vmm_config(t, disk, pv->run_dir, pv->ctx);
                step = "restoring the VM";
                r = vmm_restore(&vc, t->state, &pv->vmm, &vmm_error);
        }
        int fd = -1;
        if (r >= 0) {
                step = "connecting to the guest channel";
                r = vmm_guest_connect(pv->vmm, GUEST_CONNECT_MS, &fd);
        }
        if (r >= 0) {
                step = "guest agent handshake";
                r = guestconn_open(fd, pv->ctx, GUEST_HELLO_MS, &pv->gc);
        }
        if (r >= 0) {
                step = "rehearsing a claim";
                r = guestops_rehearse(pv->gc, pv->ctx);
        }
        if (r >= 0) {
                /* parked: no guest CPU time while it waits for a claim */
                step = "pausing the VM";
                r = qmp_execute(pv->vmm->qmp, "stop", NULL, QMP_MS, NULL);
        }
        if (r < 0) {
                _cleanup_free_ char *why = vmm_error ? NULL : vmm_failure_reason(pv->vmm);
                *ret_error = vmm_error ? TAKE_PTR(vmm_error)
                                       : strdup_printf("%s failed: %s%s%s", step, strerror(-r), why ? "; " : "",
                                                       why ?: "");
                pool_vm_free(pv);
                return r;
        }
        pv->ready_ns = now_monotonic_ns();
        *ret = pv;
        return 0;
}

/* Whole CPU cores idle over the last CPU_SAMPLE_MS or more (plock held):
 * from /proc/stat, sampled at most that often. */
static double idle_cores(uint64_t now) {
        if (cpu.at_ns && now - cpu.at_ns < CPU_SAMPLE_MS * 1000000ULL)
                return cpu.idle_cores;
        FILE *f = fopen("/proc/stat", "re");
        unsigned long long v[8] = { 0 };
        int got = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                             &v[5], &v[6], &v[7])
                    : 0;
        if (f)
                fclose(f);
        if (got != 8)
                return 0; /* unknown: one refill at a time */
        uint64_t idle = v[3] + v[4], total = 0;
        for (size_t i = 0; i < 8; i++)
                total += v[i];
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpu.at_ns && total > cpu.total)
                cpu.idle_cores = (double) (idle - cpu.idle) / (double) (total - cpu.total) * (double) MAX(ncpu, 1L);
        cpu.at_ns = now;
        cpu.idle = idle;
        cpu.total = total;
        return cpu.idle_cores;
}

/* Refills that may run at once (plock held): one, and one more for each
 * whole core idle while they run. */
static unsigned refills_allowed(uint64_t now) {
        return MIN(n_fillers, 1u + (unsigned) idle_cores(now));
}

static bool memory_to_grow(void) {
        return node_meminfo_kib("MemAvailable") >= GROW_HEADROOM_KIB;
}

/* Picks the next pool that wants a VM and may retry now, round robin so one
 * template's failures do not starve the others (plock held). grow: the
 * host has memory for pools past their size. */
static struct pool *next_to_fill(uint64_t now, bool grow) {
        static size_t rr;
        unsigned starting = 0;
        for (size_t i = 0; i < n_pools; i++)
                starting += pools[i].n_starting;
        if (starting >= refills_allowed(now))
                return NULL;
        for (size_t k = 0; k < n_pools; k++) {
                struct pool *p = &pools[(rr + k) % n_pools];
                unsigned want = grow ? pool_target(p, now) : pcfg->pool_size;
                if (p->n_ready + p->n_starting < want && p->n_starting < FILLERS_MAX && now >= p->retry_at_ns) {
                        rr = (rr + k + 1) % n_pools;
                        return p;
                }
        }
        return NULL;
}

/* Takes the VMs past p's target off it onto *out, the longest waiting
 * first (plock held): demand went down. */
static void pool_trim(struct pool *p, uint64_t now, struct pool_vm **out) {
        unsigned target = pool_target(p, now);
        while (p->n_ready > target) {
                struct pool_vm **pp = &p->ready;
                while ((*pp)->next)
                        pp = &(*pp)->next;
                struct pool_vm *x = *pp;
                *pp = NULL;
                p->n_ready--;
                x->next = *out;
                *out = x;
        }
}

static void slot_set(struct pool *p, uint64_t from, uint64_t to) {
        for (size_t i = 0; i < FILLERS_MAX; i++)
                if (p->starts_ns[i] == from) {
                        p->starts_ns[i] = to;
                        return;
                }
}

static void *filler_thread(void *arg) {
        /* pools whose template is not ready are skipped until this time */
        uint64_t *wait_tpl = calloc(n_pools ?: 1, sizeof *wait_tpl);
        if (!wait_tpl) {
                log_error("pool filler: out of memory, warm pools stay empty");
                return NULL;
        }
        pthread_mutex_lock(&plock);
        while (!stopping) {
                /* 1. the waiting VMs: a dead one is removed (and replaced
                 * below), those past a target that went down go */
                struct pool_vm *dead = NULL, *extra = NULL;
                uint64_t now = now_monotonic_ns();
                for (size_t i = 0; i < n_pools; i++) {
                        pool_take_if(&pools[i], vm_dead, NULL, &dead);
                        pool_trim(&pools[i], now, &extra);
                        publish(&pools[i], now);
                }
                pthread_mutex_unlock(&plock);
                for (struct pool_vm *x = dead; x; x = x->next)
                        log_emit(LOG_LEVEL_WARN, x->ctx, "warm VM died while waiting (%s); replacing it",
                                 vmm_exited(x->vmm) ? "qemu exited" : "guest channel closed");
                for (struct pool_vm *x = extra; x; x = x->next)
                        log_emit(LOG_LEVEL_INFO, x->ctx, "warm VM no longer needed: fewer creates of %s lately",
                                 x->template_name);
                free_list(dead);
                free_list(extra);

                /* 2. one refill */
                bool grow = memory_to_grow();
                now = now_monotonic_ns();
                pthread_mutex_lock(&plock);
                struct pool *p = NULL;
                for (size_t tries = 0; tries < n_pools && !stopping; tries++) {
                        p = next_to_fill(now, grow);
                        if (!p || wait_tpl[p - pools] <= now)
                                break;
                        p = NULL;
                }
                pthread_mutex_unlock(&plock);
                if (p) {
                        struct template_info *t = NULL;
                        int r = template_peek(p->name, &t);
                        if (r < 0) {
                                /* not built yet (or failed: the next create
                                 * retries the build); look again soon */
                                wait_tpl[p - pools] = now + 1000ULL * 1000000ULL;
                                pthread_mutex_lock(&plock);
                                continue;
                        }
                        wait_tpl[p - pools] = 0;
                        node_hold_point("pool.refill"); /* a test's way to have a create miss */

                        /* another filler may have taken this one meanwhile;
                         * VMs of another build of the template never get handed out */
                        struct pool_vm *stale = NULL;
                        uint64_t t0 = now_monotonic_ns();
                        pthread_mutex_lock(&plock);
                        bool wanted = !stopping && p->n_ready + p->n_starting <
                                                           (grow ? pool_target(p, t0) : pcfg->pool_size);
                        if (wanted) {
                                pool_take_if(p, vm_other_build, t->hash, &stale);
                                snprintf(p->build, sizeof p->build, "%s", t->hash);
                                p->n_starting++;
                                slot_set(p, 0, t0);
                        }
                        pthread_mutex_unlock(&plock);
                        for (struct pool_vm *x = stale; x; x = x->next)
                                log_emit(LOG_LEVEL_INFO, x->ctx, "discarding warm VM of superseded build %s-%s",
                                         x->template_name, x->hash);
                        free_list(stale);
                        if (!wanted) {
                                template_info_free(t);
                                pthread_mutex_lock(&plock);
                                continue;
                        }

                        struct pool_vm *pv = NULL;
                        char *err = NULL;
                        r = fill_one(t, &pv, &err);
                        uint64_t ms = (now_monotonic_ns() - t0) / 1000000ULL;
                        if (r >= 0)
                                node_hold_point("pool.refill.done"); /* a test's way to hold a refill in flight */
                        pthread_mutex_lock(&plock);
                        p->n_starting--;
                        slot_set(p, t0, 0);
                        pthread_cond_broadcast(&ready_cond); /* a claim may wait for this one */
                        if (r >= 0 && !stopping) {
                                pv->next = p->ready;
                                p->ready = pv;
                                p->n_ready++;
                                p->failures = 0;
                                p->retry_at_ns = 0;
                                p->refill_ms = pool_demand_refill_avg(p->refill_ms, ms);
                                log_emit(LOG_LEVEL_INFO, pv->ctx, "warm VM ready in %llu ms (%u/%u for %s)",
                                         (unsigned long long) ms, p->n_ready, pool_target(p, now_monotonic_ns()),
                                         p->name);
                                pv = NULL;
                        } else if (r < 0) {
                                unsigned shift = MIN(p->failures, 6u);
                                uint64_t delay = MIN((uint64_t) RETRY_MIN_MS << shift, (uint64_t) RETRY_MAX_MS);
                                p->failures++;
                                p->retry_at_ns = now_monotonic_ns() + delay * 1000000ULL;
                                log_emit(LOG_LEVEL_WARN, NULL,
                                         "template=%s warm VM refill failed (%u in a row): %s; retrying in %llu ms",
                                         p->name, p->failures, err ? err : strerror(-r), (unsigned long long) delay);
                        }
                        pthread_mutex_unlock(&plock);
                        pool_vm_free(pv); /* only when we stopped meanwhile */
                        template_info_free(t);
                        free(err);
                        pthread_mutex_lock(&plock);
                        continue;
                }

                /* 3. nothing to do: wait for a claim, a stop or the next look */
                pthread_mutex_lock(&plock);
                if (!stopping && !kicked) {
                        struct timespec deadline;
                        node_deadline_after_ms(&deadline, WATCH_INTERVAL_MS);
                        pthread_cond_timedwait(&pcond, &plock, &deadline);
                }
                kicked = false;
        }
        pthread_mutex_unlock(&plock);
        free(wait_tpl);
        return NULL;
}

static bool dir_is_empty(const char *path) {
        DIR *d = opendir(path);
        if (!d)
                return false;
        bool empty = true;
        for (struct dirent *e; empty && (e = readdir(d));)
                empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        closedir(d);
        return empty;
}

int pool_init(const struct node_config *cfg, const char *pool_dir) {
        pcfg = cfg;
        node_cond_init(&pcond);
        node_cond_init(&ready_cond);
        pdir = strdup(pool_dir);
        if (!pdir)
                return -ENOMEM;
        /* warm VMs of an earlier run died with it (PDEATHSIG); their disks
         * are all that is left */
        int r = rm_rf(pdir);
        /* under airlock-nodemgr the dir itself is in its DATA_DIR (which we
         * cannot write): emptied is as good */
        if (r < 0 && !((r == -EACCES || r == -EPERM) && dir_is_empty(pdir)))
                log_warn_errno(r, "Failed to remove %s: %m", pdir);
        if (cfg->pool_size == 0 || cfg->n_prebuild == 0)
                return 0;
        r = mkdir_p(pdir, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", pdir);
        pools = calloc(cfg->n_prebuild, sizeof *pools);
        if (!pools)
                return -ENOMEM;
        for (size_t i = 0; i < cfg->n_prebuild; i++)
                snprintf(pools[i].name, sizeof pools[i].name, "%s", cfg->prebuild[i]);
        n_pools = cfg->n_prebuild;
        log_info("warm pools: %u VMs each (up to %u while creates outrun them) for %zu templates in %s",
                 cfg->pool_size, cfg->pool_max, n_pools, pdir);
        return 0;
}

int pool_start(void) {
        if (n_pools == 0)
                return 0;
        unsigned want = node_cpus_within(1, FILLERS_MAX);
        for (; n_fillers < want; n_fillers++) {
                int r = -pthread_create(&fillers[n_fillers], NULL, filler_thread, NULL);
                if (r < 0)
                        return n_fillers > 0 ? 0 : r; /* fewer at once, as many as we have */
        }
        return 0;
}

void pool_shutdown(void) {
        pthread_mutex_lock(&plock);
        stopping = true;
        pthread_cond_broadcast(&pcond);
        pthread_cond_broadcast(&ready_cond);
        pthread_mutex_unlock(&plock);
        /* a refill in progress ends within its own timeouts */
        for (unsigned i = 0; i < n_fillers; i++)
                pthread_join(fillers[i], NULL);
        n_fillers = 0;

        struct pool_vm *all = NULL;
        pthread_mutex_lock(&plock);
        for (size_t i = 0; i < n_pools; i++) {
                struct pool_vm *l = pools[i].ready;
                while (l) {
                        struct pool_vm *next = l->next;
                        l->next = all;
                        all = l;
                        l = next;
                }
                pools[i].ready = NULL;
                pools[i].n_ready = 0;
        }
        pthread_mutex_unlock(&plock);
        free_list(all);
        if (pdir && n_pools > 0)
                rm_rf(pdir);
}

int pool_claim(const struct template_info *t, const char *dir, const char *ctx, struct pool_vm **ret) {
        struct pool_vm *stale = NULL, *pv = NULL;
        unsigned left = 0;

        pthread_mutex_lock(&plock);
        struct pool *p = stopping ? NULL : pool_find(t->name);
        if (!p) {
                pthread_mutex_unlock(&plock);
                return 0;
        }
        pool_take_if(p, vm_other_build, t->hash, &stale);
        uint64_t now = now_monotonic_ns(), waited_ns = 0;
        /* empty: a refill in flight may be sooner than restoring cold */
        uint64_t until = p->ready ? 0 : pool_demand_wait_until(now, p->starts_ns, FILLERS_MAX, p->n_waiting,
                                                                 p->refill_ms);
        if (until) {
                kicked = true; /* the fillers learn of the demand while we wait */
                pthread_cond_broadcast(&pcond);
                p->n_waiting++;
                struct timespec ts = { .tv_sec = (time_t) (until / 1000000000ULL),
                                       .tv_nsec = (long) (until % 1000000000ULL) };
                while (!p->ready && !stopping && pthread_cond_timedwait(&ready_cond, &plock, &ts) == 0)
                        ;
                p->n_waiting--;
                pool_take_if(p, vm_other_build, t->hash, &stale);
                waited_ns = now_monotonic_ns() - now;
        }
        if (p->ready && !stopping) {
                /* the longest-waiting VM would do as well; the newest is at hand */
                pv = p->ready;
                p->ready = pv->next;
                p->n_ready--;
                pv->next = NULL;
                p->hits++;
                p->waited += until != 0;
        } else
                p->misses++;
        pool_demand_note(&p->demand, now_s(now), pv != NULL);
        publish(p, now);
        left = p->n_ready;
        uint64_t hits = p->hits, misses = p->misses;
        kicked = true;
        pthread_cond_broadcast(&pcond);
        pthread_mutex_unlock(&plock);

        for (struct pool_vm *x = stale; x; x = x->next)
                log_emit(LOG_LEVEL_INFO, x->ctx, "discarding warm VM of superseded build %s-%s", x->template_name,
                         x->hash);
        free_list(stale);
        nodemetrics_pool(t->name, !pv ? "miss" : waited_ns ? "waited" : "hit");
        if (!pv) {
                log_emit(LOG_LEVEL_INFO, ctx, "pool miss for template %s (hits %llu, misses %llu%s)", t->name,
                         (unsigned long long) hits, (unsigned long long) misses,
                         waited_ns ? "; the refill it waited for came too late" : "");
                return 0;
        }
        /* QEMU keeps its open rootfs across the rename; the sandbox dir is
         * on the same storage root, so this is one metadata update */
        if (rename(pv->dir, dir) < 0) {
                int r = negative_errno();
                log_errno(LOG_LEVEL_WARN, r, ctx, "cannot move warm VM %s to %s: %m; restoring cold", pv->dir, dir);
                pool_vm_free(pv);
                return 0;
        }
        free(pv->dir);
        pv->dir = NULL;
        /* QEMU reopens its disk by path during a migration: follow the move */
        _cleanup_free_ char *moved = strdup_printf("%s/rootfs.img", dir);
        int k = moved ? node_run_link(pv->run_dir, "disk.img", moved, NULL) : -ENOMEM;
        if (k < 0)
                log_errno(LOG_LEVEL_WARN, k, ctx, "cannot repoint the disk link of %s: %m", pv->ctx);
        if (waited_ns)
                log_emit(LOG_LEVEL_INFO, ctx, "pool hit for template %s: %s after waiting %llu ms for its refill "
                         "(%u left; hits %llu, misses %llu)", t->name, pv->ctx,
                         (unsigned long long) (waited_ns / 1000000ULL), left, (unsigned long long) hits,
                         (unsigned long long) misses);
        else
                log_emit(LOG_LEVEL_INFO, ctx,
                         "pool hit for template %s: %s, waited %llu ms (%u left; hits %llu, misses %llu)", t->name,
                         pv->ctx, (unsigned long long) ((now_monotonic_ns() - pv->ready_ns) / 1000000ULL), left,
                         (unsigned long long) hits, (unsigned long long) misses);
        *ret = pv;
        return 1;
}

int pool_vm_resume(struct pool_vm *pv) {
        if (vmm_exited(pv->vmm))
                return -ESRCH;
        int r = qmp_execute(pv->vmm->qmp, "cont", NULL, QMP_MS, NULL);
        if (r < 0)
                return log_errno(LOG_LEVEL_WARN, r, pv->ctx, "cont failed: %m (%s)", qmp_last_error(pv->vmm->qmp));
        return 0;
}

json_t *pool_list_json(void) {
        json_t *a = json_array();
        if (!a)
                return NULL;
        pthread_mutex_lock(&plock);
        uint64_t now = now_monotonic_ns();
        for (size_t i = 0; i < n_pools; i++) {
                struct pool *p = &pools[i];
                unsigned claims, hits;
                pool_demand_totals(&p->demand, now_s(now), &claims, &hits);
                json_t *o = json_pack(
                        "{s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "template", p->name, "build",
                        p->build[0] ? json_string(p->build) : json_null(), "target",
                        (json_int_t) pool_target(p, now), "size", (json_int_t) pcfg->pool_size, "max",
                        (json_int_t) pcfg->pool_max, "ready", (json_int_t) p->n_ready, "starting",
                        (json_int_t) p->n_starting, "waiting", (json_int_t) p->n_waiting, "hits", (json_int_t) p->hits, "misses", (json_int_t) p->misses,
                        "waited", (json_int_t) p->waited, "recent_claims", (json_int_t) claims, "recent_hit_pct",
                        claims ? json_integer((json_int_t) ((100ULL * hits + claims / 2) / claims)) : json_null());
                if (!o || json_array_append_new(a, o) < 0) {
                        pthread_mutex_unlock(&plock);
                        json_decref(a);
                        return NULL;
                }
        }
        pthread_mutex_unlock(&plock);
        return a;
}

json_t *pool_json(const char *name) {
        pthread_mutex_lock(&plock);
        struct pool *p = pool_find(name);
        json_t *o = json_pack("{s:I, s:I}", "size", (json_int_t) (p ? pool_target(p, now_monotonic_ns()) : 0),
                              "ready", (json_int_t) (p ? p->n_ready : 0));
        pthread_mutex_unlock(&plock);
        return o;
}
