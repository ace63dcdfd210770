/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The sandbox registry. A sandbox is a QEMU process restored from a
 * template snapshot plus its guest channel. Each sandbox has one thread of
 * its own that spawns QEMU (so QEMU's parent-death signal follows the
 * sandbox, not a short-lived connection thread), then watches the VMM's
 * pidfd and the guest channel and marks the sandbox failed when either dies,
 * and finally destroys the VMM on delete.
 *
 * Sandboxes are reference counted: ops hold a reference while they use one,
 * so a delete during an exec is safe (the exec fails with a guest error
 * once the VMM is gone; memory is freed with the last reference).
 */

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "macros.h"
#include "vmm.h"

struct node_config;
struct guestconn;
struct template_info;

enum sandbox_state {
        SANDBOX_CREATING, /* not visible to get/list yet */
        SANDBOX_RUNNING,
        SANDBOX_FAILED,
        SANDBOX_PAUSED,  /* VM in memory, vCPUs stopped (QMP stop) */
        SANDBOX_STOPPED, /* no VM; SANDBOXES/ID/rootfs.img kept for a start */
};

/* A request the sandbox thread carries out on the VMM it owns. */
enum sandbox_cmd {
        SANDBOX_CMD_NONE,
        SANDBOX_CMD_PAUSE,
        SANDBOX_CMD_RESUME,
};

struct sandbox {
        char id[65];
        char ctx[80]; /* "sandbox=ID" */
        char *template_name;
        char *dir;     /* SANDBOXES/ID: rootfs.img */
        char *run_dir; /* DATA_DIR/run/vm/N: QEMU's sockets and logs (short paths) */
        unsigned refs;

        pthread_mutex_t lock; /* the fields below */
        pthread_cond_t cond;
        enum sandbox_state state;
        char *error;          /* why it failed */
        bool deleted;
        struct vmm *vmm;      /* owned by the sandbox thread */
        struct guestconn *gc; /* set once running; freed with the last reference */
        pid_t pid;
        uint64_t restore_ms;
        bool pool_hit;        /* made from a warm pool VM (pool.h) */

        /* the sandbox thread */
        pthread_t thread;
        bool thread_started;
        int stop_fd; /* eventfd: delete asks the thread to destroy the VMM */
        bool start_done;
        int start_result;
        char *start_error;
        struct template_info *tpl;
        json_t *env;
        struct pool_vm *pool_vm; /* claimed warm VM, until the thread takes it over */

        /* lifecycle verbs (s->lock) */
        bool life_busy;          /* a pause/resume/stop/start runs: others and delete are refused */
        bool cold_boot;          /* the next thread boots from the disk instead of restoring */
        int cmd_fd;              /* eventfd: a command for the sandbox thread is pending */
        enum sandbox_cmd cmd;
        bool cmd_done;
        int cmd_result;
        struct guestconn **retired_gc; /* channels of earlier VM runs, freed with the last reference */
        size_t n_retired_gc;
};

/* Sets up the registry and removes sandbox directories left by an earlier
 * run (their QEMUs died with it). */
int sandbox_manager_init(const struct node_config *cfg, const char *sandboxes_dir);

/* Creates sandbox id from template (waiting for a template build in
 * progress), restores its VM and installs its identity. On success returns
 * a reference. On failure nothing is left behind; *ret_error (may be NULL)
 * gets a message for the client. -EEXIST: id taken; -EUSERS: too many
 * sandboxes; -ENOENT: no such template; -EAGAIN: template still building;
 * -EIO: template build failed. */
int sandbox_create(const char *id, const char *template_name, json_t *env, struct sandbox **ret, char **ret_error);

/* Looks up a running or failed sandbox and returns a reference. -ENOENT. */
int sandbox_get(const char *id, struct sandbox **ret);

/* Takes another reference; returns s. */
struct sandbox *sandbox_ref(struct sandbox *s);
/* Drops a reference; the last one frees the sandbox (and its channel). */
void sandbox_unref(struct sandbox *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sandbox *, sandbox_unref);

/* Deletes: ends its sessions, destroys the VMM (killed and reaped), removes
 * its directory. -ENOENT when unknown, -EBUSY while it is being created. */
int sandbox_delete(const char *id);

/* Deletes every sandbox (shutdown). */
void sandbox_delete_all(void);

/* The guest channel of a running sandbox. -ECONNRESET with *ret_error
 * pointing at the reason when the sandbox failed or was deleted. The
 * channel stays valid while the caller holds its reference. */
int sandbox_guest(struct sandbox *s, struct guestconn **ret);

/* The failure reason of a sandbox that is not running (copy), or NULL. */
char *sandbox_error(struct sandbox *s);

/* Lifecycle verbs. Each refuses with -EBUSY while another one (or a
 * create) runs on s, and with -EPERM when s is not in a state the verb
 * starts from (*ret_state, if given, then names the current state).
 * pause/resume: QMP stop/cont, carried out by the sandbox thread that owns
 * the VMM. stop: destroys the VM (its guest channel closes, so sessions end
 * with an exit event), keeps the directory. start: boots the stopped
 * sandbox's own disk with the template's kernel and initramfs, RAM in
 * SANDBOXES/ID/mem, waits for the agent and installs the identity again.
 * ret_error (may be NULL) gets a message on other failures. */
int sandbox_pause(struct sandbox *s, const char **ret_state, char **ret_error);
int sandbox_resume(struct sandbox *s, const char **ret_state, char **ret_error);
int sandbox_stop(struct sandbox *s, const char **ret_state, char **ret_error);
int sandbox_start(struct sandbox *s, const char **ret_state, char **ret_error);

/* Disk snapshots live in SANDBOXES/ID/snapshots/SNAP.img (deleted with the
 * sandbox); at most this many per sandbox. */
#define SANDBOX_SNAPSHOTS_MAX 64

/* Takes disk snapshot snapshot_id of a running sandbox (the guest freezes
 * its file systems around a reflink of rootfs.img; the VM keeps running) or
 * a stopped one (just the reflink). *ret_info gets {"id","size" (allocated
 * bytes),"apparent_size","created_at" (Unix ms),"freeze_ms"}. -EBUSY/-EPERM
 * as for the verbs (paused: -EPERM), -EEXIST when the id is taken, -E2BIG
 * at SANDBOX_SNAPSHOTS_MAX. *ret_error gets a message on failure. */
int sandbox_snapshot(struct sandbox *s, const char *snapshot_id, json_t **ret_info, const char **ret_state,
                     char **ret_error);
/* Rolls a running or stopped sandbox back to a disk snapshot: stops it if
 * running, replaces rootfs.img with a clone of the snapshot and cold-boots
 * it. -ENXIO when there is no such snapshot. */
int sandbox_rollback(struct sandbox *s, const char *snapshot_id, const char **ret_state, char **ret_error);
/* Removes one snapshot image. -ENOENT when there is none. */
int sandbox_snapshot_delete(struct sandbox *s, const char *snapshot_id);

/* "running", "paused", "stopped", "failed" ("creating" while hidden). */
const char *sandbox_state_name(struct sandbox *s);

/* {"id","template","state","pid","restore_ms","error"?} */
json_t *sandbox_json(struct sandbox *s);

/* [sandbox_json...] of every running or failed sandbox. */
json_t *sandbox_list_json(void);
