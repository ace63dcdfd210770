/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The VMM's files, private to them; the interface is vmm.h. A stack:
 *
 *   vmm.c       a VM's life over QMP: start, adopt, boot, restore,
 *               snapshot, save, events, destroy
 *   vmm-mgr.c   where a QEMU runs: airlock-nodemgr's client (vmm_mgr_ask)
 *               or the node's own jail; VM uids, cgroups, RAM copies, the
 *               spawn, the accelerator
 *   vmm-qemu.c  QEMU's command line and its process: argv, log, exit
 *   vmm-cpu.c   the VMs' CPU model and saved states' CPU tags
 *
 * Each helper's comment is at its definition.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm.h"

struct mgr_request;

/* ---- vmm-qemu.c ---- */

struct vmm_argv {
        char **v;
        size_t n, cap;
};
void vmm_argv_release(struct vmm_argv *a);
int vmm_build_argv(const struct vmm_config *c, const struct vmm *v, bool incoming, const char *binary,
                   const char *mem_path, int tap_fd, struct vmm_argv *a);
void vmm_log_cmdline(const struct vmm_argv *a, const char *ctx);
char *vmm_path_join(const char *dir, const char *name);
int vmm_pidfd_open(pid_t pid);
bool vmm_process_exited(const struct vmm *v);
bool vmm_process_exits_within(const struct vmm *v, int ms);
void vmm_sleep_ms(unsigned ms);
int vmm_fail_exited(struct vmm *v, const char *when);
/* QEMU's last words in run_dir/qemu.log for a client: its last lines that
 * say something (at most QEMU_WORDS_MAX bytes), joined by "; ", without
 * the register dump QEMU adds to a vCPU's failure ("RAX=...", "CS =...",
 * "Code=..."); "" when it wrote none. */
#define QEMU_WORDS_MAX 600
void vmm_qemu_last_words(const char *run_dir, char *out, size_t n);
/* The same of the guest's serial console (run_dir/vm/console.log): what a
 * guest kernel that panicked or reset itself said last (the kernel boots
 * quiet, so little else is there); where it panicked, its "Kernel panic -
 * not syncing: WHY" line alone. */
void vmm_console_last_words(const char *run_dir, char *out, size_t n);
char *vmm_failure_line(const struct vmm_config *c, const char *step, int r);

/* ---- vmm-mgr.c ---- */

/* The QEMU binary every VM runs (vmm_jail_setup()), or NULL before it. */
const char *vmm_qemu_binary(void);
int vmm_mgr_ask(const struct mgr_request *q, const int *fds, size_t n_fds, char **ret_reply, int *ret_fds,
                size_t n_ret_fds, const char *ctx);
bool vmm_uid_slot(uid_t uid, uint32_t *ret);
bool vmm_uid_mark(uid_t uid, bool used);
int vmm_cgroup_remove(uid_t uid, const char *ctx);
int vmm_kill_pid(pid_t pid, int pidfd, uint64_t start_time, uid_t uid, int wait_ms, const char *ctx);
void vmm_uid_release(struct vmm *v);
int vmm_spawn_jailed(const struct vmm_config *c, struct vmm *v, bool incoming);
