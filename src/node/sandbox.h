/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The sandbox registry. A sandbox is a QEMU process restored from a
 * template snapshot plus its guest channel. Each sandbox has one thread of
 * its own that starts (or adopts) its VM, owns the VMM and its QMP
 * connection (pause, resume and full snapshots run on it), watches the
 * VMM's pidfd and the guest channel, marks the sandbox failed (and has it
 * recovered) when the VMM dies, and finally destroys the VMM on delete.
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
        SANDBOX_CMD_SNAPSHOT, /* a full snapshot: cmd_arg is a struct snapshot_job */
};

/* The owner of sandboxes the admin key made, as capabilities name it
 * (tenant ids are "ten-..."). */
#define SANDBOX_TENANT_ADMIN "admin"

/* A sandbox's size within its template's: the memory (MiB) and whole
 * vCPUs its VMM's cgroup allows. 0: the template's. The guest still sees
 * the template's machine (a restore cannot change it): a guest that
 * dirties more memory than this is killed by the kernel (and recovered as
 * after any crash), one that wants more CPU gets this much. */
struct sandbox_limits {
        unsigned memory_mib;
        unsigned vcpus;
};
#define SANDBOX_MEMORY_MIN_MIB 64

/* A volume a sandbox holds (docs/volumes.md): slot i of the sandbox's
 * volumes is the machine's volume slot i (vmm.h). Its image is the
 * sandbox's own while it holds it, SANDBOXES/ID/volumes/I.img (a reflink
 * clone of the store's); a read-write one goes back to the store when the
 * sandbox is deleted. id "" is a free slot. Fixed at create. */
#define SANDBOX_VOLUMES_MAX 4
struct sandbox_volume {
        char id[65];
        char path[1025]; /* where the guest mounts it (PROTO_VOLUME_PATH_MAX) */
        bool read_only;
};

struct sandbox {
        char id[65];
        char tenant[65]; /* owner: a tenant id or SANDBOX_TENANT_ADMIN; set before it is visible, then fixed */
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
        uint64_t fork_pause_ms; /* a fork child: how long its parent's vCPUs stopped */

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
        char *restore_state;     /* the next thread restores this full snapshot (anonymous RAM) */
        int cmd_fd;              /* eventfd: a command for the sandbox thread is pending */
        enum sandbox_cmd cmd;
        void *cmd_arg;
        bool cmd_done;
        int cmd_result;
        struct guestconn **retired_gc; /* channels of earlier VM runs, freed with the last reference */
        size_t n_retired_gc;

        /* surviving a node restart and a VMM crash (s->lock) */
        struct vmm *adopt_vmm;   /* a VM an earlier node started, until the thread takes it over */
        bool resume_after_adopt; /* that VM is paused only by a suspend the earlier node did not finish */
        char *resume_state;      /* the whole snapshot of such a suspend, whose VM is gone: recovery resumes it */
        bool resume_saved;       /* resume_state is the VM the earlier node saved at its stop (STOP_STATE) */
        bool resume_paused;      /* ... which was paused: paused again once resumed */
        bool hand_over;          /* the thread lets go of the VM instead of destroying it */
        unsigned execution;      /* 1 for the created VM, +1 for every start, recovery or restore */
        bool recovering;         /* a recovery runs: shown as state "recovering" */
        json_t *recoveries;      /* [{"at","reason","how","ok","error"?,"checkpoint"?,"checkpoint_at"?}], the last few */
        /* recovery resumes the newest full snapshot taken in the current
         * execution (processes kept, writes after it lost) instead of
         * booting the disk as the crash left it; opt-in */
        bool recover_checkpoint;
        /* its own size within its template's (its VMM's cgroup) */
        struct sandbox_limits limits;
        struct sandbox_volume volumes[SANDBOX_VOLUMES_MAX]; /* fixed at create */
        uint64_t crash_ns[3];    /* when the last VMM crashes happened (monotonic), for the give-up rule */
        /* idleness, as the guest reports it (PING "idle_ms"; s->lock) */
        uint64_t guest_idle_ms;  /* at idle_probe_ns */
        uint64_t idle_probe_ns;  /* monotonic; 0: not probed in this VM run */
        uint64_t run_started_ns; /* monotonic: when this VM run began (a wake or restore is use) */
        /* its guest agent (sandbox-agent.c; s->lock) */
        char agent[64];            /* "airlock-guest 0.2.0" as its channel last said; kept while stopped */
        char *agent_upgrade_error; /* why the last upgrade failed; NULL after one that worked */
        char agent_upgrade_to[64]; /* the agent that upgrade was to: not tried again by itself */
        uint64_t agent_upgrade_ns; /* monotonic: when the last upgrade was tried */

        /* egress: the policy the gateway enforces for this sandbox, canonical
         * JSON text (lib/netpolicy), NULL meaning allow-all (made by an
         * airlockd from before policies). Written under net_lock and lock
         * both; read under either (sandbox_network()). net_lock is held
         * across a change and its hand-over to the gateway, and should be
         * across an attachment's reading of it too, so the gateway always
         * ends up with the newest. Lock order: net_lock, then lock. */
        pthread_mutex_t net_lock;
        char *network;
        /* credentials for the gateway to inject (sandbox.secrets.set): a
         * JSON array text holding their values, so in memory only, never
         * in sandbox.json; NULL: none. Written under net_lock and lock,
         * read under lock (sandbox_secrets_dup()). airlockd hands them
         * over again after a node restart. */
        char *secrets;
};

/* Who hears that a sandbox is deleted, or leaves the node at shutdown or
 * hand-over (command sessions: session.c registers in session_init()): set
 * once at start-up. Called with the sandbox still referenced. */
void sandbox_on_delete(void (*fn)(struct sandbox *s));

/*
 * Every sandbox keeps SANDBOXES/ID/sandbox.json: template, env, the state
 * it should be in (running, paused, stopped), its VM's run dir and its
 * execution number. A node that starts takes over what an earlier one
 * left: a sandbox whose VM still runs is adopted (QMP and the guest channel
 * reconnected; the guest's processes keep running), a stopped one stays
 * stopped, and one whose VM is gone (a VMM crash, a clean node shutdown,
 * a host reboot) is recovered: booted again from its disk as a new
 * execution, in the background. A directory without a valid record is a
 * create that never finished and is removed, as are VMs nobody adopts.
 */
int sandbox_manager_init(const struct node_config *cfg, enum vmm_accel accel, const char *sandboxes_dir);

/* "boot" or "checkpoint": how recovery brings s back (record, marker, meta). */
const char *sandbox_recovery_name(const struct sandbox *s);
/* "limits" of a request, record or image: {"memory_mib"?,"vcpus"?}; zeros
 * when absent, -EBADMSG when malformed. And the object's "limits" from s
 * (nothing when it has none of its own). */
int sandbox_limits_from_json(const json_t *o, struct sandbox_limits *ret);
void sandbox_limits_to_json(const struct sandbox *s, json_t *o);
/* o's "volumes": [{"id","path","read_only"?}], at most SANDBOX_VOLUMES_MAX,
 * filling ret[] in order (absent: none). Ids valid and distinct, paths
 * allowed in a guest (proto_volume_path_is_allowed), distinct and none
 * under another. -EINVAL with *ret_error saying what is wrong. */
int sandbox_volumes_from_json(const json_t *o, struct sandbox_volume ret[SANDBOX_VOLUMES_MAX],
                              char **ret_error);
/* Sets o's "volumes" to what s holds (nothing when none). */
void sandbox_volumes_to_json(const struct sandbox *s, json_t *o);
/* The node's volume store (STORAGE_ROOT/volumes, docs/volumes.md): a new
 * volume id of size bytes (an ext4 file system), a volume made from
 * another's current content (a snapshot), and a deletion. -EEXIST: there
 * is one; -ENOENT: none; -EBUSY: a sandbox holds it. *ret_error says why. */
int sandbox_volume_create(const char *id, uint64_t size, char **ret_error);
/* Whether s holds any volume (fixed at create). */
bool sandbox_has_volumes(const struct sandbox *s);
/* The id of a volume s holds read-write (a fork cannot share it: one
 * writer at a time), or NULL. */
const char *sandbox_volume_rw(const struct sandbox *s);
/* Where s mounts volume id, or NULL when it does not hold it. */
const char *sandbox_volume_path(const struct sandbox *s, const char *id);
int sandbox_volume_clone(const char *id, const char *from, char **ret_error);
int sandbox_volume_delete(const char *id, char **ret_error);
#define SANDBOX_VOLUME_SIZE_MIN (16ull << 20)
#define SANDBOX_VOLUME_SIZE_MAX (16ull << 40)
/* 0 when limits fit template t; else -EINVAL with *ret_error saying why. */
int sandbox_limits_check(const struct sandbox_limits *l, const struct template_info *t, char **ret_error);
/* Reads o's "recovery" into *ret (false without one); -EBADMSG when it is
 * neither "boot" nor "checkpoint". */
int sandbox_recovery_from_json(const json_t *o, bool *ret);

/* What a create is asked for, from a template or from an image. */
#define TEMPLATE_WAIT_MS (15 * 60 * 1000)

struct sandbox_create_opts {
        const char *id;
        json_t *env;                         /* over the template's or image's (may be NULL) */
        const char *tenant;                  /* NULL: the admin's */
        bool recover_checkpoint;             /* recovery from the last full snapshot, not a boot */
        const struct sandbox_limits *limits; /* NULL: the template's */
        const char *network;                 /* canonical egress policy; NULL: allow-all */
        const struct sandbox_volume *volumes; /* [SANDBOX_VOLUMES_MAX] or NULL: none */
        unsigned template_wait_ms;            /* for a template still building; 0: TEMPLATE_WAIT_MS */
};

/* Creates sandbox o->id from template (waiting for a template build in
 * progress), restores its VM and installs its identity. On success returns
 * a reference. On failure nothing is left behind; *ret_error (may be NULL)
 * gets a message for the client. -EEXIST: id taken; -EUSERS: too many
 * sandboxes; -ENOENT: no such template; -EINPROGRESS: template still
 * building after o->template_wait_ms (the build goes on);
 * -EIO: template build failed. */
int sandbox_create(const struct sandbox_create_opts *o, const char *template_name, struct sandbox **ret,
                   char **ret_error);

/* The node's guest agent, "airlock-guest 0.2.0" (its --version, read
 * once); NULL when it cannot be read. */
const char *sandbox_agent_node(void);
/* Upgrades a running sandbox's guest agent to the node's, in place (its
 * processes, sessions and watches go on): 0 when done or when it is as new
 * already; -EBUSY (a verb runs), -EPERM (not running; *ret_state says how
 * it is), -EOPNOTSUPP (its agent predates upgrades), or the failure, with
 * *ret_error saying why (also kept in its "agent"). */
int sandbox_agent_upgrade(struct sandbox *s, const char **ret_state, char **ret_error);
/* The worker that upgrades idle sandboxes by themselves
 * (AIRLOCK_AGENT_UPGRADE_IDLE): started by sandbox_manager_init(), stopped
 * by the shutdown and the hand-over. */
int sandbox_agent_upgrader_start(void);
void sandbox_agent_upgrader_stop(void);

/* Looks up a running or failed sandbox and returns a reference. -ENOENT. */
int sandbox_get(const char *id, struct sandbox **ret);

/* Takes another reference; returns s. */
struct sandbox *sandbox_ref(struct sandbox *s);
/* Drops a reference; the last one frees the sandbox (and its channel). */
void sandbox_unref(struct sandbox *s);

/* For gwclient_setup(): attaches every sandbox with a VM to a gateway that
 * restarted, with new sockets. */
int sandbox_net_reattach_all(void);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sandbox *, sandbox_unref);

/* Deletes: ends its sessions, destroys the VMM (killed and reaped), removes
 * its directory — or with keep_snapshots everything but its snapshots,
 * which stay parked (sandbox_unarchive()). An unknown id whose snapshots
 * are parked loses them. -ENOENT when unknown, -EBUSY while it is being
 * created. */
int sandbox_delete(const char *id, bool keep_snapshots);
/* Makes archived sandbox id (deleted with keep_snapshots) again from one of
 * its kept snapshots: a full one resumes at its instant, a disk one boots;
 * a new execution. -ENOENT when nothing of id is kept, -ENXIO when that
 * snapshot is not. */
int sandbox_unarchive(const char *id, const char *snapshot_id, const char *network, struct sandbox **ret,
                      char **ret_error);

/* Clean node shutdown: every VM is stopped (the guest flushes its disks
 * first); directories and records stay, so the next node recovers them. */
void sandbox_shutdown_all(void);
/* Node hand-over: lets go of every VM without stopping it, for the next
 * node to adopt. */
void sandbox_hand_over_all(void);

/* The guest channel of a running sandbox. -ECONNRESET with *ret_error
 * pointing at the reason when the sandbox failed or was deleted. The
 * channel stays valid while the caller holds its reference. */
int sandbox_guest(struct sandbox *s, struct guestconn **ret);
/* Asks a running guest to write its page cache back (SYNC) within
 * timeout_ms; a failure is logged as "... before WHY" and returned (best
 * effort for the callers: a stop, a suspend, a shutdown, a volume's copy).
 * -ECONNRESET when it is not running. */
int sandbox_guest_sync(struct sandbox *s, int timeout_ms, const char *why);

/* A socket in the sandbox's VM's network namespace, its connection to
 * the guest's port started (vmm_net_connect). -ESRCH without a VM. */
int sandbox_port_connect(struct sandbox *s, uint16_t port, int *ret_fd);

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

/* Forks a running or paused sandbox: a full snapshot of the parent
 * (vmm_snapshot(): live under KVM, the VM stopped for the save under TCG)
 * restored as sandbox child_id with its own identity (hostname, sandbox id,
 * a fresh RNG seed), running. The parent runs on (a paused one stays
 * paused). *ret_child gets a reference. -EEXIST/-EUSERS as for create. */
int sandbox_fork(struct sandbox *parent, const char *child_id, const char *network, struct sandbox **ret_child,
                 const char **ret_state, char **ret_error);

/* The object store suspend uploads to and wake downloads from. */
struct objstore;
void sandbox_set_objstore(struct objstore *o);

/* Suspends a running or paused sandbox: a full snapshot (the VM stays
 * stopped after it), uploaded to the object store as snapshot_id (state +
 * rootfs.img, checksummed, with a manifest carrying the template, env and
 * execution), then every node resource is released: VM, run dir, disk,
 * record. The sandbox is no longer known to this node. On failure it goes
 * on as it was. *ret_info: {"snapshot","memory_bytes","snapshot_ms",
 * "upload_ms","total_ms","pause_ms"}. key: the data key the upload is
 * sealed with (the control plane's, held in memory only; NULL: in the
 * clear). */
struct objstore_data_key;
int sandbox_suspend(struct sandbox *s, const char *snapshot_id, const struct objstore_data_key *key,
                    json_t **ret_info, const char **ret_state, char **ret_error);
/* Wakes suspended sandbox id on this node from snapshot_id in the object
 * store: downloads and verifies the artifacts, restores RAM, devices and
 * disk, installs the identity again; a new execution. -ENXIO when the
 * snapshot is not (completely) there, -EBADMSG when it is not id's (or
 * does not open with key), -ENOKEY when it is sealed and key is NULL. key:
 * the image's data key (NULL: one in the clear, or a wake from this node's
 * copy that the upload it restarts need not seal). */
int sandbox_wake(const char *id, const char *snapshot_id, const char *network, const struct objstore_data_key *key,
                 struct sandbox **ret, char **ret_error);
/* Publishes a running or paused sandbox as an image: a full snapshot (the
 * sandbox runs on) uploaded to the object store as image_id, with a
 * manifest of kind "image" carrying its template and env. -EEXIST when the
 * object store has image_id. *ret_info: {"image","memory_bytes",
 * "snapshot_ms","upload_ms","total_ms","pause_ms"}. */
int sandbox_publish(struct sandbox *s, const char *image_id, const struct objstore_data_key *key, json_t **ret_info,
                    const char **ret_state, char **ret_error);
/* Exports s's kept snapshot snapshot_id to the object store as image
 * image_id: a full one resumes where it was taken, a disk one (meta "boot":
 * "cold") boots. s goes on as it is, in any state. -ENXIO when s has no
 * such snapshot, -EEXIST when the object store has image_id. *ret_info:
 * {"image","snapshot","kind","memory_bytes","upload_ms","total_ms"}. */
int sandbox_export(struct sandbox *s, const char *snapshot_id, const char *image_id,
                   const struct objstore_data_key *key, json_t **ret_info, char **ret_error);
/* Makes sandbox o->id from image image_id, as sandbox_create() makes one
 * from a template: its memory, processes and disk, with its own identity;
 * o->env over the image's. The image stays. -ENOENT when there is no such image,
 * -EBADMSG when image_id is no image. */
int sandbox_create_from_image(const struct sandbox_create_opts *o, const char *image_id,
                              const struct objstore_data_key *key, struct sandbox **ret, char **ret_error);
/* Deletes a suspended sandbox's image (or an image) from the object store
 * and, given the sandbox's id, its copy on this node (its upload stops
 * first). -ENOENT when there was neither. */
int sandbox_suspended_delete(const char *id, const char *snapshot_id);
/* Where suspended image snapshot_id of sandbox id (NULL: not known) is:
 * *ret_local when this node holds its copy (it wakes here from that),
 * *ret_uploaded when the object store holds it whole (its manifest landed:
 * any node can wake it). *ret_wrapped_key: the wrapped data key it is
 * sealed with (NULL: in the clear), for the control plane to unwrap
 * before a wake. -ENOENT when neither. */
int sandbox_suspended_get(const char *id, const char *snapshot_id, bool *ret_local, bool *ret_uploaded,
                          char **ret_wrapped_key);
/* A suspended copy found at the node's start whose sealed upload waits for
 * its data key (in memory only, so lost with the old node): whether id's
 * does; the ids of all that do (a JSON array); and the key, which starts
 * the upload (-EALREADY when it is not waiting, -ENOENT when there is no
 * such copy). */
bool sandbox_suspended_waits_for_key(const char *id);
json_t *sandbox_uploads_waiting_json(void);
int sandbox_suspended_upload(const char *id, const char *snapshot_id, const struct objstore_data_key *key);
/* Tells the uploads of suspended sandboxes to stop (the node is ending;
 * the next one resumes them). */
void sandbox_uploads_stop(void);

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
/* Takes full snapshot snapshot_id of a running or paused sandbox: its RAM
 * and device state (SNAP.state, a migration stream, see vmm_snapshot()) and its disk
 * (SNAP.img, reflinked while the vCPUs are stopped), of one instant. The
 * VM runs on (a paused one stays paused). *ret_info as for disk snapshots
 * plus "kind":"full","pause_ms","downtime_ms","total_ms","memory_bytes". */
int sandbox_snapshot_full(struct sandbox *s, const char *snapshot_id, json_t **ret_info, const char **ret_state,
                          char **ret_error);
/* Rolls a running or stopped sandbox back to a snapshot: stops it if
 * running and replaces rootfs.img with a clone of the snapshot's disk; a
 * disk snapshot is then cold-booted, a full one restored (RAM and devices:
 * it resumes exactly at its running point) as a new execution. -ENXIO when
 * there is no such snapshot. */
int sandbox_rollback(struct sandbox *s, const char *snapshot_id, const char **ret_state, char **ret_error);
/* Removes one snapshot image. -ENOENT when there is none. */
int sandbox_snapshot_delete(struct sandbox *s, const char *snapshot_id);

/* "running", "paused", "stopped", "failed", "recovering" ("creating"
 * while hidden). */
const char *sandbox_state_name(struct sandbox *s);

/* {"id","template","state","pid","restore_ms","execution","recoveries","error"?} */
json_t *sandbox_json(struct sandbox *s);
/* SANDBOXES/ID/rootfs.img: sandbox id's disk (the caller frees). */
char *sandbox_disk_path(const char *id);

/* [sandbox_json...] of every running or failed sandbox. */
json_t *sandbox_list_json(void);

/*
 * Egress policies (docs/network.md). Every function that makes a sandbox
 * (create, fork, wake, unarchive) takes its policy as canonical JSON text
 * (checked by the caller with netpolicy_parse(); NULL: allow-all, what an
 * airlockd from before policies means; a fork: the parent's), set before
 * its VM starts.
 *
 * sandbox_network(): the policy, never NULL ("{\"mode\":\"allow-all\"}" for
 * none). Valid while the caller holds s->lock or sandbox_network_lock():
 * hold the latter across handing it to the gateway (gwclient_attach()), so
 * a concurrent sandbox_set_network() cannot be lost.
 */
/* A command that names no working directory or user gets its template's
 * (a template built from a spec: WORKDIR, USER), else root's /root. The
 * pointers stay valid while the caller holds its reference to s and
 * *ret_hold (template_info_free(), NULL-safe). */
struct template_info;
void sandbox_exec_defaults(struct sandbox *s, const char **cwd, const char **user, struct template_info **ret_hold);

const char *sandbox_network(struct sandbox *s);
void sandbox_network_lock(struct sandbox *s);
void sandbox_network_unlock(struct sandbox *s);
/* Replaces the policy (text as above, not NULL) under the network lock,
 * hands it to the gateway (gwclient_set_policy(): new connections follow
 * it; a gateway that does not know the sandbox, or none at all, gets it at
 * the next attachment) and records it. Unchanged text does nothing. 0, or
 * the gateway's error, with the new policy kept. */
int sandbox_set_network(struct sandbox *s, const char *text);

/*
 * Credentials (nodeops-secrets.c checks them first). sandbox_set_secrets():
 * replaces the set (text: a JSON array; "[]" clears it) and hands it to the
 * gateway when the sandbox has a VM there. sandbox_secrets_dup(): a copy of
 * the set (free it with sandbox_secrets_free()), NULL when it has none: for
 * whatever attaches the sandbox to a gateway again.
 */
int sandbox_set_secrets(struct sandbox *s, const char *text);
char *sandbox_secrets_dup(struct sandbox *s);
/* Wipes and frees a set; NULL is fine. */
void sandbox_secrets_free(char *text);
