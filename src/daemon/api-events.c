/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /v1/events[?sandbox_id=ID][&after=N]: the lifecycle events of the
 * caller's sandboxes as Server-Sent Events, so that clients need not poll
 * (docs/api.md, "Events"). The store appends them (store_event_*) from
 * whichever replica changed the sandbox; a stream reads them after its
 * cursor every EVENTS_POLL_MS. Each event's SSE id is its store id: a
 * client that reconnects with Last-Event-ID (or ?after=) gets what it
 * missed, as long as the store keeps it (an hour).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "log.h"
#include "macros.h"
#include "util.h"

#define EVENTS_POLL_MS 200
#define EVENTS_BATCH 100

struct event_stream {
        struct store *store;
        const atomic_bool *stopping;
        bool all;
        char *tenant_id, *sandbox_id;
        int64_t cursor;
        struct api_sse_out out;
        char log_ctx[256];
};

static void stream_free(void *cls) {
        struct event_stream *s = cls;
        free(s->tenant_id);
        free(s->sandbox_id);
        free(s->out.pend);
        free(s);
}

/* The SSE text of a batch: "id: N\nevent: TYPE\ndata: JSON\n\n" each. */
static int batch_text(struct store_event *e, size_t n, char **ret, size_t *ret_len) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                _cleanup_(json_decrefp) json_t *o = api_event_json(&e[i]);
                _cleanup_free_ char *d = o ? json_dumps(o, JSON_COMPACT) : NULL;
                if (!d)
                        r = -ENOMEM;
                else
                        fprintf(f, "id: %lld\nevent: %s\ndata: %s\n\n", (long long) e[i].id, e[i].type, d);
        }
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                free(text);
                return r;
        }
        *ret = text;
        *ret_len = len;
        return 0;
}

/* One look at the store: the events after the cursor, queued. */
static int stream_poll(void *cls) {
        struct event_stream *s = cls;
        struct store_event *e = NULL;
        size_t n = 0;
        int r = store_event_list(s->store, s->all, s->tenant_id, s->sandbox_id, s->cursor, EVENTS_BATCH, &e, &n);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, s->log_ctx, "store: failed to read events: %m");
                n = 0;
        }
        if (n == 0) {
                store_event_array_free(e, n);
                return 0;
        }
        s->cursor = e[n - 1].id;
        char *text = NULL;
        size_t len = 0;
        r = batch_text(e, n, &text, &len);
        store_event_array_free(e, n);
        if (r < 0)
                return r;
        api_sse_out_set(&s->out, text, len);
        return 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct event_stream *s = cls;
        return api_sse_poll_read(&s->out, s->stopping, stream_poll, s, EVENTS_POLL_MS, buf, max);
}

int api_events(struct api_ctx *ctx, const char *sandbox_id, const char *after, const char *last_event_id,
               struct api_reply *ret) {
        if (sandbox_id && (!*sandbox_id || strlen(sandbox_id) > 64))
                return api_fail(ctx, -EINVAL, "'sandbox_id' must be a sandbox id");
        int64_t cursor = 0;
        const char *from = last_event_id && *last_event_id ? last_event_id : after;
        uint64_t v = 0;
        if (from && parse_u64(from, INT64_MAX, &v) < 0)
                return api_fail(ctx, -EINVAL, "%s must be an event id (a non-negative integer)",
                                from == last_event_id ? "Last-Event-ID" : "'after'");
        if (from)
                cursor = (int64_t) v;
        else { /* what comes next */
                int r = store_event_last_id(ctx->store, 0, &cursor);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read events: %m");
        }
        struct event_stream *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->store = ctx->store;
        s->stopping = ctx->stopping;
        s->all = !ctx->tenant_id;
        s->cursor = cursor;
        s->out.last_ns = now_monotonic_ns();
        snprintf(s->log_ctx, sizeof s->log_ctx, "%s", ctx->log_ctx);
        if ((ctx->tenant_id && !(s->tenant_id = strdup(ctx->tenant_id))) ||
            (sandbox_id && !(s->sandbox_id = strdup(sandbox_id)))) {
                stream_free(s);
                return -ENOMEM;
        }
        /* the stream opens with a comment: a client sees it is connected
         * before the first event */
        char *hello = strdup(": airlock events\n\n");
        if (hello)
                api_sse_out_set(&s->out, hello, strlen(hello));
        return api_sse_reply(stream_read, s, stream_free, ret);
}
