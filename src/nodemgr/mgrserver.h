/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * airlock-nodemgr's request server: DATA_DIR/run/nodemgr.sock, mode 0660,
 * owner root, group the node user's; every connection's SO_PEERCRED uid
 * must be the node user's, or it is closed unanswered. One request per
 * connection, parsed and validated by lib/mgr (mgr_request_parse), served
 * synchronously (each request is short), answered, closed. No shell, no
 * path followed through a symlink (mgr_open_beneath). docs/security.md,
 * "Privileges".
 */

#include <stdint.h>
#include <sys/types.h>

#include "config.h"

struct mgr_server;

/* Opens the listening socket for the node user node_uid:node_gid and fixes
 * the policy: VM uids AIRLOCK_VMM_UID_BASE (2000000) + [0, 65536), the
 * node's files under DATA_DIR (and the loop volume DATA_DIR/vol, and
 * AIRLOCK_TEMPLATES_DIR when set), the QEMU binary AIRLOCK_QEMU
 * (qemu-system-x86_64 in PATH). */
int mgr_server_open(const struct daemon_config *c, uid_t node_uid, gid_t node_gid, struct mgr_server **ret);

/* DATA_DIR/run/nodemgr.sock */
const char *mgr_server_path(const struct mgr_server *s);

/* Probes KVM for the node's VMs as root (jail_kvm_usable() for the first VM
 * uid) and hands the answer to the node in HOST_KVM_ENV, which the node
 * reads instead of probing (it runs without groups or privileges). */
int mgr_server_probe_kvm(const struct mgr_server *s);

/* The fd to poll for a connection. */
int mgr_server_fd(const struct mgr_server *s);

/* The poll timeout until mgr_server_tick() has work (the second sweep of
 * VM cgroups left fresh at the start), -1 for none. */
int mgr_server_timeout_ms(const struct mgr_server *s);
void mgr_server_tick(struct mgr_server *s);

/* Accepts one connection (if there is one) and serves it. Errors are the
 * client's: logged and answered, never fatal. */
void mgr_server_serve_one(struct mgr_server *s);
/* A child the supervisor reaped (pid, its wait status): true when it was
 * a template step's, which is then finished and answered. Template steps
 * run on while the server serves (mgr_server_tick() watches them); the
 * supervisor's own waitpid(-1) may reap them first. */
bool mgr_server_reaped(struct mgr_server *s, pid_t pid, int status);

/* A spawn_wait_fn (lib/spawn/spawn.h) for userdata = the server: serves
 * what arrives within ms, while a supervisor waits for its node (a
 * stopping node stops its VMs through us). */
void mgr_server_serve_for(void *userdata, int ms);

/* Closes the socket and removes it. NULL-safe. */
void mgr_server_free(struct mgr_server *s);
static inline void mgr_server_freep(struct mgr_server **s) {
        mgr_server_free(*s);
}
