/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node manager's request channel (docs/security.md, "Privileges"):
 * airlock-node, unprivileged, asks airlock-nodemgr, root, for the few
 * privileged operations it needs. One request per connection on
 * DATA_DIR/run/nodemgr.sock, in the lib/proto framing:
 *
 *   node -> nodemgr  PROTO_MGR_REQUEST {"op":s, ...}   (+ fds, SCM_RIGHTS)
 *   nodemgr -> node  PROTO_MGR_REPLY   {"ok":true, ...} or
 *                                      {"error":{"errno":n,"message":s}}
 *
 * This module is the contract both sides share: the fixed set of
 * operations, the strict parser that turns a request's bytes into a typed
 * struct (every argument checked against the manager's policy before
 * anything acts on it), the formatter the node uses, and the framing with
 * fds. Nothing here is privileged; the handlers live in src/nodemgr/.
 *
 * Paths on the wire are absolute and canonical (no "//", ".", "..",
 * trailing "/"), lie strictly under one of the policy's roots, have at most
 * MGR_PATH_DEPTH_MAX components below it, each a plain name
 * ([A-Za-z0-9._-], not "." or ".."). The manager then opens them
 * from its own fd of that root with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): a symlink
 * anywhere on the way is refused, never followed (mgr_open_beneath).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MGR_SOCKET_NAME "nodemgr.sock" /* in DATA_DIR/run */
#define MGR_ROOTS_MAX 4
#define MGR_PATH_DEPTH_MAX 8
#define MGR_FDS_MAX 4
#define MGR_REQUEST_MAX 65536 /* bytes of JSON; far below PROTO_MAX_PAYLOAD */
#define MGR_ARGV_MAX 128
#define MGR_ARG_MAX 4096
#define MGR_PATH_MAX 4096
#define MGR_VOLUMES_MAX 4 /* VMM_VOLUMES_MAX: the machine's volume slots */

enum mgr_op {
        MGR_OP_PING,          /* {} -> {"uid":n}: the channel works, the caller was accepted */
        MGR_OP_VMM_VERIFY,    /* {"pid","start_time","uid"} -> {}: that process is one of our VMs */
        MGR_OP_VMM_SIGNAL,    /* {"pid","start_time","uid","signal":"kill"|"term"} -> {} */
        MGR_OP_CGROUP_REMOVE, /* {"uid"} -> {}: removes the (empty) cgroup airlock-vm-UID */
        MGR_OP_FILE_GIVE,     /* {"path","uid","mode"} -> {}: hands a VM file or dir to a VM uid,
                               * group the node's, mode 0600/0660 (files) or 0700/2770 (dirs) */
        MGR_OP_FILE_RECLAIM,  /* {"path","mode"} -> {}: a file a VM wrote (a built template's disk,
                               * RAM, console log) back to the node user, 0600/0640/0644 */
        MGR_OP_TEMPLATE_STEP, /* {"step":"kernel"|"initramfs"|"rootfs"|"base","name","dir","out",
                               * "kernel_dir","argv"?} + fd [the build log]: runs images/kernel.sh,
                               * initramfs.sh, templates/NAME.sh or (base: a template built from
                               * a spec) debian.sh / oci.sh with argv's checked parameters, as
                               * root into a root-only staging dir, then moves the result to
                               * dir/out, the node's */
        MGR_OP_VMM_SPAWN,     /* {"uid","run_dir","kernel","initrd","disk","disk_target","mem",
                               *  "template_ram","kvm","memory_mib","vcpus","argv",
                               *  "volumes"?:[{"path","target"}]} + fds
                               * [QEMU's stdout, the sealed template RAM when template_ram]
                               * -> {"pid","start_time","exe_dev","exe_ino"} + fds [its pidfd, the
                               * gateway's TCP listener and DNS socket in its network namespace,
                               * made with its tap: lib/vmnet] */
        MGR_OP_NET_LISTEN,    /* {"pid","start_time","uid"} -> {} + fds [new gateway sockets in the
                               * namespace of that VM: for a gateway that restarted] */
        MGR_OP_NET_CONNECT,   /* {"pid","start_time","uid","port"} -> {} + fd [a TCP socket made in
                               * that VM's namespace, connecting to the guest's port: a service port] */
        MGR_OP_MAX,
};

/* What the manager accepts: fixed at its start. */
struct mgr_policy {
        uid_t vm_uid_base;  /* VM uids are [base, base + count) */
        uint32_t vm_uid_count;
        const char *roots[MGR_ROOTS_MAX]; /* absolute canonical dirs the node's files live under */
        size_t n_roots;
};

struct mgr_request {
        enum mgr_op op;
        pid_t pid;            /* VMM_VERIFY, VMM_SIGNAL */
        uint64_t start_time;  /* VMM_VERIFY, VMM_SIGNAL: /proc/PID/stat field 22 */
        uid_t uid;            /* a VM uid: VMM_*, CGROUP_REMOVE, FILE_GIVE */
        int signal;           /* VMM_SIGNAL: SIGKILL or SIGTERM */
        uint16_t port;        /* NET_CONNECT: 1..65535 */
        unsigned mode;        /* FILE_GIVE */
        size_t root;          /* FILE_GIVE: index into policy->roots */
        char path[MGR_PATH_MAX]; /* FILE_GIVE, FILE_RECLAIM: absolute, canonical, under roots[root] */
        /* TEMPLATE_STEP */
        char step[16];        /* kernel, initramfs, rootfs, base */
        char name[65];        /* rootfs, base: the template ([a-z0-9][a-z0-9_-]*), else "" */
        char dir[MGR_PATH_MAX]; /* a root or under one: where out lands */
        char out[65];         /* a plain name in dir */
        char kernel_dir[MGR_PATH_MAX]; /* initramfs: the built kernel; base: the dir holding an OCI
                                        * archive or layout, or "" (under a root) */
        /* VMM_SPAWN: every path absolute, canonical, under a root (mem: or "") */
        char run_dir[MGR_PATH_MAX], kernel[MGR_PATH_MAX], initrd[MGR_PATH_MAX], disk[MGR_PATH_MAX],
                disk_target[MGR_PATH_MAX], mem[MGR_PATH_MAX];
        bool template_ram, kvm;
        /* VMM_SPAWN: volume images (each the VM's like its disk) bound at
         * their targets (the paths QEMU is given); targets distinct */
        char volumes[MGR_VOLUMES_MAX][MGR_PATH_MAX], volume_targets[MGR_VOLUMES_MAX][MGR_PATH_MAX];
        size_t n_volumes;
        unsigned memory_mib;  /* 16 .. 1 TiB */
        unsigned vcpus;       /* 1 .. 256 */
        char *argv[MGR_ARGV_MAX + 1]; /* VMM_SPAWN: QEMU's; TEMPLATE_STEP base: ["debian", DISK_MIB,
                                       * SUITE, "PKG,PKG..."...] or ["oci", DISK_MIB, REF];
                                       * NULL-terminated; mgr_request_release() */
};

/* The op's wire name ("vmm.signal"), or NULL. */
const char *mgr_op_name(enum mgr_op op);

/* Whether uid is a VM uid under p. */
bool mgr_policy_vm_uid(const struct mgr_policy *p, uid_t uid);

/* Checks path against p (the rules above). Returns the index of the root
 * it lies under, or -EINVAL. */
int mgr_path_check(const struct mgr_policy *p, const char *path);

/* Parses and validates one request (len bytes of JSON, not necessarily
 * NUL-terminated). Unknown ops, unknown or missing keys, wrong types,
 * values out of range: -EINVAL with a reason in err (size n). *ret is
 * complete only on success. */
int mgr_request_parse(const void *json, size_t len, const struct mgr_policy *p, struct mgr_request *ret,
                      char *err, size_t n);

/* Frees what a parsed request holds (argv). */
void mgr_request_release(struct mgr_request *r);

/* The request's JSON (to free). NULL on ENOMEM or an invalid op. */
char *mgr_request_format(const struct mgr_request *r);

/* Sends one frame of type with the payload and up to MGR_FDS_MAX fds in
 * the same sendmsg (SCM_RIGHTS). */
int mgr_send(int fd, uint8_t type, const void *payload, size_t len, const int *fds, size_t n_fds);

/* Receives one frame of the expected type whose payload is at most max
 * bytes, and the fds that came with it (O_CLOEXEC; at most MGR_FDS_MAX;
 * the caller closes them). *ret_payload is NUL-terminated, to free.
 * -EBADMSG for a bad frame or a wrong type, -EMSGSIZE beyond max, 0 bytes
 * read: -ECONNRESET. Fds beyond ret_fds' room are closed, -EBADMSG. */
int mgr_recv(int fd, uint8_t type, size_t max, char **ret_payload, size_t *ret_len, int *ret_fds,
             size_t *ret_n_fds);

/* Opens path (checked by mgr_path_check, under root_path whose fd is
 * root_fd) as O_PATH without following any symlink or crossing a mount.
 * Returns the fd or a negative errno (-ELOOP, -EXDEV for a symlink). */
int mgr_open_beneath(int root_fd, const char *root_path, const char *path, int extra_flags);

/* The node's side: connects to socket_path, sends r with fds, reads the
 * reply. 0 and *ret_reply (the JSON of an ok reply, to free; may be NULL)
 * and the fds that came with it (ret_fds: room for MGR_FDS_MAX, may be
 * NULL), or the negative errno the manager answered (its message in err). */
int mgr_call(const char *socket_path, const struct mgr_request *r, const int *fds, size_t n_fds, char **ret_reply,
             int *ret_fds, size_t *ret_n_fds, char *err, size_t n);
/* mgr_call() in two halves, for a request that may take long (a template
 * step): the connection (*ret_conn, the caller's to close; a shutdown()
 * of it cancels the request) once r is sent, then its reply. */
int mgr_call_send(const char *socket_path, const struct mgr_request *r, const int *fds, size_t n_fds,
                  int *ret_conn);
int mgr_call_recv(int conn, char **ret_reply, int *ret_fds, size_t *ret_n_fds, char *err, size_t n);
