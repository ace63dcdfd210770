/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Volumes (docs/volumes.md): a tenant's named, sized disks that outlive
 * sandboxes. The store keeps each volume's row (owner, name, size, the
 * node whose store holds its image) and the sandboxes' holds on them
 * (slot, mount path, read-only or not; at most one read-write hold, which
 * the store's unique index enforces); the node keeps the images. Scoped
 * like sandboxes: a tenant key sees only its tenant's, by name or id.
 *
 * POST /v1/volumes {"name","size"}, GET /v1/volumes, GET/DELETE
 * /v1/volumes/{name or id}, POST /v1/volumes/{name or id}/snapshot
 * {"name"}; POST /v1/sandboxes {"volumes":[{"name","path","read_only"?}]}.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apireq.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "util.h"

#define VOLUME_SIZE_MIN (16ll << 20) /* the node's SANDBOX_VOLUME_SIZE_MIN */
/* a helper sandbox of the volume content API is waited for this long */
#define HELPER_WAIT_MS 30000ULL
#define HELPER_POLL_MS 50

json_t *api_volume_json(const struct store_volume *v, const struct store_volume_hold *holds,
                        size_t n_holds) {
        char ts[48];
        api_format_time(v->created_at, ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", v->id, "name", v->name, "size",
                              (json_int_t) v->size, "created_at", ts);
        if (o && v->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(v->tenant_id));
        if (o && v->node)
                json_object_set_new(o, "node", json_string(v->node));
        if (o && v->source_id)
                json_object_set_new(o, "source_id", json_string(v->source_id));
        json_t *held = json_array();
        for (size_t i = 0; held && i < n_holds; i++)
                json_array_append_new(held,
                                      json_pack("{s:s, s:s, s:b}", "sandbox_id", holds[i].sandbox_id, "path",
                                                holds[i].path, "read_only", holds[i].read_only));
        if (o && held)
                json_object_set_new(o, "held_by", held);
        else
                json_decref(held);
        return o;
}

/* A volume by id ("vol-...", any the key may see) or by its owner's name
 * (the key's tenant; the admin's own for the admin). */
int api_volume_lookup(struct api_ctx *ctx, const char *name, struct store_volume *ret) {
        struct store_volume v = {0};
        int r = strncmp(name, "vol-", 4) == 0 ? store_volume_get(ctx->store, name, &v)
                                              : store_volume_find(ctx->store, ctx->tenant_id, name, &v);
        if (r >= 0 && !api_tenant_may_see(ctx, v.tenant_id)) {
                store_volume_release(&v);
                r = -ENOENT;
        }
        if (r < 0)
                return api_read_fail(ctx, r, "volume", name);
        *ret = v;
        return 0;
}

/* "size": bytes, or a string of a number with K, M, G or T (powers of
 * 1024); rounded up to whole MiB. */
static int parse_size(const json_t *v, int64_t *ret) {
        if (json_is_integer(v)) {
                if (json_integer_value(v) <= 0)
                        return -EINVAL;
                *ret = json_integer_value(v);
        } else if (json_is_string(v)) {
                const char *s = json_string_value(v);
                char *end = NULL;
                errno = 0;
                unsigned long long n = strtoull(s, &end, 10);
                if (errno || end == s || *s == '-' || n == 0)
                        return -EINVAL;
                static const char units[] = "KMGT";
                const char *u = *end ? strchr(units, *end & ~0x20) : NULL;
                unsigned shift = u ? 10 * (unsigned) (u - units + 1) : 0;
                /* "10G", "10GiB", "10GB": powers of 1024 all */
                const char *rest = *end ? end + 1 : end;
                if ((*end && !u) || (strcmp(rest, "") != 0 && strcmp(rest, "i") != 0 &&
                                     strcmp(rest, "B") != 0 && strcmp(rest, "iB") != 0))
                        return -EINVAL;
                if (n > (unsigned long long) INT64_MAX >> shift)
                        return -EINVAL;
                *ret = (int64_t) (n << shift);
        } else
                return -EINVAL;
        int64_t mib = 1 << 20;
        if (*ret > INT64_MAX - mib)
                return -EINVAL;
        *ret = (*ret + mib - 1) / mib * mib;
        return 0;
}

/* The owner's quota with size more (docs/volumes.md). */
static int quota_check(struct api_ctx *ctx, const char *owner, int64_t size) {
        int64_t used = 0;
        size_t n = 0;
        int r = store_volume_usage(ctx->store, owner, &used, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read volume usage: %m");
        int64_t quota = (int64_t) ctx->config->volume_quota_gib << 30;
        if (n >= ctx->config->volumes_max)
                return api_fail(ctx, -EDQUOT,
                                "%s has %zu volumes, the most it may have (AIRLOCK_VOLUMES_MAX=%u)",
                                owner ? owner : "the admin", n, ctx->config->volumes_max);
        if (size > quota - used)
                return api_fail(
                        ctx, -EDQUOT,
                        "a volume of %lld MiB would take %s past its volume quota of %u GiB (%lld MiB used)",
                        (long long) (size >> 20), owner ? owner : "the admin", ctx->config->volume_quota_gib,
                        (long long) (used >> 20));
        return 0;
}

/* One node call about a volume on node (NULL: the local node). */
static int volume_node_call(struct api_ctx *ctx, const char *node, json_t *req) {
        char addr[NODES_ADDR_MAX];
        int r = req ? nodes_addr(node, addr) : -ENOMEM;
        if (r == -ENOENT)
                return api_fail(ctx, -EHOSTDOWN, "the node holding the volume (%s) is not in the cluster",
                                node);
        if (r >= 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, NULL, ctx->err);
        return r;
}

/* A new row and its image on node, made from `from` (a snapshot) or
 * empty; the row goes again when the node cannot make the image. */
static int volume_make(struct api_ctx *ctx, struct store_volume *v, const char *from) {
        int r = store_volume_insert(ctx->store, v);
        if (r == -EEXIST)
                return api_fail(ctx, r, "%s has a volume named '%s' already",
                                v->tenant_id ? v->tenant_id : "the admin", v->name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert volume: %m");
        _cleanup_(json_decrefp) json_t *req =
                from ? json_pack("{s:s, s:s, s:s}", "op", "volume.clone", "id", v->id, "from", from)
                     : json_pack("{s:s, s:s, s:I}", "op", "volume.create", "id", v->id, "size",
                                 (json_int_t) v->size);
        r = volume_node_call(ctx, v->node, req);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "volume %s: the node could not make it: %s", v->id,
                         ctx->err);
                (void) store_volume_delete(ctx->store, v->id);
        }
        return r;
}

static int reply_volume(struct api_ctx *ctx, const struct store_volume *v, unsigned status,
                        struct api_reply *ret) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        int r = store_volume_holds_of_volume(ctx->store, v->id, &holds, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read volume holds: %m");
        json_t *o = api_volume_json(v, holds, n);
        store_volume_hold_array_free(holds, n);
        return api_reply_json(ret, status, o);
}

int api_volume_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        int r = apireq_check_body(body, APIREQ_BODY_VOLUME, false, ctx->err);
        if (r < 0)
                return r;
        const char *name = json_string_value(json_object_get(body, "name"));
        if (!name || !name_is_valid(name) || strncmp(name, "vol-", 4) == 0)
                return api_fail(ctx, -EINVAL,
                                "field 'name' must be 1-64 characters of [A-Za-z0-9._-], not starting "
                                "with '.' or 'vol-'");
        int64_t size;
        if (parse_size(json_object_get(body, "size"), &size) < 0 || size < VOLUME_SIZE_MIN)
                return api_fail(ctx, -EINVAL,
                                "field 'size' must be bytes, or a number with K, M, G or T (\"10G\"), "
                                "of at least 16M");
        if ((r = quota_check(ctx, ctx->tenant_id, size)) < 0)
                return r;
        const json_t *pin = json_object_get(body, "node");
        if (pin && !json_is_null(pin) &&
            (!json_is_string(pin) || strlen(json_string_value(pin)) > 63 ||
             !name_is_valid(json_string_value(pin))))
                return api_fail(ctx, -EINVAL, "field 'node' must be a node's name (see GET /v1/nodes)");
        char id[32];
        if ((r = random_id("vol-", 8, id, sizeof id)) < 0)
                return r;
        _cleanup_free_ char *node = NULL;
        struct nodes_want want = {.template_name = "", .node = json_string_value(pin)};
        if ((r = nodes_place(&want, &node, ctx->err)) < 0)
                return r;
        struct store_volume v = {.id = id,
                                 .tenant_id = (char *) ctx->tenant_id,
                                 .name = (char *) name,
                                 .size = size,
                                 .node = node,
                                 .created_at = now_unix_ms()};
        if ((r = volume_make(ctx, &v, NULL)) < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "created volume %s (%s, %lld MiB)", id, name,
                 (long long) (size >> 20));
        return reply_volume(ctx, &v, MHD_HTTP_CREATED, ret);
}

int api_volume_snapshot(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        int r = apireq_check_body(body, APIREQ_BODY_NAME, false, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_volume_release) struct store_volume src = {0};
        if ((r = api_volume_lookup(ctx, id, &src)) < 0)
                return r;
        const char *name = json_string_value(json_object_get(body, "name"));
        char made[96];
        if (!name) {
                snprintf(made, sizeof made, "%.40s-%lld", src.name, (long long) now_unix_ms());
                name = made;
        }
        if (!name_is_valid(name) || strncmp(name, "vol-", 4) == 0)
                return api_fail(ctx, -EINVAL,
                                "field 'name' must be 1-64 characters of [A-Za-z0-9._-], not starting "
                                "with '.' or 'vol-'");
        /* the copy is its source's owner's, and counts against that quota */
        if ((r = quota_check(ctx, src.tenant_id, src.size)) < 0)
                return r;
        char new_id[32];
        if ((r = random_id("vol-", 8, new_id, sizeof new_id)) < 0)
                return r;
        struct store_volume v = {.id = new_id,
                                 .tenant_id = src.tenant_id,
                                 .name = (char *) name,
                                 .size = src.size,
                                 .node = src.node,
                                 .source_id = src.id,
                                 .created_at = now_unix_ms()};
        if ((r = volume_make(ctx, &v, src.id)) < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "volume %s: snapshot %s (%s)", src.id, new_id, name);
        return reply_volume(ctx, &v, MHD_HTTP_CREATED, ret);
}

int api_volume_list(struct api_ctx *ctx, struct api_reply *ret) {
        struct store_volume *a = NULL;
        size_t n = 0;
        int r = store_volume_list(ctx->store, !ctx->tenant_id, ctx->tenant_id, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list volumes: %m");
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++) {
                struct store_volume_hold *holds = NULL;
                size_t k = 0;
                if (store_volume_holds_of_volume(ctx->store, a[i].id, &holds, &k) < 0 ||
                    json_array_append_new(arr, api_volume_json(&a[i], holds, k)) < 0) {
                        json_decref(arr);
                        arr = NULL;
                }
                store_volume_hold_array_free(holds, k);
        }
        store_volume_array_free(a, n);
        return api_reply_list(ret, "volumes", arr);
}

int api_volume_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_volume_release) struct store_volume v = {0};
        int r = api_volume_lookup(ctx, id, &v);
        if (r < 0)
                return r;
        return reply_volume(ctx, &v, MHD_HTTP_OK, ret);
}

bool api_volume_helper_of(const struct store_sandbox *sb, const char *volume_id) {
        _cleanup_(json_decrefp) json_t *m = sb->metadata ? json_loads(sb->metadata, 0, NULL) : NULL;
        const char *v = json_string_value(json_object_get(m, API_VOLUME_HELPER_METADATA));
        return v && strcmp(v, volume_id) == 0;
}

/* Waits while the volume's holders are all helper sandboxes (of E2B's
 * volume content API), which go with the requests in flight; at most
 * HELPER_WAIT_MS, then whoever holds it is named as ever. */
static void helpers_wait(struct api_ctx *ctx, const char *volume_id) {
        uint64_t until = now_monotonic_ns() + HELPER_WAIT_MS * 1000000ULL;
        for (;;) {
                struct store_volume_hold *holds = NULL;
                size_t n = 0;
                bool helpers = store_volume_holds_of_volume(ctx->store, volume_id, &holds, &n) >= 0 && n > 0;
                for (size_t i = 0; i < n && helpers; i++) {
                        struct store_sandbox sb = {0};
                        helpers = store_sandbox_get(ctx->store, holds[i].sandbox_id, &sb) >= 0 &&
                                  api_volume_helper_of(&sb, volume_id);
                        store_sandbox_release(&sb);
                }
                store_volume_hold_array_free(holds, n);
                if (!helpers || now_monotonic_ns() > until)
                        return;
                struct timespec ts = {0, HELPER_POLL_MS * 1000000L};
                nanosleep(&ts, NULL);
        }
}

/* The refusal of a volume someone holds: who, in ctx->err. */
static int held_fail(struct api_ctx *ctx, const struct store_volume *v, const char *doing) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        helpers_wait(ctx, v->id);
        int r = store_volume_holds_of_volume(ctx->store, v->id, &holds, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read volume holds: %m");
        if (n == 0)
                return 0;
        r = api_fail(ctx, -EBUSY, "cannot %s volume '%s': sandbox %s holds it%s%s (delete %s first)", doing,
                     v->name, holds[0].sandbox_id, holds[0].read_only ? " read-only" : "",
                     n > 1 ? " with others" : "", n > 1 ? "them" : "it");
        store_volume_hold_array_free(holds, n);
        return r;
}

int api_volume_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_volume_release) struct store_volume v = {0};
        int r = api_volume_lookup(ctx, id, &v);
        if (r < 0 || (r = held_fail(ctx, &v, "delete")) < 0)
                return r;
        /* the row first: the store refuses it while a sandbox holds the
         * volume (a create racing this one loses its hold's foreign key),
         * and once it is gone nothing can take the image any more; an
         * image the node then fails to remove is a leftover, never a row
         * without an image */
        r = store_volume_delete(ctx->store, v.id);
        if (r == -EBUSY)
                return held_fail(ctx, &v, "delete") ?: api_fail(ctx, r, "volume '%s' is held", v.name);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete volume: %m");
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "volume.delete", "id", v.id);
        int k = volume_node_call(ctx, v.node, req);
        if (k < 0 && k != -ENOENT)
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "volume %s: its image stays on its node as a leftover: %s",
                         v.id, ctx->err);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "deleted volume %s (%s)", v.id, v.name);
        *ret = (struct api_reply){.status = MHD_HTTP_NO_CONTENT};
        return 0;
}

/* Two owners (or nodes), NULL being the admin (the local node). */
static bool same_owner(const char *a, const char *b) {
        return a && b ? strcmp(a, b) == 0 : a == b;
}

void api_volumes_follow(const struct daemon_config *config, struct store *store, const char *sandbox_id,
                        const char *log_ctx) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = {0};
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        if (store_sandbox_get(store, sandbox_id, &sb) < 0 ||
            store_volume_holds_of_sandbox(store, sandbox_id, &holds, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                _cleanup_(store_volume_release) struct store_volume v = {0};
                if (holds[i].read_only || store_volume_get(store, holds[i].volume_id, &v) < 0 ||
                    same_owner(v.node, sb.node))
                        continue;
                int r = store_volume_set_node(store, v.id, sb.node);
                if (r < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, log_ctx,
                                  "store: failed to move volume %s to node %s: %m", v.id,
                                  sb.node ?: API_LOCAL_NODE);
                        continue;
                }
                log_emit(LOG_LEVEL_INFO, log_ctx, "volume %s follows its writer %s from node %s to %s", v.id,
                         sandbox_id, v.node ?: API_LOCAL_NODE, sb.node ?: API_LOCAL_NODE);
                /* the image its old node keeps is stale: gone where that
                 * node answers (a lost one, not asked, keeps it as a
                 * leftover) */
                char addr[NODES_ADDR_MAX], err[API_ERRMSG_MAX] = "";
                _cleanup_(store_node_release) struct store_node old = {0};
                _cleanup_(json_decrefp) json_t *req =
                        json_pack("{s:s, s:s}", "op", "volume.delete", "id", v.id);
                r = req ? 0 : -ENOMEM;
                if (r >= 0 && v.node && (r = store_node_get(store, v.node, &old)) >= 0 && old.lost_at)
                        r = -EHOSTDOWN;
                if (r >= 0)
                        r = nodes_addr(v.node, addr);
                if (r >= 0)
                        r = node_call(addr, config->node_timeout_s, req, NULL, err);
                if (r < 0 && r != -ENOENT)
                        log_emit(LOG_LEVEL_WARN, log_ctx,
                                 "volume %s: its stale image stays on node %s as a leftover: %s", v.id,
                                 v.node ?: API_LOCAL_NODE, err[0] ? err : strerror(-r));
        }
        store_volume_hold_array_free(holds, n);
}

/* The holds of sandbox_id (free with store_volume_hold_array_free()); a
 * store failure logged. */
static int holds_of(struct api_ctx *ctx, const char *sandbox_id, struct store_volume_hold **ret, size_t *ret_n) {
        int r = store_volume_holds_of_sandbox(ctx->store, sandbox_id, ret, ret_n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read volume holds: %m");
        return 0;
}

int api_volume_refuse(struct api_ctx *ctx, const char *sandbox_id, const char *doing) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        int r = holds_of(ctx, sandbox_id, &holds, &n);
        if (r < 0)
                return r;
        if (n > 0)
                r = api_fail(ctx, -EBUSY,
                             "cannot %s sandbox %s: it holds volumes (%s mounted at %s%s), whose content of "
                             "this instant an image or an archive does not carry (docs/volumes.md); a disk "
                             "snapshot's export, snapshots, rollback, fork, suspend and wake work",
                             doing, sandbox_id, holds[0].volume_id, holds[0].path, n > 1 ? ", ..." : "");
        store_volume_hold_array_free(holds, n);
        return r;
}

int api_volume_fork_holds(struct api_ctx *ctx, const char *parent_id, const char *child_id) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        int r = holds_of(ctx, parent_id, &holds, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                if (!holds[i].read_only) {
                        r = api_fail(
                                ctx, -EBUSY,
                                "cannot fork sandbox %s: it holds volume %s read-write (at %s), which one "
                                "sandbox at a time may (docs/volumes.md); a fork shares read-only volumes",
                                parent_id, holds[i].volume_id, holds[i].path);
                        break;
                }
                if (!child_id)
                        continue;
                struct store_volume_hold h = holds[i];
                h.sandbox_id = (char *) child_id;
                if ((r = store_volume_hold_insert(ctx->store, &h)) < 0)
                        log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx,
                                  "store: failed to record fork %s's volume %s: %m", child_id, h.volume_id);
        }
        store_volume_hold_array_free(holds, n);
        return r;
}

void api_volume_holds_add(struct api_ctx *ctx, const char *sandbox_id, json_t *o) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        if (store_volume_holds_of_sandbox(ctx->store, sandbox_id, &holds, &n) < 0 || n == 0) {
                store_volume_hold_array_free(holds, n);
                return;
        }
        json_t *list = json_array();
        for (size_t i = 0; list && i < n; i++)
                json_array_append_new(list, json_pack("{s:s, s:s, s:b}", "id", holds[i].volume_id, "path",
                                                      holds[i].path, "read_only", holds[i].read_only));
        if (list)
                json_object_set_new(o, "volumes", list);
        store_volume_hold_array_free(holds, n);
}

/* ---- a create's volumes ---- */

void api_volume_attach_release(struct api_volume_attach *a) {
        for (size_t i = 0; i < a->n; i++)
                store_volume_release(&a->volumes[i]);
        json_decref(a->node_request);
        *a = (struct api_volume_attach){0};
}

int api_volume_attach_prepare(struct api_ctx *ctx, const char *owner, const json_t *list,
                              struct api_volume_attach *ret) {
        size_t i;
        json_t *e;
        if (!list)
                return 0;
        if (!(ret->node_request = json_array()))
                return -ENOMEM;
        json_array_foreach(list, i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                const char *path = json_string_value(json_object_get(e, "path"));
                bool ro = json_is_true(json_object_get(e, "read_only"));
                struct store_volume *v = &ret->volumes[ret->n];
                int r = api_volume_lookup(ctx, name, v);
                if (r < 0)
                        return r;
                ret->n++;
                if (!same_owner(v->tenant_id, owner))
                        return api_fail(ctx, -EPERM, "volume '%s' belongs to another owner than the sandbox",
                                        name);
                for (size_t j = 0; j + 1 < ret->n; j++)
                        if (strcmp(ret->volumes[j].id, v->id) == 0)
                                return api_fail(ctx, -EINVAL, "volume '%s' is named twice", name);
                /* one node holds it: the sandbox runs there */
                if (ret->n > 1 && !same_owner(ret->volumes[0].node, v->node))
                        return api_fail(ctx, -EINVAL, "volumes '%s' and '%s' are on different nodes",
                                        ret->volumes[0].name, v->name);
                struct store_volume_hold *holds = NULL;
                size_t n = 0;
                helpers_wait(ctx, v->id);
                if ((r = store_volume_holds_of_volume(ctx->store, v->id, &holds, &n)) < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx,
                                         "store: failed to read volume holds: %m");
                bool rw_held = false;
                for (size_t k = 0; k < n; k++)
                        rw_held |= !holds[k].read_only;
                if (rw_held || (!ro && n > 0))
                        r = api_fail(ctx, -EBUSY,
                                     "volume '%s' is in use by sandbox %s%s: a volume is read-write to one "
                                     "sandbox, or read-only to many",
                                     name, holds[0].sandbox_id, holds[0].read_only ? " (read-only)" : "");
                store_volume_hold_array_free(holds, n);
                if (r < 0)
                        return r;
                if (json_array_append_new(ret->node_request, json_pack("{s:s, s:s, s:b}", "id", v->id,
                                                                       "path", path, "read_only", ro)) < 0)
                        return -ENOMEM;
        }
        ret->node = ret->n ? ret->volumes[0].node : NULL;
        return 0;
}

int api_volume_attach_record(struct api_ctx *ctx, const char *sandbox_id,
                             const struct api_volume_attach *a) {
        size_t i;
        json_t *e;
        json_array_foreach(a->node_request, i, e) {
                struct store_volume_hold h = {
                        .sandbox_id = (char *) sandbox_id,
                        .volume_id = (char *) json_string_value(json_object_get(e, "id")),
                        .slot = (int) i,
                        .path = (char *) json_string_value(json_object_get(e, "path")),
                        .read_only = json_is_true(json_object_get(e, "read_only")),
                };
                int r = store_volume_hold_insert(ctx->store, &h);
                if (r == -EEXIST)
                        return api_fail(ctx, -EBUSY,
                                        "volume '%s' was taken read-write by another sandbox meanwhile",
                                        a->volumes[i].name);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx,
                                         "store: failed to record a volume hold: %m");
        }
        return 0;
}
