/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeops-ops.h"

#include <errno.h>
#include <stdio.h>
#include <sodium.h>
#include <string.h>

#include "conn.h"
#include "macros.h"
#include "nodeops-req.h"
#include "nodeutil.h"
#include "objstore.h"
#include "sandbox.h"
#include "util.h"

/* The error code of a verb whose VM did not start or restore: a saved
 * state of another CPU is the client's conflict (409 cpu_mismatch), a
 * timeout its own, the rest the guest's or the VMM's (502). */
static const char *vm_failure_code(int r) {
        switch (r) {
        case -ETIMEDOUT:
                return "timeout";
        case -ENOMEM:
                return "internal";
        case -EXDEV:
                return "cpu_mismatch";
        case -EOPNOTSUPP: /* an agent that predates upgrades */ return "conflict";
        default:
                return "guest";
        }
}

typedef int (*verb_fn)(struct sandbox *s, const char **ret_state, char **ret_error);

/* A verb that gives s a VM (start, rollback, wake) may carry the policy the
 * control plane holds: s takes it first, so the VM starts under it. A
 * gateway's refusal is logged by sandbox_set_network(); the new VM's
 * attachment hands the policy over again. */
static int take_network(struct node_conn *c, json_t *req, struct sandbox *s) {
        _cleanup_free_ char *network = NULL;
        int r = nodeops_field_network(c, req, false, &network);
        if (r < 0)
                return r;
        if (network)
                (void) sandbox_set_network(s, network);
        return 0;
}

/* Validates "id", runs the verb and replies: the sandbox on success,
 * not_found, conflict (naming the current state), or the failure. With
 * network, the request's "network" is taken first (take_network()). */
static int run_verb(struct node_conn *c, json_t *req, const char *verb, verb_fn fn, bool network) {
        const char *id = json_string_value(json_object_get(req, "id"));
        if (!id || !name_is_valid(id))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"id\" must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'");
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if (sandbox_get(id, &s) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s", s->ctx);
        int r;
        if (network && (r = take_network(c, req, s)) < 0)
                return r;

        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        r = fn(s, &state, &err);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no sandbox %s", id);
        if (r == -EBUSY)
                return conn_reply_error(c, r, "conflict", "cannot %s: another operation on sandbox %s is in progress",
                                        verb, id);
        if (r == -EPERM)
                return conn_reply_error(c, -EBUSY, "conflict", "cannot %s: sandbox is %s", verb, state ? state : "?");
        if (r < 0)
                return conn_reply_error(c, r, vm_failure_code(r),
                                        "%s failed: %s", verb, err ? err : strerror(-r));
        return conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
}

int nodeops_sandbox_pause(struct node_conn *c, json_t *req) {
        return run_verb(c, req, "pause", sandbox_pause, false);
}

int nodeops_sandbox_resume(struct node_conn *c, json_t *req) {
        return run_verb(c, req, "resume", sandbox_resume, false);
}

int nodeops_sandbox_stop(struct node_conn *c, json_t *req) {
        return run_verb(c, req, "stop", sandbox_stop, false);
}

int nodeops_sandbox_start(struct node_conn *c, json_t *req) {
        return run_verb(c, req, "start", sandbox_start, true);
}

int nodeops_sandbox_agent_upgrade(struct node_conn *c, json_t *req) {
        return run_verb(c, req, "upgrade its agent", sandbox_agent_upgrade, false);
}

/* Validates "id" and "snapshot_id" and looks the sandbox up (replies on
 * failure). */
/* A request's "id" and "snapshot_id" (names); -EINVAL replied when not. */
static int id_snapshot_args(struct node_conn *c, json_t *req, const char **ret_id, const char **ret_snap) {
        const char *id = json_string_value(json_object_get(req, "id"));
        const char *snap = json_string_value(json_object_get(req, "snapshot_id"));
        if (!id || !name_is_valid(id) || !snap || !name_is_valid(snap))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "fields \"id\" and \"snapshot_id\" must be 1-64 characters of "
                                        "[A-Za-z0-9._-], not starting with '.'");
        *ret_id = id;
        *ret_snap = snap;
        return 0;
}

static int snapshot_args(struct node_conn *c, json_t *req, struct sandbox **ret_s, const char **ret_snap) {
        const char *id, *snap;
        int r = id_snapshot_args(c, req, &id, &snap);
        if (r < 0)
                return r;
        if (sandbox_get(id, ret_s) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s snapshot=%s", (*ret_s)->ctx, snap);
        *ret_snap = snap;
        return 0;
}

/* snapshot_args() and the request's optional data key (the caller wipes
 * key->key). */
static int keyed_snapshot_args(struct node_conn *c, json_t *req, struct sandbox **ret_s, const char **ret_snap,
                               struct objstore_data_key *key, bool *ret_has) {
        int r = snapshot_args(c, req, ret_s, ret_snap);
        return r < 0 ? r : nodeops_field_data_key(c, req, key, ret_has);
}

/* A request's "snapshot_id", required: a name. */
static int snapshot_id_arg(struct node_conn *c, json_t *req, const char **ret) {
        const char *snap = json_string_value(json_object_get(req, "snapshot_id"));
        if (!snap || !name_is_valid(snap))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"snapshot_id\" must be 1-64 characters of [A-Za-z0-9._-], not "
                                        "starting with '.'");
        *ret = snap;
        return 0;
}

/* What a publish (an image any number of sandboxes start from) does not
 * carry: its volumes. 1 when it answered the refusal. */
static int refuse_volumes(struct node_conn *c, struct sandbox *s, const char *verb) {
        if (!sandbox_has_volumes(s))
                return 0;
        int r = conn_reply_error(c, -EBUSY, "conflict",
                                 "cannot %s sandbox %s: it holds volumes, whose content of this instant "
                                 "an image does not carry (docs/volumes.md)",
                                 verb, s->id);
        return r < 0 ? r : 1;
}

/* The refusals and failures of snapshot and rollback, as replies. */
static int snapshot_reply_error(struct node_conn *c, struct sandbox *s, int r, const char *verb, const char *state,
                                const char *err) {
        switch (r) {
        case -ENOENT:
                return conn_reply_error(c, r, "not_found", "no sandbox %s", s->id);
        case -ENXIO:
                return conn_reply_error(c, -ENOENT, "not_found", "%s", err ? err : "no such snapshot");
        case -EBUSY:
                return conn_reply_error(c, r, "conflict", "cannot %s: another operation on sandbox %s is in progress",
                                        verb, s->id);
        case -EPERM:
                return conn_reply_error(c, -EBUSY, "conflict", "cannot %s: sandbox is %s", verb, state ? state : "?");
        case -EEXIST:
                return conn_reply_error(c, r, "conflict", "%s", err ? err : "snapshot exists");
        case -E2BIG:
                return conn_reply_error(c, -EFBIG, "too_large", "%s", err ? err : "too many snapshots");
        default:
                return conn_reply_error(c, r, vm_failure_code(r),
                                        "%s failed: %s", verb, err ? err : strerror(-r));
        }
}

int nodeops_sandbox_snapshot(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        const char *snap = NULL;
        int r = snapshot_args(c, req, &s, &snap);
        if (r < 0)
                return r;
        const char *kind = json_string_value(json_object_get(req, "kind")) ?: "disk";
        bool full = strcmp(kind, "full") == 0;
        if (!full && strcmp(kind, "disk") != 0)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"kind\" must be \"disk\" or \"full\"");
        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        json_t *info = NULL;
        r = full ? sandbox_snapshot_full(s, snap, &info, &state, &err) : sandbox_snapshot(s, snap, &info, &state, &err);
        if (r < 0)
                return snapshot_reply_error(c, s, r, "snapshot", state, err);
        return conn_reply_ok(c, json_pack("{s:o}", "snapshot", info));
}

/* A rollback of a sandbox this node only keeps the snapshots of (deleted
 * with keep_snapshots): made again from the snapshot. 1 when it answered,
 * 0 when there is no such sandbox here either. */
static int rollback_archived(struct node_conn *c, json_t *req, const char *network) {
        const char *id = json_string_value(json_object_get(req, "id"));
        const char *snap = json_string_value(json_object_get(req, "snapshot_id"));
        if (!id || !name_is_valid(id) || !snap || !name_is_valid(snap))
                return 0; /* snapshot_args() explains */
        _cleanup_free_ char *err = NULL;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = sandbox_unarchive(id, snap, network, &s, &err);
        if (r == -ENOENT)
                return 0;
        if (r == -ENXIO)
                return conn_reply_error(c, -ENOENT, "not_found", "%s", err ? err : "no such snapshot");
        if (r < 0)
                return conn_reply_error(c, r, vm_failure_code(r), "rollback failed: %s",
                                        err ? err : strerror(-r));
        r = conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
        return r < 0 ? r : 1;
}

int nodeops_sandbox_rollback(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        _cleanup_free_ char *network = NULL;
        const char *snap = NULL;
        int r = nodeops_field_network(c, req, false, &network);
        if (r < 0)
                return r;
        r = rollback_archived(c, req, network);
        if (r != 0)
                return r < 0 ? r : 0;
        r = snapshot_args(c, req, &s, &snap);
        if (r < 0)
                return r;
        if (network)
                (void) sandbox_set_network(s, network);
        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        r = sandbox_rollback(s, snap, &state, &err);
        if (r < 0)
                return snapshot_reply_error(c, s, r, "rollback", state, err);
        return conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
}

int nodeops_snapshot_delete(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        const char *snap = NULL;
        int r = snapshot_args(c, req, &s, &snap);
        if (r < 0)
                return r;
        r = sandbox_snapshot_delete(s, snap);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no snapshot %s of sandbox %s", snap, s->id);
        if (r < 0)
                return conn_reply_error(c, r, "internal", "cannot remove snapshot %s: %s", snap, strerror(-r));
        return conn_reply_ok(c, NULL);
}

int nodeops_sandbox_fork(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        const char *child_id = json_string_value(json_object_get(req, "child_id"));
        const char *id = json_string_value(json_object_get(req, "id"));
        if (!id || !name_is_valid(id) || !child_id || !name_is_valid(child_id))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "fields \"id\" and \"child_id\" must be 1-64 characters of "
                                        "[A-Za-z0-9._-], not starting with '.'");
        /* absent: the child inherits the parent's */
        _cleanup_free_ char *network = NULL;
        int r = nodeops_field_network(c, req, false, &network);
        if (r < 0)
                return r;
        if (sandbox_get(id, &s) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s child=%s", s->ctx, child_id);
        const char *rw = sandbox_volume_rw(s);
        if (rw)
                return conn_reply_error(c, -EBUSY, "conflict",
                                        "cannot fork sandbox %s: it holds volume %s read-write, which one "
                                        "sandbox at a time may (docs/volumes.md); a fork shares read-only "
                                        "volumes",
                                        s->id, rw);
        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        _cleanup_(sandbox_unrefp) struct sandbox *child = NULL;
        r = sandbox_fork(s, child_id, network, &child, &state, &err);
        if (r == -EEXIST)
                return conn_reply_error(c, r, "conflict", "%s", err ? err : "child exists");
        if (r == -EUSERS)
                return conn_reply_error(c, r, "capacity", "%s", err ? err : "node at capacity");
        if (r < 0)
                return snapshot_reply_error(c, s, r, "fork", state, err);
        json_t *o = sandbox_json(child);
        if (o)
                json_object_set_new(o, "parent_pause_ms", json_integer((json_int_t) child->fork_pause_ms));
        return conn_reply_ok(c, json_pack("{s:o}", "sandbox", o));
}

int nodeops_sandbox_suspend(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        const char *snap = NULL;
        struct objstore_data_key key = { 0 };
        bool has_key;
        int r = keyed_snapshot_args(c, req, &s, &snap, &key, &has_key);
        if (r < 0)
                return r;
        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        json_t *info = NULL;
        r = sandbox_suspend(s, snap, has_key ? &key : NULL, &info, &state, &err);
        sodium_memzero(key.key, sizeof key.key);
        if (r == -EOPNOTSUPP)
                return conn_reply_error(c, r, "unsupported", "this node has no object store");
        if (r < 0)
                return snapshot_reply_error(c, s, r, "suspend", state, err);
        return conn_reply_ok(c, json_pack("{s:o}", "suspended", info));
}

int nodeops_sandbox_publish(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        const char *image = NULL;
        struct objstore_data_key key = { 0 };
        bool has_key;
        int r = keyed_snapshot_args(c, req, &s, &image, &key, &has_key);
        if (r < 0)
                return r;
        /* from one of its kept snapshots (an export), or a full snapshot
         * taken for it */
        json_t *from_j = json_object_get(req, "from_snapshot");
        const char *from = json_string_value(from_j);
        if (from_j && (!from || !name_is_valid(from))) {
                sodium_memzero(key.key, sizeof key.key);
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"from_snapshot\" must be a snapshot id of the sandbox");
        }
        /* a disk snapshot's image is the sandbox's own disk; a running
         * one's memory has the volumes mounted */
        if (!from && (r = refuse_volumes(c, s, "publish")) != 0) {
                sodium_memzero(key.key, sizeof key.key);
                return r < 0 ? r : 0;
        }
        const char *state = NULL;
        _cleanup_free_ char *err = NULL;
        json_t *info = NULL;
        r = from ? sandbox_export(s, from, image, has_key ? &key : NULL, &info, &err)
                 : sandbox_publish(s, image, has_key ? &key : NULL, &info, &state, &err);
        sodium_memzero(key.key, sizeof key.key);
        if (r == -EOPNOTSUPP)
                return conn_reply_error(c, r, "unsupported", "this node has no object store");
        if (r == -EEXIST)
                return conn_reply_error(c, r, "conflict", "%s", err ? err : "image exists");
        if (r < 0)
                return snapshot_reply_error(c, s, r, "publish", state, err);
        return conn_reply_ok(c, json_pack("{s:o}", "published", info));
}

int nodeops_sandbox_wake(struct node_conn *c, json_t *req) {
        const char *id, *snap;
        int r = id_snapshot_args(c, req, &id, &snap);
        if (r < 0)
                return r;
        /* absent: an airlockd from before policies, which meant allow-all */
        _cleanup_free_ char *network = NULL;
        r = nodeops_field_network(c, req, false, &network);
        if (r < 0)
                return r;
        struct objstore_data_key key = { 0 };
        bool has_key;
        if ((r = nodeops_field_data_key(c, req, &key, &has_key)) < 0)
                return r;
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " sandbox=%s snapshot=%s", id, snap);
        _cleanup_free_ char *err = NULL;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        r = sandbox_wake(id, snap, network, has_key ? &key : NULL, &s, &err);
        sodium_memzero(key.key, sizeof key.key);
        switch (r) {
        case 0:
                /* woken by an earlier request whose reply was lost: this
                 * one's policy is the control plane's current one */
                if (network)
                        (void) sandbox_set_network(s, network);
                return conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
        case -EOPNOTSUPP:
                return conn_reply_error(c, r, "unsupported", "this node has no object store");
        case -ENXIO:
                return conn_reply_error(c, -ENOENT, "not_found", "%s", err ? err : "no such snapshot");
        case -EEXIST:
                return conn_reply_error(c, r, "conflict", "%s", err ? err : "sandbox exists on this node");
        case -EUSERS:
                return conn_reply_error(c, r, "capacity", "%s", err ? err : "node at capacity");
        case -ENOKEY:
                return conn_reply_error(c, r, "key_required", "%s", err ? err : "the image is sealed");
        case -EBADMSG:
                return conn_reply_error(c, r, "corrupt", "%s", err ? err : "the image does not open");
        default:
                return conn_reply_error(c, r, vm_failure_code(r), "wake failed: %s",
                                        err ? err : strerror(-r));
        }
}

int nodeops_suspended_get(struct node_conn *c, json_t *req) {
        const char *snap;
        if (snapshot_id_arg(c, req, &snap) < 0)
                return -EINVAL;
        const char *id = json_string_value(json_object_get(req, "id")); /* optional: the node's copy too */
        bool local = false, uploaded = false;
        _cleanup_free_ char *wrapped = NULL;
        int r = sandbox_suspended_get(id, snap, &local, &uploaded, &wrapped);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no suspended snapshot %s", snap);
        if (r < 0)
                return conn_reply_error(c, r, "internal", "cannot read snapshot %s: %s", snap, strerror(-r));
        return conn_reply_ok(c, json_pack("{s:s, s:b, s:b, s:s*, s:b}", "snapshot_id", snap, "local", local,
                                          "uploaded", uploaded, "wrapped_key", wrapped, "needs_key",
                                          sandbox_suspended_waits_for_key(id)));
}

int nodeops_suspended_upload(struct node_conn *c, json_t *req) {
        const char *id, *snap;
        int r = id_snapshot_args(c, req, &id, &snap);
        if (r < 0)
                return r;
        struct objstore_data_key key = { 0 };
        bool has_key;
        r = nodeops_field_data_key(c, req, &key, &has_key);
        if (r < 0)
                return r;
        if (!has_key)
                return conn_reply_error(c, -EINVAL, "invalid", "\"data_key\" and \"wrapped_key\" are required");
        r = sandbox_suspended_upload(id, snap, &key);
        sodium_memzero(key.key, sizeof key.key);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no suspended copy %s of sandbox %s here", snap, id);
        if (r < 0 && r != -EALREADY)
                return conn_reply_error(c, r, "internal", "cannot upload %s: %s", snap, strerror(-r));
        return conn_reply_ok(c, json_pack("{s:b}", "started", r >= 0));
}

int nodeops_suspended_delete(struct node_conn *c, json_t *req) {
        const char *snap;
        if (snapshot_id_arg(c, req, &snap) < 0)
                return -EINVAL;
        int r = sandbox_suspended_delete(json_string_value(json_object_get(req, "id")), snap);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no suspended snapshot %s", snap);
        if (r < 0)
                return conn_reply_error(c, r, "internal", "cannot delete snapshot %s: %s", snap, strerror(-r));
        return conn_reply_ok(c, NULL);
}
