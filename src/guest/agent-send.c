/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's replies to the host: every frame the agent sends goes out
 * through agent_send(). The bottom of the agent: the request handlers
 * (process.c, files.c, watch.c, fsuser.c, identity.c, metrics.c) and the
 * dispatcher in agent.c call it; it calls nothing of theirs.
 */
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "macros.h"
#include "request.h"

int agent_send(struct agent *a, uint8_t type, uint32_t stream, const void *data, size_t len) {
        if (a->host_away || a->chan_fd < 0)
                return 0;
        int r = proto_write_frame(a->chan_fd, type, stream, data, len);
        if (r < 0 && r != -EMSGSIZE) {
                /* the host went away mid-write; the read side will notice */
                log_warn("Failed to send %s frame: %s", proto_type_name(type), strerror(-r));
                a->host_away = true;
        }
        return r;
}

int agent_send_json(struct agent *a, uint8_t type, uint32_t stream, json_t *obj) {
        _cleanup_free_ char *s = NULL;
        size_t n;
        int r;

        if (!obj)
                return -ENOMEM;
        r = guest_json_dump(obj, PROTO_MAX_PAYLOAD, &s, &n);
        json_decref(obj);
        if (r < 0)
                return r;
        return agent_send(a, type, stream, s, n);
}

int agent_send_ok(struct agent *a, uint32_t stream) {
        return agent_send(a, PROTO_RESULT, stream, "{}", 2);
}

int agent_send_error(struct agent *a, uint32_t stream, int err, const char *what) {
        int e = err < 0 ? -err : (err > 0 ? err : EIO);
        char msg[256];
        snprintf(msg, sizeof msg, "%s: %s", what ? what : "request", strerror(e));
        return agent_send_json(a, PROTO_ERROR, stream, json_pack("{s:i,s:s}", "errno", e, "message", msg));
}

int agent_send_errorf(struct agent *a, uint32_t stream, int err, const char *fmt, ...) {
        int e = err < 0 ? -err : (err > 0 ? err : EIO);
        _cleanup_free_ char *clean = NULL;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        /* names in it (paths, users) may be any bytes, or cut mid-character */
        if (guest_utf8_sanitize(msg, strlen(msg), &clean) < 0)
                return -ENOMEM;
        return agent_send_json(a, PROTO_ERROR, stream, json_pack("{s:i,s:s}", "errno", e, "message", clean));
}
