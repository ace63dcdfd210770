/* SPDX-License-Identifier: Apache-2.0 */
#include "guestops.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "proto.h"
#include "util.h"

int guestops_identity(struct guestconn *g, const char *sandbox_id, json_t *env, int timeout_ms, char **ret_message) {
        uint8_t seed[32];
        char seed_hex[65];
        int r = random_bytes(seed, sizeof seed);
        if (r < 0)
                return r;
        node_hex(seed, sizeof seed, seed_hex);
        json_t *req = json_pack("{s:s, s:s, s:O, s:I, s:s}", "sandbox_id", sandbox_id, "hostname", sandbox_id, "env",
                                env, "time_ns", (json_int_t) now_realtime_ns(), "seed", seed_hex);
        r = req ? guestconn_call(g, PROTO_IDENTITY, req, timeout_ms, NULL, ret_message) : -ENOMEM;
        json_decref(req);
        explicit_bzero(seed, sizeof seed);
        explicit_bzero(seed_hex, sizeof seed_hex);
        return r;
}

struct run {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool exited, dead;
        int exit_code;
        char *out;
        size_t out_size, out_len;
};

/* On the channel's reader thread: output, then EXIT (or the channel's end). */
static void run_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct run *x = userdata;
        pthread_mutex_lock(&x->lock);
        if ((type == PROTO_STDOUT || type == PROTO_STDERR) && !x->exited && x->out_size > 0) {
                size_t take = MIN(len, x->out_size - 1 - x->out_len);
                memcpy(x->out + x->out_len, payload, take);
                x->out_len += take;
        } else if (type == PROTO_EXIT && !x->exited) {
                _cleanup_(json_decrefp) json_t *m = json_loadb((const char *) payload, len, 0, NULL);
                json_t *code = json_object_get(m, "exit_code");
                x->exit_code = json_is_integer(code) ? (int) json_integer_value(code) : -1;
                x->exited = true;
        } else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

int guestops_run(struct guestconn *g, json_t *argv, int timeout_ms, int *ret_exit_code, char *out, size_t out_size,
                 char **ret_message) {
        struct run x = { .lock = PTHREAD_MUTEX_INITIALIZER, .out = out, .out_size = out ? out_size : 0 };
        node_cond_init(&x.cond);
        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ULL;
        uint32_t stream = 0;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:O, s:{}, s:s}", "argv", argv, "env", "cwd", "/");
        int r = req ? guestconn_stream_open(g, run_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_EXEC, req, timeout_ms, NULL, ret_message);
        if (r >= 0) {
                pthread_mutex_lock(&x.lock);
                while (!x.exited && !x.dead && now_monotonic_ns() < deadline) {
                        struct timespec ts = { .tv_sec = (time_t) (deadline / 1000000000ULL),
                                               .tv_nsec = (long) (deadline % 1000000000ULL) };
                        pthread_cond_timedwait(&x.cond, &x.lock, &ts);
                }
                pthread_mutex_unlock(&x.lock);
                if (!x.exited)
                        r = x.dead ? -ECONNRESET : -ETIMEDOUT;
        }
        if (stream)
                guestconn_stream_close(g, stream);
        pthread_cond_destroy(&x.cond);
        if (out && out_size > 0)
                out[x.out_len] = 0;
        if (r >= 0)
                *ret_exit_code = x.exit_code;
        return r;
}

#define REHEARSAL_MS 10000

int guestops_rehearse(struct guestconn *g, const char *ctx) {
        _cleanup_(json_decrefp) json_t *env = json_object();
        _cleanup_(json_decrefp) json_t *argv = json_pack("[s]", "true");
        if (!env || !argv)
                return -ENOMEM;
        int r = guestops_identity(g, "rehearsal", env, REHEARSAL_MS, NULL);
        int code = -1;
        if (r >= 0)
                r = guestops_run(g, argv, REHEARSAL_MS, &code, NULL, 0, NULL);
        if (r == -ENOENT)
                return 0; /* an image without `true` still makes sandboxes */
        if (r >= 0 && code != 0)
                log_emit(LOG_LEVEL_WARN, ctx, "`true` exited with %d in the rehearsal", code);
        return r;
}
