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
#include <stdint.h>
#include <sys/types.h>

/* Names the machine model vmm.c builds (machine options, device list and
 * order). A snapshot only restores into an identical machine, so template
 * content hashes include this: bump it whenever the QEMU command line's
 * machine or devices change. */
#define VMM_MACHINE_REVISION "microvm-4 rtc=on virtio-serial+virtio-blk+virtio-net+4 volume slots"

/* Volume slots: after the NIC, VMM_VOLUMES_MAX more virtio-blk disks with
 * serials "vol0".. (the guest agent finds a slot's disk by it). One with
 * no volume is QEMU's null-co driver of size 0, so a template boots with
 * the slots empty and a restore may put a volume's image into any of them
 * (the migration stream holds the devices, not what backs them); the
 * guest learns the new size from vmm_volume_resized(). */
#define VMM_VOLUMES_MAX 4

/* The guest kernel's fixed arguments (tsc_early_khz= and the root are
 * added per host). tsc=reliable: microvm has no HPET or ACPI PM timer, so
 * the kernel's clocksource watchdog compares the TSC with jiffies, and a
 * boot on a loaded host (ticks lost in periodic mode) marks the TSC
 * unstable and falls back to refined-jiffies: a 4 ms clock with no vDSO,
 * kept by every sandbox restored from that boot's snapshot (docs/images.md,
 * "Findings worth knowing"). The guest's TSC is the host's, which the
 * host's own kernel watches. Template content hashes include these. */
#define VMM_KERNEL_ARGS "console=ttyS0 quiet panic=-1 tsc=reliable"

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

/*
 * The CPU the node's VMs get, set once at start: under TCG QEMU's "max"
 * (the same on every host: what TCG emulates), under KVM "host" (the
 * host's own CPU) or a named QEMU model (AIRLOCK_CPU_MODEL, with
 * "enforce": QEMU refuses to start on a host that lacks a feature of it).
 * Its id says what a VM's saved state needs to resume: "tcg:max",
 * "kvm:host:AuthenticAMD-25-1-1" (host_cpu_signature()) or
 * "kvm:EPYC-Rome-v2". Every state file the node saves is tagged with it
 * (vmm_state_cpu()), and a restore of a state tagged with another is
 * refused with the reason; templates are built per id.
 */
#define VMM_CPU_ID_MAX 96
int vmm_cpu_setup(enum vmm_accel accel, const char *model);
const char *vmm_cpu_id(void);
/* The id a state file was saved on: -ENODATA when it has none (saved by an
 * older node, or a file system without xattrs: restored as before). */
int vmm_state_cpu(const char *state_path, char *buf, size_t n);
/* Tags state_path with the CPU id cpu (a downloaded one: its manifest's). */
int vmm_state_cpu_set(const char *state_path, const char *cpu);
/* For vmm.c (vmm-cpu.c holds the CPU): QEMU's -cpu under KVM; tags the
 * state file open at fd with this node's id; 0 when state_path may resume
 * here (its id is this node's, or it has none), else -EXDEV and
 * *ret_error (may be NULL) says why. */
const char *vmm_cpu_arg(void);
int vmm_state_cpu_tag(int fd);
int vmm_state_cpu_check(const char *state_path, char **ret_error);

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
        bool mem_anonymous;       /* plain anonymous RAM, mem_path unused: a restore from a full
                                   * snapshot, whose state stream carries all of RAM */
        const char *run_dir;      /* existing dir: vmm.pid, qemu.log; vm/ (QEMU's own: qmp.sock,
                                   * guest.sock, console.log) is made here */
        const char *log_ctx;      /* "sandbox=sbx-..." for log lines */
        /* the VMM's cgroup, when the sandbox is smaller than its machine
         * (0: memory_mib and vcpus): memory for the guest, and whole CPUs */
        unsigned cgroup_memory_mib;
        unsigned cgroup_vcpus;
        /* the volume slots: an image QEMU opens read-write, or NULL */
        const char *volumes[VMM_VOLUMES_MAX];
};

struct vmm {
        pid_t pid;
        uid_t uid;                /* its own uid (and gid), unique among the node's live VMs; 0: unjailed */
        uint64_t start_time;      /* of pid, jail_process_start_time() */
        dev_t exe_dev;            /* the binary it was started from (stat before exec) */
        ino_t exe_ino;
        char *vm_dir;             /* run_dir/vm: the one host directory the jailed QEMU can write */
        int pidfd;                /* pidfd_open(pid): readable when QEMU exits */
        char *qmp_path;
        char *guest_path;         /* the chardev socket of the guest channel */
        char *console_path;       /* serial console log (kernel messages) */
        struct qmp *qmp;          /* connected QMP client */
        enum vmm_accel accel;
        char *log_path;           /* QEMU's own stdout/stderr (run_dir/qemu.log) */
        char *log_ctx;            /* copy of vmm_config.log_ctx */
        char *pid_path;           /* run_dir/vmm.pid: "PID STARTTIME", for a node that restarts */
        bool adopted;             /* started by an earlier node: not our child, never waitpid()ed */
        int gw_fds[2];            /* the gateway's TCP listener and DNS socket in the VM's network
                                   * namespace (lib/vmnet), made with it; -1 once taken */
};

/* Jail settings, once at start: qemu_binary (a name in PATH or a path) is
 * resolved to the one binary every VM runs and every peer must be; VM uids (and gids) are uid_base + slot,
 * slot < uid_count. Detects the cgroup controllers and logs them. */
int vmm_jail_setup(const char *qemu_binary, uint32_t uid_base, uint32_t uid_count);

/* Every QEMU runs jailed (src/node/jail.h): its own uid, new mount, pid,
 * ipc, uts and network namespaces, a private root with only its files, a
 * cgroup with memory, pids and cpu limits; every connection to its QMP and
 * guest sockets is checked to reach that process (jail_peer_verify).
 *
 * QEMU runs in its own session (a Ctrl-C for the node does not reach it) and
 * outlives the node: a node that crashes or restarts leaves its VMs running
 * and the next one adopts them (vmm_adopt) or kills them (vmm_kill_recorded).
 * run_dir/vmm.pid names the process by pid and start time. Stale
 * qmp.sock/guest.sock in run_dir are removed first; QEMU's output goes to
 * run_dir/qemu.log and its tail is logged when it dies while we wait on
 * it: start-up, restore, save (-ECHILD; QEMU exits by itself when an
 * incoming migration fails, e.g. a corrupt state file or another -m). */

/* Every VM has one NIC, a virtio-net device on a tap in its own network
 * namespace (lib/vmnet), whose only peer is the egress gateway: v->gw_fds
 * are the sockets the gateway serves it on. vmm_net_listen() makes new ones
 * for a running VM (a gateway that restarted, an adopted VM); the old ones
 * must be closed by then. */
int vmm_net_listen(const struct vmm *v, int *ret_tcp_fd, int *ret_dns_fd);
/* A socket in the VM's namespace whose connection to the guest's port has
 * started (non-blocking: poll for POLLOUT, then SO_ERROR): how the node
 * reaches a server in the guest (a service port). */
int vmm_net_connect(const struct vmm *v, uint16_t port, int *ret_fd);

/* Starts a fresh VM that boots the kernel. Returns once QMP is connected and
 * the VM runs (the guest is still booting: connect the guest channel and wait
 * for the agent's HELLO). On failure *ret_error (may be NULL) says what
 * failed in a line, in QEMU's own words where it left any in qemu.log
 * ("QEMU exited: ...: -accel kvm: failed to initialize kvm: Permission
 * denied"); free it. */
int vmm_boot(const struct vmm_config *c, struct vmm **ret, char **ret_error);

/* Starts QEMU with -incoming defer on c->mem_path (share=off), feeds
 * state_path to migrate-incoming through an fd passed with getfd (no `cat`
 * child), waits for completion and sends `cont`. On return the vCPUs run.
 * With c->mem_anonymous the state is a full snapshot (vmm_snapshot()). */
/* A state saved on another CPU (vmm_state_cpu()) is -EXDEV, before QEMU
 * starts. *ret_error as for vmm_boot(). */
int vmm_restore(const struct vmm_config *c, const char *state_path, struct vmm **ret, char **ret_error);

/* Why a running VM's vCPUs stopped for good while QEMU lives on: its run
 * state is internal-error (KVM could not run a vCPU: "KVM internal error",
 * "kvm run failed"), guest-panicked or shutdown. A line with the state and
 * qemu.log's tail; NULL while it runs or is paused (free it). Asks QEMU
 * over QMP: call it from the thread that owns v. */
char *vmm_stopped_reason(struct vmm *v);
/* What went wrong with a VM whose guest did not answer: QEMU exited (its
 * last words in qemu.log), or its vCPUs stopped for good
 * (vmm_stopped_reason()); NULL when it runs as it should (free it). From
 * the owner's thread. */
char *vmm_failure_reason(struct vmm *v);
/* The last lines of the guest's serial console that say something (a
 * kernel panic's line where there is one), for a guest that runs but did
 * not answer; NULL when it wrote nothing (free it). */
char *vmm_console_tail(const struct vmm *v);
/* How the exited (not yet reaped) QEMU process ended: "exited (status N)"
 * or "exited (status N, killed by signal S)". */
void vmm_exit_describe(struct vmm *v, char *buf, size_t n);
/* Reads the QMP events QEMU sent since the last command (none waits):
 * true when one may have changed the run state (STOP, GUEST_PANICKED,
 * SHUTDOWN): then ask vmm_stopped_reason(). From the owner's thread. */
bool vmm_events_stop(struct vmm *v);
/* The fd that is readable when QEMU sent an event (QMP), for poll(). */
int vmm_event_fd(const struct vmm *v);

/* What vmm_snapshot() measured. */
struct vmm_snapshot_stats {
        uint64_t total_ms;    /* the whole snapshot, the VM running most of it */
        uint64_t downtime_ms; /* QEMU's own figure: vCPUs stopped until the stream was complete */
        uint64_t pause_ms;    /* vCPUs stopped until they ran again (downtime + paused() + cont) */
        uint64_t bytes;       /* size of the state stream */
};

/* A full snapshot of a running VM: RAM and device state are streamed to
 * state_path by a migration, then paused(userdata) runs while the vCPUs
 * are still stopped (the caller reflinks the disk: memory and disk are of
 * one instant), then the VM runs again unless leave_paused. Under KVM the
 * migration is live (the VM runs while most of RAM is copied and stops for
 * the last dirty pages); under TCG the VM is stopped for the whole save,
 * because live streams taken under TCG (QEMU 7.2) restored into guests
 * that crashed now and then. The stream holds all guest RAM whatever the
 * backend (x-ignore-shared off), so vmm_restore() with mem_anonymous
 * restores it anywhere. On failure the VM is running again (or still
 * paused if leave_paused) and no state_path was written. */
int vmm_snapshot(struct vmm *v, const char *state_path, bool leave_paused, int (*paused)(void *userdata),
                 void *userdata, struct vmm_snapshot_stats *ret_stats);

/* Pauses the VM and writes its device state to state_path with
 * x-ignore-shared (the RAM file itself is the memory snapshot). Leaves the VM
 * paused. Only share=on RAM is skipped: on a VM started with mem_shared
 * false the whole guest RAM goes into state_path. */
int vmm_save(struct vmm *v, const char *state_path);

/* Tells the guest the disk in volume slot `slot` is size bytes (QMP
 * block_resize to the image's own size): a slot the guest saw empty (a
 * restore from the template) shows the volume's size a moment later. */
int vmm_volume_resized(struct vmm *v, unsigned slot, uint64_t size);

/* Takes over the QEMU an earlier node started in run_dir: checks that
 * run_dir/vmm.pid still names a live process (pid and start time), opens a
 * pidfd, takes its uid back and connects QMP (the listener checked to be
 * that process; if not, the VM is killed). -ESRCH when that VM is gone. The guest channel is
 * connected as usual (vmm_guest_connect). */
int vmm_adopt(const char *run_dir, enum vmm_accel accel, const char *log_ctx, struct vmm **ret);

/* Cancels a migration (a snapshot's save) still running: one an earlier
 * node may have left in an adopted VM, or one vmm_snapshot() gave up
 * waiting for; waits until QEMU says it is over: left alone it would finish
 * later and stop the VM ("postmigrate") under us. 0 also when there was
 * none. */
int vmm_end_migration(struct vmm *v);

/* SIGKILLs the QEMU that run_dir/vmm.pid names, if it still runs, and waits
 * (up to a second) for it to end. For VMs of an earlier node that nobody
 * adopts: warm-pool VMs, template builds. 0 also when none ran. */
int vmm_kill_recorded(const char *run_dir);

/* Connects to the guest channel socket (O_CLOEXEC, blocking). Retries while
 * QEMU has not created the socket yet, up to timeout_ms. Every connection
 * is checked to reach v's QEMU (jail_peer_verify) before it is returned:
 * -EPERM (logged) for any other listener, and nothing was sent to it. */
int vmm_guest_connect(struct vmm *v, int timeout_ms, int *ret_fd);

/* SIGKILLs v's QEMU (through airlock-nodemgr when it started it) without
 * waiting or freeing: another thread may be in a call on v. */
void vmm_kill(struct vmm *v);

/* Whether airlock-nodemgr starts the VMs (AIRLOCK_NODEMGR_SOCKET): then
 * what needs root goes through it. */
bool vmm_via_nodemgr(void);

/* airlock-nodemgr's template.step (docs/security.md): runs the build
 * script of step ("kernel", "initramfs", "rootfs" of template name, or
 * "base" of a template built from a spec, with its parameters params:
 * lib/mgr) as root and puts its output at dir/out, the node's; the
 * script's output goes to log_fd. -EOPNOTSUPP without nodemgr (run it
 * yourself). The request is sent here: *ret_conn is where its reply comes. */
int vmm_template_step_send(const char *step, const char *name, const char *dir, const char *out,
                           const char *kernel_dir, char *const *params, int log_fd, int *ret_conn);
/* Its end, on the connection vmm_template_step_send() gave (the caller's
 * to close; a shutdown() of it from another thread cancels the step:
 * airlock-nodemgr kills it). The refusal is logged with ctx. */
int vmm_template_step_wait(int conn, const char *ctx);

/* airlock-nodemgr's file.reclaim: a file a VM wrote becomes the node's
 * (mode 0600/0640/0644). -EOPNOTSUPP without nodemgr. */
int vmm_file_reclaim(const char *path, unsigned mode, const char *ctx);

/* true once the QEMU process has exited (non-blocking check via pidfd). */
bool vmm_exited(struct vmm *v);

/* Lets go of v without touching the VM: it keeps running with its sockets
 * and vmm.pid for the next node to adopt (node hand-over). NULL-safe. */
void vmm_forget(struct vmm *v);

/* SIGKILLs QEMU if alive, reaps it, closes everything, removes its sockets,
 * frees v. NULL-safe. Never leaves a zombie or a process behind. */
void vmm_destroy(struct vmm *v);
