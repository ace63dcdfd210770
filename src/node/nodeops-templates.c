/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The template build ops of docs/node-protocol.md: airlockd checks a spec,
 * names the template by its content and asks its node to build it
 * (template.build, the build context streamed after the request), then
 * follows it (template.get, template.log) and removes it (template.delete).
 * The builds themselves are template-build.c's.
 */
#include "nodeops-ops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "macros.h"
#include "nodeops-req.h"
#include "nodeutil.h"
#include "proto.h"
#include "template-build.h"
#include "template-internal.h"
#include "util.h"

/* A build context at most (the API's limit too). */
#define CONTEXT_MAX (256ull << 20)
#define CONTEXT_IDLE_MS 60000
/* template.log: bytes per answer at most. */
#define LOG_CHUNK_MAX (256u << 10)

static int field_name(struct node_conn *c, json_t *req, const char **ret) {
        const char *name = json_string_value(json_object_get(req, "name"));
        if (!template_custom_name(name))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"name\" must be c- and 32 hex digits");
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " template=%s", name);
        *ret = name;
        return 0;
}

/* Reads the node-data frames of the build context into path. */
static int read_context(struct node_conn *c, const char *path) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return conn_reply_errno(c, negative_errno(), "cannot store the build context");
        uint64_t total = 0;
        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                int r = conn_read_frame(c, CONTEXT_IDLE_MS, &h, &payload);
                if (r <= 0)
                        return conn_reply_errno(c, r == 0 ? -ECONNRESET : r, "reading the build context failed");
                if (h.type == PROTO_NODE_END) {
                        conn_pop_frame(c, &h);
                        return 0;
                }
                if (h.type != PROTO_NODE_DATA) {
                        conn_pop_frame(c, &h);
                        return conn_reply_error(c, -EINVAL, "invalid", "expected node-data or node-end, got %s",
                                                proto_type_name(h.type));
                }
                total += h.length;
                if (total > CONTEXT_MAX) {
                        conn_pop_frame(c, &h);
                        return conn_reply_error(c, -EFBIG, "too_large", "build context larger than %llu bytes",
                                                (unsigned long long) CONTEXT_MAX);
                }
                r = fd_write_all(fd, payload, h.length);
                conn_pop_frame(c, &h);
                if (r < 0)
                        return conn_reply_errno(c, r, "cannot store the build context");
        }
}

int nodeops_template_build(struct node_conn *c, json_t *req) {
        const char *name;
        bool has_context;
        _cleanup_free_ char *network = NULL;
        int r;
        if ((r = field_name(c, req, &name)) < 0 || (r = nodeops_field_bool(c, req, "context", false, &has_context)) < 0 ||
            (r = nodeops_field_network(c, req, false, &network)) < 0)
                return r;
        json_t *spec = json_object_get(req, "spec");
        const char *base = json_string_value(json_object_get(req, "base"));
        if (!json_is_object(spec))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"spec\" must be a template spec");
        if (json_object_get(req, "base") && (!base || !name_is_valid(base)))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"base\" must be a template name");
        _cleanup_free_ char *context = NULL;
        if (has_context) {
                char rnd[17];
                if ((r = random_id("", 8, rnd, sizeof rnd)) < 0 ||
                    !(context = strdup_printf("%s/.upload-%s.tar", template_dir(), rnd)))
                        return conn_reply_errno(c, r < 0 ? r : -ENOMEM, "cannot name the build context");
                if ((r = read_context(c, context)) < 0) {
                        (void) unlink(context);
                        return r;
                }
        }
        _cleanup_free_ char *error = NULL;
        r = template_custom_build(&(struct template_build_request){ .name = name, .spec = spec, .base = base,
                                                                    .context = context, .network = network },
                                  &error);
        if (context)
                (void) unlink(context); /* the build took it, or it is not needed */
        if (r == -EBUSY)
                return conn_reply_ok(c, json_pack("{s:s, s:s}", "name", name, "state", "building"));
        if (r == -EINVAL || r == -EOPNOTSUPP)
                return conn_reply_error(c, r, "invalid", "%s", error ? error : "the spec cannot be built");
        if (r < 0)
                return conn_reply_error(c, r, node_errno_code(-r), "%s", error ? error : strerror(-r));
        return conn_reply_ok(c, json_pack("{s:s, s:s}", "name", name, "state", r > 0 ? "ready" : "building"));
}

int nodeops_template_get(struct node_conn *c, json_t *req) {
        const char *name;
        int r = field_name(c, req, &name);
        if (r < 0)
                return r;
        json_t *o = NULL;
        r = template_custom_status(name, &o);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no template %s on this node", name);
        if (r < 0)
                return conn_reply_errno(c, r, "reading the template failed");
        return conn_reply_ok(c, o);
}

int nodeops_template_log(struct node_conn *c, json_t *req) {
        const char *name;
        uint64_t offset, limit;
        int r;
        if ((r = field_name(c, req, &name)) < 0 ||
            (r = nodeops_field_uint(c, req, "offset", 0, 0, INT64_MAX, &offset)) < 0 ||
            (r = nodeops_field_uint(c, req, "limit", 65536, 1, LOG_CHUNK_MAX, &limit)) < 0)
                return r;
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        bool done = false;
        r = template_custom_log(name, offset, (size_t) limit, &data, &len, &done);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no build log of template %s", name);
        if (r < 0)
                return conn_reply_errno(c, r, "reading the build log failed");
        /* whole UTF-8 characters only: the rest comes with the next read */
        size_t take = done ? len : utf8_cut(data ? data : "", len, len);
        size_t out_len = 0;
        _cleanup_free_ char *text = utf8_sanitize(data ? data : "", take, &out_len);
        if (!text)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:s%, s:I, s:b}", "data", text, out_len, "next",
                                          (json_int_t) (offset + take), "done", done && take == len));
}

int nodeops_template_delete(struct node_conn *c, json_t *req) {
        const char *name;
        int r = field_name(c, req, &name);
        if (r < 0)
                return r;
        r = template_custom_delete(name);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no template %s on this node", name);
        if (r < 0)
                return conn_reply_errno(c, r, "removing the template failed");
        return conn_reply_ok(c, NULL);
}
