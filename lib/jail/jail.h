/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The VMM jail: starts one program (QEMU) under its own uid/gid, in new
 * mount, pid, ipc, uts and network namespaces, on a private root that holds
 * only the paths the spec names, in the cgroups the spec names, with
 * no_new_privs, no capabilities and a fixed fd set. Self-contained and
 * driven by one small spec with no strings to interpret (no shell, no
 * command building), so a root node manager can later serve it as one fixed
 * request. See docs/security.md, "The VMM jail".
 *
 * Also the check the node runs on every connection to a VMM socket
 * (jail_peer_verify): the listener on the other end must be that very
 * process.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JAIL_MOUNTS_MAX 32
#define JAIL_CGROUPS_MAX 8
#define JAIL_KEEP_FDS_MAX 4

/* What every VMM gets (docs/security.md, "The VMM jail"). */
#define JAIL_VMM_MEMORY_MARGIN_MIB 192 /* QEMU's own beyond guest RAM: TCG's 32 MiB buffer, heap, I/O */
#define JAIL_VMM_PIDS_MAX 256          /* threads: vCPUs, the main loop, RCU, up to 64 I/O workers */
#define JAIL_VMM_NOFILE 4096
/* VM uids (and gids) are base + slot; the default base (AIRLOCK_VMM_UID_BASE) */
#define JAIL_VM_UID_BASE_DEFAULT 2000000u

enum jail_mount_kind {
        JAIL_BIND_RO,  /* file or directory, read-only, nosuid, nodev */
        JAIL_BIND_RW,  /* file or directory, read-write, nosuid, nodev, noexec */
        JAIL_BIND_DEV, /* a device node, read-write, nosuid, noexec */
        JAIL_SYMLINK,  /* target becomes a symlink to source */
        JAIL_PROC,     /* a procfs of the jail's own pid namespace at target */
        JAIL_DEV_NODE, /* a character device node of the jail's own at target: the numbers of the host's
                        * node source, owned by the jail's uid and gid, mode 0600. The VMM opens it
                        * whatever owner and mode the host's node has (/dev/kvm is 0660 root:kvm where
                        * udev's rule set it, 0600 root:root where none did) and needs no group */
};

struct jail_mount {
        enum jail_mount_kind kind;
        const char *source; /* host path (binds) or link text (symlinks); NULL for a bind of tree_fd */
        const char *target; /* absolute path inside the jail */
        int tree_fd;        /* binds with no source: a detached mount of the very file or dir to bind,
                             * from open_tree(OPEN_TREE_CLONE) (no path is looked up again) */
};

struct jail_spec {
        const char *binary;    /* absolute path, exec'd with argv and an empty environment */
        char *const *argv;
        uid_t uid;             /* > 0 */
        gid_t gid;             /* > 0 */
        const char *root_dir;  /* existing empty host dir: the private root is mounted on it
                                * (inside the child's mount namespace only) */
        const struct jail_mount *mounts;
        size_t n_mounts;       /* <= JAIL_MOUNTS_MAX; a target never lies under an earlier bind's */
        const char *const *cgroup_procs; /* cgroup.procs files the child joins before anything else */
        size_t n_cgroups;      /* <= JAIL_CGROUPS_MAX */
        int stdin_fd, stdout_fd;        /* stderr is stdout */
        const int *keep_fds;   /* passed on purpose: they become fds 3, 4, ... */
        size_t n_keep_fds;     /* <= JAIL_KEEP_FDS_MAX */
        bool join_netns;       /* joins netns_fd (a namespace vmnet_create() made, with the VM's tap)
                                * instead of a new, empty network namespace */
        int netns_fd;
        unsigned nofile;       /* RLIMIT_NOFILE */
        unsigned nproc;        /* RLIMIT_NPROC (threads of the uid) */
};

/* -EINVAL unless the spec is complete and within its limits: absolute
 * normalised paths (no "..", no "//"), uid/gid > 0, fds valid, no mount
 * target under an earlier bind target. */
int jail_spec_validate(const struct jail_spec *s);

/* What a jailed VMM of uid/gid gets of KVM: a /dev/kvm node of its own as
 * JAIL_DEV_NODE makes it, opened by a process holding only that uid and gid
 * (no groups, no capabilities), KVM_GET_API_VERSION answered 12 and
 * KVM_CREATE_VM working. Run as root (it makes the node in a private mount
 * namespace of a child). 0 if all hold; otherwise a negative errno,
 * reason (n bytes) says which step failed and *ret_fix (may be NULL) what
 * an operator does about it. */
int jail_kvm_probe(uid_t uid, gid_t gid, char *reason, size_t n, const char **ret_fix);

/* Whether jailed VMMs of uid (its gid the same number) can run KVM guests:
 * the cpu has vmx/svm and /dev/kvm opens here (host_kvm_usable()), and,
 * when this process is root, jail_kvm_probe() passes for uid. reason (n
 * bytes) says why or why not, with the fix when the probe failed. */
bool jail_kvm_usable(uid_t uid, char *reason, size_t n);

/* Starts the jailed process (clone3: the pidfd comes with the process, no
 * race with pid reuse). Returns its pid (in the caller's pid namespace) and
 * pidfd. A step that fails in the child is written to stdout_fd as
 * "airlock-jail: STEP failed: errno N" and the child exits 127. The caller
 * reaps the child as usual (SIGCHLD). */
int jail_spawn(const struct jail_spec *s, pid_t *ret_pid, int *ret_pidfd);

/* The start time of pid in clock ticks since boot (/proc/PID/stat field
 * 22): with the pid it names one process for good, across pid reuse. */
int jail_process_start_time(pid_t pid, uint64_t *ret);

/* Who must be on the other end of a VMM socket. */
struct jail_peer {
        pid_t pid;           /* in our pid namespace */
        int pidfd;           /* of pid, held across the check */
        uint64_t start_time; /* jail_process_start_time() when it was recorded */
        uid_t uid;           /* its uid */
        dev_t exe_dev;       /* stat() of the binary it must run; exe_ino 0: not checked here (the */
        ino_t exe_ino;       /* caller has airlock-nodemgr check it: another uid's exe is not ours to see) */
};

/* Checks the peer of connected Unix socket fd: SO_PEERCRED (the process
 * that called listen()) is want->pid with want->uid, /proc/PID shows the
 * recorded start time and the expected executable (device and inode, so a
 * bind mount of the same file matches), and want->pidfd shows the process
 * alive after these reads (so the pid was not reused in between). 0 if
 * all hold, -EPERM if one does not, another negative errno if the check
 * itself failed. Nothing is read from or written to fd. */
int jail_peer_verify(int fd, const struct jail_peer *want);

/* ---- cgroups: one per jailed VM, named by its uid ---- */

/* Finds the controllers the node can use for its VMs, once: cgroup v2 when
 * the node's own v2 cgroup offers memory, pids and cpu and they can be
 * enabled for its children; otherwise the v1 hierarchies of memory, pids
 * and cpu that exist and are writable; otherwise none (logged as a
 * warning). Logs what it chose. Idempotent. */
void jail_cgroup_setup(void);

/* true when jail_cgroup_setup() found at least one usable controller: then
 * a VM whose cgroup cannot be made must not start. */
bool jail_cgroup_available(void);

struct jail_cgroup_limits {
        uint64_t memory_bytes; /* memory.max / memory.limit_in_bytes */
        unsigned pids;         /* pids.max */
        unsigned cpus;         /* cpu quota in whole CPUs */
};

/* Makes the cgroup "airlock-vm-UID" in every hierarchy in use, with the
 * limits, and returns the cgroup.procs files the jail joins (up to
 * JAIL_CGROUPS_MAX, strings to free with jail_cgroup_procs_free). One that
 * exists already is removed first if empty; -EBUSY if processes are in it
 * (the uid is in use: a live VM of this or another node) or if it was made
 * in the last 15 s (another node's claim, its VM about to join). Without
 * usable controllers 0 with *ret_n = 0. */
int jail_cgroup_create(uid_t uid, const struct jail_cgroup_limits *l, char **ret_procs, size_t *ret_n);
void jail_cgroup_procs_free(char **procs, size_t n);

/* Removes the cgroup of uid from every hierarchy (after its VM ended;
 * retries briefly while the kernel still counts the exiting process).
 * 0 also when there was none. */
int jail_cgroup_remove(uid_t uid);

/* Removes every empty VM cgroup of a uid in [base, base + count): those
 * of VMs that ended while nobody could remove theirs (airlock-nodemgr
 * was down). A cgroup with a process in it, or made in the last
 * JAIL_CGROUP_FRESH_S s (another node's fresh claim, or a VM that ended
 * just as airlock-nodemgr went), stays; *ret_fresh (may be NULL) counts
 * those empty but fresh: sweep again once they are not. The number
 * removed. */
#define JAIL_CGROUP_FRESH_S 15
int jail_cgroup_sweep(uid_t base, uint32_t count, unsigned *ret_fresh);
