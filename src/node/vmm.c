/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A VM's life over QMP: start, adopt, boot, restore, snapshot, save, events,
 * destroy (the top of the VMM; see vmm.h).
 */
#include "vmm-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"
#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "qmp.h"
#include "unixsock.h"
#include "util.h"

#define QMP_WAIT_MS 10000      /* QEMU start until QMP answers */
#define QMP_CMD_MS 5000        /* one ordinary QMP command */
#define MIGRATE_WAIT_MS 60000  /* device-state save/restore; takes ms with x-ignore-shared */
#define KILL_EXIT_WAIT_MS 30000 /* a SIGKILLed QEMU blocked in I/O, until it exits */

/* ---- peers ---- */

/* Who may be on the other end of v's sockets. */
static int vmm_peer(const struct vmm *v, struct jail_peer *ret) {
        struct stat st = { .st_dev = v->exe_dev, .st_ino = v->exe_ino };
        /* the binary recorded at its start (a QEMU upgrade since does not
         * disown running VMs); records without one: the configured binary */
        if (v->exe_ino == 0 && (!vmm_qemu_binary() || stat(vmm_qemu_binary(), &st) < 0))
                return vmm_qemu_binary() ? negative_errno() : -ENOENT;
        *ret = (struct jail_peer){ .pid = v->pid, .pidfd = v->pidfd, .start_time = v->start_time, .uid = v->uid,
                                   .exe_dev = st.st_dev, .exe_ino = st.st_ino };
        return 0;
}

/* Connects to one of v's sockets and proves the listener is v's QEMU
 * before a byte goes either way. -ENOENT/-ECONNREFUSED while it is not
 * there yet; -ECHILD (not logged) where v's QEMU exited; -EPERM (logged)
 * for anyone else. */
static int vmm_connect(struct vmm *v, const char *path, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        int r = unix_connect(path, 0, &fd);
        if (r < 0)
                return r;
        struct jail_peer want;
        r = vmm_peer(v, &want);
        if (r >= 0 && vmm_via_nodemgr()) {
                /* an unprivileged node cannot look at another uid's
                 * /proc/PID/exe: airlock-nodemgr proves the binary (and the
                 * uid, and the start time), with a pidfd of its own */
                want.exe_ino = 0;
                r = vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_VMM_VERIFY, .pid = v->pid,
                                                   .start_time = v->start_time, .uid = v->uid },
                            NULL, 0, NULL, NULL, 0, v->log_ctx);
                if (r < 0 && r != -ENOMEM)
                        r = -EPERM;
        }
        if (r >= 0)
                r = jail_peer_verify(fd, &want);
        /* A QEMU killed between its listen and this check fails it too:
         * that is its exit, not an impostor. */
        if (r < 0 && vmm_process_exits_within(v, 500))
                return -ECHILD;
        if (r < 0) {
                if (r == -ENOENT || r == -ECONNREFUSED) /* those mean "not there yet" to callers */
                        r = -EPERM;
                struct ucred cred = { 0 };
                socklen_t len = sizeof cred;
                (void) getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
                return log_errno(LOG_LEVEL_ERROR, r == -EPERM ? -EPERM : r, v->log_ctx,
                                 "refusing %s: its listener (pid %d uid %u) is not this VM's QEMU (pid %d uid %u): %m",
                                 path, (int) cred.pid, (unsigned) cred.uid, (int) v->pid, (unsigned) v->uid);
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* QEMU sets up the QMP socket early but answers only once its main loop
 * runs; retry connecting until then, and notice if it dies instead. */
static int wait_qmp(struct vmm *v) {
        uint64_t deadline = now_monotonic_ns() + QMP_WAIT_MS * 1000000ull;
        for (;;) {
                if (vmm_process_exited(v))
                        return vmm_fail_exited(v, "start-up");
                uint64_t now = now_monotonic_ns();
                if (now >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx,
                                         "qemu did not answer on QMP within %d ms", QMP_WAIT_MS);
                int fd;
                int r = vmm_connect(v, v->qmp_path, &fd);
                if (r == -ENOENT || r == -ECONNREFUSED) {
                        vmm_sleep_ms(2);
                        continue;
                }
                if (r == -ECHILD)
                        return vmm_fail_exited(v, "start-up");
                if (r < 0)
                        return r;
                r = qmp_connect_fd(fd, (int) ((deadline - now) / 1000000), &v->qmp);
                if (r >= 0)
                        return 0;
                if (vmm_process_exits_within(v, 500))
                        return vmm_fail_exited(v, "start-up");
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "QMP handshake with qemu failed: %m");
        }
}

static int vmm_new(const struct vmm_config *c, struct vmm **ret) {
        if (!c || !c->kernel || !c->initrd || !c->rootfs || (!c->mem_path && !c->mem_anonymous) || !c->run_dir ||
            c->memory_mib == 0 ||
            c->vcpus == 0)
                return -EINVAL;

        struct vmm *v = calloc(1, sizeof *v);
        if (!v)
                return -ENOMEM;
        v->pid = -1;
        v->pidfd = -1;
        v->gw_fds[0] = v->gw_fds[1] = -1;
        v->accel = c->accel;
        v->vm_dir = vmm_path_join(c->run_dir, "vm");
        v->qmp_path = vmm_path_join(c->run_dir, "vm/qmp.sock");
        v->guest_path = vmm_path_join(c->run_dir, "vm/guest.sock");
        v->console_path = vmm_path_join(c->run_dir, "vm/console.log");
        v->log_path = vmm_path_join(c->run_dir, "qemu.log");
        v->pid_path = vmm_path_join(c->run_dir, "vmm.pid");
        v->log_ctx = strdup(c->log_ctx ?: "");
        if (!v->vm_dir || !v->qmp_path || !v->guest_path || !v->console_path || !v->log_path || !v->pid_path ||
            !v->log_ctx) {
                vmm_destroy(v);
                return -ENOMEM;
        }
        *ret = v;
        return 0;
}

/* Writes run_dir/vmm.pid ("PID STARTTIME UID EXEDEV EXEINO"), so a node
 * that restarts finds this VM again, checks its peers and cleans up after
 * it. */
static int record_pid(struct vmm *v) {
        int r = jail_process_start_time(v->pid, &v->start_time);
        if (r < 0)
                return r;
        char line[128];
        int n = snprintf(line, sizeof line, "%d %" PRIu64 " %u %" PRIu64 " %" PRIu64 "\n", (int) v->pid,
                         v->start_time, (unsigned) v->uid, (uint64_t) v->exe_dev, (uint64_t) v->exe_ino);
        return file_write_replace(v->pid_path, line, (size_t) n, 0600);
}

/* Reads run_dir/vmm.pid and returns a pidfd for the process it names, if
 * that very process (same start time) still runs. -ESRCH otherwise. The
 * uid is 0 in records of unjailed VMs (older nodes). */
static int recorded_pidfd(const char *pid_path, pid_t *ret_pid, uint64_t *ret_start, uid_t *ret_uid,
                          struct vmm *ret_exe) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = file_read_all(pid_path, 128, &text, &len);
        if (r < 0)
                return r == -ENOENT ? -ESRCH : r;
        int pid;
        uint64_t want, have, dev = 0, ino = 0;
        unsigned uid = 0;
        int k = sscanf(text, "%d %" SCNu64 " %u %" SCNu64 " %" SCNu64, &pid, &want, &uid, &dev, &ino);
        if (k < 2 || pid <= 1)
                return -EBADMSG;
        if (ret_uid)
                *ret_uid = (uid_t) uid;
        if (ret_exe && k == 5) {
                ret_exe->exe_dev = (dev_t) dev;
                ret_exe->exe_ino = (ino_t) ino;
        }
        int fd = vmm_pidfd_open(pid);
        if (fd < 0)
                return -ESRCH;
        /* checked after the pidfd exists: it cannot come to name another process */
        if (jail_process_start_time(pid, &have) < 0 || have != want) {
                close(fd);
                return -ESRCH;
        }
        *ret_pid = pid;
        if (ret_start)
                *ret_start = want;
        return fd;
}

int vmm_adopt(const char *run_dir, enum vmm_accel accel, const char *log_ctx, struct vmm **ret) {
        struct vmm_config c = { .kernel = "-", .initrd = "-", .rootfs = "-", .mem_path = "-", .run_dir = run_dir,
                                .memory_mib = 1, .vcpus = 1, .accel = accel, .log_ctx = log_ctx };
        struct vmm *v;
        int r = vmm_new(&c, &v);
        if (r < 0)
                return r;
        v->adopted = true;
        uid_t uid = 0;
        r = recorded_pidfd(v->pid_path, &v->pid, &v->start_time, &uid, v);
        if (r < 0) {
                v->pid = -1;
                vmm_destroy(v);
                return r;
        }
        v->pidfd = r;
        /* ours again: its peers are checked against it, its cgroup goes with it */
        v->uid = uid;
        if (!vmm_uid_mark(uid, true))
                log_emit(LOG_LEVEL_WARN, v->log_ctx, "adopting pid %d, recorded with uid %u outside the VM uids",
                         (int) v->pid, (unsigned) uid);
        int fd;
        r = vmm_connect(v, v->qmp_path, &fd);
        if (r >= 0)
                r = qmp_connect_fd(fd, QMP_WAIT_MS, &v->qmp);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot reconnect to QMP of pid %d: %m", (int) v->pid);
                vmm_destroy(v); /* a VM we cannot drive is of no use: it goes */
                return r;
        }
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm adopted pid=%d uid=%u", (int) v->pid, (unsigned) v->uid);
        *ret = v;
        return 0;
}

int vmm_kill_recorded(const char *run_dir) {
        _cleanup_free_ char *pid_path = vmm_path_join(run_dir, "vmm.pid");
        if (!pid_path)
                return -ENOMEM;
        pid_t pid;
        uid_t uid = 0;
        uint64_t start = 0;
        int fd = recorded_pidfd(pid_path, &pid, &start, &uid, NULL);
        if (fd == -ESRCH) {
                uint32_t slot;
                if (vmm_uid_slot(uid, &slot)) /* its VM is gone; its cgroup may be left */
                        (void) vmm_cgroup_remove(uid, NULL);
                return 0;
        }
        if (fd < 0)
                return fd;
        int r = vmm_kill_pid(pid, fd, start, uid, 1000, NULL);
        if (r >= 0) {
                log_info("killed the VM pid=%d an earlier node left in %s", (int) pid, run_dir);
                uint32_t slot;
                if (vmm_uid_slot(uid, &slot))
                        (void) vmm_cgroup_remove(uid, NULL);
        }
        close(fd);
        return r;
}

/* Spawns QEMU for c and connects QMP. */
static int vmm_start(const struct vmm_config *c, bool incoming, struct vmm **ret) {
        struct vmm *v;
        int r = vmm_new(c, &v);
        if (r < 0)
                return r;

        struct sockaddr_un sa;
        if (strlen(v->qmp_path) >= sizeof sa.sun_path || strlen(v->guest_path) >= sizeof sa.sun_path) {
                r = log_errno(LOG_LEVEL_ERROR, -ENAMETOOLONG, v->log_ctx,
                              "run dir %s is too long for Unix socket paths", c->run_dir);
                goto fail;
        }
        /* Leftovers of an earlier QEMU would make us connect to nothing. */
        (void) unlink(v->qmp_path);
        (void) unlink(v->guest_path);

        r = vmm_spawn_jailed(c, v, incoming);
        if (r < 0)
                goto fail;
        r = record_pid(v);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "failed to write %s: %m", v->pid_path);
                goto fail;
        }

        r = wait_qmp(v);
        if (r < 0)
                goto fail;

        *ret = v;
        return 0;
fail:
        vmm_destroy(v);
        return r;
}

/* x-ignore-shared: both ends of one stream must agree (it changes the
 * stream's format). On for template snapshots (the RAM file is the memory
 * snapshot), off for full snapshots (the stream carries RAM). */
static int set_ignore_shared(struct vmm *v, bool on) {
        _cleanup_(json_decrefp) json_t *args =
                json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared", "state", on);
        if (!args)
                return -ENOMEM;
        int r = qmp_execute(v->qmp, "migrate-set-capabilities", args, QMP_CMD_MS, NULL);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "migrate-set-capabilities failed: %m (%s)",
                                 qmp_last_error(v->qmp));
        return 0;
}

/* Polls query-migrate until the migration completed or failed; *ret_info
 * (may be NULL) gets the last answer. */
static int wait_migration_info(struct vmm *v, const char *what, json_t **ret_info) {
        uint64_t deadline = now_monotonic_ns() + MIGRATE_WAIT_MS * 1000000ull;
        for (;;) {
                _cleanup_(json_decrefp) json_t *st = NULL;
                int r = qmp_execute(v->qmp, "query-migrate", NULL, QMP_CMD_MS, &st);
                if (r < 0) {
                        if (vmm_process_exits_within(v, 500))
                                return vmm_fail_exited(v, what);
                        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "query-migrate failed: %m (%s)",
                                         qmp_last_error(v->qmp));
                }
                const char *status = json_string_value(json_object_get(st, "status"));
                if (status && strcmp(status, "completed") == 0) {
                        /* QEMU says completed a moment before its migration
                         * thread leaves the finish-migrate run state (and
                         * fills in the downtime): a cont in between is
                         * refused ("Migration is not finalized yet"), seen
                         * under nested KVM. Done when the run state moved on. */
                        _cleanup_(json_decrefp) json_t *rs = NULL;
                        r = qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &rs);
                        bool settled = r < 0 || strcmp(json_string_value(json_object_get(rs, "status")) ?: "",
                                                       "finish-migrate") != 0;
                        if (settled || now_monotonic_ns() >= deadline) {
                                if (ret_info)
                                        *ret_info = TAKE_PTR(st);
                                return 0;
                        }
                        vmm_sleep_ms(1);
                        continue;
                }
                if (status && (strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)) {
                        const char *desc = json_string_value(json_object_get(st, "error-desc"));
                        return log_errno(LOG_LEVEL_ERROR, -EIO, v->log_ctx, "%s %s: %s", what, status,
                                         desc ?: "no error description");
                }
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx, "%s still %s after %d ms", what,
                                         status ?: "not started", MIGRATE_WAIT_MS);
                vmm_sleep_ms(1);
        }
}

static int wait_migration(struct vmm *v, const char *what) {
        return wait_migration_info(v, what, NULL);
}

int vmm_boot(const struct vmm_config *c, struct vmm **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        struct vmm *v;
        int r = vmm_start(c, false, &v);
        if (r < 0) {
                if (ret_error && c && c->run_dir)
                        *ret_error = vmm_failure_line(c, "starting QEMU", r);
                return r;
        }
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm booting pid=%d accel=%s mem=%uMiB ms=%llu", (int) v->pid,
                 vmm_accel_name(v->accel), c->memory_mib,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
        *ret = v;
        return 0;
}

/* Logs a failed QMP step with QEMU's own explanation. */
static int qmp_failed(struct vmm *v, int r, const char *what) {
        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "%s failed: %m (%s)", what, qmp_last_error(v->qmp));
}

/* Sends a migration command whose only argument is a URI. */
static int qmp_uri(struct vmm *v, const char *cmd, const char *uri) {
        _cleanup_(json_decrefp) json_t *args = json_pack("{s:s}", "uri", uri);
        if (!args)
                return -ENOMEM;
        int r = qmp_execute(v->qmp, cmd, args, QMP_CMD_MS, NULL);
        return r < 0 ? qmp_failed(v, r, cmd) : 0;
}

int vmm_volume_resized(struct vmm *v, unsigned slot, uint64_t size) {
        if (slot >= VMM_VOLUMES_MAX || size == 0 || size > INT64_MAX)
                return -EINVAL;
        char dev[16];
        snprintf(dev, sizeof dev, "v%u", slot);
        _cleanup_(json_decrefp) json_t *args =
                json_pack("{s:s,s:I}", "device", dev, "size", (json_int_t) size);
        if (!args)
                return -ENOMEM;
        int r = qmp_execute(v->qmp, "block_resize", args, QMP_CMD_MS, NULL);
        return r < 0 ? qmp_failed(v, r, "block_resize") : 0;
}

/* The QMP half of a restore, on a QEMU waiting with -incoming defer. fd is
 * the state file; QEMU receives its own copy. */
/* Hands QEMU fd under the name fdname and runs the migration command on
 * it ("migrate-incoming": a restore, "migrate": a save) to its end. */
static int migrate_fd(struct vmm *v, int fd, const char *fdname, const char *command, const char *what) {
        int r = qmp_send_fd(v->qmp, fd, fdname);
        if (r < 0)
                return qmp_failed(v, r, "getfd");
        char uri[64];
        snprintf(uri, sizeof uri, "fd:%s", fdname);
        r = qmp_uri(v, command, uri);
        if (r < 0)
                return r;
        return wait_migration(v, what);
}

static int restore_state(struct vmm *v, int fd, bool ignore_shared) {
        int r = set_ignore_shared(v, ignore_shared);
        if (r < 0)
                return r;
        r = migrate_fd(v, fd, "state", "migrate-incoming", "restore");
        if (r < 0)
                return r;
        /* Without -S QEMU already resumes after an incoming migration; `cont`
         * makes "running on return" independent of that default (it is a
         * no-op on a running VM). */
        r = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL);
        return r < 0 ? qmp_failed(v, r, "cont") : 0;
}

int vmm_restore(const struct vmm_config *c, const char *state_path, struct vmm **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!c || !state_path || !c->run_dir)
                return -EINVAL;
        /* Open first: a missing snapshot should not cost a QEMU start. */
        _cleanup_close_ int fd = open(state_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                int r = log_errno(LOG_LEVEL_ERROR, negative_errno(), c->log_ctx, "failed to open %s: %m", state_path);
                if (ret_error)
                        *ret_error = strdup_printf("cannot open the saved state: %s", strerror(-r));
                return r;
        }
        int r = vmm_state_cpu_check(state_path, ret_error);
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, c->log_ctx, "not restoring %s: %s", state_path,
                         ret_error && *ret_error ? *ret_error : strerror(-r));
                return r;
        }

        struct vmm *v;
        r = vmm_start(c, true, &v);
        if (r < 0) {
                if (ret_error)
                        *ret_error = vmm_failure_line(c, "starting QEMU", r);
                return r;
        }
        uint64_t t1 = now_monotonic_ns();
        r = restore_state(v, fd, !c->mem_anonymous);
        if (r < 0) {
                /* QEMU quits when an incoming stream fails: its words first */
                if (r != -ECHILD && vmm_process_exits_within(v, 500))
                        r = -ECHILD;
                vmm_destroy(v);
                if (ret_error)
                        *ret_error = vmm_failure_line(c, "loading the saved state", r);
                return r;
        }
        uint64_t t2 = now_monotonic_ns();
        /* start = process spawn until QMP answers, load = device state in and
         * running: the two halves of the restore latency. */
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm restored pid=%d accel=%s ms=%llu start_ms=%llu load_ms=%llu",
                 (int) v->pid, vmm_accel_name(v->accel), (unsigned long long) ((t2 - t0) / 1000000),
                 (unsigned long long) ((t1 - t0) / 1000000), (unsigned long long) ((t2 - t1) / 1000000));
        *ret = v;
        return 0;
}

/* The QMP half of a save: device state into fd. */
static int save_state(struct vmm *v, int fd) {
        int r = set_ignore_shared(v, true);
        if (r < 0)
                return r;
        r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL);
        if (r < 0)
                return qmp_failed(v, r, "stop");
        return migrate_fd(v, fd, "save", "migrate", "save");
}

/* Ends writing a state file QEMU streamed into fd (our fd shares the file
 * description QEMU wrote through): after a save that returned r >= 0 it is
 * synced and renamed from tmp to path; otherwise, or when that fails, tmp
 * is removed. Returns r or the failure. */
static int state_file_finish(struct vmm *v, int fd, const char *tmp, const char *path, int r) {
        /* the CPU it needs, with it from the start (a file system without
         * xattrs keeps it untagged: restored as before) */
        int t = r >= 0 ? vmm_state_cpu_tag(fd) : 0;
        if (t < 0 && t != -ENOTSUP)
                log_errno(LOG_LEVEL_WARN, t, v->log_ctx, "cannot tag %s with its CPU %s: %m", path, vmm_cpu_id());
        if (r >= 0 && (fsync(fd) < 0 || rename(tmp, path) < 0))
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to store %s: %m", path);
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

int vmm_end_migration(struct vmm *v) {
        if (!v || !v->qmp)
                return -EINVAL;
        int r = qmp_execute(v->qmp, "migrate_cancel", NULL, QMP_CMD_MS, NULL);
        if (r < 0)
                return qmp_failed(v, r, "migrate_cancel");
        uint64_t deadline = now_monotonic_ns() + MIGRATE_WAIT_MS * 1000000ull;
        for (;;) {
                _cleanup_(json_decrefp) json_t *st = NULL;
                r = qmp_execute(v->qmp, "query-migrate", NULL, QMP_CMD_MS, &st);
                if (r < 0)
                        return qmp_failed(v, r, "query-migrate");
                /* no migration ever ("status" absent), or one that is over */
                const char *status = json_string_value(json_object_get(st, "status")) ?: "none";
                if (strcmp(status, "none") == 0 || strcmp(status, "completed") == 0 ||
                    strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)
                        return 0;
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx,
                                         "a migration an earlier node began is still %s after %d ms", status,
                                         MIGRATE_WAIT_MS);
                vmm_sleep_ms(1);
        }
}

/* Live full snapshots: fast enough that the precopy converges under TCG
 * dirtying, and a stop short enough to be a pause, not an outage. */
#define SNAPSHOT_BANDWIDTH (8ULL << 30) /* bytes/s: a local file, not a network */
#define SNAPSHOT_DOWNTIME_MS 20

/* A VM left paused after a snapshot is in QEMU's "postmigrate" state, from
 * which QEMU refuses to migrate again ("Can't migrate the vm that was
 * paused due to previous migration"): a paused sandbox could take one full
 * snapshot, fork or suspend, then no other. cont and stop at once make it
 * an ordinary paused VM (its vCPUs run for the moment between the two). */
static int leave_postmigrate(struct vmm *v) {
        _cleanup_(json_decrefp) json_t *st = NULL;
        int r = qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &st);
        if (r < 0)
                return qmp_failed(v, r, "query-status");
        if (strcmp(json_string_value(json_object_get(st, "status")) ?: "", "postmigrate") != 0)
                return 0;
        if ((r = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL)) < 0)
                return qmp_failed(v, r, "cont (leaving postmigrate)");
        if ((r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL)) < 0)
                return qmp_failed(v, r, "stop (leaving postmigrate)");
        return 0;
}

int vmm_snapshot(struct vmm *v, const char *state_path, bool leave_paused, int (*paused)(void *userdata),
                 void *userdata, struct vmm_snapshot_stats *ret_stats) {
        uint64_t t0 = now_monotonic_ns();
        if (!v || !v->qmp || !state_path)
                return -EINVAL;
        _cleanup_free_ char *tmp = strdup_printf("%s.tmp", state_path);
        if (!tmp)
                return -ENOMEM;
        (void) unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to create %s: %m", tmp);

        _cleanup_(json_decrefp) json_t *params = json_pack("{s:I, s:I}", "max-bandwidth",
                                                           (json_int_t) SNAPSHOT_BANDWIDTH, "downtime-limit",
                                                           (json_int_t) SNAPSHOT_DOWNTIME_MS);
        _cleanup_(json_decrefp) json_t *info = NULL;
        bool stopped = false;
        uint64_t t_done = 0, t_run = 0;
        int r = params ? 0 : -ENOMEM;
        if (r >= 0)
                r = set_ignore_shared(v, false);
        if (r >= 0 && (r = qmp_execute(v->qmp, "migrate-set-parameters", params, QMP_CMD_MS, NULL)) < 0)
                r = qmp_failed(v, r, "migrate-set-parameters");
        if (r >= 0 && (r = qmp_send_fd(v->qmp, fd, "snap")) < 0)
                r = qmp_failed(v, r, "getfd");
        if (r >= 0)
                r = leave_postmigrate(v);
        /* Live only where dirty tracking is the hardware's (KVM): under
         * TCG (QEMU 7.2) a live stream restored into a guest that later
         * crashed in 1 of 3 tries (timer-wheel corruption); stopped first,
         * 10 of 10 were sound. The pause is then the whole save. */
        uint64_t t_stop = now_monotonic_ns();
        if (r >= 0 && v->accel != VMM_ACCEL_KVM && (r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL)) < 0)
                r = qmp_failed(v, r, "stop");
        if (r >= 0)
                r = qmp_uri(v, "migrate", "fd:snap");
        if (r >= 0) {
                r = wait_migration_info(v, "snapshot", &info);
                /* one still running when we give up is cancelled: left
                 * alone it would complete later and stop the vCPUs of a
                 * VM we think runs (postmigrate), and refuse the next */
                if (r == -ETIMEDOUT)
                        (void) vmm_end_migration(v);
                /* completed or failed during completion: stopped either way
                 * until we say cont (QEMU restarts a VM only when precopy
                 * itself failed) */
                stopped = true;
                t_done = now_monotonic_ns();
        }
        if (r >= 0 && paused)
                r = paused(userdata);
        if (stopped && !leave_paused) {
                int k = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL);
                if (k < 0) {
                        qmp_failed(v, k, "cont after the snapshot");
                        if (r >= 0)
                                r = k;
                }
                t_run = now_monotonic_ns();
        }
        /* durability off the pause path */
        r = state_file_finish(v, fd, tmp, state_path, r);
        if (r < 0)
                return r;
        struct stat st = { 0 };
        (void) fstat(fd, &st);
        /* stopped before the migration (TCG): the whole save was downtime */
        uint64_t downtime = v->accel == VMM_ACCEL_KVM
                                    ? (uint64_t) json_integer_value(json_object_get(info, "downtime"))
                                    : (t_done - t_stop) / 1000000ULL;
        struct vmm_snapshot_stats stats = {
                .total_ms = (now_monotonic_ns() - t0) / 1000000ULL,
                .downtime_ms = downtime,
                .pause_ms = downtime + (t_run > t_done ? (t_run - t_done) / 1000000ULL : 0),
                .bytes = (uint64_t) st.st_size,
        };
        log_emit(LOG_LEVEL_INFO, v->log_ctx,
                 "vm snapshot path=%s bytes=%llu ms=%llu downtime_ms=%llu pause_ms=%llu%s", state_path,
                 (unsigned long long) stats.bytes, (unsigned long long) stats.total_ms,
                 (unsigned long long) stats.downtime_ms, (unsigned long long) stats.pause_ms,
                 leave_paused ? " (left paused)" : "");
        if (ret_stats)
                *ret_stats = stats;
        return 0;
}

int vmm_save(struct vmm *v, const char *state_path) {
        uint64_t t0 = now_monotonic_ns();
        if (!v || !v->qmp || !state_path)
                return -EINVAL;

        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp.XXXXXX", state_path) < 0) {
                tmp = NULL;
                return -ENOMEM;
        }
        /* A temporary name, renamed on success: a reader never sees half a
         * state file, and a failed save leaves the old one in place. */
        _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to create %s: %m", tmp);

        int r = state_file_finish(v, fd, tmp, state_path, save_state(v, fd));
        if (r < 0)
                return r;
        struct stat st = { 0 };
        (void) fstat(fd, &st);
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm state saved path=%s bytes=%lld ms=%llu", state_path,
                 (long long) st.st_size, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
        return 0;
}

int vmm_guest_connect(struct vmm *v, int timeout_ms, int *ret_fd) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ull;
        for (;;) {
                /* every connection is checked again: a reconnect is never
                 * trusted because an earlier one was */
                int r = vmm_connect(v, v->guest_path, ret_fd);
                if (r >= 0)
                        return 0;
                if (r == -ECHILD)
                        return vmm_fail_exited(v, "guest channel set-up");
                if (r != -ENOENT && r != -ECONNREFUSED)
                        return r == -EPERM ? r
                                           : log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "failed to connect to %s: %m",
                                                       v->guest_path);
                if (vmm_process_exited(v))
                        return vmm_fail_exited(v, "guest channel set-up");
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx, "guest channel %s did not appear",
                                         v->guest_path);
                vmm_sleep_ms(2);
        }
}

static void vmm_free(struct vmm *v) {
        free(v->vm_dir);
        free(v->qmp_path);
        free(v->guest_path);
        free(v->console_path);
        free(v->log_path);
        free(v->pid_path);
        free(v->log_ctx);
        free(v);
}

void vmm_forget(struct vmm *v) {
        if (!v)
                return;
        qmp_free(v->qmp);
        if (v->pidfd >= 0)
                close(v->pidfd);
        vmm_free(v);
}

/* A VM that could not be killed (airlock-nodemgr gone: only it may signal
 * a jailed VMM) must not be forgotten, or it runs on with no owner: its run
 * dir, with the vmm.pid record, moves aside to RUN_DIR.stray, which the
 * next node's sweep of run/vm finds and ends (node_vm_run_dirs_sweep). Its
 * uid and cgroup stay taken until then. */
static void vmm_strand(struct vmm *v) {
        _cleanup_free_ char *dir = v->pid_path ? strdup(v->pid_path) : NULL;
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash)
                *slash = 0;
        _cleanup_free_ char *aside = slash ? strdup_printf("%s.stray", dir) : NULL;
        if (!aside || rename(dir, aside) < 0)
                log_errno(LOG_LEVEL_ERROR, aside ? negative_errno() : -ENOMEM, v->log_ctx,
                          "cannot stop VM pid %d nor keep its record (it may run on unowned): %m", (int) v->pid);
        else
                log_emit(LOG_LEVEL_ERROR, v->log_ctx,
                         "cannot stop VM pid %d (airlock-nodemgr gone?); its record moved to %s, the next node start "
                         "ends it",
                         (int) v->pid, aside);
        if (v->pidfd >= 0)
                close(v->pidfd);
        vmm_free(v);
}

/* The run dir of v (its log's directory) into dir; false when unknown. */
static bool vm_run_dir(const struct vmm *v, char dir[static PATH_MAX]) {
        const char *slash = v->log_path ? strrchr(v->log_path, '/') : NULL;
        if (!slash || (size_t) (slash - v->log_path) >= PATH_MAX)
                return false;
        memcpy(dir, v->log_path, (size_t) (slash - v->log_path));
        dir[slash - v->log_path] = 0;
        return true;
}

/* vmm_qemu_last_words() of a running (or ended) VM. */
static void vm_last_words(const struct vmm *v, char *out, size_t n) {
        char dir[PATH_MAX];
        out[0] = 0;
        if (vm_run_dir(v, dir))
                vmm_qemu_last_words(dir, out, n);
}

/* vmm_console_last_words() of a running (or ended) VM. */
static void vm_console_words(const struct vmm *v, char *out, size_t n) {
        char dir[PATH_MAX];
        out[0] = 0;
        if (vm_run_dir(v, dir))
                vmm_console_last_words(dir, out, n);
}

/* Run states in which the vCPUs will not run again without a reset. */
static bool state_is_dead(const char *st) {
        static const char *const dead[] = { "internal-error", "guest-panicked", "shutdown" };
        for (size_t i = 0; i < ARRAY_SIZE(dead); i++)
                if (strcmp(st, dead[i]) == 0)
                        return true;
        return false;
}

char *vmm_stopped_reason(struct vmm *v) {
        if (!v || !v->qmp)
                return NULL;
        _cleanup_(json_decrefp) json_t *st = NULL;
        if (qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &st) < 0)
                return NULL;
        const char *status = json_string_value(json_object_get(st, "status"));
        if (!status || !state_is_dead(status))
                return NULL;
        char words[QEMU_WORDS_MAX + 8];
        vm_last_words(v, words, sizeof words);
        return strdup_printf("the VM's vCPUs stopped: QEMU run state %s%s%s", status, words[0] ? "; QEMU said: " : "",
                             words);
}

char *vmm_failure_reason(struct vmm *v) {
        if (!v)
                return NULL;
        if (vmm_process_exits_within(v, 300)) {
                char how[128], words[QEMU_WORDS_MAX + 8], console[QEMU_WORDS_MAX + 8] = "";
                vmm_exit_describe(v, how, sizeof how);
                vm_last_words(v, words, sizeof words);
                /* QEMU said nothing: a guest that reset itself (-no-reboot
                 * turns a panic's reboot or a triple fault into an exit)
                 * said why on its console */
                if (!words[0])
                        vm_console_words(v, console, sizeof console);
                return strdup_printf("QEMU %s%s%s%s%s", how, words[0] ? ": " : "", words,
                                     console[0] ? "; the guest's console says: " : "", console);
        }
        return vmm_stopped_reason(v);
}

char *vmm_console_tail(const struct vmm *v) {
        char words[QEMU_WORDS_MAX + 8];
        if (!v)
                return NULL;
        vm_console_words(v, words, sizeof words);
        return words[0] ? strdup(words) : NULL;
}

bool vmm_events_stop(struct vmm *v) {
        if (!v || !v->qmp)
                return false;
        uint64_t before = qmp_event_count(v->qmp);
        int n = qmp_read_events(v->qmp);
        if (n < 0)
                return false; /* a broken QMP connection: QEMU's exit shows on its pidfd */
        uint64_t got = qmp_event_count(v->qmp) - before;
        if (got > QMP_EVENT_RING)
                return true; /* more than the ring remembers: ask */
        for (uint64_t i = 0; i < got; i++) {
                const char *e = qmp_event_recent(v->qmp, (size_t) i);
                if (e && (strcmp(e, "STOP") == 0 || strcmp(e, "GUEST_PANICKED") == 0 || strcmp(e, "SHUTDOWN") == 0))
                        return true;
        }
        return false;
}

int vmm_event_fd(const struct vmm *v) {
        return v && v->qmp ? qmp_fd(v->qmp) : -1;
}

void vmm_destroy(struct vmm *v) {
        if (!v)
                return;
        qmp_free(v->qmp);
        v->gw_fds[0] = safe_close(v->gw_fds[0]);
        v->gw_fds[1] = safe_close(v->gw_fds[1]);
        if ((v->adopted || vmm_via_nodemgr()) && v->pidfd >= 0) {
                /* Not our child: whoever inherited it (or airlock-nodemgr,
                 * which started it) reaps it; the pidfd still names this
                 * process alone. */
                int r = vmm_process_exited(v) ? 0 : vmm_kill_pid(v->pid, v->pidfd, v->start_time, v->uid, 2000, v->log_ctx);
                if (!vmm_process_exited(v)) {
                        /* killed, but a thread blocked in disk I/O (a loaded
                         * host, a slow volume) holds its exit: it will go.
                         * Refused: one already ending on its own (a QEMU that
                         * quit) goes in a moment; one airlock-nodemgr could
                         * not reach is stranded below. */
                        if (r >= 0)
                                log_emit(LOG_LEVEL_WARN, v->log_ctx,
                                         "VM pid %d still exiting 2 s after SIGKILL; waiting up to %d s more",
                                         (int) v->pid, KILL_EXIT_WAIT_MS / 1000);
                        struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                        (void) poll(&p, 1, r >= 0 ? KILL_EXIT_WAIT_MS : 2000);
                }
                if (!vmm_process_exited(v)) {
                        vmm_strand(v);
                        return;
                }
        } else if (v->pid > 0) {
                /* Not reaped yet, so the pid cannot have been reused. */
                (void) kill(v->pid, SIGKILL);
                int status;
                while (waitpid(v->pid, &status, 0) < 0 && errno == EINTR)
                        ;
        }
        /* gone now (killed and reaped, or seen to exit): its cgroup and uid go too */
        vmm_uid_release(v);
        if (v->pidfd >= 0)
                close(v->pidfd);
        if (v->qmp_path)
                (void) unlink(v->qmp_path);
        if (v->guest_path)
                (void) unlink(v->guest_path);
        if (v->pid_path && v->pid > 0)
                (void) unlink(v->pid_path);
        vmm_free(v);
}
