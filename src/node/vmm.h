/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One QEMU microVM process, driven over QMP (lib/qmp). Used both to boot a
 * template VM once (RAM in a shared file, then saved) and to restore
 * sandboxes from that snapshot (private copy-on-write mapping of the same
 * RAM file, device state by incoming migration). See ARCHITECTURE.md.
 *
 * The device list is fixed and identical for boot and restore (migration
 * requires it): virtio-serial-device with one virtserialport named
 * "airlock.0" on a chardev socket, virtio-blk-device on the rootfs image, no
 * NIC (no network inside sandboxes until the egress gateway exists).
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Names the machine model vmm.c builds (machine options, device list and
 * order). A snapshot only restores into an identical machine, so template
 * content hashes include this: bump it whenever the QEMU command line's
 * machine or devices change. */
#define VMM_MACHINE_REVISION "microvm-2 rtc=on virtio-serial+virtio-blk"

enum vmm_accel {
        VMM_ACCEL_TCG,
        VMM_ACCEL_KVM,
};

/* Resolves "auto" | "kvm" | "tcg". auto picks kvm only when /proc/cpuinfo
 * shows vmx or svm AND /dev/kvm opens read-write. reason (size n) gets a
 * human sentence for the log ("cpu has no vmx/svm flag (PVM host?)").
 * "kvm" when unusable is -ENODEV. Unknown strings are -EINVAL. */
int vmm_accel_pick(const char *want, enum vmm_accel *ret, char *reason, size_t n);
const char *vmm_accel_name(enum vmm_accel a);

/* Host TSC frequency in kHz for the guest's tsc_early_khz= (TCG boots hang
 * without it under load, see ARCHITECTURE.md). */
int vmm_host_tsc_khz(unsigned long *ret);

struct vmm_config {
        const char *qemu_binary; /* NULL: "qemu-system-x86_64" from PATH */
        enum vmm_accel accel;
        unsigned memory_mib;
        unsigned vcpus;
        const char *kernel;       /* ELF vmlinux, booted via PVH */
        const char *initrd;       /* initramfs (cpio, may be compressed) */
        const char *cmdline;      /* extra kernel args; tsc_early_khz etc. are added */
        const char *rootfs;       /* raw disk image, opened read-write */
        const char *mem_path;     /* RAM file */
        bool mem_shared;          /* true: share=on (template boot); false: share=off (restore) */
        const char *run_dir;      /* existing dir: qmp.sock, guest.sock, console.log live here */
        const char *log_ctx;      /* "sandbox=sbx-..." for log lines */
};

struct vmm {
        pid_t pid;
        int pidfd;                /* pidfd_open(pid): readable when QEMU exits */
        char *qmp_path;
        char *guest_path;         /* the chardev socket of the guest channel */
        char *console_path;       /* serial console log (kernel messages) */
        struct qmp *qmp;          /* connected QMP client */
        enum vmm_accel accel;
        char *log_path;           /* QEMU's own stdout/stderr (run_dir/qemu.log) */
        char *log_ctx;            /* copy of vmm_config.log_ctx */
};

/* QEMU runs in its own session (a Ctrl-C for the node does not reach it) and
 * gets SIGKILL when the node dies (PR_SET_PDEATHSIG). Linux ties that
 * signal to the *thread* that forked, so every fork happens on one internal
 * spawner thread that lives as long as the process: vmm_boot() and
 * vmm_restore() are safe to call from any thread. Stale
 * qmp.sock/guest.sock in run_dir are removed first; QEMU's output goes to
 * run_dir/qemu.log and its tail is logged when it dies while we wait on
 * it: start-up, restore, save (-ECHILD; QEMU exits by itself when an
 * incoming migration fails, e.g. a corrupt state file or another -m). */

/* Starts a fresh VM that boots the kernel. Returns once QMP is connected and
 * the VM runs (the guest is still booting: connect the guest channel and wait
 * for the agent's HELLO). */
int vmm_boot(const struct vmm_config *c, struct vmm **ret);

/* Starts QEMU with -incoming defer on c->mem_path (share=off), feeds
 * state_path to migrate-incoming through an fd passed with getfd (no `cat`
 * child), waits for completion and sends `cont`. On return the vCPUs run. */
int vmm_restore(const struct vmm_config *c, const char *state_path, struct vmm **ret);

/* Pauses the VM and writes its device state to state_path with
 * x-ignore-shared (the RAM file itself is the memory snapshot). Leaves the VM
 * paused. Only share=on RAM is skipped: on a VM started with mem_shared
 * false the whole guest RAM goes into state_path. */
int vmm_save(struct vmm *v, const char *state_path);

/* Connects to the guest channel socket (O_CLOEXEC, blocking). Retries while
 * QEMU has not created the socket yet, up to timeout_ms. */
int vmm_guest_connect(struct vmm *v, int timeout_ms, int *ret_fd);

/* true once the QEMU process has exited (non-blocking check via pidfd). */
bool vmm_exited(struct vmm *v);

/* SIGKILLs QEMU if alive, reaps it, closes everything, removes its sockets,
 * frees v. NULL-safe. Never leaves a zombie or a process behind. */
void vmm_destroy(struct vmm *v);
