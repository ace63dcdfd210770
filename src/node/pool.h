/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Warm pools: per prebuilt template, VMs restored ahead of time and paused,
 * so a create only has to resume one and install its identity. A pool VM
 * is everything a cold create makes except the identity: its own rootfs
 * reflink in POOL_DIR/<name>-<n>/, a restored QEMU, an open guest channel
 * (HELLO done), then QMP `stop` (no CPU while it waits).
 *
 * A pool holds cfg->pool_size VMs, more while its template's creates come
 * faster (up to cfg->pool_max; pooldemand.h says how many). Filler threads
 * keep the pools full: they refill after every claim and once a template
 * becomes ready, as many at once as the host has idle cores for, retry
 * failed refills with backoff, and watch the waiting VMs (a QEMU that dies
 * or a channel that closes is removed and replaced; those past a target
 * that went down are destroyed). A VM restored from another build of its
 * template than the current one is never handed out.
 */

#include <jansson.h>
#include <stdint.h>

#include "vmm.h"

struct node_config;
struct guestconn;
struct template_info;

/* One warm VM. Fields a claimer takes over are set to NULL. */
struct pool_vm {
        char ctx[96];         /* "pool=NAME-N" */
        char *template_name;
        char *hash;           /* the template build it was restored from */
        char *dir;            /* its directory (rootfs.img); NULL once moved to a sandbox */
        char *run_dir;        /* QEMU's sockets and logs (DATA_DIR/run/vm/N) */
        struct vmm *vmm;
        struct guestconn *gc;
        uint64_t ready_ns;    /* CLOCK_MONOTONIC: when it was parked */
        struct pool_vm *next;
};

/* Sets up a pool for every prebuilt template (none when pool_size is 0) and
 * removes pool_dir leftovers of an earlier run (their QEMUs died with it).
 * Call after sandbox_manager_init() (which cleans DATA_DIR/run/vm). */
int pool_init(const struct node_config *cfg, const char *pool_dir);

/* Starts the filler threads (none when there are no pools). */
int pool_start(void);

/* Stops the fillers and destroys every waiting VM (QEMU killed and reaped,
 * directories removed). Claimed VMs belong to their sandboxes. */
void pool_shutdown(void);

/* Takes a warm VM of template t (of the same build, t->hash) and renames
 * its directory to dir (which must not exist). Returns 1 with *ret (the
 * caller owns it; its dir field is NULL) on a hit, 0 on a miss: no pool for
 * t, none ready, or the move failed (that VM is destroyed). With none
 * ready it waits for a refill in flight when that is due sooner than a
 * cold restore (pool_demand_wait_until()). Logs the hit or miss under ctx
 * and wakes the fillers to refill. */
int pool_claim(const struct template_info *t, const char *dir, const char *ctx, struct pool_vm **ret);

/* Resumes the vCPUs of a claimed VM (QMP `cont`). */
int pool_vm_resume(struct pool_vm *pv);

/* Destroys what pv still owns: channel, QEMU (killed and reaped), run dir
 * and directory when not taken over; frees pv. NULL-safe. */
void pool_vm_free(struct pool_vm *pv);

/* {"size":N,"ready":M} for template name: N the pool's target now (0 when
 * it has no pool). */
json_t *pool_json(const char *name);

/* One object per pool, in AIRLOCK_PREBUILD order (empty without pools):
 * {"template", "build" (the template hash it refills from; null before
 * its first refill), "target" (the VMs it keeps now), "size", "max",
 * "ready" (VMs waiting), "starting" (VMs being restored now), "waiting"
 * (claims waiting for those), "hits", "misses", "waited" (claims since the
 * node started), "recent_claims", "recent_hit_pct" (the last 5 minutes;
 * null without claims)}. A consistent snapshot: taken under the pools'
 * lock. */
json_t *pool_list_json(void);
