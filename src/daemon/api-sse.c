/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Server-Sent Events for the API's streams (sessions, /v1/events, template
 * build logs): formatting, the pending text a content callback hands to
 * libmicrohttpd, keep-alive comments, and the loop of a stream that polls
 * for news.
 */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "macros.h"
#include "util.h"

int api_sse_format(const char *event, const json_t *data, char **ret, size_t *ret_len) {
        _cleanup_free_ char *d = json_dumps(data, JSON_COMPACT);
        if (!d)
                return -ENOMEM;
        size_t n = strlen("event: ") + strlen(event) + strlen("\ndata: ") + strlen(d) + strlen("\n\n") + 1;
        char *s = malloc(n);
        if (!s)
                return -ENOMEM;
        int k = snprintf(s, n, "event: %s\ndata: %s\n\n", event, d);
        *ret = s;
        *ret_len = (size_t) k;
        return 0;
}

int api_sse_from_node_event(const json_t *ev, char **ret, size_t *ret_len, bool *ret_last) {
        const char *type = json_string_value(json_object_get(ev, "type"));
        _cleanup_(json_decrefp) json_t *d = NULL;
        bool last = false;
        if (!type)
                return 0;
        if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
                const char *data = json_string_value(json_object_get(ev, "data"));
                if (!data)
                        return 0;
                d = json_pack("{s:s}", "data", data);
        } else if (strcmp(type, "exit") == 0) {
                json_t *code = json_object_get(ev, "exit_code");
                d = json_pack("{s:O}", "exit_code", json_is_integer(code) ? code : json_null());
                json_t *sig = json_object_get(ev, "signal");
                if (d && json_is_integer(sig) && json_integer_value(sig) != 0)
                        json_object_set(d, "signal", sig);
                /* why a session ended without its process's own exit
                 * (revoked with its execution, the guest channel closed) */
                json_t *error = json_object_get(ev, "error");
                if (d && json_is_string(error))
                        json_object_set(d, "error", error);
                last = true;
        } else if (strcmp(type, "dropped") == 0) {
                json_t *bytes = json_object_get(ev, "bytes");
                d = json_pack("{s:I}", "bytes", json_is_integer(bytes) ? json_integer_value(bytes) : 0);
        } else
                return 0;
        if (!d)
                return -ENOMEM;
        int r = api_sse_format(type, d, ret, ret_len);
        if (r < 0)
                return r;
        *ret_last = last;
        return 1;
}

void api_sse_out_set(struct api_sse_out *o, char *text, size_t len) {
        free(o->pend);
        o->pend = text;
        o->len = len;
        o->off = 0;
}

size_t api_sse_out_take(struct api_sse_out *o, char *buf, size_t max) {
        if (o->off >= o->len)
                return 0;
        size_t n = MIN(max, o->len - o->off);
        memcpy(buf, o->pend + o->off, n);
        o->off += n;
        o->last_ns = now_monotonic_ns();
        return n;
}

int api_sse_out_keepalive(struct api_sse_out *o) {
        if (now_monotonic_ns() - o->last_ns < API_SSE_KEEPALIVE_S * 1000000000ULL)
                return 0;
        char *k = strdup(": keepalive\n\n");
        if (!k)
                return -ENOMEM;
        api_sse_out_set(o, k, strlen(k));
        return 1;
}

void api_sse_out_fail(struct api_sse_out *o, int r, const char *msg) {
        char *text = NULL;
        size_t len = 0;
        _cleanup_(json_decrefp) json_t *d =
                json_pack("{s:s, s:s}", "code", api_error_code(r), "message", msg && *msg ? msg : api_error_default_message(r));
        if (d && api_sse_format("error", d, &text, &len) >= 0)
                api_sse_out_set(o, text, len);
        o->done = true;
}

int api_sse_reply(MHD_ContentReaderCallback reader, void *cls, MHD_ContentReaderFreeCallback free_cb,
                  struct api_reply *ret) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, reader, cls, free_cb);
        if (!resp) {
                free_cb(cls);
                return -ENOMEM;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
        return 0;
}

ssize_t api_sse_poll_read(struct api_sse_out *o, const atomic_bool *stopping, int (*poll)(void *cls), void *cls,
                          unsigned poll_ms, char *buf, size_t max) {
        for (;;) {
                size_t taken = api_sse_out_take(o, buf, max);
                if (taken > 0)
                        return (ssize_t) taken;
                if (o->done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (atomic_load(stopping)) {
                        api_sse_out_fail(o, -EHOSTDOWN, "the server is shutting down");
                        continue;
                }
                int r = poll(cls);
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (r > 0)
                        continue;
                r = api_sse_out_keepalive(o);
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (r > 0)
                        continue;
                struct timespec ts = { poll_ms / 1000, (long) (poll_ms % 1000) * 1000000L };
                nanosleep(&ts, NULL);
        }
}
