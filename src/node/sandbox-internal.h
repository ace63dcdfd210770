/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's sandbox core, private to its files; the interface is
 * sandbox.h. It is a stack: each file calls only the layers below it.
 *
 *   4  sandbox-manager.c    start-up takeover, shutdown, hand-over
 *   3  sandbox-create.c     create, delete
 *      sandbox-lifecycle.c  pause, resume, stop, start
 *      sandbox-snapshot.c   fork, snapshots, rollback
 *      sandbox-suspend.c    suspend, wake, unarchive
 *      sandbox-agent.c      the guest agent's upgrade in place
 *      sandbox-image.c      publish, export, create from an image
 *                           (calls sandbox-suspend.c's restore: the one
 *                           call between verbs, and it goes one way)
 *   2  sandbox-vm.c         the VM and its command thread, the verbs'
 *                           claim, crash recovery, new sandboxes from a
 *                           restore or a boot
 *      sandbox-parked.c     parked directories, suspend marks, uploads
 *                           (below sandbox-vm.c, which clears a parked
 *                           directory for a new sandbox)
 *      sandbox-delta.c      a suspended image as deltas against its
 *                           template (below sandbox-parked.c)
 *      sandbox-volume.c     the volume store and the copies sandboxes
 *                           hold, their mounts (below sandbox-vm.c)
 *   1  sandbox-registry.c   the manager's state, the registry, the record,
 *                           snapshot paths
 *
 * Below them: pool, template, guestconn, guestops, vmm, gwclient, nodeutil
 * (none calls back into the core). Whoever must hear of a deleted sandbox
 * (command sessions) registers an observer (sandbox_on_delete()).
 * Each helper's comment is at its definition.
 */

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objstore.h"
#include "sandbox.h"
#include "vmm.h"

struct node_config;
struct objstore_data_key;

/* How long a create waits for a template that is being built. */
/* pause/resume wait at most this for the sandbox thread (its QMP call is
 * bounded by QMP_RUNSTATE_MS; the rest is slack for a busy host). */
#define LIFECYCLE_CMD_WAIT_MS 15000

/* A full snapshot the sandbox thread takes (vmm_snapshot()): RAM and
 * device state to state_path, and the disk reflinked to disk_dst while the
 * vCPUs are stopped, so both are of one instant. */
struct snapshot_job {
        struct sandbox *s;
        const char *state_path;
        const char *disk_dst;
        const char *volumes_of; /* a full snapshot's id: its volumes' copies too (sandbox-volume.c), or NULL */
        struct sandbox *volumes_to; /* a fork's child: the volumes' copies cloned into its dir, or NULL */
        bool leave_paused;
        struct vmm_snapshot_stats stats;
};

/* ---- 1: sandbox-registry.c ---- */

/* The manager's state, set once by sandbox_registry_init() (the registry
 * itself is private to sandbox-registry.c). */
struct sandbox_manager {
        const struct node_config *cfg;
        enum vmm_accel accel;
        char *dir; /* SANDBOXES */
};
const struct sandbox_manager *sandbox_mgr(void);
int sandbox_registry_init(const struct node_config *cfg, enum vmm_accel accel, const char *sandboxes_dir);

/* The registry's lock: taken before a sandbox's own lock, never after.
 * sandbox_reg_find() and sandbox_reg_remove() want it held. */
void sandbox_reg_lock(void);
void sandbox_reg_unlock(void);
struct sandbox *sandbox_reg_find(const char *id);
void sandbox_reg_remove(struct sandbox *s);
/* Registers s (hidden while CREATING): -EEXIST when its id is taken,
 * -EUSERS at max_sandboxes, with *ret_error (may be NULL) saying so. */
int sandbox_reg_add(struct sandbox *s, char **ret_error);
/* References to every registered sandbox (with_creating: those being
 * created too), for a walk without the lock. */
int sandbox_reg_all(bool with_creating, struct sandbox ***ret, size_t *ret_n);
/* Takes the first registered sandbox out that no verb holds (any: the
 * first at all); NULL when there is none (*ret_empty: none is left). */
struct sandbox *sandbox_reg_take_idle(bool any, bool *ret_empty);
/* true when a registered sandbox has adopted a VM in run_dir. */
bool sandbox_reg_has_run_dir(const char *run_dir);
/* A new sandbox whose VM runs: RUNNING (visible to get/list) and recorded. */
void sandbox_make_visible(struct sandbox *s);
/* true the first time a disk image had to be copied byte by byte (the
 * storage cannot reflink): that is logged once per node. */
bool sandbox_warn_copy_once(void);
/* Tells the observer of sandbox_on_delete() (sandbox.h). */
void sandbox_deleted(struct sandbox *s);

bool sandbox_state_is(struct sandbox *s, enum sandbox_state st);
/* How long a running guest has been idle, in ms (its last PING answer,
 * grown since, unless the channel carried use after it); -1 when unknown
 * (not running, not probed yet). s->lock held. */
int64_t sandbox_idle_ms_locked(struct sandbox *s);
const char *sandbox_state_str(enum sandbox_state st);
int sandbox_record_save(struct sandbox *s);
/* The parts of a record a node takes a sandbox over with. */
struct sandbox_record {
        json_t *json;
        const char *template_name, *state, *run_dir;
        json_t *env, *recoveries;
        unsigned execution;
        bool recover_checkpoint;
        struct sandbox_limits limits;
        struct sandbox_volume volumes[SANDBOX_VOLUMES_MAX];
        char *network; /* canonical, or NULL: none recorded (allow-all) */
};
int sandbox_record_load(const char *dir, const char *id, struct sandbox_record *ret);
void sandbox_record_release(struct sandbox_record *rec);
/* checkpoint (NULL: none) is the full snapshot the recovery resumed and
 * checkpoint_at_ms when it was taken (Unix ms). */
void sandbox_recoveries_add(struct sandbox *s, const char *reason, const char *how, bool ok, const char *error,
                            const char *checkpoint, int64_t checkpoint_at_ms);
/* network: canonical policy text, or NULL (allow-all) */
int sandbox_new(const char *id, const char *template_name, json_t *env, const char *network, struct sandbox **ret);
/* A created sandbox's first execution: its tenant, its recovery setting
 * and its limits, as o asks. */
void sandbox_first_execution(struct sandbox *s, const struct sandbox_create_opts *o);
/* Sets s->tenant from o's "tenant" (a record, a parked marker, a suspend
 * manifest's meta); SANDBOX_TENANT_ADMIN when o has none. -EBADMSG when it
 * is not a valid name. */
int sandbox_tenant_from_json(struct sandbox *s, const json_t *o);

/* A full snapshot's state file remembers the execution it was taken in
 * (an xattr; a file system without them leaves it untagged: never resumed
 * by recovery). */
int sandbox_snapshot_execution_set(const char *state_path, unsigned execution);
int sandbox_snapshot_execution_get(const char *state_path, unsigned *ret);
char *sandbox_snapshot_path(struct sandbox *s, const char *snapshot_id);
char *sandbox_snapshot_state_path(struct sandbox *s, const char *snapshot_id);
int sandbox_snapshot_count(const char *sandbox_dir, size_t *ret);
int sandbox_clone_replace(struct sandbox *s, const char *src, const char *dst);

/* ---- 2: sandbox-vm.c ---- */

void sandbox_set_failed(struct sandbox *s, const char *fmt, ...) _printf_(2, 3);
int sandbox_thread_start(struct sandbox *s, char **ret_error);
void sandbox_thread_stop(struct sandbox *s);
void sandbox_create_abort(struct sandbox *s);
int sandbox_life_begin(struct sandbox *s, enum sandbox_state from, enum sandbox_state from2, const char **ret_state);
void sandbox_life_end(struct sandbox *s);
int sandbox_post_command(struct sandbox *s, enum sandbox_cmd cmd, void *arg, int64_t wait_ms);
void sandbox_stop_claimed(struct sandbox *s, bool flush);
int sandbox_start_claimed(struct sandbox *s, char **ret_error);
int sandbox_template(struct sandbox *s, char **ret_error);
/* Creates the RAM file of a cold boot (memory_mib of s->tpl, sparse). */
int sandbox_ram_file_create(struct sandbox *s, const char *path, char **ret_error);
void sandbox_recover_schedule(struct sandbox *s, const char *reason);
/* A new sandbox id registered (CREATING, hidden, its directory fresh);
 * its undoing; a restore of a full snapshot, and a boot of a disk, into a
 * registered sandbox (on failure it is gone). */
int sandbox_register_new(const char *id, const char *template_name, json_t *env, const char *network,
                         struct sandbox **ret, char **ret_error);
void sandbox_new_abort(struct sandbox *s);
int sandbox_restore_new(struct sandbox *s, char *state_path, char **ret_error);
int sandbox_boot_new(struct sandbox *s, char **ret_error);

/* ---- 2: sandbox-volume.c ---- */

struct guestconn;
/* A new sandbox's copies of the volumes it holds (s->volumes), refused
 * (-EBUSY) where another sandbox holds one in a way this one's use
 * excludes; -ENOENT for one this node does not have. Each from the node's
 * store, or, where from (a downloaded image's directory) has its artifact
 * (sandbox_volume_artifacts), that one (moved). */
int sandbox_volumes_attach(struct sandbox *s, const char *from, char **ret_error);
/* The artifact names of a suspended image's volumes ("volume0".."volume3",
 * by slot), and the artifacts of the volumes meta names (a suspended
 * sandbox's: their images in the node's store, where its suspend put
 * them back and where nothing writes them while it holds them): how many,
 * paths[i] the caller's to free. */
extern const char *const sandbox_volume_artifacts[SANDBOX_VOLUMES_MAX + 1];
size_t sandbox_volumes_upload(const json_t *meta, struct objstore_artifact art[SANDBOX_VOLUMES_MAX],
                              char *paths[SANDBOX_VOLUMES_MAX]);
/* At a delete, once the VM is gone: the read-write copies go back into
 * the store. */
void sandbox_volumes_release(struct sandbox *s);
/* Points vc's volume slots at the copies, through run dir links (links[k]
 * the caller's to free). */
int sandbox_volumes_config(struct sandbox *s, struct vmm_config *vc, char *links[VMM_VOLUMES_MAX],
                           char **ret_error);
/* Once the guest agent answers: each slot resized to its copy, and
 * mounted where asked (done already after a restore of the sandbox's own
 * state: answered as done). */
int sandbox_volumes_mount(struct sandbox *s, struct vmm *v, struct guestconn *g, char **ret_error);
/* A full snapshot's volumes: each copy cloned beside the snapshot
 * (SNAPSHOTS/ID.volumeK) while the vCPUs stand still, so memory (the
 * guest's caches of the mounted volumes) and volumes are of one instant;
 * what a rollback to it (or a recovery resuming it) puts back; and their
 * removal with the snapshot. */
int sandbox_volumes_snapshot(struct sandbox *s, const char *snapshot_id);
/* A fork's volumes (read-only ones: the child holds them too): each of the
 * parent's copies cloned into the child's dir while the parent's vCPUs
 * stand still, as a full snapshot's are. */
int sandbox_volumes_fork(struct sandbox *parent, struct sandbox *child);
int sandbox_volumes_rollback(struct sandbox *s, const char *snapshot_id);
void sandbox_volumes_snapshot_delete(struct sandbox *s, const char *snapshot_id);

/* ---- 2: sandbox-delta.c ---- */

struct objstore;
/* A suspended sandbox's image as deltas against its template build: the
 * four artifacts to upload (its own state.delta and rootfs.delta, the
 * build's mem and rootfs.img, shared) and the files behind them. */
struct sandbox_delta {
        char *paths[4];
        struct objstore_artifact art[4];
        char base_sha[2][OBJSTORE_SHA256_HEX]; /* the build's mem and rootfs.img (hashed once per build) */
};
/* Makes the deltas of suspended sandbox id (SANDBOXES/ID/suspend/) against
 * the build meta's "base" names (when this node has it) or its template's
 * current one, and adds "delta" to meta. -ENOENT: no build to take (the
 * image goes whole, as before deltas). */
int sandbox_delta_make(const char *id, json_t *meta, struct sandbox_delta *ret);
void sandbox_delta_release(struct sandbox_delta *d);
/* Whether an image's meta says it is deltas (its own artifacts then are
 * state.delta and rootfs.delta, beside the build's, shared). */
bool sandbox_delta_of(json_t *meta);
/* With an image's own artifacts in dir (state.delta, rootfs.delta):
 * rebuilds dir/state and dir/rootfs.img against this node's copy of the
 * build, or the image's (fetched from o), and verifies both. *ret_error
 * says what failed. */
int sandbox_delta_reassemble(struct objstore *o, const char *snapshot_id, const uint8_t *data_key, json_t *meta,
                             const char *dir, char **ret_error);

/* ---- 2: sandbox-parked.c ---- */

/*
 * A suspend leaves SANDBOXES/ID/suspend/: "intent" (the snapshot id and
 * whether the sandbox was paused) from the start, "complete" once the full
 * snapshot in state + rootfs.img is whole, "released" once the VM is to be
 * stopped for it (from then on that snapshot is the sandbox), and
 * "uploaded" once the object store holds it whole. A node that finds the
 * directory unparked took over from one killed mid-suspend (or mid-wake);
 * see suspend_takeover(). Parked, it is a suspended sandbox: it wakes from
 * this copy on this node, from the object store elsewhere once uploaded.
 */
#define SUSPEND_INTENT "suspend/intent"
#define SUSPEND_COMPLETE "suspend/complete"
#define SUSPEND_RELEASED "suspend/released"
#define SUSPEND_UPLOADED "suspend/uploaded"

/* A parked directory (a suspended or archived sandbox) keeps only its
 * snapshots and this marker (template, env, execution; no record): true for
 * such a directory. */
#define PARKED_MARKER "parked.json"
bool sandbox_dir_is_parked(const char *dir);
/* The node's object store (NULL: none). */
struct objstore *sandbox_objstore(void);
char *sandbox_marker_path(const char *dir);
int sandbox_clear_but_snapshots(const char *dir);
/* Parks s's directory: only snapshots/ and the marker (template, env,
 * execution as JSON) stay; without snapshots nothing stays. */
int sandbox_park(struct sandbox *s);
/* Removes the parked snapshots of suspended sandbox id (its delete). */
int sandbox_parked_remove(const char *id);
bool sandbox_suspend_has(const char *dir, const char *what);
bool sandbox_suspend_is_released(const char *dir);
int sandbox_suspend_mark(struct sandbox *s, const char *what);
int sandbox_suspend_intent_write(struct sandbox *s, const char *snapshot_id, bool was_paused, const char *wrapped);
json_t *sandbox_suspend_intent_read(const char *dir);
bool sandbox_suspended_local(const char *id, const char *snapshot_id);
json_t *sandbox_suspended_meta(const char *id);
void sandbox_waiting_add(const char *id);
bool sandbox_waiting_take(const char *id);
bool sandbox_waiting_has(const char *id);
void sandbox_upload_start(const char *id, const char *snapshot_id, const struct objstore_data_key *key);
void sandbox_upload_cancel(const char *id);

/* ---- 3: sandbox-suspend.c, for sandbox-image.c ---- */

/* What a wake leaves in DIR/wake/ while it runs. */
#define WAKE_SNAPSHOT "wake/snapshot"
/* A running or paused sandbox's VM saved (memory, devices) at the node's
 * stop, for the next node to resume; STOP_PAUSED when it was paused. */
#define STOP_STATE "stop.state"
/* A deleted sandbox's directory while it is removed: out of the
 * sandboxes' names at once, so that a node killed in the middle of the
 * removal leaves nothing the next node would take for a sandbox (it
 * finishes the removal). */
#define DELETING_SUFFIX ".deleting"
#define STOP_PAUSED "stop.paused"
/* A snapshot's manifest (-ENXIO with *ret_error when it is not
 * restorable); a restore of a downloaded full snapshot into a registered
 * sandbox (on failure it is gone). */
int sandbox_manifest_read(const char *snapshot_id, json_t **ret, char **ret_error);
int sandbox_download_restore(struct sandbox *s, const char *snapshot_id, const uint8_t *data_key, bool mark, bool cold,
                             uint64_t *ret_t_down, char **ret_error);
