/* SPDX-License-Identifier: Apache-2.0 */
/* The node's report of now: see nodereport.h. */
#include "nodereport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "nodemetrics.h"
#include "sandbox.h"
#include "util.h"

/* A VMM's CPU seconds (utime + stime of /proc/PID/stat) and resident
 * bytes (VmRSS of /proc/PID/status): the process its cgroup holds. */
static int vmm_usage(long long pid, double *ret_cpu, double *ret_rss) {
        char path[64];
        _cleanup_free_ char *stat = NULL, *status = NULL;
        snprintf(path, sizeof path, "/proc/%lld/stat", pid);
        int r = file_read_all(path, 4096, &stat, NULL);
        if (r < 0)
                return r;
        /* after the command's ")" (which may itself hold spaces): fields 3.. */
        const char *p = strrchr(stat, ')');
        unsigned long long utime = 0, stime = 0;
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
                return -EBADMSG;
        snprintf(path, sizeof path, "/proc/%lld/status", pid);
        if ((r = file_read_all(path, 16384, &status, NULL)) < 0)
                return r;
        const char *rss = strstr(status, "\nVmRSS:");
        unsigned long long kb = 0;
        if (!rss || sscanf(rss + 7, "%llu", &kb) != 1)
                return -EBADMSG;
        long hz = sysconf(_SC_CLK_TCK);
        *ret_cpu = (double) (utime + stime) / (double) (hz > 0 ? hz : 100);
        *ret_rss = (double) kb * 1024;
        return 0;
}

json_t *nodereport_metrics_json(bool per_sandbox) {
        /* the gauges of now, in a registry of this call's */
        _cleanup_(metrics_registry_freep) struct metrics_registry *now = NULL;
        struct metrics_family *by_state = NULL, *cpu = NULL, *rss = NULL;
        if (metrics_registry_new(&now) < 0 ||
            metrics_family(now, "airlock_node_sandboxes", METRICS_GAUGE, "Sandboxes on the node, by state",
                           (const char *const[]){ "state", NULL }, NULL, 0, &by_state) < 0)
                return NULL;
        if (per_sandbox &&
            (metrics_family(now, "airlock_sandbox_cpu_seconds_total", METRICS_COUNTER,
                            "CPU time of a sandbox's VMM process (its vCPUs and devices) since it started",
                            (const char *const[]){ "sandbox", NULL }, NULL, 0, &cpu) < 0 ||
             metrics_family(now, "airlock_sandbox_memory_bytes", METRICS_GAUGE,
                            "Resident memory of a sandbox's VMM process (guest RAM it touched, and QEMU's own)",
                            (const char *const[]){ "sandbox", NULL }, NULL, 0, &rss) < 0))
                return NULL;
        _cleanup_(json_decrefp) json_t *list = sandbox_list_json();
        size_t i;
        json_t *s;
        static const char *const states[] = { "running", "paused", "stopped", "failed", "recovering" };
        for (size_t k = 0; k < sizeof states / sizeof states[0]; k++)
                metrics_set(by_state, (const char *const[]){ states[k] }, 0);
        json_array_foreach(list, i, s) {
                const char *st = json_string_value(json_object_get(s, "state"));
                const char *id = json_string_value(json_object_get(s, "id"));
                json_int_t pid = json_integer_value(json_object_get(s, "pid"));
                metrics_add(by_state, (const char *const[]){ st ? st : "unknown" }, 1);
                double c, m;
                if (per_sandbox && id && pid > 0 && vmm_usage(pid, &c, &m) >= 0) {
                        metrics_add(cpu, (const char *const[]){ id }, c);
                        metrics_set(rss, (const char *const[]){ id }, m);
                }
        }
        json_t *own = nodemetrics_counters_json(), *gauges = metrics_to_json(now);
        json_t *fams = json_object_get(own, "families");
        if (!own || !gauges || json_array_extend(fams, json_object_get(gauges, "families")) < 0) {
                json_decref(own);
                json_decref(gauges);
                return NULL;
        }
        json_decref(gauges);
        return own;
}

/* ---- usage over the last hour ---- */

struct usage_sample {
        int64_t ts_ms;
        double cpu_pct; /* < 0: unknown (the first sample) */
        uint64_t memory, disk;
};

struct usage {
        char id[65];
        double cpu_s;       /* the VMM's CPU seconds at the last sample */
        uint64_t sample_ns; /* when; 0: none yet */
        long long pid;      /* of which VMM (a restart is another) */
        struct usage_sample ring[NODEREPORT_KEEP];
        size_t n, head;     /* head: the next slot */
        bool seen;          /* in this pass */
        struct usage *next;
};

static pthread_mutex_t usage_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usage *usages;
static pthread_t sampler;
static int stop_fd = -1;
static bool sampling;
static unsigned sample_s = NODEREPORT_SAMPLE_S;

static struct usage *usage_find(const char *id) {
        for (struct usage *u = usages; u; u = u->next)
                if (strcmp(u->id, id) == 0)
                        return u;
        return NULL;
}

/* The disk's allocated bytes (a reflink's shared extents count too). */
static uint64_t disk_bytes(const char *id) {
        _cleanup_free_ char *path = sandbox_disk_path(id);
        struct stat st;
        return path && stat(path, &st) == 0 ? (uint64_t) st.st_blocks * 512 : 0;
}

/* A sample of u now (usage_lock held); cpu from the previous sample;
 * *ret_cpu_s the VMM's CPU seconds. */
static bool usage_sample(struct usage *u, long long pid, struct usage_sample *ret, double *ret_cpu_s) {
        double cpu, rss;
        if (vmm_usage(pid, &cpu, &rss) < 0)
                return false;
        *ret_cpu_s = cpu;
        uint64_t now = now_monotonic_ns();
        *ret = (struct usage_sample){ .ts_ms = now_unix_ms(), .cpu_pct = -1, .memory = (uint64_t) rss,
                                      .disk = disk_bytes(u->id) };
        if (u->sample_ns && u->pid == pid && now > u->sample_ns && cpu >= u->cpu_s)
                ret->cpu_pct = (cpu - u->cpu_s) * 100.0 / ((double) (now - u->sample_ns) / 1e9);
        return true;
}

static void sample_all(void) {
        _cleanup_(json_decrefp) json_t *list = sandbox_list_json();
        pthread_mutex_lock(&usage_lock);
        for (struct usage *u = usages; u; u = u->next)
                u->seen = false;
        size_t i;
        json_t *s;
        json_array_foreach(list, i, s) {
                const char *id = json_string_value(json_object_get(s, "id"));
                json_int_t pid = json_integer_value(json_object_get(s, "pid"));
                if (!id || strlen(id) >= sizeof usages->id)
                        continue;
                struct usage *u = usage_find(id);
                if (!u && (u = calloc(1, sizeof *u))) {
                        snprintf(u->id, sizeof u->id, "%s", id);
                        u->next = usages;
                        usages = u;
                }
                if (!u)
                        continue;
                u->seen = true; /* a stopped one keeps its history, and gets no sample */
                struct usage_sample x;
                double cpu;
                if (pid <= 0 || !usage_sample(u, pid, &x, &cpu))
                        continue;
                u->ring[u->head] = x;
                u->head = (u->head + 1) % NODEREPORT_KEEP;
                if (u->n < NODEREPORT_KEEP)
                        u->n++;
                u->cpu_s = cpu;
                u->sample_ns = now_monotonic_ns();
                u->pid = pid;
        }
        /* the gone ones go */
        for (struct usage **p = &usages; *p;) {
                if ((*p)->seen) {
                        p = &(*p)->next;
                        continue;
                }
                struct usage *dead = *p;
                *p = dead->next;
                free(dead);
        }
        pthread_mutex_unlock(&usage_lock);
}

static void *sampler_main(void *arg) {
        for (;;) {
                sample_all();
                struct pollfd p = { .fd = stop_fd, .events = POLLIN };
                if (poll(&p, 1, (int) sample_s * 1000) != 0)
                        return NULL;
        }
}

int nodereport_start(void) {
        const char *env = getenv("AIRLOCK_USAGE_SAMPLE_S");
        uint64_t v;
        if (env && *env) {
                if (parse_u64(env, 3600, &v) < 0 || v == 0)
                        return log_error_errno(-EINVAL, "AIRLOCK_USAGE_SAMPLE_S must be 1..3600 seconds, not '%s'", env);
                sample_s = (unsigned) v;
        }
        stop_fd = eventfd(0, EFD_CLOEXEC);
        if (stop_fd < 0)
                return negative_errno();
        int r = -pthread_create(&sampler, NULL, sampler_main, NULL);
        if (r < 0) {
                close(stop_fd);
                stop_fd = -1;
                return r;
        }
        sampling = true;
        return 0;
}

void nodereport_stop(void) {
        if (!sampling)
                return;
        uint64_t one = 1;
        (void) !write(stop_fd, &one, sizeof one);
        pthread_join(sampler, NULL);
        close(stop_fd);
        stop_fd = -1;
        sampling = false;
}

static json_t *sample_json(const struct usage_sample *x) {
        json_t *o = json_pack("{s:I, s:I, s:I}", "ts_ms", (json_int_t) x->ts_ms, "memory_bytes",
                              (json_int_t) x->memory, "disk_bytes", (json_int_t) x->disk);
        if (o && x->cpu_pct >= 0)
                json_object_set_new(o, "cpu_pct", json_real(x->cpu_pct));
        return o;
}

int nodereport_usage(const char *id, json_t **ret) {
        struct sandbox *s = NULL;
        if (sandbox_get(id, &s) < 0)
                return -ENOENT;
        _cleanup_(json_decrefp) json_t *sj = sandbox_json(s);
        sandbox_unref(s);
        json_int_t pid = json_integer_value(json_object_get(sj, "pid"));
        json_t *hist = json_array(), *now = NULL;
        pthread_mutex_lock(&usage_lock);
        struct usage *u = usage_find(id);
        struct usage fresh = { 0 };
        snprintf(fresh.id, sizeof fresh.id, "%s", id);
        struct usage_sample x;
        double cpu;
        if (pid > 0 && usage_sample(u ? u : &fresh, pid, &x, &cpu))
                now = sample_json(&x);
        for (size_t i = 0; u && hist && i < u->n; i++) {
                size_t k = (u->head + NODEREPORT_KEEP - u->n + i) % NODEREPORT_KEEP;
                json_array_append_new(hist, sample_json(&u->ring[k]));
        }
        pthread_mutex_unlock(&usage_lock);
        if (!hist) {
                json_decref(now);
                return -ENOMEM;
        }
        *ret = json_pack("{s:o, s:o, s:i}", "now", now ? now : json_null(), "history", hist, "sample_s",
                         (int) sample_s);
        return *ret ? 0 : -ENOMEM;
}
