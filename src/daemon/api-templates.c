/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates built from specs (docs/templates.md): POST /v1/templates (a
 * JSON spec or a Dockerfile, and for COPY a build context tar: the body
 * as multipart/form-data, see http.c), GET /v1/templates/{name} with the
 * build's state and progress, GET /v1/templates/{name}/builds/{id}/logs
 * as Server-Sent Events while it builds, DELETE /v1/templates/{name}.
 *
 * The caller's name maps to a node template named by content, "c-" and 32
 * hex digits of SHA-256 over the owner, the canonical spec, the base's
 * node name and the context: the same request builds once and is reused,
 * and two tenants never share a build. A tenant's templates are its own:
 * another tenant's is a 404, and a sandbox is made only from its owner's.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "apireq.h"
#include "buildctx.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "tplspec.h"
#include "util.h"

#define TEMPLATE_LOG_POLL_MS 300
#define TEMPLATE_LOG_CHUNK 65536
/* The node answers a build request once it has the context and checked
 * the request: a context of 256 MiB over a slow link takes a while. */
#define BUILD_REQUEST_TIMEOUT_S 600

static const char *owner_of(const struct api_ctx *ctx) {
        return ctx->tenant_id ? ctx->tenant_id : "";
}

static json_t *template_json(const struct store_template *t) {
        char created[48], updated[48];
        api_format_time(t->created_at, created, sizeof created);
        api_format_time(t->updated_at, updated, sizeof updated);
        json_t *spec = json_loads(t->spec ? t->spec : "{}", 0, NULL);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s}", "name", t->name, "state", t->state, "build_id",
                              t->build_id, "template_id", t->node_name, "spec", spec ? spec : json_object(),
                              "created_at", created, "updated_at", updated);
        if (!o)
                return NULL;
        if (t->error)
                json_object_set_new(o, "error", json_string(t->error));
        if (t->memory_mib)
                json_object_set_new(o, "memory_mib", json_integer(t->memory_mib));
        if (t->vcpus)
                json_object_set_new(o, "vcpus", json_integer(t->vcpus));
        if (t->tenant_id && *t->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(t->tenant_id));
        json_object_set_new(o, "node", json_string(t->node && *t->node ? t->node : API_LOCAL_NODE));
        char logs[256];
        snprintf(logs, sizeof logs, "/v1/templates/%s/builds/%s/logs", t->name, t->build_id);
        json_object_set_new(o, "logs", json_string(logs));
        return o;
}

/* The address of the node that holds (or builds) t. */
static int template_node_addr(const struct store_template *t, char addr[NODES_ADDR_MAX]) {
        return nodes_addr(t->node && *t->node ? t->node : NULL, addr);
}

static int lookup(struct api_ctx *ctx, const char *name, struct store_template *ret) {
        int r = store_template_get(ctx->store, owner_of(ctx), name, ret);
        if (r < 0)
                return api_read_fail(ctx, r, "template", name);
        return 0;
}

/* The node's template.list entry of name, from its reply list (borrowed),
 * or NULL. */
static json_t *template_entry(json_t *list, const char *name) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(list, "templates"), i, e)
                if (strcmp(json_string_value(json_object_get(e, "name")) ?: "", name) == 0)
                        return e;
        return NULL;
}

/* The node's template.list reply, or NULL when it does not answer. */
static json_t *node_templates(struct api_ctx *ctx, const char *addr) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "template.list");
        json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        if (!req || node_call(addr, ctx->config->node_timeout_s, req, &rep, err) < 0)
                return NULL;
        return rep;
}

/* A building template's state from its node, recorded when it ended.
 * *ret_progress (may be NULL) gets the node's report while it builds. */
static void refresh(struct api_ctx *ctx, struct store_template *t, json_t **ret_progress) {
        if (strcmp(t->state, "building") != 0)
                return;
        char addr[NODES_ADDR_MAX], err[API_ERRMSG_MAX] = "";
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "template.get", "name", t->node_name);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = req ? template_node_addr(t, addr) : -ENOMEM;
        if (r >= 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, &rep, err);
        const char *state = NULL, *error = NULL;
        if (r == -ENOENT) {
                state = "failed";
                error = "the node lost the build (it restarted, or the template was removed there)";
        } else if (r >= 0) {
                state = json_string_value(json_object_get(rep, "state"));
                error = json_string_value(json_object_get(rep, "error"));
        }
        if (!state || strcmp(state, "building") == 0) {
                if (ret_progress && rep)
                        *ret_progress = json_incref(rep);
                return;
        }
        uint32_t mem = 0;
        if (strcmp(state, "ready") == 0) {
                /* the machine it was built with, from the node's list */
                _cleanup_(json_decrefp) json_t *list = node_templates(ctx, addr);
                mem = (uint32_t) json_integer_value(json_object_get(template_entry(list, t->node_name), "memory_mib"));
        }
        r = store_template_set_state(ctx->store, t->tenant_id, t->name, t->build_id, state, error, mem, 0);
        if (r < 0 && r != -ESTALE && r != -ENOENT)
                log_errno(LOG_LEVEL_WARN, r, ctx->log_ctx, "store: failed to update template: %m");
        if (r >= 0) {
                free(t->state);
                free(t->error);
                t->state = strdup(state);
                t->error = error ? strdup(error) : NULL;
                if (mem)
                        t->memory_mib = mem;
        }
}

int api_template_resolve(struct api_ctx *ctx, const char *owner, const char *name, char **ret_node_template,
                         char **ret_node) {
        _cleanup_(store_template_release) struct store_template t = { 0 };
        int r = store_template_get(ctx->store, owner ? owner : "", name, &t);
        /* a node's name of a built template is reached through its owner's
         * name only, never named directly */
        if (r == -ENOENT && strncmp(name, "c-", 2) == 0 && strlen(name) == 34 &&
            strspn(name + 2, "0123456789abcdef") == 32)
                return api_fail(ctx, -ENOENT, "template '%.64s' not found", name);
        if (r == -ENOENT)
                return 0; /* a built-in one, or none (the node says) */
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read template: %m");
        refresh(ctx, &t, NULL);
        if (strcmp(t.state, "building") == 0)
                return api_fail(ctx, -EBUSY, "template '%.64s' is still building (GET /v1/templates/%.64s)", name,
                                name);
        if (strcmp(t.state, "ready") != 0)
                return api_fail(ctx, -EBUSY, "template '%.64s' failed to build: %.600s", name,
                                t.error ? t.error : "see its build log");
        *ret_node_template = TAKE_PTR(t.node_name);
        *ret_node = t.node && *t.node ? TAKE_PTR(t.node) : NULL;
        return 1;
}

/* The spec of a request: {"spec": {...}} or {"dockerfile": TEXT, "name",
 * "memory_mib"?, "vcpus"?, "disk_mib"?}. */
static int parse_request(struct api_ctx *ctx, const json_t *body, struct tplspec **ret) {
        char err[TPLSPEC_ERR_MAX] = "";
        json_t *spec = json_object_get(body, "spec");
        json_t *dockerfile = json_object_get(body, "dockerfile");
        if (!spec == !dockerfile)
                return api_fail(ctx, -EINVAL, "give 'spec' (a template spec) or 'dockerfile' (its text), not both");
        if (spec) {
                const char *k;
                json_t *v;
                json_object_foreach((json_t *) body, k, v) if (strcmp(k, "spec") != 0) return api_fail(
                        ctx, -EINVAL, "unknown field \"%.64s\" beside 'spec' (sizes go inside the spec)", k);
                if (!json_is_object(spec))
                        return api_fail(ctx, -EINVAL, "'spec' must be an object (docs/templates.md)");
                if (tplspec_parse_json(spec, ret, err) < 0)
                        return api_fail(ctx, -EINVAL, "%s", err);
                return 0;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) body, k, v) {
                if (strcmp(k, "dockerfile") != 0 && strcmp(k, "name") != 0 && strcmp(k, "memory_mib") != 0 &&
                    strcmp(k, "vcpus") != 0 && strcmp(k, "disk_mib") != 0)
                        return api_fail(ctx, -EINVAL, "unknown field \"%.64s\"", k);
        }
        const char *name = json_string_value(json_object_get(body, "name"));
        if (!json_is_string(dockerfile) || !name)
                return api_fail(ctx, -EINVAL, "'dockerfile' (its text) needs 'name' (the template's)");
        if (tplspec_parse_dockerfile(json_string_value(dockerfile), json_string_length(dockerfile), name, ret, err) <
            0)
                return api_fail(ctx, -EINVAL, "%s", err);
        /* the sizes, checked by reading the spec back with them */
        _cleanup_(json_decrefp) json_t *j = tplspec_to_json(*ret);
        if (!j)
                return -ENOMEM;
        static const char *const sizes[] = { "memory_mib", "vcpus", "disk_mib" };
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
                if (json_object_get(body, sizes[i]))
                        json_object_set(j, sizes[i], json_object_get(body, sizes[i]));
        tplspec_free(*ret);
        *ret = NULL;
        if (tplspec_parse_json(j, ret, err) < 0)
                return api_fail(ctx, -EINVAL, "%s", err);
        return 0;
}

/* c- and 32 hex digits over what makes the build. */
static void content_id(const char *owner, const char *canonical, const char *base, const char *context_sha,
                       char out[35]) {
        crypto_hash_sha256_state st;
        uint8_t h[crypto_hash_sha256_BYTES];
        const char *parts[] = { "airlock-template-1", owner, canonical, base ? base : "", context_sha ? context_sha : "" };
        crypto_hash_sha256_init(&st);
        for (size_t i = 0; i < ARRAY_SIZE(parts); i++)
                crypto_hash_sha256_update(&st, (const uint8_t *) parts[i], strlen(parts[i]) + 1);
        crypto_hash_sha256_final(&st, h);
        memcpy(out, "c-", 2);
        sodium_bin2hex(out + 2, 33, h, 16);
}

/* The build context, read once before anything else sees it
 * (lib/buildctx): an entry that would escape where it is unpacked, a
 * device, a setuid file, a limit passed (a decompression bomb, a huge
 * sparse file) is a 400 naming the entry and why; so is a path the spec
 * names that it lacks. Nothing is unpacked here, nothing is kept. */
static int check_context(struct api_ctx *ctx, const char *path, const char *const *srcs, const char *name) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx->log_ctx, "Failed to reopen the build context: %m");
        _cleanup_(buildctx_freep) struct buildctx *c = NULL;
        char err[BUILDCTX_ERR_MAX] = "";
        int r = buildctx_new(BUILDCTX_CONTEXT, NULL, &c);
        if (r >= 0)
                r = buildctx_feed_fd(c, fd, err);
        if (r == -ENOMEM || r == -EIO)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "Failed to read the build context: %m");
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "template %s: build context refused: %s", name, err);
                return api_fail(ctx, -EINVAL, "%s", err);
        }
        for (size_t i = 0; srcs[i]; i++)
                if (!buildctx_has(c, srcs[i]))
                        return api_fail(ctx, -EINVAL, "'%.200s' is not in the build context", srcs[i]);
        return 0;
}

/* Sends the build request, the context streamed after it. */
static int node_build(struct api_ctx *ctx, const char *addr, json_t *req, const char *context_path, json_t **ret) {
        struct node_conn *c = NULL;
        int r = node_conn_open(addr, BUILD_REQUEST_TIMEOUT_S, &c);
        if (r < 0)
                return api_fail(ctx, r, "cannot reach the node: %s", strerror(-r));
        r = node_conn_send_request(c, req);
        if (r >= 0 && context_path) {
                _cleanup_close_ int fd = open(context_path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        r = negative_errno();
                char buf[65536];
                for (ssize_t k; r >= 0 && (k = read(fd, buf, sizeof buf)) != 0;) {
                        if (k < 0) {
                                r = negative_errno();
                                break;
                        }
                        r = node_conn_send_data(c, buf, (size_t) k);
                }
                if (r >= 0)
                        r = node_conn_send_end(c, false);
        }
        /* the node's verdict explains a send that failed */
        int rr = node_conn_read_reply(c, ret, ctx->err);
        node_conn_free(c);
        return rr < 0 ? rr : r;
}

int api_template_create(struct api_ctx *ctx, const json_t *body, const char *context_path, const char *context_sha,
                        struct api_reply *ret) {
        _cleanup_(tplspec_freep) struct tplspec *spec = NULL;
        int r = parse_request(ctx, body, &spec);
        if (r < 0)
                return r;
        const char *owner = owner_of(ctx);
        char local[NODES_ADDR_MAX], addr[NODES_ADDR_MAX];
        if ((r = nodes_any_addr(local)) < 0)
                return api_fail(ctx, r, "no node to build on");
        /* the node's own (built-in) templates, asked once */
        _cleanup_(json_decrefp) json_t *builtins = node_templates(ctx, local);
        if (template_entry(builtins, spec->name))
                return api_fail(ctx, -EEXIST, "'%s' is a built-in template's name: choose another", spec->name);

        /* the base: one of the owner's templates (built where it is), or a
         * built-in one (the node says whether it has it) */
        _cleanup_free_ char *base_node_template = NULL, *node = NULL;
        if (spec->base == TPLSPEC_BASE_TEMPLATE) {
                if (strcmp(spec->from, spec->name) == 0)
                        return api_fail(ctx, -EINVAL, "a template cannot be built on itself");
                r = api_template_resolve(ctx, owner, spec->from, &base_node_template, &node);
                if (r < 0)
                        return r;
                if (r == 0) {
                        if (!template_entry(builtins, spec->from))
                                return api_fail(ctx, -EINVAL, "base template '%.64s' not found", spec->from);
                        base_node_template = strdup(spec->from);
                        if (!base_node_template)
                                return -ENOMEM;
                }
        }
        _cleanup_free_ const char **srcs = tplspec_context_paths(spec);
        if (!srcs)
                return -ENOMEM;
        if (srcs[0] && !context_path)
                return api_fail(ctx, -EINVAL,
                                "'%.200s' needs a build context: send the request as multipart/form-data with "
                                "a 'context' part (a tar)",
                                srcs[0]);
        if (context_path && (r = check_context(ctx, context_path, srcs, spec->name)) < 0)
                return r;
        if (!node && (!base_node_template || strncmp(base_node_template, "c-", 2) != 0)) {
                /* NULL: this machine's node */
                struct nodes_want want = { .template_name = base_node_template ? base_node_template : "minimal" };
                if ((r = nodes_place(&want, &node, ctx->err)) < 0)
                        return r;
        }
        if ((r = nodes_addr(node, addr)) < 0)
                return api_fail(ctx, r, "cannot reach node %s", node ? node : API_LOCAL_NODE);

        _cleanup_(json_decrefp) json_t *canon = tplspec_to_json(spec);
        _cleanup_free_ char *canon_s = canon ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (!canon_s)
                return -ENOMEM;
        char node_name[35], build_id[32];
        content_id(owner, canon_s, base_node_template, context_sha, node_name);
        if ((r = random_id("bld-", 8, build_id, sizeof build_id)) < 0)
                return r;
        _cleanup_free_ char *net_s = NULL;
        _cleanup_(json_decrefp) json_t *net = NULL;
        if ((r = api_network_default(ctx, ctx->tenant_id, &net_s)) < 0 || (r = api_network_json(net_s, &net)) < 0)
                return r;

        /* the row first: a second request for the name waits on it */
        _cleanup_(store_template_release) struct store_template old = { 0 };
        bool had = store_template_get(ctx->store, owner, spec->name, &old) >= 0;
        if (had && strcmp(old.node_name, node_name) == 0 && strcmp(old.state, "failed") != 0) {
                /* the same build: nothing to do, its state answers */
                refresh(ctx, &old, NULL);
                if (strcmp(old.state, "failed") != 0) {
                        *ret = (struct api_reply){ .status = strcmp(old.state, "ready") == 0 ? MHD_HTTP_OK
                                                                                            : MHD_HTTP_ACCEPTED,
                                                   .body = template_json(&old) };
                        return ret->body ? 0 : -ENOMEM;
                }
        }
        if (had && strcmp(old.state, "building") == 0)
                return api_fail(ctx, -EBUSY, "template '%s' is building (build %s): wait for it or delete it",
                                spec->name, old.build_id);
        struct store_template row = { .tenant_id = (char *) owner, .name = spec->name, .node_name = node_name,
                                      .build_id = build_id, .state = "building", .node = node ? node : (char *) "",
                                      .spec = canon_s,
                                      .memory_mib = spec->memory_mib, .vcpus = spec->vcpus };
        r = store_template_put(ctx->store, &row);
        if (r == -EDQUOT)
                return api_fail(ctx, -EDQUOT, "%d templates already: delete one first", STORE_TEMPLATES_MAX);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to write template: %m");

        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:O, s:O, s:b}", "op", "template.build", "name",
                                                        node_name, "spec", canon, "network", net, "context",
                                                        context_path != NULL);
        if (req && base_node_template)
                json_object_set_new(req, "base", json_string(base_node_template));
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = req ? node_build(ctx, addr, req, context_path, &rep) : -ENOMEM;
        if (r < 0) {
                /* refused before anything ran: nothing stays (an older
                 * build of the name stays what it was) */
                int k = had ? store_template_put(ctx->store, &old) : store_template_delete(ctx->store, owner, spec->name);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, ctx->log_ctx, "store: failed to restore template row: %m");
                if (!ctx->err[0])
                        api_fail(ctx, r, "the node refused the build: %s", strerror(-r));
                return r;
        }
        const char *state = json_string_value(json_object_get(rep, "state"));
        if (state && strcmp(state, "ready") == 0)
                (void) store_template_set_state(ctx->store, owner, spec->name, build_id, "ready", NULL, 0, 0);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "template %s: build %s of %s on %s (%s)", spec->name, build_id,
                 node_name, node ? node : API_LOCAL_NODE, state ? state : "?");
        _cleanup_(store_template_release) struct store_template now = { 0 };
        if ((r = lookup(ctx, spec->name, &now)) < 0)
                return r;
        *ret = (struct api_reply){ .status = strcmp(now.state, "ready") == 0 ? MHD_HTTP_OK : MHD_HTTP_ACCEPTED,
                                   .body = template_json(&now) };
        return ret->body ? 0 : -ENOMEM;
}

int api_template_get(struct api_ctx *ctx, const char *name, struct api_reply *ret) {
        _cleanup_(store_template_release) struct store_template t = { 0 };
        int r = lookup(ctx, name, &t);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *progress = NULL;
        refresh(ctx, &t, &progress);
        json_t *o = template_json(&t);
        if (o && progress) {
                static const char *const keys[] = { "step", "steps", "step_text", "elapsed_ms", "log_bytes" };
                for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                        if (json_object_get(progress, keys[i]))
                                json_object_set(o, keys[i], json_object_get(progress, keys[i]));
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = o };
        return o ? 0 : -ENOMEM;
}

int api_template_list_own(struct api_ctx *ctx, json_t *arr) {
        struct store_template *a = NULL;
        size_t n = 0;
        /* the caller's own, as every other endpoint scopes them (names are
         * unique per owner only) */
        int r = store_template_list(ctx->store, owner_of(ctx), STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list templates: %m");
        for (size_t i = 0; i < n; i++) {
                refresh(ctx, &a[i], NULL);
                json_t *o = template_json(&a[i]);
                if (o)
                        json_object_set_new(o, "kind", json_string("built"));
                if (o)
                        json_array_append_new(arr, o);
        }
        store_template_array_free(a, n);
        return 0;
}

int api_template_delete(struct api_ctx *ctx, const char *name, struct api_reply *ret) {
        _cleanup_(store_template_release) struct store_template t = { 0 };
        int r = lookup(ctx, name, &t);
        if (r < 0)
                return r;
        /* its sandboxes boot its kernel and restore its memory */
        struct store_sandbox *sbs = NULL;
        size_t n = 0, users = 0;
        r = ctx->tenant_id ? store_sandbox_list_tenant(ctx->store, ctx->tenant_id, STORE_LIST_MAX, &sbs, &n)
                           : store_sandbox_list(ctx->store, STORE_LIST_MAX, &sbs, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list sandboxes: %m");
        for (size_t i = 0; i < n; i++)
                if (strcmp(sbs[i].template_name, name) == 0 && strcmp(owner_of(ctx), sbs[i].tenant_id ?: "") == 0)
                        users++;
        store_sandbox_array_free(sbs, n);
        if (users > 0)
                return api_fail(ctx, -EBUSY, "template '%.64s' has %zu sandbox%s: delete them first", name, users,
                                users == 1 ? "" : "es");
        size_t refs = 0;
        if ((r = store_template_node_refs(ctx->store, t.node_name, &refs)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read templates: %m");
        if (refs <= 1) {
                /* no other name of the owner's is this build: the node's copy goes */
                char addr[NODES_ADDR_MAX], err[API_ERRMSG_MAX] = "";
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "template.delete", "name",
                                                                t.node_name);
                r = req ? template_node_addr(&t, addr) : -ENOMEM;
                if (r >= 0)
                        r = node_call(addr, ctx->config->node_timeout_s, req, NULL, err);
                if (r < 0 && r != -ENOENT)
                        return api_fail(ctx, r, "the node could not remove template %s: %s", name, err);
        }
        r = store_template_delete(ctx->store, owner_of(ctx), name);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete template: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "template %s deleted", name);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

/* ---- the build log, live ---- */

struct log_stream {
        const struct daemon_config *config;
        struct store *store;
        const atomic_bool *stopping;
        char addr[NODES_ADDR_MAX];
        char node_name[40];
        char *owner, *name, *build_id;
        uint64_t offset;
        char carry[512]; /* the log's last line while it is incomplete */
        struct api_sse_out out;
        char log_ctx[256];
};

static void log_stream_free(void *cls) {
        struct log_stream *s = cls;
        free(s->owner);
        free(s->name);
        free(s->build_id);
        free(s->out.pend);
        free(s);
}

/* Appends one SSE event to f. */
static void sse_event(FILE *f, const char *event, json_t *data) {
        _cleanup_free_ char *d = data ? json_dumps(data, JSON_COMPACT) : NULL;
        if (d)
                fprintf(f, "event: %s\ndata: %s\n\n", event, d);
        json_decref(data);
}

/* A "progress" event for each step header ("=== step N/M: TEXT", the
 * node's build log) that the new text completes. */
static void progress_events(struct log_stream *s, FILE *f, const char *data, size_t len, json_t *elapsed) {
        static const char header[] = "=== step ";
        size_t cl = strlen(s->carry);
        _cleanup_free_ char *text = malloc(cl + len + 1);
        if (!text)
                return;
        memcpy(text, s->carry, cl);
        memcpy(text + cl, data, len);
        text[cl + len] = 0;
        char *line = text;
        for (char *nl; (nl = strchr(line, '\n')); line = nl + 1) {
                *nl = 0;
                unsigned n, m;
                int off = 0;
                if (strncmp(line, header, sizeof header - 1) == 0 &&
                    sscanf(line + sizeof header - 1, "%u/%u: %n", &n, &m, &off) == 2 && off > 0)
                        sse_event(f, "progress",
                                  json_pack("{s:I, s:I, s:s, s:O}", "step", (json_int_t) n, "steps", (json_int_t) m,
                                            "step_text", line + sizeof header - 1 + off, "elapsed_ms",
                                            elapsed ? elapsed : json_null()));
        }
        /* an incomplete last line waits for the rest (a long one is no header) */
        snprintf(s->carry, sizeof s->carry, "%s", strlen(line) < sizeof s->carry ? line : "");
}

/* One look at the node: new log text, progress, and the end. 1: the
 * stream ended (text holds its last events). */
static int log_poll(struct log_stream *s, char **ret, size_t *ret_len) {
        char err[API_ERRMSG_MAX] = "";
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        bool ended = false;
        _cleanup_(json_decrefp) json_t *lreq = json_pack("{s:s, s:s, s:I, s:I}", "op", "template.log", "name",
                                                         s->node_name, "offset", (json_int_t) s->offset, "limit",
                                                         (json_int_t) TEMPLATE_LOG_CHUNK);
        _cleanup_(json_decrefp) json_t *lrep = NULL;
        int r = lreq ? node_call(s->addr, s->config->node_timeout_s, lreq, &lrep, err) : -ENOMEM;
        bool log_done = r < 0; /* no log (any more): nothing to follow */
        json_t *data = r >= 0 ? json_object_get(lrep, "data") : NULL;
        if (r >= 0) {
                s->offset = (uint64_t) json_integer_value(json_object_get(lrep, "next"));
                log_done = json_is_true(json_object_get(lrep, "done"));
        }
        _cleanup_(json_decrefp) json_t *greq = json_pack("{s:s, s:s}", "op", "template.get", "name", s->node_name);
        _cleanup_(json_decrefp) json_t *grep = NULL;
        r = greq ? node_call(s->addr, s->config->node_timeout_s, greq, &grep, err) : -ENOMEM;
        const char *state = r >= 0 ? json_string_value(json_object_get(grep, "state")) : "failed";
        /* every step's progress, from the headers the log has (a look at
         * the node's state now and then would miss the quick ones) */
        if (json_string_length(data) > 0) {
                progress_events(s, f, json_string_value(data), json_string_length(data),
                                json_object_get(grep, "elapsed_ms"));
                sse_event(f, "log", json_pack("{s:O}", "text", data));
        }
        if ((r < 0 || !state || strcmp(state, "building") != 0) && log_done) {
                /* ended: the store hears it too */
                const char *error = r >= 0 ? json_string_value(json_object_get(grep, "error"))
                                           : "the node lost the build";
                (void) store_template_set_state(s->store, s->owner, s->name, s->build_id, state ? state : "failed",
                                                error, 0, 0);
                json_t *o = json_pack("{s:s, s:s}", "state", state ? state : "failed", "build_id", s->build_id);
                if (o && error)
                        json_object_set_new(o, "error", json_string(error));
                if (o && r >= 0 && json_object_get(grep, "elapsed_ms"))
                        json_object_set(o, "elapsed_ms", json_object_get(grep, "elapsed_ms"));
                sse_event(f, "end", o);
                ended = true;
        }
        if (fclose(f) != 0) {
                free(text);
                return -ENOMEM;
        }
        *ret = text;
        *ret_len = len;
        return ended ? 1 : 0;
}

/* One look for api_sse_poll_read(): what log_poll() found, queued. */
static int log_stream_poll(void *cls) {
        struct log_stream *s = cls;
        char *text = NULL;
        size_t len = 0;
        int r = log_poll(s, &text, &len);
        if (r < 0)
                return r;
        bool ended = r > 0;
        if (len == 0) {
                free(text);
                s->out.done = ended;
                return ended ? 1 : 0;
        }
        api_sse_out_set(&s->out, text, len);
        s->out.done = ended;
        return 1;
}

static ssize_t log_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct log_stream *s = cls;
        return api_sse_poll_read(&s->out, s->stopping, log_stream_poll, s, TEMPLATE_LOG_POLL_MS, buf, max);
}

int api_template_logs(struct api_ctx *ctx, const char *name, const char *build_id, struct api_reply *ret) {
        _cleanup_(store_template_release) struct store_template t = { 0 };
        int r = lookup(ctx, name, &t);
        if (r < 0)
                return r;
        if (strcmp(t.build_id, build_id) != 0)
                return api_fail(ctx, -ENOENT, "build '%.64s' of template '%.64s' not found (its latest is %s)",
                                build_id, name, t.build_id);
        struct log_stream *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->config = ctx->config;
        s->store = ctx->store;
        s->stopping = ctx->stopping;
        s->out.last_ns = now_monotonic_ns();
        snprintf(s->node_name, sizeof s->node_name, "%s", t.node_name);
        snprintf(s->log_ctx, sizeof s->log_ctx, "%s", ctx->log_ctx);
        s->owner = strdup(owner_of(ctx));
        s->name = strdup(name);
        s->build_id = strdup(build_id);
        if (!s->owner || !s->name || !s->build_id || (r = template_node_addr(&t, s->addr)) < 0) {
                log_stream_free(s);
                return r < 0 ? api_fail(ctx, r, "cannot reach the node of template %s", name) : -ENOMEM;
        }
        char *hello = strdup(": airlock template build log\n\n");
        if (hello)
                api_sse_out_set(&s->out, hello, strlen(hello));
        return api_sse_reply(log_stream_read, s, log_stream_free, ret);
}
