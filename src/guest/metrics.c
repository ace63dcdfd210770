/* SPDX-License-Identifier: Apache-2.0 */
/* METRICS: what the guest uses of its CPUs, memory and root file system,
 * from /proc and statvfs, for the host's metrics (E2B's getMetrics()). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent.h"
#include "request.h"

/* The CPU times of /proc/stat's first line at the previous call: the
 * usage reported is since then (since the sandbox's IDENTITY the first
 * time, metrics_prime()). */
static unsigned long long prev_busy, prev_total;

static int cpu_used_pct(double *ret) {
        FILE *f = fopen("/proc/stat", "re");
        if (!f)
                return -errno;
        unsigned long long v[8] = { 0 };
        int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7]);
        fclose(f);
        if (n < 4)
                return -EIO;
        unsigned long long idle = v[3] + v[4], total = 0;
        for (int i = 0; i < 8; i++)
                total += v[i];
        unsigned long long busy = total - idle;
        unsigned long long db = busy - prev_busy, dt = total - prev_total;
        *ret = dt && busy >= prev_busy && total > prev_total ? 100.0 * (double) db / (double) dt : 0.0;
        prev_busy = busy;
        prev_total = total;
        return 0;
}

/* MemTotal, MemAvailable and Cached of /proc/meminfo, in bytes. */
static int memory(unsigned long long *total, unsigned long long *available, unsigned long long *cached) {
        FILE *f = fopen("/proc/meminfo", "re");
        if (!f)
                return -errno;
        char line[256];
        unsigned long long kb;
        int seen = 0;
        while (fgets(line, sizeof line, f)) {
                if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
                        *total = kb << 10, seen |= 1;
                else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                        *available = kb << 10, seen |= 2;
                else if (sscanf(line, "Cached: %llu kB", &kb) == 1)
                        *cached = kb << 10, seen |= 4;
        }
        fclose(f);
        return seen == 7 ? 0 : -EIO;
}

void metrics_prime(void) {
        double ignored;
        (void) cpu_used_pct(&ignored);
}

int metrics_handle(struct agent *a, uint32_t stream, const uint8_t *payload, size_t len) {
        int r = guest_json_check(payload, len);
        if (r < 0)
                return r;
        double cpu = 0;
        unsigned long long mem_total = 0, mem_avail = 0, mem_cached = 0;
        struct statvfs vfs;
        if ((r = cpu_used_pct(&cpu)) < 0 || (r = memory(&mem_total, &mem_avail, &mem_cached)) < 0)
                return r;
        if (statvfs("/", &vfs) < 0)
                return -errno;
        unsigned long long disk_total = (unsigned long long) vfs.f_blocks * vfs.f_frsize;
        unsigned long long disk_used = (unsigned long long) (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        return agent_send_json(a, PROTO_RESULT, stream,
                               json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "cpu_count",
                                         (json_int_t) (cpus > 0 ? cpus : 1), "cpu_used_pct", cpu, "mem_total",
                                         (json_int_t) mem_total, "mem_used", (json_int_t) (mem_total - MIN(mem_avail, mem_total)),
                                         "mem_cache", (json_int_t) mem_cached, "disk_total", (json_int_t) disk_total,
                                         "disk_used", (json_int_t) disk_used));
}
