/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Private to sandbox.c (registry, record, sandbox thread, create/delete),
 * sandbox-lifecycle.c (verbs, crash recovery), sandbox-snapshot.c (fork,
 * suspend/wake, snapshots, rollback) and sandbox-image.c (images): the
 * state and helpers they share. Nothing else includes it; the interface is sandbox.h. Each
 * helper's comment is at its definition.
 */

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox.h"
#include "vmm.h"

struct node_config;

/* How long a create waits for a template that is being built. */
#define TEMPLATE_WAIT_MS (15 * 60 * 1000)
/* pause/resume wait at most this for the sandbox thread (its QMP call is
 * bounded by QMP_RUNSTATE_MS; the rest is slack for a busy host). */
#define LIFECYCLE_CMD_WAIT_MS 15000

/* ---- state, defined in sandbox.c ---- */

extern const struct node_config *scfg;
extern char *sdir;               /* SANDBOXES */
extern pthread_mutex_t reg_lock; /* guards reg, reg_n */
extern struct sandbox **reg;
extern size_t reg_n, reg_cap;
extern pthread_mutex_t clone_lock; /* guards warned_copy */
extern bool warned_copy;

/* A full snapshot the sandbox thread takes (vmm_snapshot()): RAM and
 * device state to state_path, and the disk reflinked to disk_dst while the
 * vCPUs are stopped, so both are of one instant. */
struct snapshot_job {
        struct sandbox *s;
        const char *state_path;
        const char *disk_dst;
        bool leave_paused;
        struct vmm_snapshot_stats stats;
};

/* ---- sandbox.c ---- */

/* the registry (reg_lock held) */
struct sandbox *reg_find(const char *id);
void reg_remove(struct sandbox *s);
/* Registers s (hidden while CREATING): -EEXIST when its id is taken,
 * -EUSERS at max_sandboxes, with *ret_error (may be NULL) saying so. */
int reg_add(struct sandbox *s, char **ret_error);
/* A new sandbox whose VM runs: RUNNING (visible to get/list) and recorded. */
void sandbox_make_visible(struct sandbox *s);

bool sandbox_state_is(struct sandbox *s, enum sandbox_state st);
const char *state_name(enum sandbox_state st);
int record_save(struct sandbox *s);
/* checkpoint (NULL: none) is the full snapshot the recovery resumed and
 * checkpoint_at_ms when it was taken (Unix ms). */
void recoveries_add(struct sandbox *s, const char *reason, const char *how, bool ok, const char *error,
                    const char *checkpoint, int64_t checkpoint_at_ms);
/* network: canonical policy text, or NULL (allow-all) */
int sandbox_new(const char *id, const char *template_name, json_t *env, const char *network, struct sandbox **ret);
/* Sets s->tenant from o's "tenant" (a record, a parked marker, a suspend
 * manifest's meta); SANDBOX_TENANT_ADMIN when o has none. -EBADMSG when it
 * is not a valid name. */
int sandbox_tenant_from_json(struct sandbox *s, const json_t *o);
int run_sandbox_thread(struct sandbox *s, char **ret_error);
void stop_thread(struct sandbox *s);
void create_abort(struct sandbox *s);

/* A full snapshot's state file remembers the execution it was taken in
 * (an xattr; a file system without them leaves it untagged: never resumed
 * by recovery). */
int snapshot_execution_set(const char *state_path, unsigned execution);
int snapshot_execution_get(const char *state_path, unsigned *ret);

/* What a suspend cut off by a node's death left in SANDBOXES/ID/suspend/,
 * for the node taking s over (its record loaded, s->adopt_vmm decided):
 * with the VM still there, it goes on as before the suspend; without it but
 * with the whole snapshot, s->resume_state is set (1 is returned), since
 * that is its latest state; an uploaded image is removed as stale, and so
 * is the directory. */
int suspend_takeover(struct sandbox *s, bool vm_adopted);
/* A node start found suspended sandbox id parked in dir: the upload of its
 * copy that did not land starts again. */
void suspended_takeover(const char *id, const char *dir);
/* What a wake cut off left in DIR/wake/, for the node taking over the
 * sandbox in dir (which has a record, so the wake made it visible): the
 * image it was woken from is stale and goes, and so does the directory. */
void wake_takeover(const char *dir);

/* ---- sandbox-lifecycle.c ---- */

int life_begin(struct sandbox *s, enum sandbox_state from, enum sandbox_state from2, const char **ret_state);
void life_end(struct sandbox *s);
int post_command(struct sandbox *s, enum sandbox_cmd cmd, void *arg, int64_t wait_ms);
void stop_claimed(struct sandbox *s, bool flush);
int start_claimed(struct sandbox *s, char **ret_error);
int sandbox_template(struct sandbox *s, char **ret_error);
/* Creates the RAM file of a cold boot (memory_mib of s->tpl, sparse). */
int ram_file_create(struct sandbox *s, const char *path, char **ret_error);
void recover_schedule(struct sandbox *s, const char *reason);

/* ---- sandbox-snapshot.c ---- */

char *snapshot_path(struct sandbox *s, const char *snapshot_id);
char *snapshot_state_path(struct sandbox *s, const char *snapshot_id);
int clone_replace(struct sandbox *s, const char *src, const char *dst);
/* For sandbox-image.c (sandbox-snapshot.c has them): the node's object
 * store (NULL: none); a new sandbox id registered (CREATING, hidden, its
 * directory fresh); its undoing; a snapshot's manifest (-ENXIO with
 * *ret_error when it is not restorable); a restore of a downloaded full
 * snapshot, and a boot of a disk, into a registered sandbox (on failure
 * it is gone). */
struct objstore *sandbox_objstore(void);
int register_new(const char *id, const char *template_name, json_t *env, const char *network,
                 struct sandbox **ret, char **ret_error);
void new_abort(struct sandbox *s);
int manifest_read(const char *snapshot_id, json_t **ret, char **ret_error);
int download_restore(struct sandbox *s, const char *snapshot_id, const uint8_t *data_key, bool mark, bool cold,
                     uint64_t *ret_t_down, char **ret_error);
int boot_new(struct sandbox *s, char **ret_error);
/* A parked directory (a suspended or archived sandbox) keeps only its
 * snapshots and this marker (template, env, execution; no record): true for
 * such a directory. */
#define PARKED_MARKER "parked.json"
bool sandbox_dir_is_parked(const char *dir);
/* Parks s's directory: only snapshots/ and the marker (template, env,
 * execution as JSON) stay; without snapshots nothing stays. */
int sandbox_park(struct sandbox *s);
/* Removes the parked snapshots of suspended sandbox id (its delete). */
int sandbox_parked_remove(const char *id);
