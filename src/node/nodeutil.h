/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Small helpers of the node agent that every op needs: turning guest output
 * into JSON-safe UTF-8, validating the paths and names clients send, and
 * mapping errnos to the error codes of docs/node-protocol.md.
 */

#include "util.h"
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest path accepted anywhere in a request (same limit as the guest). */
#define NODE_PATH_MAX PATH_SAFE_MAX

/* true when p is an absolute path of at most NODE_PATH_MAX bytes with no ".."
 * component. */
bool node_path_is_valid(const char *p);

/* A user name exec and session.start pass to the guest, which looks it up
 * in its own passwd file: [a-z_][a-z0-9_-]{0,31} ("root" is one). */
#define NODE_USER_MAX USER_NAME_MAX
bool node_user_name_is_valid(const char *name);

/* Error code (docs/node-protocol.md) for a negative errno produced inside
 * the node: -EINVAL "invalid", -ENOENT "not_found", -EEXIST "conflict", ... */
const char *node_errno_code(int r);

/* Error code for an errno (positive) the guest agent reported with ERROR:
 * ENOENT not_found; EINVAL, ENOTDIR, EISDIR, ENAMETOOLONG, ELOOP invalid;
 * EFBIG too_large; EEXIST, ENOTEMPTY conflict; EACCES, EPERM forbidden;
 * the rest "guest". */
const char *node_guest_errno_code(int guest_errno);

/* Encodes data as standard base64 into a new NUL-terminated string. */
char *node_base64_encode(const void *data, size_t len);
/* Decodes standard base64 (no whitespace). -EINVAL on bad input. */
int node_base64_decode(const char *s, uint8_t **ret, size_t *ret_len);

/* Starts argv (PATH search) with stdin /dev/null and stdout+stderr on
 * out_fd, in a new process group, with default signal handling. Only
 * async-signal-safe calls between fork and exec. */
int node_spawn(char *const argv[], int out_fd, pid_t *ret_pid);
/* Waits for pid up to timeout_s (then kills its process group). Returns
 * the wait status. */
int node_wait_child(pid_t pid, unsigned timeout_s, int *ret_status);
/* The first line `program --version` prints (qemu, airlock-guest). */
int node_program_version(const char *program, char **ret);

/* The version of an agent's name ("airlock-guest 0.2.0" -> "0.2.0"; a
 * name without a space is its own version). */
const char *node_agent_version(const char *agent);
/* Compares two agents' versions as dotted numbers (a part that is no
 * number counts as 0, a missing one too): <0, 0, >0. */
int node_agent_version_cmp(const char *a, const char *b);

/* Hex-encodes n bytes into out (size >= 2n+1). */
void node_hex(const uint8_t *data, size_t n, char *out);

/* A test hold point: when AIRLOCK_TEST_HOLD (a comma list) names point,
 * logs "test hold point POINT reached" and blocks this thread until the
 * file AIRLOCK_TEST_HOLD_RELEASE exists (for good without one), so a test
 * can kill a process exactly there. Does nothing otherwise. Never set it in
 * production: the operation waits. */
void node_hold_point(const char *point);

/* Creates a fresh, short directory DATA_DIR/run/vm/N for one VM's sockets and
 * console log: Unix socket paths are limited to 107 bytes, and sandbox or
 * template directories can be longer. */
int node_vm_run_dir(const char *data_dir, char **ret);

/* Cleans DATA_DIR/run/vm after an earlier node: every run dir for which
 * keep(path, userdata) is false loses its VM (vmm_kill_recorded) and is
 * removed; new run dirs are numbered after the highest one left. */
int node_vm_run_dirs_sweep(const char *data_dir, bool (*keep)(const char *path, void *userdata), void *userdata);

/* Points RUN_DIR/NAME at target (a symlink, replaced atomically) and
 * returns its path in *ret_link. QEMU opens a VM's disks through such
 * links (disk.img, vol0.img..): it reopens a disk by path when a migration
 * (full snapshot, fork, suspend) inactivates its block devices, and a warm
 * VM's disk moves (pool/NAME-N to sandboxes/ID) after QEMU opened it; the
 * link follows. */
int node_run_link(const char *run_dir, const char *name, const char *target, char **ret_link);

/* Takes DATA_DIR/node.lock (flock, held until the process exits), waiting
 * up to wait_s for a node that is still handing over. -EBUSY after that. */
#define NODE_LOCK_WAIT_S 30
int node_lock_data_dir(const char *data_dir, unsigned wait_s);

/* Initialises cond for timed waits against CLOCK_MONOTONIC (every timed
 * wait of the node: wall-clock jumps must not stretch or cut them). */
void node_cond_init(pthread_cond_t *cond);

/* Sets *ts to now + ms on CLOCK_MONOTONIC, the deadline for
 * pthread_cond_timedwait() on a node_cond_init() condition. */
void node_deadline_after_ms(struct timespec *ts, int64_t ms);

/* A field of /proc/meminfo ("MemTotal", "MemAvailable", ...) in KiB; 0
 * when it cannot be read. */
uint64_t node_meminfo_kib(const char *field);

/* How many threads to run side by side, one a CPU online: that number
 * kept within lo..hi (lo when it cannot be read). */
unsigned node_cpus_within(unsigned lo, unsigned hi);
