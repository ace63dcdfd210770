/* SPDX-License-Identifier: Apache-2.0 */
/* volume.create, volume.clone, volume.delete: the node's volume store
 * (docs/node-protocol.md, docs/volumes.md). airlockd keeps the volumes'
 * records (owner, name, size, holders); the node keeps their images. */
#include "nodeops-ops.h"

#include <errno.h>
#include <stdlib.h>

#include "conn.h"
#include "macros.h"
#include "nodeops-req.h"
#include "sandbox.h"

static int reply_volume(struct node_conn *c, int r, const char *id, char *err) {
        _cleanup_free_ char *e = err;
        if (r >= 0)
                return conn_reply_ok(c, json_pack("{s:{s:s}}", "volume", "id", id));
        const char *code = r == -EINVAL   ? "invalid"
                           : r == -EEXIST ? "conflict"
                           : r == -EBUSY  ? "conflict"
                           : r == -ENOENT ? "not_found"
                                          : "internal";
        return conn_reply_error(c, r, code, "%s", e ? e : strerror(-r));
}

int nodeops_volume_create(struct node_conn *c, json_t *req) {
        const char *id;
        uint64_t size;
        int r;
        if ((r = nodeops_field_name(c, req, "id", &id)) < 0 ||
            (r = nodeops_field_uint(c, req, "size", 0, SANDBOX_VOLUME_SIZE_MIN, SANDBOX_VOLUME_SIZE_MAX,
                                    &size)) < 0)
                return r;
        char *err = NULL;
        r = sandbox_volume_create(id, size, &err);
        return reply_volume(c, r, id, err);
}

int nodeops_volume_clone(struct node_conn *c, json_t *req) {
        const char *id, *from;
        int r;
        if ((r = nodeops_field_name(c, req, "id", &id)) < 0 ||
            (r = nodeops_field_name(c, req, "from", &from)) < 0)
                return r;
        char *err = NULL;
        r = sandbox_volume_clone(id, from, &err);
        return reply_volume(c, r, id, err);
}

int nodeops_volume_delete(struct node_conn *c, json_t *req) {
        const char *id;
        int r = nodeops_field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        char *err = NULL;
        r = sandbox_volume_delete(id, &err);
        return reply_volume(c, r, id, err);
}
