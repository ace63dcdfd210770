/* SPDX-License-Identifier: Apache-2.0 */
#include "sandbox-internal.h"
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "gwclient.h"
#include "log.h"
#include "netpolicy.h"
#include "nodeutil.h"
#include "pool.h"
#include "proto.h"
#include "qmp.h"
#include "session.h"
#include "template-build.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

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
/* Recoveries kept in a sandbox's record and JSON. */
#define RECOVERIES_KEPT 8
/* How long a clean shutdown waits for the guest to flush its disks. */
#define SHUTDOWN_SYNC_MS 5000
/* How long shutdown and hand-over wait for a verb in progress. */
#define SHUTDOWN_BUSY_WAIT_NS (30 * 1000000000ULL)
#define RECORD_MAX (256 * 1024)

const struct node_config *scfg;
static enum vmm_accel scfg_accel;
char *sdir;

pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* A fixed array is enough: max_sandboxes is bounded and small. */
struct sandbox **reg;
size_t reg_n, reg_cap;

/* Guards warned_copy: the byte-copy fallback is logged once per node. */
pthread_mutex_t clone_lock = PTHREAD_MUTEX_INITIALIZER;
bool warned_copy;


struct sandbox *sandbox_ref(struct sandbox *s) {
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);
        return s;
}

void sandbox_unref(struct sandbox *s) {
        if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST) > 0)
                return;
        /* the thread was joined by delete (or never started) */
        guestconn_free(s->gc);
        for (size_t i = 0; i < s->n_retired_gc; i++)
                guestconn_free(s->retired_gc[i]);
        free(s->retired_gc);
        if (s->stop_fd >= 0)
                close(s->stop_fd);
        if (s->cmd_fd >= 0)
                close(s->cmd_fd);
        vmm_destroy(s->adopt_vmm); /* adopted, but never taken over */
        free(s->restore_state);
        free(s->resume_state);
        json_decref(s->recoveries);
        template_info_free(s->tpl);
        json_decref(s->env);
        free(s->template_name);
        free(s->dir);
        free(s->run_dir);
        free(s->error);
        free(s->start_error);
        free(s->network);
        sandbox_secrets_free(s->secrets);
        pthread_mutex_destroy(&s->net_lock);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

static void net_attach(struct sandbox *s, struct vmm *v);

/* ---- registry (reg_lock held) ---- */

struct sandbox *reg_find(const char *id) {
        for (size_t i = 0; i < reg_n; i++)
                if (strcmp(reg[i]->id, id) == 0)
                        return reg[i];
        return NULL;
}

void reg_remove(struct sandbox *s) {
        for (size_t i = 0; i < reg_n; i++)
                if (reg[i] == s) {
                        reg[i] = reg[--reg_n];
                        return;
                }
}

void sandbox_make_visible(struct sandbox *s) {
        /* lock order: reg_lock, then s->lock */
        pthread_mutex_lock(&reg_lock);
        pthread_mutex_lock(&s->lock);
        if (s->state == SANDBOX_CREATING)
                s->state = SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&reg_lock);
        (void) record_save(s);
}

int reg_add(struct sandbox *s, char **ret_error) {
        pthread_mutex_lock(&reg_lock);
        int r = reg_find(s->id) ? -EEXIST : reg_n >= reg_cap ? -EUSERS : 0;
        if (r == 0)
                reg[reg_n++] = s;
        pthread_mutex_unlock(&reg_lock);
        if (r < 0 && ret_error)
                *ret_error = r == -EEXIST ? strdup_printf("sandbox %s exists", s->id)
                                          : strdup_printf("node at capacity (%u sandboxes)", scfg->max_sandboxes);
        return r;
}

bool sandbox_state_is(struct sandbox *s, enum sandbox_state st) {
        pthread_mutex_lock(&s->lock);
        bool is = s->state == st;
        pthread_mutex_unlock(&s->lock);
        return is;
}

/* ---- the record: SANDBOXES/ID/sandbox.json ---- */

/* The state a record keeps: what the sandbox should be in when a node
 * takes it over. A failed sandbox was running: recovery brings it back. */
static const char *record_state(enum sandbox_state st) {
        switch (st) {
        case SANDBOX_PAUSED:
                return "paused";
        case SANDBOX_STOPPED:
                return "stopped";
        default:
                return "running";
        }
}

/* Writes the record. Without fsync: it is rewritten on every transition,
 * and after a host crash every VM is gone anyway (recovery boots the disk,
 * which only needs the template and env the first write recorded). */
int record_save(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:O, s:s, s:s*, s:I, s:O*, s:s}", "version", 1, "id", s->id,
                              "tenant", s->tenant, "template", s->template_name, "env", s->env, "state",
                              record_state(s->state), "run_dir", s->run_dir, "execution", (json_int_t) s->execution,
                              "recoveries", s->recoveries, "recovery", sandbox_recovery_name(s));
        if (o)
                sandbox_limits_to_json(s, o);
        /* the policy goes along, so a node restart keeps enforcing it */
        json_t *net = o && s->network ? json_loads(s->network, 0, NULL) : NULL;
        if (net)
                json_object_set_new(o, "network", net);
        pthread_mutex_unlock(&s->lock);
        _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        _cleanup_free_ char *path = strdup_printf("%s/sandbox.json", s->dir);
        if (!text || !path)
                return -ENOMEM;
        int r = file_write_replace(path, text, strlen(text), 0600);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "cannot write %s (a node restart would lose this sandbox): %m",
                          path);
        return r;
}

/* The parts of a record a node takes a sandbox over with. */
struct record {
        json_t *json;
        const char *template_name, *state, *run_dir;
        json_t *env, *recoveries;
        unsigned execution;
        bool recover_checkpoint;
        struct sandbox_limits limits;
        char *network; /* canonical, or NULL: none recorded (allow-all) */
};

static void record_release(struct record *rec) {
        json_decref(rec->json);
        free(rec->network);
}

/* The policy a record carries, checked again: canonical text, or NULL
 * when it has none (a record from before policies: allow-all, as then).
 * One that does not parse (a damaged file) fails closed, to deny-all: the
 * sandbox is kept, never dropped for it. */
static int record_network(const json_t *j, const char *id, char **ret) {
        json_t *n = json_object_get(j, "network");
        if (!n) {
                *ret = NULL;
                return 0;
        }
        _cleanup_(netpolicy_freep) struct netpolicy *p = NULL;
        char err[NETPOLICY_ERR_MAX] = "";
        int r = netpolicy_parse(n, "network", &p, err, sizeof err);
        if (r == -ENOMEM)
                return r;
        if (r <= 0) {
                log_warn("sandbox=%s the recorded network policy is unusable (%s): denying all egress", id,
                         r == 0 ? "empty" : err[0] ? err : strerror(-r));
                if ((r = netpolicy_new(NETPOLICY_DENY_ALL, &p)) < 0)
                        return r;
        }
        return netpolicy_format(p, ret);
}

/* Reads and checks SANDBOXES/ID/sandbox.json. -ENOENT without one (a
 * create that never finished), -EBADMSG when it is not a record of id. */
static int record_load(const char *dir, const char *id, struct record *ret) {
        _cleanup_free_ char *path = strdup_printf("%s/sandbox.json", dir), *text = NULL;
        size_t len;
        if (!path)
                return -ENOMEM;
        int r = file_read_all(path, RECORD_MAX, &text, &len);
        if (r < 0)
                return r;
        json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
                return -EBADMSG;
        struct record rec = {
                .json = j,
                .template_name = json_string_value(json_object_get(j, "template")),
                .state = json_string_value(json_object_get(j, "state")),
                .run_dir = json_string_value(json_object_get(j, "run_dir")),
                .env = json_object_get(j, "env"),
                .recoveries = json_object_get(j, "recoveries"),
        };
        json_int_t exe = json_integer_value(json_object_get(j, "execution"));
        const char *rid = json_string_value(json_object_get(j, "id"));
        if (!rid || strcmp(rid, id) != 0 || !rec.template_name || !name_is_valid(rec.template_name) || !rec.state ||
            (strcmp(rec.state, "running") != 0 && strcmp(rec.state, "paused") != 0 &&
             strcmp(rec.state, "stopped") != 0) ||
            !json_is_object(rec.env) || (rec.recoveries && !json_is_array(rec.recoveries)) || exe < 0 ||
            exe > UINT32_MAX || (rec.run_dir && path_check(rec.run_dir, strlen(rec.run_dir)) < 0)) {
                json_decref(j);
                return -EBADMSG;
        }
        rec.execution = (unsigned) exe;
        /* a record from before the setting existed boots its disk */
        if (sandbox_recovery_from_json(j, &rec.recover_checkpoint) < 0 || sandbox_limits_from_json(j, &rec.limits) < 0) {
                json_decref(j);
                return -EBADMSG;
        }
        if ((r = record_network(j, id, &rec.network)) < 0) {
                json_decref(j);
                return r;
        }
        *ret = rec;
        return 0;
}

/* Appends one recovery to s->recoveries (s->lock held), keeping the last
 * RECOVERIES_KEPT. */
void recoveries_add(struct sandbox *s, const char *reason, const char *how, bool ok, const char *error,
                    const char *checkpoint, int64_t checkpoint_at_ms) {
        if (!s->recoveries && !(s->recoveries = json_array()))
                return;
        json_t *o = json_pack("{s:I, s:s, s:s, s:b, s:I}", "at", (json_int_t) (now_realtime_ns() / 1000000ULL), "reason",
                              reason, "how", how, "ok", ok, "execution", (json_int_t) s->execution);
        if (o && error)
                json_object_set_new(o, "error", json_string(error));
        if (o && checkpoint) { /* what it rolled back to, and from when */
                json_object_set_new(o, "checkpoint", json_string(checkpoint));
                json_object_set_new(o, "checkpoint_at", json_integer(checkpoint_at_ms));
        }
        if (o)
                json_array_append_new(s->recoveries, o);
        while (json_array_size(s->recoveries) > RECOVERIES_KEPT)
                json_array_remove(s->recoveries, 0);
}

/* ---- the sandbox thread ---- */

static void set_failed(struct sandbox *s, const char *fmt, ...) _printf_(2, 3);
static void set_failed(struct sandbox *s, const char *fmt, ...) {
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

/* PIDFD_GET_INFO (Linux 6.15), its first version: the exit status of a
 * process that is not our child, once its parent reaped it. */
struct pidfd_info_v0 {
        uint64_t mask;
        uint64_t cgroupid;
        uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
        int32_t exit_code;
};
#define PIDFD_GET_INFO_V0 _IOWR(0xFF, 11, struct pidfd_info_v0)
#define PIDFD_INFO_EXIT_ (1ULL << 3)

/* The wait status of the exited process of pidfd that is not our child
 * (airlock-nodemgr started it and reaps it: give it a moment). */
static int foreign_exit_status(int pidfd, int *ret) {
        for (int i = 0; i < 50; i++) {
                struct pidfd_info_v0 info = { .mask = PIDFD_INFO_EXIT_ };
                /* ESRCH: gone, but its exit not published yet (a VM whose
                 * exit closes a tap takes a moment longer): ask again */
                int k = ioctl(pidfd, PIDFD_GET_INFO_V0, &info);
                if (k < 0 && errno != ESRCH)
                        return negative_errno();
                if (k >= 0 && (info.mask & PIDFD_INFO_EXIT_)) {
                        *ret = info.exit_code;
                        return 0;
                }
                struct timespec ts = { 0, 10 * 1000000L };
                nanosleep(&ts, NULL);
        }
        return -ETIMEDOUT;
}

/* Describes how the (not yet reaped) QEMU process ended. */
static void describe_exit(struct vmm *v, char *buf, size_t n) {
        siginfo_t si = { 0 };
        if (waitid((idtype_t) P_PIDFD, (id_t) v->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) {
                int status;
                if (errno != ECHILD || foreign_exit_status(v->pidfd, &status) < 0)
                        snprintf(buf, n, "vmm exited");
                else if (WIFEXITED(status))
                        snprintf(buf, n, "vmm exited (status %d)", WEXITSTATUS(status));
                else
                        snprintf(buf, n, "vmm exited (status %d, killed by signal %d)", 128 + WTERMSIG(status),
                                 WTERMSIG(status));
                return;
        }
        if (si.si_code == CLD_EXITED)
                snprintf(buf, n, "vmm exited (status %d)", si.si_status);
        else
                snprintf(buf, n, "vmm exited (status %d, killed by signal %d)", 128 + si.si_status, si.si_status);
}

static int send_identity(struct sandbox *s, struct guestconn *g, char **ret_message) {
        return guestops_identity(g, s->id, s->env, IDENTITY_MS, ret_message);
}

/* Takes over the warm VM create claimed from the pool: resumes it and
 * installs the identity. On failure the warm VM is destroyed and the rootfs
 * replaced by a fresh clone, so that start_vm() can restore cold. */
static int start_pooled(struct sandbox *s) {
        struct pool_vm *pv = TAKE_PTR(s->pool_vm);
        _cleanup_free_ char *msg = NULL;
        uint64_t t0 = now_monotonic_ns();
        int r = pool_vm_resume(pv);
        uint64_t t_resumed = now_monotonic_ns();
        if (r >= 0)
                r = send_identity(s, pv->gc, &msg);
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

        net_attach(s, pv->vmm);
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
static void net_attach(struct sandbox *s, struct vmm *v) {
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

static void net_detach(struct sandbox *s) {
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
        pthread_mutex_lock(&reg_lock);
        size_t n = reg_n;
        struct sandbox **list = calloc(n ? n : 1, sizeof *list);
        size_t k = 0;
        for (size_t i = 0; list && i < n; i++)
                if (reg[i]->state != SANDBOX_CREATING) {
                        sandbox_ref(reg[i]);
                        list[k++] = reg[i];
                }
        pthread_mutex_unlock(&reg_lock);
        if (!list)
                return -ENOMEM;
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

/* Restores the VM and installs its identity. On failure *ret_error says why;
 * everything started is torn down again. */
static int start_vm(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!rootfs || !mem)
                return -ENOMEM;
        struct template_info *t = s->tpl;
        _cleanup_free_ char *disk = NULL;
        int k = node_disk_link(s->run_dir, rootfs, &disk);
        if (k < 0) {
                *ret_error = strdup_printf("cannot link the disk into %s: %s", s->run_dir, strerror(-k));
                return k;
        }
        struct vmm_config vc = template_vmm_config(t, disk, s->run_dir, s->ctx);
        vc.cgroup_memory_mib = s->limits.memory_mib;
        vc.cgroup_vcpus = s->limits.vcpus;
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
                r = send_identity(s, g, &msg);
                if (r < 0 && msg) {
                        *ret_error = strdup_printf("installing the identity failed: %s", msg);
                        guestconn_free(g);
                        vmm_destroy(v);
                        return r;
                }
        }
        if (r < 0) {
                /* the VMM's own account: QEMU's last words, or its vCPUs'
                 * run state (internal-error), not only a timeout */
                char why[128] = "";
                if (vmm_exited(v))
                        describe_exit(v, why, sizeof why);
                _cleanup_free_ char *qemu = vmm_failure_reason(v);
                *ret_error = strdup_printf("%s failed: %s%s%s%s%s", step, strerror(-r), why[0] ? "; " : "", why,
                                           qemu ? "; " : "", qemu ?: "");
                guestconn_free(g);
                vmm_destroy(v);
                return r;
        }
        net_attach(s, v);
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
static int adopt_vm(struct sandbox *s, char **ret_error) {
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
        net_attach(s, v);
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
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", job->s->dir);
        return rootfs ? clone_replace(job->s, rootfs, job->disk_dst) : -ENOMEM;
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
                r = adopt_vm(s, &error);
        else {
                r = s->pool_vm ? start_pooled(s) : -ENOENT;
                if (r < 0)
                        r = start_vm(s, &error);
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
                        if (dead)
                                snprintf(why, sizeof why, "%s", dead);
                        else
                                describe_exit(v, why, sizeof why);
                        set_failed(s, "%s", why);
                        pthread_mutex_lock(&s->lock);
                        s->vmm = NULL;
                        pthread_mutex_unlock(&s->lock);
                        net_detach(s);
                        vmm_destroy(v); /* kills a live one, reaps it */
                        recover_schedule(s, why);
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
                        set_failed(s, "guest channel closed");
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
                        net_detach(s);
                vmm_destroy(v);
        }
        return NULL;
}

/* Asks the sandbox thread to destroy the VMM and waits for it. */
void stop_thread(struct sandbox *s) {
        if (!s->thread_started)
                return;
        uint64_t one = 1;
        if (write(s->stop_fd, &one, sizeof one) < 0)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot signal the sandbox thread: %m");
        pthread_join(s->thread, NULL);
        s->thread_started = false;
}

/* ---- public ---- */

/* Builds the sandbox an earlier node recorded in SANDBOXES/name and
 * registers it. Its VM, if it still runs, is only reconnected over QMP here
 * (s->adopt_vmm); the thread takes it over later. */
static int takeover_one(const char *name, const char *dir) {
        _cleanup_(record_release) struct record rec = { 0 };
        int r = record_load(dir, name, &rec);
        if (r < 0)
                return r;
        /* what a wake cut off left: never a sandbox's state (a suspend's
         * is looked at below, once we know whether its VM still runs) */
        wake_takeover(dir);
        struct sandbox *s;
        r = sandbox_new(name, rec.template_name, rec.env, rec.network, &s);
        if (r < 0)
                return r;
        r = sandbox_tenant_from_json(s, rec.json);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        s->dir = strdup(dir);
        s->execution = rec.execution;
        s->recover_checkpoint = rec.recover_checkpoint;
        s->limits = rec.limits;
        s->recoveries = rec.recoveries ? json_deep_copy(rec.recoveries) : NULL;
        if (!s->dir) {
                sandbox_unref(s);
                return -ENOMEM;
        }
        if (strcmp(rec.state, "stopped") == 0)
                s->state = SANDBOX_STOPPED;
        else {
                /* only a run dir of ours, under DATA_DIR/run/vm/ */
                _cleanup_free_ char *prefix = strdup_printf("%s/run/vm/", scfg->data_dir);
                bool ours = prefix && rec.run_dir && strncmp(rec.run_dir, prefix, strlen(prefix)) == 0 &&
                            !strchr(rec.run_dir + strlen(prefix), '/');
                if (ours && vmm_adopt(rec.run_dir, scfg_accel, s->ctx, &s->adopt_vmm) >= 0 &&
                    !(s->run_dir = strdup(rec.run_dir))) {
                        sandbox_unref(s);
                        return -ENOMEM;
                }
                /* adopted: CREATING (hidden) until the thread has the guest;
                 * else its VM is gone and recovery boots it again */
                if (!s->adopt_vmm)
                        s->state = SANDBOX_FAILED;
        }
        r = suspend_takeover(s, s->adopt_vmm != NULL);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        if (r > 0 && s->state == SANDBOX_STOPPED)
                s->state = SANDBOX_FAILED; /* cannot be: a suspend needs a VM; resume it all the same */
        pthread_mutex_lock(&reg_lock);
        r = reg_n < reg_cap ? 0 : -EUSERS;
        if (r >= 0)
                reg[reg_n++] = s;
        pthread_mutex_unlock(&reg_lock);
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, s->ctx, "more sandboxes on disk than max_sandboxes=%u: left as it is",
                         scfg->max_sandboxes);
                sandbox_unref(s);
                return 0; /* keep the directory */
        }
        return 1;
}

/* node_vm_run_dirs_sweep() keeps the run dirs of adopted VMs. */
static bool run_dir_adopted(const char *path, void *userdata) {
        (void) userdata;
        bool keep = false;
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < reg_n && !keep; i++)
                keep = reg[i]->adopt_vmm && reg[i]->run_dir && strcmp(reg[i]->run_dir, path) == 0;
        pthread_mutex_unlock(&reg_lock);
        return keep;
}

int sandbox_manager_init(const struct node_config *cfg, enum vmm_accel accel, const char *sandboxes_dir) {
        scfg = cfg;
        scfg_accel = accel;
        sdir = strdup(sandboxes_dir);
        if (!sdir)
                return -ENOMEM;
        reg_cap = cfg->max_sandboxes;
        reg = calloc(reg_cap, sizeof *reg);
        if (!reg)
                return -ENOMEM;

        int r = mkdir_p(sdir, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", sdir);
        DIR *d = opendir(sdir);
        if (!d)
                return log_error_errno(negative_errno(), "Failed to open %s: %m", sdir);
        for (struct dirent *de; (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *path = strdup_printf("%s/%s", sdir, de->d_name);
                if (!path) {
                        closedir(d);
                        return -ENOMEM;
                }
                if (name_is_valid(de->d_name) && sandbox_dir_is_parked(path)) {
                        /* a record in a parked directory: a wake (or a rollback
                         * of an archived sandbox) made it visible again, and its
                         * node stopped before it unparked it */
                        _cleanup_free_ char *rec = strdup_printf("%s/sandbox.json", path);
                        _cleanup_free_ char *marker = strdup_printf("%s/" PARKED_MARKER, path);
                        if (!rec || !marker || access(rec, F_OK) < 0) {
                                suspended_takeover(de->d_name, path); /* a suspended or archived sandbox */
                                continue;
                        }
                        log_info("sandbox=%s was made again from what it kept; taking it over", de->d_name);
                        (void) unlink(marker);
                }
                r = name_is_valid(de->d_name) ? takeover_one(de->d_name, path) : -EBADMSG;
                if (r >= 0)
                        continue;
                log_info("sandbox=%s removing what an unfinished create left (%s): %s", de->d_name,
                         r == -ENOENT ? "no record" : strerror(-r), path);
                r = rm_rf(path);
                if (r < 0)
                        log_warn_errno(r, "Failed to remove %s: %m", path);
        }
        closedir(d);

        /* VMs nobody adopts (warm pools, template builds, unfinished
         * creates) end here */
        r = node_vm_run_dirs_sweep(cfg->data_dir, run_dir_adopted, NULL);
        if (r < 0)
                log_warn_errno(r, "Failed to clean %s/run/vm: %m", cfg->data_dir);

        /* take the adopted VMs over; recover the sandboxes whose VM is gone */
        pthread_mutex_lock(&reg_lock);
        size_t n = reg_n;
        struct sandbox **all = calloc(n ? n : 1, sizeof *all);
        for (size_t i = 0; all && i < n; i++)
                all[i] = sandbox_ref(reg[i]);
        pthread_mutex_unlock(&reg_lock);
        if (!all)
                return -ENOMEM;
        unsigned adopted = 0, recovering = 0, stopped = 0;
        for (size_t i = 0; i < n; i++) {
                struct sandbox *s = all[i];
                if (s->adopt_vmm) {
                        _cleanup_free_ char *err = NULL;
                        r = run_sandbox_thread(s, &err);
                        if (r >= 0) {
                                adopted++;
                                (void) record_save(s);
                        } else {
                                pthread_mutex_lock(&s->lock);
                                s->state = SANDBOX_CREATING; /* set_failed() takes it from here */
                                pthread_mutex_unlock(&s->lock);
                                set_failed(s, "%s", err ? err : strerror(-r));
                        }
                }
                if (sandbox_state_is(s, SANDBOX_FAILED)) {
                        recovering++;
                        recover_schedule(s, s->error ? s->error : "the VM was gone when the node started");
                } else if (sandbox_state_is(s, SANDBOX_STOPPED))
                        stopped++;
                sandbox_unref(s);
        }
        free(all);
        if (n > 0)
                log_info("took over %zu sandboxes of an earlier node: %u VMs adopted, %u stopped, %u being recovered", n,
                         adopted, stopped, recovering);
        return 0;
}

/* Undoes a create that failed before or after the thread started. */
void create_abort(struct sandbox *s) {
        pthread_mutex_lock(&reg_lock);
        reg_remove(s);
        pthread_mutex_unlock(&reg_lock);
        stop_thread(s);
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
int run_sandbox_thread(struct sandbox *s, char **ret_error) {
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

/* A sandbox object in state CREATING with one reference (the registry's,
 * once registered). */
int sandbox_new(const char *id, const char *template_name, json_t *env, const char *network, struct sandbox **ret) {
        struct sandbox *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        snprintf(s->id, sizeof s->id, "%s", id);
        snprintf(s->ctx, sizeof s->ctx, "sandbox=%s", id);
        snprintf(s->tenant, sizeof s->tenant, "%s", SANDBOX_TENANT_ADMIN);
        s->refs = 1;
        s->state = SANDBOX_CREATING;
        s->stop_fd = eventfd(0, EFD_CLOEXEC);
        s->cmd_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        pthread_mutex_init(&s->lock, NULL);
        pthread_mutex_init(&s->net_lock, NULL);
        node_cond_init(&s->cond); /* pause/resume wait on it with a deadline */
        s->template_name = strdup(template_name);
        s->env = env ? json_incref(env) : json_object();
        s->network = network ? strdup(network) : NULL;
        if (s->stop_fd < 0 || s->cmd_fd < 0 || !s->template_name || !s->env || (network && !s->network)) {
                int r = s->stop_fd < 0 || s->cmd_fd < 0 ? negative_errno() : -ENOMEM;
                sandbox_unref(s);
                return r;
        }
        *ret = s;
        return 0;
}

const char *sandbox_recovery_name(const struct sandbox *s) {
        return s->recover_checkpoint ? "checkpoint" : "boot";
}

int sandbox_recovery_from_json(const json_t *o, bool *ret) {
        json_t *v = json_object_get(o, "recovery");
        const char *n = json_string_value(v);
        if (!v) {
                *ret = false;
                return 0;
        }
        if (!n || (strcmp(n, "boot") != 0 && strcmp(n, "checkpoint") != 0))
                return -EBADMSG;
        *ret = strcmp(n, "checkpoint") == 0;
        return 0;
}

int sandbox_tenant_from_json(struct sandbox *s, const json_t *o) {
        json_t *t = json_object_get(o, "tenant");
        if (!t)
                return 0; /* made before sandboxes had owners on the node: the admin's */
        if (!json_is_string(t) || !name_is_valid(json_string_value(t)))
                return -EBADMSG;
        snprintf(s->tenant, sizeof s->tenant, "%s", json_string_value(t));
        return 0;
}

int sandbox_create(const char *id, const char *template_name, json_t *env, const char *tenant, bool recover_checkpoint,
                   const struct sandbox_limits *limits, const char *network, struct sandbox **ret, char **ret_error) {
        _cleanup_free_ char *rootfs = NULL;
        char *err = NULL;
        int r;

        struct sandbox *s;
        r = sandbox_new(id, template_name, env, network, &s);
        if (r < 0)
                return r;
        s->execution = 1;
        s->recover_checkpoint = recover_checkpoint;
        if (limits)
                s->limits = *limits;
        if (tenant)
                snprintf(s->tenant, sizeof s->tenant, "%s", tenant);

        r = reg_add(s, ret_error);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }

        uint64_t t0 = now_monotonic_ns();
        r = template_get(template_name, TEMPLATE_WAIT_MS, &s->tpl, &err);
        if (r < 0) {
                if (r == -ENOENT)
                        err = strdup_printf("no template %s", template_name);
                else if (r == -EAGAIN)
                        err = strdup_printf("template %s is still building", template_name);
                else if (r == -EIO) {
                        char *m = strdup_printf("template %s failed to build: %s", template_name, err ? err : "?");
                        free(err);
                        err = m;
                } else if (!err)
                        err = strdup_printf("template %s: %s", template_name, strerror(-r));
                goto fail;
        }
        if ((r = sandbox_limits_check(&s->limits, s->tpl, &err)) < 0)
                goto fail;
        if (s->tpl->env && json_object_size(s->tpl->env) > 0) {
                /* a template built from a spec: its environment under the create's */
                json_t *merged = json_deep_copy(s->tpl->env);
                if (!merged || json_object_update(merged, s->env) < 0) {
                        json_decref(merged);
                        r = -ENOMEM;
                        goto fail;
                }
                pthread_mutex_lock(&s->lock);
                json_decref(s->env);
                s->env = merged;
                pthread_mutex_unlock(&s->lock);
        }
        uint64_t t_tpl = now_monotonic_ns();
        if (t_tpl - t0 > 1000000000ULL)
                log_emit(LOG_LEVEL_INFO, s->ctx, "waited %llu ms for template %s",
                         (unsigned long long) ((t_tpl - t0) / 1000000ULL), template_name);

        s->dir = strdup_printf("%s/%s", sdir, id);
        rootfs = strdup_printf("%s/%s/rootfs.img", sdir, id);
        if (!s->dir || !rootfs) {
                r = -ENOMEM;
                goto fail;
        }
        rm_rf(s->dir); /* nothing of ours can be there: the id was free */
        /* a warm VM brings its directory (moved to s->dir) and its run dir;
         * one of its template's size, so a smaller sandbox restores cold */
        if (!s->limits.memory_mib && !s->limits.vcpus && pool_claim(s->tpl, s->dir, s->ctx, &s->pool_vm) > 0) {
                s->run_dir = TAKE_PTR(s->pool_vm->run_dir);
                goto start_thread;
        }
        if (mkdir(s->dir, 0700) < 0) {
                r = negative_errno();
                err = strdup_printf("cannot create %s: %s", s->dir, strerror(-r));
                goto fail;
        }
        r = node_vm_run_dir(scfg->data_dir, &s->run_dir);
        if (r < 0) {
                err = strdup_printf("cannot create a run directory under %s/run: %s", scfg->data_dir, strerror(-r));
                goto fail;
        }
        bool cloned = false;
        r = file_clone_or_copy(s->tpl->rootfs, rootfs, &cloned);
        pthread_mutex_lock(&clone_lock);
        bool warn = r >= 0 && !cloned && !warned_copy;
        if (warn)
                warned_copy = true;
        pthread_mutex_unlock(&clone_lock);
        if (r < 0) {
                err = strdup_printf("cannot copy the template disk: %s", strerror(-r));
                goto fail;
        }
        if (warn)
                log_emit(LOG_LEVEL_WARN, s->ctx,
                         "rootfs was byte-copied, not reflinked: %s and %s are not on one reflink-capable "
                         "file system (btrfs/xfs); creates will be slow and use disk (logged once)",
                         s->tpl->rootfs, sdir);

start_thread:
        r = run_sandbox_thread(s, &err);
        if (r < 0)
                goto fail;
        sandbox_make_visible(s);
        *ret = sandbox_ref(s);
        return 0;

fail:
        log_emit(LOG_LEVEL_WARN, s->ctx, "create failed: %s", err ? err : strerror(-r));
        if (ret_error)
                *ret_error = err;
        else
                free(err);
        create_abort(s);
        return r;
}

int sandbox_get(const char *id, struct sandbox **ret) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = reg_find(id);
        if (s && s->state == SANDBOX_CREATING)
                s = NULL;
        if (s)
                sandbox_ref(s);
        pthread_mutex_unlock(&reg_lock);
        if (!s)
                return -ENOENT;
        *ret = s;
        return 0;
}

/* Deletes s, which the caller already took out of the registry (its
 * registry reference is now the caller's). */
static void delete_removed(struct sandbox *s, bool keep_snapshots) {
        uint64_t t0 = now_monotonic_ns();
        pthread_mutex_lock(&s->lock);
        s->deleted = true;
        /* the guest goes anyway: one that stopped reading its channel must
         * not keep the sandbox thread (an idle probe blocked on a send) and
         * so this delete waiting for up to a minute */
        guestconn_shutdown(s->gc);
        pthread_mutex_unlock(&s->lock);
        session_sandbox_deleted(s);
        stop_thread(s);
        rm_rf(s->run_dir);
        int r = keep_snapshots ? sandbox_park(s) : rm_rf(s->dir);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox deleted%s in %llu ms", keep_snapshots ? " (snapshots kept)" : "",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        sandbox_unref(s);
}

int sandbox_delete(const char *id, bool keep_snapshots) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = reg_find(id);
        int r = 0;
        if (!s)
                r = -ENOENT;
        else if (s->state == SANDBOX_CREATING)
                r = -EBUSY;
        else {
                /* a lifecycle verb owns the sandbox thread until it is done */
                pthread_mutex_lock(&s->lock);
                r = s->life_busy ? -EBUSY : 0;
                pthread_mutex_unlock(&s->lock);
                if (r == 0)
                        reg_remove(s);
        }
        pthread_mutex_unlock(&reg_lock);
        if (r == -ENOENT && !keep_snapshots && sandbox_parked_remove(id) >= 0)
                log_info("sandbox=%s removed the snapshots it kept while suspended", id);
        /* the gateway's journal of it goes (a suspended one's too: the node
         * does not know it); one archived with its snapshots keeps it */
        bool forget = !keep_snapshots && gwclient_enabled();
        if (r == -ENOENT && forget)
                (void) gwclient_forget(id, NULL);
        if (r < 0)
                return r;
        /* its credentials go at once, not with the last reference */
        pthread_mutex_lock(&s->lock);
        sandbox_secrets_free(TAKE_PTR(s->secrets));
        pthread_mutex_unlock(&s->lock);
        delete_removed(s, keep_snapshots);
        if (forget)
                (void) gwclient_forget(id, NULL);
        node_hold_point("delete.removed"); /* a test's way to cut airlockd off after the VM went */
        return 0;
}

/* Takes one sandbox out of the registry for shutdown or hand-over, or NULL
 * when none is left. A sandbox that a create or a verb still works on is
 * waited for, up to a deadline (a create waiting for a template build
 * another process runs would wait for minutes); after that it is taken as
 * it is. */
static struct sandbox *take_next(uint64_t deadline) {
        for (;;) {
                pthread_mutex_lock(&reg_lock);
                struct sandbox *s = NULL;
                bool late = now_monotonic_ns() > deadline;
                for (size_t i = 0; i < reg_n && !s; i++) {
                        pthread_mutex_lock(&reg[i]->lock);
                        bool busy = reg[i]->state == SANDBOX_CREATING || reg[i]->life_busy;
                        pthread_mutex_unlock(&reg[i]->lock);
                        if (!busy || late)
                                s = reg[i];
                }
                if (s)
                        reg_remove(s);
                bool empty = reg_n == 0;
                pthread_mutex_unlock(&reg_lock);
                if (s || empty)
                        return s;
                struct timespec ts = { 0, 20 * 1000000L };
                nanosleep(&ts, NULL);
        }
}

void sandbox_shutdown_all(void) {
        uint64_t deadline = now_monotonic_ns() + SHUTDOWN_BUSY_WAIT_NS;
        for (struct sandbox *s; (s = take_next(deadline));) {
                /* the guest flushes its disks; a paused or failed one cannot */
                struct guestconn *g = NULL;
                if (sandbox_guest(s, &g) >= 0) {
                        _cleanup_(json_decrefp) json_t *empty = json_object();
                        int k = empty ? guestconn_call(g, PROTO_SYNC, empty, SHUTDOWN_SYNC_MS, NULL, NULL) : -ENOMEM;
                        if (k < 0)
                                log_errno(LOG_LEVEL_WARN, k, s->ctx, "guest did not flush its disks: %m");
                }
                pthread_mutex_lock(&s->lock);
                s->deleted = true; /* ops still holding it see "gone" */
                bool had_vm = s->thread_started;
                pthread_mutex_unlock(&s->lock);
                session_sandbox_deleted(s);
                stop_thread(s);
                if (s->run_dir)
                        rm_rf(s->run_dir);
                if (had_vm)
                        log_emit(LOG_LEVEL_INFO, s->ctx, "VM stopped for the node shutdown; the next node boots it "
                                 "again");
                sandbox_unref(s);
        }
}

void sandbox_hand_over_all(void) {
        uint64_t deadline = now_monotonic_ns() + SHUTDOWN_BUSY_WAIT_NS;
        for (struct sandbox *s; (s = take_next(deadline));) {
                pthread_mutex_lock(&s->lock);
                s->hand_over = true;
                s->deleted = true;
                pthread_mutex_unlock(&s->lock);
                session_sandbox_deleted(s);
                stop_thread(s);
                sandbox_unref(s);
        }
}

int sandbox_guest(struct sandbox *s, struct guestconn **ret) {
        pthread_mutex_lock(&s->lock);
        int r = s->state == SANDBOX_RUNNING && !s->deleted && s->gc ? 0 : -ECONNRESET;
        if (r >= 0)
                *ret = s->gc;
        pthread_mutex_unlock(&s->lock);
        return r;
}

char *sandbox_error(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        char *e = s->deleted ? strdup("sandbox deleted") : s->error ? strdup(s->error) : NULL;
        pthread_mutex_unlock(&s->lock);
        return e;
}

const char *state_name(enum sandbox_state st) {
        switch (st) {
        case SANDBOX_RUNNING:
                return "running";
        case SANDBOX_FAILED:
                return "failed";
        case SANDBOX_PAUSED:
                return "paused";
        case SANDBOX_STOPPED:
                return "stopped";
        case SANDBOX_CREATING:
        default:
                return "creating";
        }
}

const char *sandbox_state_name(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        const char *n = s->recovering ? "recovering" : state_name(s->state);
        pthread_mutex_unlock(&s->lock);
        return n;
}

json_t *sandbox_json(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s}", "id", s->id, "tenant", s->tenant, "template",
                              s->template_name, "state", s->recovering ? "recovering" : state_name(s->state), "pid",
                              (json_int_t) s->pid, "restore_ms", (json_int_t) s->restore_ms, "execution",
                              (json_int_t) s->execution, "node", scfg->node_name);
        if (o && s->state == SANDBOX_FAILED && !s->recovering && s->error)
                json_object_set_new(o, "error", json_string(s->error));
        if (o && s->recoveries)
                json_object_set_new(o, "recoveries", json_deep_copy(s->recoveries));
        if (o)
                json_object_set_new(o, "recovery", json_string(sandbox_recovery_name(s)));
        if (o && s->idle_probe_ns && s->state == SANDBOX_RUNNING && s->gc) {
                /* the guest's idle time at the last probe, grown since,
                 * unless the channel carried use after it */
                uint64_t now = now_monotonic_ns(), used = guestconn_used_ns(s->gc);
                uint64_t idle = s->guest_idle_ms + (now - s->idle_probe_ns) / 1000000ULL;
                if (used > s->idle_probe_ns)
                        idle = MIN(idle, (now - used) / 1000000ULL);
                /* a restored guest's clock may have jumped by the time it
                 * was suspended: it cannot have been idle longer than it ran */
                idle = MIN(idle, (now - s->run_started_ns) / 1000000ULL);
                json_object_set_new(o, "idle_ms", json_integer((json_int_t) idle));
        }
        if (o)
                json_object_set_new(o, "pool", json_string(s->pool_hit ? "hit" : "miss"));
        if (o)
                sandbox_limits_to_json(s, o);
        pthread_mutex_unlock(&s->lock);
        return o;
}

char *sandbox_disk_path(const char *id) {
        return strdup_printf("%s/%s/rootfs.img", sdir, id);
}

json_t *sandbox_list_json(void) {
        json_t *arr = json_array();
        if (!arr)
                return NULL;
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < reg_n; i++)
                if (reg[i]->state != SANDBOX_CREATING)
                        json_array_append_new(arr, sandbox_json(reg[i]));
        pthread_mutex_unlock(&reg_lock);
        return arr;
}

/* ---- egress policy ---- */

#define NETWORK_NONE "{\"mode\":\"allow-all\"}"

const char *sandbox_network(struct sandbox *s) {
        return s->network ?: NETWORK_NONE;
}

void sandbox_network_lock(struct sandbox *s) {
        pthread_mutex_lock(&s->net_lock);
}

void sandbox_network_unlock(struct sandbox *s) {
        pthread_mutex_unlock(&s->net_lock);
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
                (void) record_save(s);
        return r;
}

void sandbox_secrets_free(char *text) {
        if (!text)
                return;
        sodium_memzero(text, strlen(text));
        free(text);
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

char *sandbox_secrets_dup(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        char *c = s->secrets ? strdup(s->secrets) : NULL;
        pthread_mutex_unlock(&s->lock);
        return c;
}

void sandbox_exec_defaults(struct sandbox *s, const char **cwd, const char **user, struct template_info **ret_hold) {
        /* s->tpl is set once, before the sandbox runs, and lives with it;
         * a sandbox this node took over from an earlier one has none until
         * it boots: a template built from a spec is read for the call */
        const struct template_info *t = s->tpl;
        *ret_hold = NULL;
        if (!t && template_custom_name(s->template_name) && template_get(s->template_name, 0, ret_hold, NULL) >= 0)
                t = *ret_hold;
        if (t && !*cwd && t->workdir)
                *cwd = t->workdir;
        if (t && !*user && t->user)
                *user = t->user;
        /* root's commands start in its home (docs/api.md); a user's in
         * theirs, which the guest knows */
        if (!*cwd && !*user)
                *cwd = "/root";
}
