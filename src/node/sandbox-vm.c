/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's VM and its command thread: start, adopt, monitor, the verbs'
 * claim and command, crash recovery, and new sandboxes made from a restore
 * or a boot (layer 2).
 */
#include "sandbox-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "pool.h"
#include "proto.h"
#include "qmp.h"
#include "template.h"
#include "util.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* How long stop waits for the guest to flush its file systems. */
#define STOP_SYNC_MS 10000
#define GUEST_CONNECT_MS 5000
#define GUEST_HELLO_MS 10000
/* A cold boot (start) runs the whole kernel and init: minutes under TCG. */
#define GUEST_BOOT_HELLO_MS 120000
#define QMP_RUNSTATE_MS 5000
#define IDENTITY_MS 10000
/* How often the sandbox thread checks the guest channel. */
#define MONITOR_INTERVAL_MS 250
/* How often it asks a running guest how long it has been idle. */
#define IDLE_PROBE_MS 5000
#define IDLE_PROBE_TIMEOUT_MS 2000

static void sandbox_net_attach(struct sandbox *s, struct vmm *v);

void sandbox_set_failed(struct sandbox *s, const char *fmt, ...) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        pthread_mutex_lock(&s->lock);
        /* a stopped sandbox has no VM left to fail */
        bool first = s->state != SANDBOX_FAILED && s->state != SANDBOX_STOPPED && !s->deleted;
        if (first) {
                s->state = SANDBOX_FAILED;
                free(s->error);
                s->error = strdup(msg);
        }
        pthread_mutex_unlock(&s->lock);
        if (first)
                log_emit(LOG_LEVEL_WARN, s->ctx, "sandbox failed: %s", msg);
}

static int sandbox_send_identity(struct sandbox *s, struct guestconn *g, char **ret_message) {
        return guestops_identity(g, s->id, s->env, IDENTITY_MS, ret_message);
}

/* Takes over the warm VM create claimed from the pool: resumes it and
 * installs the identity. On failure the warm VM is destroyed and the rootfs
 * replaced by a fresh clone, so that sandbox_start_vm() can restore cold. */
static int sandbox_start_pooled(struct sandbox *s) {
        struct pool_vm *pv = TAKE_PTR(s->pool_vm);
        _cleanup_free_ char *msg = NULL;
        uint64_t t0 = now_monotonic_ns();
        int r = pool_vm_resume(pv);
        uint64_t t_resumed = now_monotonic_ns();
        if (r >= 0)
                r = sandbox_send_identity(s, pv->gc, &msg);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "warm VM %s failed: %s%s%s; restoring cold", pv->ctx,
                         strerror(-r), msg ? ": " : "", msg ?: "");
                pool_vm_free(pv); /* the run dir is s->run_dir now and is reused */
                _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
                if (!rootfs)
                        return -ENOMEM;
                /* the guest may have written to it: start from the template again */
                if (unlink(rootfs) < 0 && errno != ENOENT)
                        return negative_errno();
                int k = file_clone_or_copy(s->tpl->rootfs, rootfs, NULL);
                return k < 0 ? k : r;
        }
        uint64_t t_done = now_monotonic_ns();

        sandbox_net_attach(s, pv->vmm);
        pthread_mutex_lock(&s->lock);
        s->vmm = TAKE_PTR(pv->vmm);
        s->gc = TAKE_PTR(pv->gc);
        s->pid = s->vmm->pid;
        s->restore_ms = (t_done - t0) / 1000000ULL;
        s->pool_hit = true;
        pthread_mutex_unlock(&s->lock);
        log_emit(LOG_LEVEL_INFO, s->ctx,
                 "sandbox made from warm VM %s of %s-%s: restore_ms=%llu (resume %llu ms, identity %llu ms) pid=%d",
                 pv->ctx, s->tpl->name, s->tpl->hash, (unsigned long long) s->restore_ms,
                 (unsigned long long) ((t_resumed - t0) / 1000000ULL),
                 (unsigned long long) ((t_done - t_resumed) / 1000000ULL), (int) s->pid);
        pool_vm_free(pv);
        return 0;
}

/* ---- the VM's network: the egress gateway serves it (gwclient.h) ---- */

/* Hands the gateway the sandbox's credentials, when it has any, after an
 * attachment (a gateway that restarted, or one that never had them). Under
 * the network lock, like the attachment. */
static void net_hand_secrets(struct sandbox *s) {
        char *set = sandbox_secrets_dup(s);
        if (set)
                (void) gwclient_set_secrets(s->id, set, s->ctx);
        sandbox_secrets_free(set);
}

/* Hands the gateway the VM's sockets with the sandbox's policy; the node
 * keeps no copy (a new gateway gets new ones: vmm_net_listen). A VM an
 * earlier node started has none here: a gateway that still serves it keeps
 * its sockets (they cannot be made twice: EADDRINUSE), one that does not
 * gets new ones. */
static void sandbox_net_attach(struct sandbox *s, struct vmm *v) {
        if (!gwclient_enabled())
                goto out;
        /* held until the gateway has it: a policy changed meanwhile
         * (sandbox_set_network()) is handed over after this one, never before */
        sandbox_network_lock(s);
        const char *policy = sandbox_network(s);
        int tcp = v->gw_fds[0], dns = v->gw_fds[1];
        int r = 0;
        if (tcp < 0) {
                r = vmm_net_listen(v, &tcp, &dns);
                if (r == -EADDRINUSE) {
                        (void) gwclient_set_policy(s->id, policy, s->ctx);
                        sandbox_network_unlock(s);
                        goto out;
                }
        }
        if (r >= 0 && gwclient_attach(s->id, s->execution, policy, tcp, dns, s->ctx) >= 0)
                net_hand_secrets(s);
        sandbox_network_unlock(s);
        if (tcp != v->gw_fds[0]) {
                safe_close(tcp);
                safe_close(dns);
        }
out:
        v->gw_fds[0] = safe_close(v->gw_fds[0]);
        v->gw_fds[1] = safe_close(v->gw_fds[1]);
}

static void sandbox_net_detach(struct sandbox *s) {
        if (gwclient_enabled())
                (void) gwclient_detach(s->id, s->ctx);
}

/* A copy of what names the sandbox's VM process (pid -1: it has none),
 * for work outside its lock: the sandbox's thread may end the VM meanwhile,
 * and then what is asked of this pid fails (it is gone). Close its pidfd. */
static struct vmm vm_who(struct sandbox *s, unsigned *ret_execution) {
        struct vmm who = { .pid = -1, .pidfd = -1, .gw_fds = { -1, -1 } };
        pthread_mutex_lock(&s->lock);
        if (s->vmm) {
                who.pid = s->vmm->pid;
                who.pidfd = s->vmm->pidfd >= 0 ? fcntl(s->vmm->pidfd, F_DUPFD_CLOEXEC, 3) : -1;
                who.start_time = s->vmm->start_time;
                who.uid = s->vmm->uid;
                who.log_ctx = s->ctx;
        }
        if (ret_execution)
                *ret_execution = s->execution;
        pthread_mutex_unlock(&s->lock);
        return who;
}

int sandbox_port_connect(struct sandbox *s, uint16_t port, int *ret_fd) {
        struct vmm who = vm_who(s, NULL);
        int r = who.pid > 0 ? vmm_net_connect(&who, port, ret_fd) : -ESRCH;
        safe_close(who.pidfd);
        return r;
}

/* gwclient's reattach_all: a gateway that restarted gets every sandbox
 * that has a VM again, with new sockets. */
int sandbox_net_reattach_all(void) {
        struct sandbox **list = NULL;
        size_t k = 0;
        int r = sandbox_reg_all(false, &list, &k);
        if (r < 0)
                return r;
        for (size_t i = 0; i < k; i++) {
                struct sandbox *s = list[i];
                unsigned execution;
                struct vmm who = vm_who(s, &execution);
                int tcp = -1, dns = -1;
                if (who.pid > 0 && vmm_net_listen(&who, &tcp, &dns) >= 0) {
                        sandbox_network_lock(s);
                        if (gwclient_attach(s->id, execution, sandbox_network(s), tcp, dns, s->ctx) >= 0)
                                net_hand_secrets(s);
                        sandbox_network_unlock(s);
                        safe_close(tcp);
                        safe_close(dns);
                }
                safe_close(who.pidfd);
                sandbox_unref(s);
        }
        free(list);
        return 0;
}

static void volume_links_free(char *(*links)[VMM_VOLUMES_MAX]) {
        for (size_t i = 0; i < VMM_VOLUMES_MAX; i++)
                free((*links)[i]);
}

/* Restores the VM and installs its identity. On failure *ret_error says why;
 * everything started is torn down again. */
static int sandbox_start_vm(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!rootfs || !mem)
                return -ENOMEM;
        struct template_info *t = s->tpl;
        _cleanup_free_ char *disk = NULL;
        int k = node_run_link(s->run_dir, "disk.img", rootfs, &disk);
        if (k < 0) {
                *ret_error = strdup_printf("cannot link the disk into %s: %s", s->run_dir, strerror(-k));
                return k;
        }
        struct vmm_config vc = template_vmm_config(t, disk, s->run_dir, s->ctx);
        vc.cgroup_memory_mib = s->limits.memory_mib;
        vc.cgroup_vcpus = s->limits.vcpus;
        _cleanup_(volume_links_free) char *volume_links[VMM_VOLUMES_MAX] = { 0 };
        if ((k = sandbox_volumes_config(s, &vc, volume_links, ret_error)) < 0)
                return k;
        /* a start boots the sandbox's own disk with fresh RAM of its own; a
         * create maps the template's RAM copy-on-write */
        if (s->cold_boot) {
                vc.mem_path = mem;
                vc.mem_shared = true;
        }
        /* a full snapshot (fork, rollback, wake) carries its RAM */
        const char *state = s->restore_state ?: t->state;
        vc.mem_anonymous = s->restore_state != NULL;

        uint64_t t0 = now_monotonic_ns();
        struct vmm *v = NULL;
        _cleanup_free_ char *vmm_error = NULL;
        int r = s->cold_boot && !s->restore_state ? vmm_boot(&vc, &v, &vmm_error)
                                                  : vmm_restore(&vc, state, &v, &vmm_error);
        if (r < 0) {
                *ret_error = strdup_printf("%s the VM failed: %s", s->cold_boot && !s->restore_state ? "booting"
                                                                                                    : "restoring",
                                           vmm_error ?: strerror(-r));
                return r;
        }
        uint64_t t_restored = now_monotonic_ns();

        int fd = -1;
        struct guestconn *g = NULL;
        const char *step = "connecting to the guest channel";
        r = vmm_guest_connect(v, GUEST_CONNECT_MS, &fd);
        if (r >= 0) {
                step = "guest agent handshake";
                r = guestconn_open(fd, s->ctx, s->cold_boot && !s->restore_state ? GUEST_BOOT_HELLO_MS : GUEST_HELLO_MS,
                                   &g);
        }
        uint64_t t_hello = now_monotonic_ns();
        if (r >= 0) {
                step = "installing the identity";
                _cleanup_free_ char *msg = NULL;
                r = sandbox_send_identity(s, g, &msg);
                if (r == -ETIMEDOUT) {
                        /* an agent that said hello, then nothing: what
                         * its kernel printed meanwhile is the lead */
                        _cleanup_free_ char *console = vmm_console_tail(v);
                        log_emit(LOG_LEVEL_WARN, s->ctx,
                                 "the guest answered its hello but not its identity within %d ms; its "
                                 "console "
                                 "ends: %s",
                                 IDENTITY_MS, console ?: "(nothing)");
                }
                if (r < 0 && msg) {
                        *ret_error = strdup_printf("installing the identity failed: %s", msg);
                        guestconn_free(g);
                        vmm_destroy(v);
                        return r;
                }
        }
        if (r >= 0 && (r = sandbox_volumes_mount(s, v, g, ret_error)) < 0) {
                guestconn_free(g);
                vmm_destroy(v);
                return r;
        }
        if (r < 0) {
                /* the VMM's own account: how QEMU exited and its (or the
                 * guest console's) last words, or its vCPUs' run state
                 * (internal-error), not only a timeout */
                _cleanup_free_ char *qemu = vmm_failure_reason(v);
                *ret_error =
                        strdup_printf("%s failed: %s%s%s", step, strerror(-r), qemu ? "; " : "", qemu ?: "");
                guestconn_free(g);
                vmm_destroy(v);
                return r;
        }
        sandbox_net_attach(s, v);
        uint64_t t_done = now_monotonic_ns();

        pthread_mutex_lock(&s->lock);
        s->vmm = v;
        s->gc = g;
        s->pid = v->pid;
        s->restore_ms = (t_done - t0) / 1000000ULL;
        pthread_mutex_unlock(&s->lock);
        log_emit(LOG_LEVEL_INFO, s->ctx,
                 "sandbox restored from %s: restore_ms=%llu (vmm %llu ms, guest hello %llu ms, identity %llu ms) pid=%d",
                 s->restore_state ? "a full snapshot" : t->hash, (unsigned long long) s->restore_ms,
                 (unsigned long long) ((t_restored - t0) / 1000000ULL),
                 (unsigned long long) ((t_hello - t_restored) / 1000000ULL),
                 (unsigned long long) ((t_done - t_hello) / 1000000ULL), (int) v->pid);
        return 0;
}

/* Takes over the VM an earlier node left running (s->adopt_vmm): a new
 * guest channel and HELLO (the guest detaches the old connection's
 * processes, which keep running); identity and clock stay as they are. A
 * paused VM runs for the moment its agent needs to answer. */
static int sandbox_adopt_vm(struct sandbox *s, char **ret_error) {
        pthread_mutex_lock(&s->lock);
        struct vmm *v = TAKE_PTR(s->adopt_vmm);
        pthread_mutex_unlock(&s->lock);
        _cleanup_(json_decrefp) json_t *st = NULL;
        /* a snapshot the earlier node was saving (a suspend, a fork) ends
         * first, or it would stop the VM when it completes */
        const char *step = "ending a migration";
        int r = vmm_end_migration(v);
        if (r >= 0) {
                step = "query-status";
                r = qmp_execute(v->qmp, "query-status", NULL, QMP_RUNSTATE_MS, &st);
        }
        bool paused = r >= 0 && strcmp(json_string_value(json_object_get(st, "status")) ?: "", "running") != 0;
        if (r >= 0 && paused) {
                step = "cont";
                r = qmp_execute(v->qmp, "cont", NULL, QMP_RUNSTATE_MS, NULL);
        }
        int fd = -1;
        struct guestconn *g = NULL;
        if (r >= 0) {
                step = "connecting to the guest channel";
                r = vmm_guest_connect(v, GUEST_CONNECT_MS, &fd);
        }
        if (r >= 0) {
                step = "guest agent handshake";
                r = guestconn_open(fd, s->ctx, GUEST_HELLO_MS, &g);
        }
        /* paused by a suspend that never finished: it goes on running */
        if (r >= 0 && paused && s->resume_after_adopt)
                paused = false;
        else if (r >= 0 && paused) {
                step = "stop";
                r = qmp_execute(v->qmp, "stop", NULL, QMP_RUNSTATE_MS, NULL);
        }
        if (r < 0) {
                *ret_error = strdup_printf("taking over the running VM failed at %s: %s", step, strerror(-r));
                guestconn_free(g);
                vmm_destroy(v);
                return r;
        }
        sandbox_net_attach(s, v);
        pthread_mutex_lock(&s->lock);
        s->vmm = v;
        s->gc = g;
        s->pid = v->pid;
        s->state = paused ? SANDBOX_PAUSED : SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox taken over from an earlier node: pid=%d %s execution=%u",
                 (int) v->pid, paused ? "paused" : "running", s->execution);
        return 0;
}

/* Writes back what the host holds dirty of a running VM's disk, before the
 * snapshot stops it: QEMU's stop flushes the disk, and the reflink under
 * the pause writes back its source range, each inside the pause (an agent
 * that just wrote a file leaves tens of MiB there, and a slow disk makes
 * that seconds). The guest goes on writing back its own page cache
 * meanwhile, so a round that found much is followed by another, a few at
 * most; what the last one leaves is flushed in the pause as before. */
#define DISK_FLUSH_ROUNDS 3
#define DISK_FLUSH_QUICK_MS 20

static void flush_disk_before_pause(struct sandbox *s) {
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_close_ int fd = rootfs ? open(rootfs, O_RDONLY | O_CLOEXEC) : -1;
        if (fd < 0)
                return; /* the pause flushes it, as it always did */
        uint64_t t0 = now_monotonic_ns(), t = t0;
        unsigned rounds = 0;
        while (rounds < DISK_FLUSH_ROUNDS) {
                rounds++;
                if (fdatasync(fd) < 0) {
                        log_emit(LOG_LEVEL_WARN, s->ctx, "cannot flush %s before the snapshot: %m", rootfs);
                        return;
                }
                uint64_t now = now_monotonic_ns();
                bool quick = now - t < DISK_FLUSH_QUICK_MS * 1000000ULL;
                t = now;
                if (quick)
                        break;
        }
        uint64_t ms = (t - t0) / 1000000ULL;
        if (ms >= DISK_FLUSH_QUICK_MS)
                log_emit(LOG_LEVEL_INFO, s->ctx, "disk written back before the snapshot in %llu ms (%u rounds)",
                         (unsigned long long) ms, rounds);
}

static int snapshot_job_paused(void *userdata) {
        struct snapshot_job *job = userdata;
        _cleanup_free_ char *rootfs = job->disk_dst ? strdup_printf("%s/rootfs.img", job->s->dir) : NULL;
        int r = !job->disk_dst ? 0 : rootfs ? sandbox_clone_replace(job->s, rootfs, job->disk_dst) : -ENOMEM;
        if (r >= 0 && job->volumes_of)
                r = sandbox_volumes_snapshot(job->s, job->volumes_of);
        if (r >= 0 && job->volumes_to)
                r = sandbox_volumes_fork(job->s, job->volumes_to);
        return r;
}

/* Carries out a request on the VMM this thread owns (QMP is
 * single-threaded, and only this thread may destroy the VMM). */
static void run_command(struct sandbox *s, struct vmm *v) {
        uint64_t n;
        if (read(s->cmd_fd, &n, sizeof n) < 0 && errno != EAGAIN)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot read the command eventfd: %m");
        pthread_mutex_lock(&s->lock);
        enum sandbox_cmd cmd = s->cmd;
        struct snapshot_job *job = s->cmd_arg;
        pthread_mutex_unlock(&s->lock);
        if (cmd == SANDBOX_CMD_NONE)
                return; /* the requester gave up waiting */
        int r;
        enum sandbox_state from = SANDBOX_RUNNING, to = SANDBOX_RUNNING;
        if (cmd == SANDBOX_CMD_SNAPSHOT) {
                if (v && !job->leave_paused)
                        flush_disk_before_pause(s);
                r = v ? vmm_snapshot(v, job->state_path, job->leave_paused, snapshot_job_paused, job, &job->stats)
                      : -ECONNRESET;
                if (job->leave_paused)
                        to = SANDBOX_PAUSED;
        } else {
                bool pause = cmd == SANDBOX_CMD_PAUSE;
                r = v ? qmp_execute(v->qmp, pause ? "stop" : "cont", NULL, QMP_RUNSTATE_MS, NULL) : -ECONNRESET;
                if (r < 0)
                        log_emit(LOG_LEVEL_WARN, s->ctx, "QMP %s failed: %s (%s)", pause ? "stop" : "cont",
                                 strerror(-r), v ? qmp_last_error(v->qmp) : "vmm gone");
                from = pause ? SANDBOX_RUNNING : SANDBOX_PAUSED;
                to = pause ? SANDBOX_PAUSED : SANDBOX_RUNNING;
        }
        pthread_mutex_lock(&s->lock);
        if (r >= 0 && s->state == from)
                s->state = to;
        if (s->cmd == cmd) {
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
                s->cmd_result = r;
                s->cmd_done = true;
                pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
}

/* Asks a running guest, every IDLE_PROBE_MS, how long it has been idle
 * (the control plane suspends sandboxes idle for too long). */
static void probe_idle(struct sandbox *s) {
        uint64_t now = now_monotonic_ns();
        pthread_mutex_lock(&s->lock);
        bool due = s->state == SANDBOX_RUNNING && s->gc &&
                   (s->idle_probe_ns == 0 || now - s->idle_probe_ns >= IDLE_PROBE_MS * 1000000ULL);
        struct guestconn *g = s->gc;
        pthread_mutex_unlock(&s->lock);
        if (!due)
                return;
        _cleanup_(json_decrefp) json_t *req = json_object(), *res = NULL;
        if (!req || guestconn_call(g, PROTO_PING, req, IDLE_PROBE_TIMEOUT_MS, &res, NULL) < 0)
                return;
        json_t *idle = json_object_get(res, "idle_ms");
        if (!json_is_integer(idle) || json_integer_value(idle) < 0)
                return;
        pthread_mutex_lock(&s->lock);
        s->guest_idle_ms = (uint64_t) json_integer_value(idle);
        s->idle_probe_ns = now;
        pthread_mutex_unlock(&s->lock);
}

static void *sandbox_thread(void *arg) {
        struct sandbox *s = arg;
        char *error = NULL;

        /* a VM an earlier node left; else a warm VM when create claimed
         * one; cold when not or when it failed */
        int r;
        if (s->adopt_vmm)
                r = sandbox_adopt_vm(s, &error);
        else {
                r = s->pool_vm ? sandbox_start_pooled(s) : -ENOENT;
                if (r < 0)
                        r = sandbox_start_vm(s, &error);
        }
        pthread_mutex_lock(&s->lock);
        s->idle_probe_ns = 0; /* a new VM run: its guest is asked afresh */
        s->run_started_ns = now_monotonic_ns();
        s->start_done = true;
        s->start_result = r;
        s->start_error = error;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return NULL;

        /* Watch until delete asks us to stop. */
        for (;;) {
                pthread_mutex_lock(&s->lock);
                struct vmm *v = s->vmm;
                pthread_mutex_unlock(&s->lock);

                /* QMP's fd too: QEMU tells of a run state change (STOP) */
                struct pollfd p[4] = { { .fd = s->stop_fd, .events = POLLIN },
                                       { .fd = s->cmd_fd, .events = POLLIN },
                                       { .fd = v ? v->pidfd : -1, .events = POLLIN },
                                       { .fd = vmm_event_fd(v), .events = POLLIN } };
                int k = poll(p, v ? 4 : 2, MONITOR_INTERVAL_MS);
                if (k < 0 && errno != EINTR)
                        break;
                if (p[0].revents & POLLIN)
                        break;
                if (p[1].revents & POLLIN) {
                        run_command(s, v);
                        continue;
                }
                _cleanup_free_ char *dead = NULL;
                if (v && !(p[2].revents & POLLIN) && (p[3].revents & POLLIN) && vmm_events_stop(v))
                        dead = vmm_stopped_reason(v);
                if (v && ((p[2].revents & POLLIN) || dead)) {
                        /* QEMU exited, or its vCPUs stopped for good
                         * (internal-error: KVM could not run them): a VMM
                         * failure either way, booted again by recovery */
                        char why[512];
                        _cleanup_free_ char *exited = dead ? NULL : vmm_failure_reason(v);
                        snprintf(why, sizeof why, "%s", dead ?: exited ?: "QEMU exited");
                        sandbox_set_failed(s, "%s", why);
                        pthread_mutex_lock(&s->lock);
                        s->vmm = NULL;
                        pthread_mutex_unlock(&s->lock);
                        sandbox_net_detach(s);
                        vmm_destroy(v); /* kills a live one, reaps it */
                        sandbox_recover_schedule(s, why);
                        continue;
                }
                probe_idle(s);
                if (!guestconn_alive(s->gc)) {
                        /* QEMU closes the channel as it dies: give its exit a
                         * moment to show, so the error names the real cause */
                        if (v) {
                                struct pollfd q = { .fd = v->pidfd, .events = POLLIN };
                                if (poll(&q, 1, 300) > 0)
                                        continue;
                        }
                        sandbox_set_failed(s, "guest channel closed");
                }
        }

        pthread_mutex_lock(&s->lock);
        struct vmm *v = s->vmm;
        s->vmm = NULL;
        bool hand_over = s->hand_over;
        if (s->cmd != SANDBOX_CMD_NONE) { /* nobody else will carry it out */
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
                s->cmd_result = -ECANCELED;
                s->cmd_done = true;
                pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
        if (hand_over)
                vmm_forget(v); /* keeps running for the next node, served by the same gateway */
        else {
                if (v)
                        sandbox_net_detach(s);
                vmm_destroy(v);
        }
        return NULL;
}

/* Asks the sandbox thread to destroy the VMM and waits for it. */
void sandbox_thread_stop(struct sandbox *s) {
        if (!s->thread_started)
                return;
        uint64_t one = 1;
        if (write(s->stop_fd, &one, sizeof one) < 0)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot signal the sandbox thread: %m");
        pthread_join(s->thread, NULL);
        s->thread_started = false;
}

/* Undoes a create that failed before or after the thread started. */
void sandbox_create_abort(struct sandbox *s) {
        sandbox_reg_lock();
        sandbox_reg_remove(s);
        sandbox_reg_unlock();
        sandbox_thread_stop(s);
        pool_vm_free(TAKE_PTR(s->pool_vm)); /* claimed, but the thread never took it over */
        if (s->run_dir)
                rm_rf(s->run_dir);
        if (s->dir) {
                int r = rm_rf(s->dir);
                if (r < 0)
                        log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        }
        sandbox_unref(s);
}

/* Starts the sandbox's own thread (it restores or boots the VM and then
 * watches it) and waits until the VM is up or failed. On failure *ret_error
 * says why. */
int sandbox_thread_start(struct sandbox *s, char **ret_error) {
        int r = -pthread_create(&s->thread, NULL, sandbox_thread, s);
        if (r < 0) {
                *ret_error = strdup_printf("cannot start the sandbox thread: %s", strerror(-r));
                return r;
        }
        s->thread_started = true;
        pthread_mutex_lock(&s->lock);
        while (!s->start_done)
                pthread_cond_wait(&s->cond, &s->lock);
        r = s->start_result;
        if (r < 0)
                *ret_error = TAKE_PTR(s->start_error);
        pthread_mutex_unlock(&s->lock);
        return r;
}

int sandbox_set_network(struct sandbox *s, const char *text) {
        char *copy = strdup(text);
        if (!copy)
                return -ENOMEM;
        sandbox_network_lock(s);
        pthread_mutex_lock(&s->lock);
        bool same = strcmp(sandbox_network(s), text) == 0;
        bool hidden = s->state == SANDBOX_CREATING;
        if (!same) {
                free(s->network);
                s->network = TAKE_PTR(copy);
        }
        pthread_mutex_unlock(&s->lock);
        free(copy);
        if (same) {
                sandbox_network_unlock(s);
                return 0;
        }
        /* the gateway serves only VMs it was attached to: one that does not
         * know this sandbox (no VM, or not attached yet) or no gateway at
         * all (nothing is served) reads it at the next attachment */
        int r = gwclient_enabled() ? gwclient_set_policy(s->id, text, s->ctx) : 0;
        if (r == -ENOENT || r == -ENOTCONN)
                r = 0;
        sandbox_network_unlock(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "network policy changed%s", r < 0 ? " (the gateway refused it)" : "");
        /* a sandbox still being made is recorded once it is visible (a
         * record would make a node restart take an unfinished create over) */
        if (!hidden)
                (void) sandbox_record_save(s);
        return r;
}

int sandbox_set_secrets(struct sandbox *s, const char *text) {
        bool clear = strcmp(text, "[]") == 0;
        char *copy = clear ? NULL : strdup(text);
        if (!clear && !copy)
                return -ENOMEM;
        /* net_lock across the change and its hand-over: two sets in a row
         * reach the gateway in that order */
        sandbox_network_lock(s);
        pthread_mutex_lock(&s->lock);
        sandbox_secrets_free(s->secrets);
        s->secrets = copy;
        bool has_vm = s->state == SANDBOX_RUNNING || s->state == SANDBOX_PAUSED;
        pthread_mutex_unlock(&s->lock);
        /* without a VM the gateway does not know the sandbox: whatever
         * attaches it later hands the set over (sandbox_secrets_dup()) */
        int r = gwclient_enabled() && has_vm ? gwclient_set_secrets(s->id, text, s->ctx) : 0;
        if (r == -ENOENT || r == -ENOTCONN)
                r = 0;
        sandbox_network_unlock(s);
        return r;
}

/* A sandbox whose VMM crashed this many times within CRASH_WINDOW_NS is
 * not recovered again: something in it kills its VM. */
#define CRASH_GIVE_UP ARRAY_SIZE(((struct sandbox *) 0)->crash_ns)
#define CRASH_WINDOW_NS (10 * 60 * 1000000000ULL)

/* ---- lifecycle verbs ---- */

/* Claims s for one verb: it must still be registered, no other verb (or
 * create) may run, and it must be in state `from` (or `from2`). */
int sandbox_life_begin(struct sandbox *s, enum sandbox_state from, enum sandbox_state from2, const char **ret_state) {
        sandbox_reg_lock();
        pthread_mutex_lock(&s->lock);
        int r = 0;
        if (sandbox_reg_find(s->id) != s || s->deleted)
                r = -ENOENT;
        else if (s->life_busy || s->state == SANDBOX_CREATING)
                r = -EBUSY;
        else if (s->state != from && s->state != from2)
                r = -EPERM;
        else
                s->life_busy = true;
        if (ret_state)
                *ret_state = sandbox_state_str(s->state);
        pthread_mutex_unlock(&s->lock);
        sandbox_reg_unlock();
        return r;
}

void sandbox_life_end(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        s->life_busy = false;
        pthread_mutex_unlock(&s->lock);
}

/* Joins the sandbox thread (it destroys the VMM) and re-arms stop_fd for
 * the next thread: sandbox_thread_stop() leaves the eventfd readable. */
static void life_stop_thread(struct sandbox *s) {
        if (!s->thread_started)
                return; /* nothing to join, and stop_fd was never written (a read would block) */
        sandbox_thread_stop(s);
        uint64_t n;
        if (read(s->stop_fd, &n, sizeof n) < 0 && errno != EAGAIN)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot drain the stop eventfd: %m");
}

/* Hands a command to the sandbox thread of s (claimed by sandbox_life_begin())
 * and waits up to wait_ms (< 0: until done; for commands whose arg lives
 * on the caller's stack) for its result. On a timeout the thread drops the
 * command if it has not started it yet. */
int sandbox_post_command(struct sandbox *s, enum sandbox_cmd cmd, void *arg, int64_t wait_ms) {
        pthread_mutex_lock(&s->lock);
        s->cmd = cmd;
        s->cmd_arg = arg;
        s->cmd_done = false;
        pthread_mutex_unlock(&s->lock);
        uint64_t one = 1;
        if (write(s->cmd_fd, &one, sizeof one) < 0) {
                int r = negative_errno();
                pthread_mutex_lock(&s->lock);
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        struct timespec deadline;
        node_deadline_after_ms(&deadline, wait_ms);
        pthread_mutex_lock(&s->lock);
        int r = 0;
        while (!s->cmd_done && r == 0)
                r = wait_ms < 0 ? -pthread_cond_wait(&s->cond, &s->lock)
                                : -pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
        if (s->cmd_done)
                r = s->cmd_result;
        else {
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* The stop itself, for a sandbox claimed by sandbox_life_begin(); leaves it
 * claimed. flush: the guest syncs its disks first. */
void sandbox_stop_claimed(struct sandbox *s, bool flush) {
        uint64_t t0 = now_monotonic_ns();
        /* Flush the guest's page cache to the disk image first, or writes
         * not yet synced die with QEMU. A paused guest cannot answer; a
         * guest that does not is stopped anyway (it is ours to stop). */
        if (flush)
                (void) sandbox_guest_sync(s, STOP_SYNC_MS, "stop");
        /* QEMU dies, its end of the guest channel closes: open streams and
         * sessions end ("guest channel closed"); the channel itself stays
         * allocated until start retires it, since ops may still hold it. */
        life_stop_thread(s);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (mem && unlink(mem) < 0 && errno != ENOENT)
                log_errno(LOG_LEVEL_WARN, negative_errno(), s->ctx, "Failed to remove %s: %m", mem);
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_STOPPED;
        s->pid = 0;
        pthread_mutex_unlock(&s->lock);
        (void) sandbox_record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox stopped in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
}

/* Moves the channel of the previous VM run out of s->gc (s->lock held).
 * Nobody can reach it through s any more; an op that fetched it before the
 * stop may still hold it, so it is freed only when no such op can exist:
 * right away when s has no other holder, else with the last reference. */
static int sandbox_retire_gc(struct sandbox *s) {
        if (!s->gc)
                return 0;
        struct guestconn **n = realloc(s->retired_gc, (s->n_retired_gc + 1) * sizeof *n);
        if (!n)
                return -ENOMEM;
        s->retired_gc = n;
        s->retired_gc[s->n_retired_gc++] = TAKE_PTR(s->gc);
        /* the registry's reference and the caller's */
        if (__atomic_load_n(&s->refs, __ATOMIC_SEQ_CST) <= 2) {
                for (size_t i = 0; i < s->n_retired_gc; i++)
                        guestconn_free(s->retired_gc[i]);
                s->n_retired_gc = 0;
        }
        return 0;
}

int sandbox_ram_file_create(struct sandbox *s, const char *path, char **ret_error) {
        /* the RAM file of a boot with share=on, as for a template */
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || ftruncate(fd, (off_t) s->tpl->memory_mib << 20) < 0) {
                int r = negative_errno();
                *ret_error = strdup_printf("cannot create the RAM file %s: %s", path, strerror(-r));
                return r;
        }
        return 0;
}

/* The template of s, looked up once: a sandbox a node took over from an
 * earlier one has none until it needs to boot (the build may still run). */
int sandbox_template(struct sandbox *s, char **ret_error) {
        if (s->tpl)
                return 0;
        int r = template_get(s->template_name, TEMPLATE_WAIT_MS, &s->tpl, ret_error);
        if (r < 0 && !*ret_error)
                *ret_error = strdup_printf("template %s: %s", s->template_name, strerror(-r));
        return r;
}

/* The cold boot of a stopped sandbox claimed by sandbox_life_begin(); leaves it
 * claimed. On failure it stays stopped and *ret_error says why. */
int sandbox_start_claimed(struct sandbox *s, char **ret_error) {
        int r;
        char *err = NULL;
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!mem) {
                r = -ENOMEM;
                goto fail;
        }
        r = sandbox_template(s, &err);
        if (r < 0)
                goto fail;
        /* a sandbox taken over without its VM has no run dir yet */
        if (!s->run_dir && (r = node_vm_run_dir(sandbox_mgr()->cfg->data_dir, &s->run_dir)) < 0) {
                err = strdup_printf("cannot create a run directory under %s/run: %s", sandbox_mgr()->cfg->data_dir, strerror(-r));
                goto fail;
        }
        if (!s->restore_state && (r = sandbox_ram_file_create(s, mem, &err)) < 0)
                goto fail;
        pthread_mutex_lock(&s->lock);
        r = sandbox_retire_gc(s);
        s->cold_boot = true;
        s->start_done = false;
        s->start_result = 0;
        free(s->start_error);
        s->start_error = NULL;
        free(s->error);
        s->error = NULL;
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                goto fail;

        uint64_t t0 = now_monotonic_ns();
        r = sandbox_thread_start(s, &err);
        if (r < 0) {
                life_stop_thread(s); /* it has returned already: only joins */
                goto fail;
        }
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_RUNNING;
        s->execution++;
        pthread_mutex_unlock(&s->lock);
        (void) sandbox_record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox started (cold boot) in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;

fail:
        if (mem)
                (void) unlink(mem);
        log_emit(LOG_LEVEL_WARN, s->ctx, "start failed: %s", err ? err : strerror(-r));
        if (ret_error)
                *ret_error = err;
        else
                free(err);
        return r;
}

/* ---- crash recovery ---- */

/* The newest full snapshot of s taken in its current execution (tagged by
 * sandbox_snapshot_full()): 1 with its id and time, or 0 when there is none.
 * One from an earlier execution is never used: the disk has moved on since
 * (a start, wake, rollback or recovery came after it), and resuming it would
 * take the sandbox back past writes it acknowledged after that event. */
static int sandbox_checkpoint_of_execution(struct sandbox *s, char *ret, size_t n, int64_t *ret_at_ms) {
        _cleanup_free_ char *d = strdup_printf("%s/snapshots", s->dir);
        DIR *dir = d ? opendir(d) : NULL;
        if (!dir)
                return 0;
        struct timespec best = { 0 };
        int found = 0;
        for (struct dirent *de; (de = readdir(dir));) {
                size_t len = strlen(de->d_name);
                if (len <= 6 || len - 6 >= n || strcmp(de->d_name + len - 6, ".state") != 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                _cleanup_free_ char *path = strdup_printf("%s/%s", d, de->d_name);
                unsigned exe;
                if (!path || sandbox_snapshot_execution_get(path, &exe) < 0 || exe != s->execution)
                        continue;
                if (found && (st.st_mtim.tv_sec < best.tv_sec ||
                              (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec <= best.tv_nsec)))
                        continue;
                best = st.st_mtim;
                snprintf(ret, n, "%.*s", (int) (len - 6), de->d_name);
                found = 1;
        }
        closedir(dir);
        if (found)
                *ret_at_ms = (int64_t) best.tv_sec * 1000 + best.tv_nsec / 1000000;
        return found;
}

struct recovery {
        struct sandbox *s; /* a reference */
        char reason[256];
        unsigned attempt; /* 1, then one more for each boot that failed */
};

static void recover_schedule(struct sandbox *s, const char *reason, unsigned attempt);

/* Recoveries start their VMs one a CPU at a time (at least 2, at most
 * RECOVER_STARTS_MAX): after a node's restart every running sandbox is
 * recovered at once, and QEMUs loading their states side by side on a few
 * cores each took as long as all of them (bench/restart.py, 16 sandboxes
 * on 2 cores: 4-7 s each). Not fewer than 2, so that one boot that hangs
 * until its timeout does not hold up every other recovery. */
#define RECOVER_STARTS_MIN 2
#define RECOVER_STARTS_MAX 8

static pthread_mutex_t recover_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t recover_cond = PTHREAD_COND_INITIALIZER;
static unsigned recover_starting;

static void recover_start_slot(void) {
        unsigned most = node_cpus_within(RECOVER_STARTS_MIN, RECOVER_STARTS_MAX);
        pthread_mutex_lock(&recover_lock);
        while (recover_starting >= most)
                pthread_cond_wait(&recover_cond, &recover_lock);
        recover_starting++;
        pthread_mutex_unlock(&recover_lock);
}

static void recover_start_done(void) {
        pthread_mutex_lock(&recover_lock);
        recover_starting--;
        pthread_cond_signal(&recover_cond);
        pthread_mutex_unlock(&recover_lock);
}

/* Brings a failed sandbox back as a new execution: a cold boot of its own
 * disk (the freshest state it has: every write the guest synced is there;
 * its file systems replay their journals as after a power cut), or, for a
 * sandbox that opted in, a resume of the newest full snapshot of the
 * execution that died (its processes kept, later writes lost). Runs on a thread of its own, claimed like a verb,
 * so a delete meanwhile is refused with -EBUSY or wins before it starts. */
static void *recover_thread(void *arg) {
        struct recovery *rc = arg;
        struct sandbox *s = rc->s;
        char *err = NULL;
        int r;
        if (sandbox_life_begin(s, SANDBOX_FAILED, SANDBOX_FAILED, NULL) < 0)
                goto out;
        pthread_mutex_lock(&s->lock);
        s->recovering = true;
        uint64_t now = now_monotonic_ns();
        /* the oldest of the last CRASH_GIVE_UP crashes, then this one */
        bool give_up = s->crash_ns[0] && now - s->crash_ns[0] < CRASH_WINDOW_NS;
        memmove(s->crash_ns, s->crash_ns + 1, sizeof s->crash_ns - sizeof s->crash_ns[0]);
        s->crash_ns[CRASH_GIVE_UP - 1] = now;
        pthread_mutex_unlock(&s->lock);
        if (give_up) {
                log_emit(LOG_LEVEL_ERROR, s->ctx, "not recovering: the VM failed %zu times within %llu minutes",
                         CRASH_GIVE_UP, (unsigned long long) (CRASH_WINDOW_NS / 60000000000ULL));
                pthread_mutex_lock(&s->lock);
                s->recovering = false;
                sandbox_recoveries_add(s, rc->reason, "none", false, "failed too often: left failed", NULL, 0);
                pthread_mutex_unlock(&s->lock);
                (void) sandbox_record_save(s);
                sandbox_life_end(s);
                goto out;
        }
        life_stop_thread(s); /* joins the thread of the VM that died */
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_STOPPED;
        pthread_mutex_unlock(&s->lock);
        /* by default the disk as the crash left it; a checkpoint only
         * when asked for, and only one of this execution */
        char snap[80] = "", how[160] = "cold boot of its disk";
        int64_t snap_at = 0;
        bool resumed = false, resumed_suspend = false;
        if (s->resume_state) {
                resumed_suspend = true;
                /* the whole snapshot of a suspend the node died in, or the
                 * VM the node saved at its stop: nothing ran after it, so
                 * it is the latest state there is */
                s->restore_state = TAKE_PTR(s->resume_state);
                snprintf(how, sizeof how,
                         s->resume_saved ? "resumed the VM saved at the node's stop"
                                         : "resumed the snapshot of the suspend it was in when the "
                                           "node stopped");
        } else if (s->recover_checkpoint && sandbox_checkpoint_of_execution(s, snap, sizeof snap, &snap_at) > 0) {
                _cleanup_free_ char *img = sandbox_snapshot_path(s, snap);
                _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
                /* its volumes as they were then: the memory has them mounted */
                if (img && rootfs && sandbox_clone_replace(s, img, rootfs) >= 0 &&
                    sandbox_volumes_rollback(s, snap) >= 0) {
                        s->restore_state = sandbox_snapshot_state_path(s, snap);
                        resumed = true;
                        snprintf(how, sizeof how, "resumed full snapshot %s (writes after it are lost)", snap);
                }
        } else if (s->recover_checkpoint)
                snprintf(how, sizeof how, "cold boot of its disk (no full snapshot of the execution that failed)");
        if (rc->attempt > 1) {
                size_t k = strlen(how);
                snprintf(how + k, sizeof how - k, " (attempt %u)", rc->attempt);
        }
        log_emit(LOG_LEVEL_WARN, s->ctx, "recovering the sandbox (%s): %s", rc->reason, how);
        recover_start_slot();
        r = sandbox_start_claimed(s, &err);
        recover_start_done();
        if (resumed_suspend && s->restore_state)
                (void) unlink(s->restore_state); /* loaded (or unusable): nobody else needs it */
        /* paused when the node stopped: paused again (it ran for the
         * moment between its restore and this) */
        if (r >= 0 && resumed_suspend && s->resume_paused) {
                int k = sandbox_post_command(s, SANDBOX_CMD_PAUSE, NULL, LIFECYCLE_CMD_WAIT_MS);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot pause it again as it was: %m");
        }
        s->resume_saved = s->resume_paused = false;
        free(s->restore_state);
        s->restore_state = NULL;
        pthread_mutex_lock(&s->lock);
        s->recovering = false;
        if (r < 0) {
                s->state = SANDBOX_FAILED;
                free(s->error);
                s->error = strdup_printf("recovery failed: %s", err ? err : strerror(-r));
        }
        sandbox_recoveries_add(s, rc->reason, how, r >= 0, r < 0 ? s->error : NULL, resumed ? snap : NULL, snap_at);
        bool again = r < 0 && !s->deleted;
        pthread_mutex_unlock(&s->lock);
        (void) sandbox_record_save(s);
        sandbox_life_end(s);
        log_emit(r < 0 ? LOG_LEVEL_ERROR : LOG_LEVEL_INFO, s->ctx, "recovery %s%s",
                 r < 0 ? "failed" : "done", again ? "; trying again (a failed boot counts as a crash)" : "");
        /* a boot that failed is a VM that died too: tried again, within
         * the give-up rule (a boot that always fails is left failed after
         * CRASH_GIVE_UP of them) */
        if (again)
                recover_schedule(s, rc->reason, rc->attempt + 1);
out:
        free(err);
        sandbox_unref(s);
        free(rc);
        return NULL;
}

void sandbox_recover_schedule(struct sandbox *s, const char *reason) {
        recover_schedule(s, reason, 1);
}

static void recover_schedule(struct sandbox *s, const char *reason, unsigned attempt) {
        if (!sandbox_mgr()->cfg->recover)
                return;
        struct recovery *rc = calloc(1, sizeof *rc);
        if (!rc)
                return;
        rc->s = sandbox_ref(s);
        rc->attempt = attempt;
        snprintf(rc->reason, sizeof rc->reason, "%s", reason);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = -pthread_create(&t, &attr, recover_thread, rc);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, s->ctx, "cannot start the recovery thread: %m");
                sandbox_unref(s);
                free(rc);
        }
}

/* Undoes a fork or wake that failed: as sandbox_create_abort(), except that the
 * snapshots parked in a suspended sandbox's directory stay. */
void sandbox_new_abort(struct sandbox *s) {
        if (s->dir && sandbox_dir_is_parked(s->dir)) {
                (void) sandbox_clear_but_snapshots(s->dir);
                free(s->dir);
                s->dir = NULL;
        }
        sandbox_create_abort(s);
}

/* ---- fork ---- */

/* Registers a new sandbox id (CREATING, hidden) for fork and wake; its
 * directory is made fresh (a woken sandbox finds its snapshots again if
 * they were parked here). On failure *ret_error says why. */
int sandbox_register_new(const char *id, const char *template_name, json_t *env, const char *network,
                 struct sandbox **ret, char **ret_error) {
        struct sandbox *s;
        int r = sandbox_new(id, template_name, env, network, &s);
        if (r < 0)
                return r;
        r = sandbox_reg_add(s, ret_error);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        s->dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        if (!s->dir) {
                sandbox_new_abort(s);
                return -ENOMEM;
        }
        if (sandbox_dir_is_parked(s->dir))
                (void) sandbox_clear_but_snapshots(s->dir);
        else
                (void) rm_rf(s->dir);
        if ((mkdir(s->dir, 0700) < 0 && errno != EEXIST) || (r = node_vm_run_dir(sandbox_mgr()->cfg->data_dir, &s->run_dir)) < 0) {
                r = r < 0 ? r : negative_errno();
                *ret_error = strdup_printf("cannot create the directories of %s: %s", id, strerror(-r));
                sandbox_new_abort(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* Restores the full snapshot at state_path into s (registered by
 * sandbox_register_new(), its disk in place), installs its identity and makes it
 * visible. The state file is removed afterwards: the VM has loaded it. */
int sandbox_restore_new(struct sandbox *s, char *state_path, char **ret_error) {
        s->restore_state = state_path;
        int r = sandbox_template(s, ret_error);
        if (r >= 0)
                r = sandbox_thread_start(s, ret_error);
        (void) unlink(state_path);
        free(s->restore_state);
        s->restore_state = NULL;
        if (r < 0) {
                sandbox_new_abort(s);
                return r;
        }
        sandbox_make_visible(s);
        return 0;
}

/* Boots s (registered by sandbox_register_new(), its disk in place) as a start
 * does, and makes it visible. On failure s is gone (sandbox_new_abort()). */
int sandbox_boot_new(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        int r = mem ? sandbox_template(s, ret_error) : -ENOMEM;
        if (r >= 0)
                r = sandbox_ram_file_create(s, mem, ret_error);
        s->cold_boot = true;
        if (r >= 0)
                r = sandbox_thread_start(s, ret_error);
        if (r < 0)
                sandbox_new_abort(s);
        else
                sandbox_make_visible(s);
        return r;
}
