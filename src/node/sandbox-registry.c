/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox registry and what each sandbox keeps on disk: the record, its
 * snapshots' paths, the manager's state (layer 1 of the sandbox core; see
 * sandbox-internal.h).
 */
#include "sandbox-internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "netpolicy.h"
#include "nodeutil.h"
#include "proto.h"
#include "template.h"
#include "util.h"

/* Recoveries kept in a sandbox's record and JSON. */
#define RECOVERIES_KEPT 8
#define RECORD_MAX (256 * 1024)

static struct sandbox_manager mgr;
/* Guards reg and reg_n; taken before a sandbox's lock, never after. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* A fixed array is enough: max_sandboxes is bounded and small. */
static struct sandbox **reg;
static size_t reg_n, reg_cap;
/* Guards warned_copy: the byte-copy fallback is logged once per node. */
static pthread_mutex_t clone_lock = PTHREAD_MUTEX_INITIALIZER;
static bool warned_copy;

const struct sandbox_manager *sandbox_mgr(void) {
        return &mgr;
}

int sandbox_registry_init(const struct node_config *cfg, enum vmm_accel accel, const char *sandboxes_dir) {
        mgr.cfg = cfg;
        mgr.accel = accel;
        if (!(mgr.dir = strdup(sandboxes_dir)))
                return -ENOMEM;
        reg_cap = cfg->max_sandboxes;
        reg = calloc(reg_cap ? reg_cap : 1, sizeof *reg);
        return reg ? 0 : -ENOMEM;
}

void sandbox_reg_lock(void) {
        pthread_mutex_lock(&reg_lock);
}

void sandbox_reg_unlock(void) {
        pthread_mutex_unlock(&reg_lock);
}

bool sandbox_warn_copy_once(void) {
        pthread_mutex_lock(&clone_lock);
        bool warn = !warned_copy;
        warned_copy = true;
        pthread_mutex_unlock(&clone_lock);
        return warn;
}

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
        free(s->agent_upgrade_error);
        free(s->start_error);
        free(s->network);
        sandbox_secrets_free(s->secrets);
        pthread_mutex_destroy(&s->net_lock);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

/* ---- registry (reg_lock held) ---- */

struct sandbox *sandbox_reg_find(const char *id) {
        for (size_t i = 0; i < reg_n; i++)
                if (strcmp(reg[i]->id, id) == 0)
                        return reg[i];
        return NULL;
}

void sandbox_reg_remove(struct sandbox *s) {
        for (size_t i = 0; i < reg_n; i++)
                if (reg[i] == s) {
                        reg[i] = reg[--reg_n];
                        return;
                }
}

int sandbox_reg_all(bool with_creating, struct sandbox ***ret, size_t *ret_n) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox **list = calloc(reg_n ? reg_n : 1, sizeof *list);
        size_t k = 0;
        for (size_t i = 0; list && i < reg_n; i++)
                if (with_creating || reg[i]->state != SANDBOX_CREATING)
                        list[k++] = sandbox_ref(reg[i]);
        pthread_mutex_unlock(&reg_lock);
        if (!list)
                return -ENOMEM;
        *ret = list;
        *ret_n = k;
        return 0;
}

struct sandbox *sandbox_reg_take_idle(bool any, bool *ret_empty) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = NULL;
        for (size_t i = 0; i < reg_n && !s; i++) {
                pthread_mutex_lock(&reg[i]->lock);
                bool busy = reg[i]->state == SANDBOX_CREATING || reg[i]->life_busy;
                pthread_mutex_unlock(&reg[i]->lock);
                if (!busy || any)
                        s = reg[i];
        }
        if (s)
                sandbox_reg_remove(s);
        *ret_empty = reg_n == 0;
        pthread_mutex_unlock(&reg_lock);
        return s;
}

bool sandbox_reg_has_run_dir(const char *run_dir) {
        bool has = false;
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < reg_n && !has; i++)
                has = reg[i]->adopt_vmm && reg[i]->run_dir && strcmp(reg[i]->run_dir, run_dir) == 0;
        pthread_mutex_unlock(&reg_lock);
        return has;
}

static void (*on_delete)(struct sandbox *s);

void sandbox_on_delete(void (*fn)(struct sandbox *s)) {
        on_delete = fn;
}

void sandbox_deleted(struct sandbox *s) {
        if (on_delete)
                on_delete(s);
}

void sandbox_make_visible(struct sandbox *s) {
        /* lock order: reg_lock, then s->lock */
        pthread_mutex_lock(&reg_lock);
        pthread_mutex_lock(&s->lock);
        if (s->state == SANDBOX_CREATING)
                s->state = SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&reg_lock);
        (void) sandbox_record_save(s);
}

int sandbox_reg_add(struct sandbox *s, char **ret_error) {
        pthread_mutex_lock(&reg_lock);
        int r = sandbox_reg_find(s->id) ? -EEXIST : reg_n >= reg_cap ? -EUSERS : 0;
        if (r == 0)
                reg[reg_n++] = s;
        pthread_mutex_unlock(&reg_lock);
        if (r < 0 && ret_error)
                *ret_error = r == -EEXIST ? strdup_printf("sandbox %s exists", s->id)
                                          : strdup_printf("node at capacity (%u sandboxes)", mgr.cfg->max_sandboxes);
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
int sandbox_record_save(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:O, s:s, s:s*, s:I, s:O*, s:s}", "version", 1, "id", s->id,
                              "tenant", s->tenant, "template", s->template_name, "env", s->env, "state",
                              record_state(s->state), "run_dir", s->run_dir, "execution", (json_int_t) s->execution,
                              "recoveries", s->recoveries, "recovery", sandbox_recovery_name(s));
        if (o) {
                sandbox_limits_to_json(s, o);
                sandbox_volumes_to_json(s, o);
        }
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

void sandbox_record_release(struct sandbox_record *rec) {
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
int sandbox_record_load(const char *dir, const char *id, struct sandbox_record *ret) {
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
        struct sandbox_record rec = {
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
        _cleanup_free_ char *verr = NULL;
        if (sandbox_recovery_from_json(j, &rec.recover_checkpoint) < 0 ||
            sandbox_limits_from_json(j, &rec.limits) < 0 ||
            sandbox_volumes_from_json(j, rec.volumes, &verr) < 0) {
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
void sandbox_recoveries_add(struct sandbox *s, const char *reason, const char *how, bool ok, const char *error,
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

void sandbox_first_execution(struct sandbox *s, const struct sandbox_create_opts *o) {
        s->execution = 1;
        s->recover_checkpoint = o->recover_checkpoint;
        if (o->limits)
                s->limits = *o->limits;
        if (o->volumes)
                memcpy(s->volumes, o->volumes, sizeof s->volumes);
        if (o->tenant)
                snprintf(s->tenant, sizeof s->tenant, "%s", o->tenant);
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

int sandbox_get(const char *id, struct sandbox **ret) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = sandbox_reg_find(id);
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

int sandbox_guest(struct sandbox *s, struct guestconn **ret) {
        pthread_mutex_lock(&s->lock);
        int r = s->state == SANDBOX_RUNNING && !s->deleted && s->gc ? 0 : -ECONNRESET;
        if (r >= 0)
                *ret = s->gc;
        pthread_mutex_unlock(&s->lock);
        return r;
}

int sandbox_guest_sync(struct sandbox *s, int timeout_ms, const char *why) {
        struct guestconn *g = NULL;
        if (sandbox_guest(s, &g) < 0) /* only a running guest has one */
                return -ECONNRESET;
        _cleanup_(json_decrefp) json_t *empty = json_object();
        int k = empty ? guestconn_call(g, PROTO_SYNC, empty, timeout_ms, NULL, NULL) : -ENOMEM;
        if (k < 0)
                log_errno(LOG_LEVEL_WARN, k, s->ctx, "guest did not flush its disks before %s: %m", why);
        return k;
}

char *sandbox_error(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        char *e = s->deleted ? strdup("sandbox deleted") : s->error ? strdup(s->error) : NULL;
        pthread_mutex_unlock(&s->lock);
        return e;
}

const char *sandbox_state_str(enum sandbox_state st) {
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
        const char *n = s->recovering ? "recovering" : sandbox_state_str(s->state);
        pthread_mutex_unlock(&s->lock);
        return n;
}

int64_t sandbox_idle_ms_locked(struct sandbox *s) {
        if (!s->idle_probe_ns || s->state != SANDBOX_RUNNING || !s->gc)
                return -1;
        /* the guest's idle time at the last probe, grown since, unless the
         * channel carried use after it */
        uint64_t now = now_monotonic_ns(), used = guestconn_used_ns(s->gc);
        uint64_t idle = s->guest_idle_ms + (now - s->idle_probe_ns) / 1000000ULL;
        if (used > s->idle_probe_ns)
                idle = MIN(idle, (now - used) / 1000000ULL);
        /* a restored guest's clock may have jumped by the time it was
         * suspended: it cannot have been idle longer than it ran */
        idle = MIN(idle, (now - s->run_started_ns) / 1000000ULL);
        return (int64_t) MIN(idle, (uint64_t) INT64_MAX);
}

json_t *sandbox_json(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s}", "id", s->id, "tenant", s->tenant, "template",
                              s->template_name, "state", s->recovering ? "recovering" : sandbox_state_str(s->state), "pid",
                              (json_int_t) s->pid, "restore_ms", (json_int_t) s->restore_ms, "execution",
                              (json_int_t) s->execution, "node", mgr.cfg->node_name);
        if (o && s->state == SANDBOX_FAILED && !s->recovering && s->error)
                json_object_set_new(o, "error", json_string(s->error));
        if (o && s->recoveries)
                json_object_set_new(o, "recoveries", json_deep_copy(s->recoveries));
        if (o)
                json_object_set_new(o, "recovery", json_string(sandbox_recovery_name(s)));
        int64_t idle = sandbox_idle_ms_locked(s);
        if (o && idle >= 0)
                json_object_set_new(o, "idle_ms", json_integer((json_int_t) idle));
        char agent[GUESTCONN_AGENT_MAX];
        if (o && s->gc) {
                guestconn_agent(s->gc, agent);
                if (agent[0])
                        snprintf(s->agent, sizeof s->agent, "%s", agent);
        }
        if (o && s->agent[0]) {
                json_t *a = json_pack("{s:s}", "version", node_agent_version(s->agent));
                if (a && s->agent_upgrade_error)
                        json_object_set_new(a, "upgrade_error", json_string(s->agent_upgrade_error));
                json_object_set_new(o, "agent", a);
        }
        if (o)
                json_object_set_new(o, "pool", json_string(s->pool_hit ? "hit" : "miss"));
        if (o) {
                sandbox_limits_to_json(s, o);
                sandbox_volumes_to_json(s, o);
        }
        pthread_mutex_unlock(&s->lock);
        return o;
}

char *sandbox_disk_path(const char *id) {
        return strdup_printf("%s/%s/rootfs.img", mgr.dir, id);
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

void sandbox_secrets_free(char *text) {
        if (!text)
                return;
        sodium_memzero(text, strlen(text));
        free(text);
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

/* ---- a full snapshot's execution ---- */

#define EXECUTION_XATTR "user.airlock.execution"

int sandbox_snapshot_execution_set(const char *state_path, unsigned execution) {
        char v[16];
        int n = snprintf(v, sizeof v, "%u", execution);
        return setxattr(state_path, EXECUTION_XATTR, v, (size_t) n, 0) < 0 ? negative_errno() : 0;
}

int sandbox_snapshot_execution_get(const char *state_path, unsigned *ret) {
        char v[16];
        ssize_t n = getxattr(state_path, EXECUTION_XATTR, v, sizeof v - 1);
        if (n < 0)
                return negative_errno();
        v[n] = 0;
        char *end;
        errno = 0;
        unsigned long x = strtoul(v, &end, 10);
        if (n == 0 || *end || errno || x > UINT32_MAX)
                return -EBADMSG;
        *ret = (unsigned) x;
        return 0;
}

/* ---- disk snapshots ---- */

/* SANDBOXES/ID/snapshots/SNAP.img */
char *sandbox_snapshot_path(struct sandbox *s, const char *snapshot_id) {
        return strdup_printf("%s/snapshots/%s.img", s->dir, snapshot_id);
}

/* Counts the snapshots of s by their disk images (temporary ones included:
 * they are snapshots being made; a full snapshot's state file goes with
 * its image). */
int sandbox_snapshot_count(const char *sandbox_dir, size_t *ret) {
        _cleanup_free_ char *d = strdup_printf("%s/snapshots", sandbox_dir);
        if (!d)
                return -ENOMEM;
        DIR *dir = opendir(d);
        if (!dir)
                return negative_errno();
        size_t n = 0;
        for (struct dirent *de; (de = readdir(dir));)
                if (strstr(de->d_name, ".img"))
                        n++;
        closedir(dir);
        *ret = n;
        return 0;
}

/* SANDBOXES/ID/snapshots/SNAP.state: the RAM and device state of a full
 * snapshot. */
char *sandbox_snapshot_state_path(struct sandbox *s, const char *snapshot_id) {
        return strdup_printf("%s/snapshots/%s.state", s->dir, snapshot_id);
}

/* Clones src to dst through a temporary name beside dst, so dst is either
 * absent or complete. */
int sandbox_clone_replace(struct sandbox *s, const char *src, const char *dst) {
        _cleanup_free_ char *tmp = strdup_printf("%s.tmp", dst);
        if (!tmp)
                return -ENOMEM;
        (void) unlink(tmp);
        bool cloned = false;
        int r = file_clone_or_copy(src, tmp, &cloned);
        if (r >= 0 && rename(tmp, dst) < 0)
                r = negative_errno();
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        if (!cloned && sandbox_warn_copy_once())
                log_emit(LOG_LEVEL_WARN, s->ctx, "storage cannot reflink: disk images are copied byte by byte");
        return 0;
}
