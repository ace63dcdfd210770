/* SPDX-License-Identifier: Apache-2.0 */
#include "guestops.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guestconn.h"
#include "guestreply.h"
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

struct guestops_proc {
        struct guestconn *g;
        uint32_t stream;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool exited, dead;
        int exit_code;
        int out_fd;
        char *out;
        size_t out_size, out_len;
};

/* On the channel's reader thread: output, then EXIT (or the channel's end). */
static void proc_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct guestops_proc *x = userdata;
        pthread_mutex_lock(&x->lock);
        if ((type == PROTO_STDOUT || type == PROTO_STDERR) && !x->exited) {
                if (x->out_fd >= 0)
                        (void) fd_write_all(x->out_fd, payload, len);
                if (x->out_size > 0) {
                        size_t take = MIN(len, x->out_size - 1 - x->out_len);
                        memcpy(x->out + x->out_len, payload, take);
                        x->out_len += take;
                }
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

void guestops_proc_release(struct guestops_proc *p) {
        if (!p)
                return;
        if (p->stream)
                guestconn_stream_close(p->g, p->stream);
        if (p->out && p->out_size > 0)
                p->out[p->out_len] = 0;
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
}

int guestops_spawn(struct guestconn *g, const struct guestops_exec *e, struct guestops_proc **ret, char **ret_message) {
        struct guestops_proc *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->g = g;
        p->out_fd = e->out_fd > 0 ? e->out_fd : -1;
        p->out = e->out;
        p->out_size = e->out ? e->out_size : 0;
        pthread_mutex_init(&p->lock, NULL);
        node_cond_init(&p->cond);
        _cleanup_(json_decrefp) json_t *env = e->env ? json_incref(e->env) : json_object();
        _cleanup_(json_decrefp) json_t *req =
                env ? json_pack("{s:O, s:O, s:s}", "argv", e->argv, "env", env, "cwd", e->cwd ? e->cwd : "/") : NULL;
        if (req && e->user && json_object_set_new(req, "user", json_string(e->user)) < 0)
                req = (json_decref(req), NULL);
        int r = req ? guestconn_stream_open(g, proc_handler, p, &p->stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, p->stream, PROTO_EXEC, req, e->timeout_ms > 0 ? e->timeout_ms : 10000,
                                          NULL, ret_message);
        if (r < 0) {
                guestops_proc_release(p);
                return r;
        }
        *ret = p;
        return 0;
}

int guestops_proc_wait(struct guestops_proc *p, int timeout_ms, int *ret_exit_code) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ULL;
        pthread_mutex_lock(&p->lock);
        while (!p->exited && !p->dead && now_monotonic_ns() < deadline) {
                struct timespec ts = { .tv_sec = (time_t) (deadline / 1000000000ULL),
                                       .tv_nsec = (long) (deadline % 1000000000ULL) };
                pthread_cond_timedwait(&p->cond, &p->lock, &ts);
        }
        int r = p->exited ? 0 : p->dead ? -ECONNRESET : -ETIMEDOUT;
        if (r >= 0)
                *ret_exit_code = p->exit_code;
        pthread_mutex_unlock(&p->lock);
        return r;
}

int guestops_exec(struct guestconn *g, const struct guestops_exec *e, int timeout_ms, int *ret_exit_code,
                  char **ret_message) {
        struct guestops_proc *p = NULL;
        int r = guestops_spawn(g, e, &p, ret_message);
        if (r < 0)
                return r;
        r = guestops_proc_wait(p, timeout_ms, ret_exit_code);
        guestops_proc_release(p);
        return r;
}

int guestops_run(struct guestconn *g, json_t *argv, int timeout_ms, int *ret_exit_code, char *out, size_t out_size,
                 char **ret_message) {
        if (out && out_size > 0)
                out[0] = 0;
        return guestops_exec(g, &(struct guestops_exec){ .argv = argv, .out = out, .out_size = out_size,
                                                         .timeout_ms = timeout_ms },
                             timeout_ms, ret_exit_code, ret_message);
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

/* The answer a FILE_WRITE's stream gets: RESULT or ERROR, or the end. */
struct put_reply {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool done, dead;
        int err;
        char *msg;
};

static void put_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct put_reply *x = userdata;
        pthread_mutex_lock(&x->lock);
        if ((type == PROTO_RESULT || type == PROTO_ERROR) && !x->done) {
                int err = 0;
                json_t *res = NULL;
                char *msg = NULL;
                if (guestreply_parse(type, payload, len, &err, &res, &msg) < 0)
                        err = -EBADMSG;
                json_decref(res);
                x->err = err;
                x->msg = msg;
                x->done = true;
        } else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

int guestops_file_put(struct guestconn *g, const char *path, unsigned mode, const void *data, size_t len,
                      int timeout_ms, char **ret_message) {
        struct put_reply x = {0};
        uint32_t stream = 0;
        pthread_mutex_init(&x.lock, NULL);
        node_cond_init(&x.cond);
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:i}", "path", path, "mode", (int) mode);
        int r = req ? guestconn_stream_open(g, put_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_send_json(g, PROTO_FILE_WRITE, stream, req);
        for (size_t off = 0; r >= 0 && off < len; off += PROTO_DATA_CHUNK)
                r = guestconn_send(g, PROTO_FILE_DATA, stream, (const uint8_t *) data + off,
                                   MIN((size_t) PROTO_DATA_CHUNK, len - off));
        if (r >= 0)
                r = guestconn_send(g, PROTO_FILE_END, stream, "{}", 2);
        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ULL;
        pthread_mutex_lock(&x.lock);
        while (r >= 0 && !x.done && !x.dead && now_monotonic_ns() < deadline) {
                struct timespec ts = {.tv_sec = (time_t) (deadline / 1000000000ULL),
                                      .tv_nsec = (long) (deadline % 1000000000ULL)};
                pthread_cond_timedwait(&x.cond, &x.lock, &ts);
        }
        if (r >= 0)
                r = x.done ? x.err : x.dead ? -ECONNRESET : -ETIMEDOUT;
        pthread_mutex_unlock(&x.lock);
        if (stream)
                guestconn_stream_close(g, stream);
        if (r < 0 && ret_message && x.msg)
                *ret_message = TAKE_PTR(x.msg);
        free(x.msg);
        pthread_mutex_destroy(&x.lock);
        pthread_cond_destroy(&x.cond);
        return r;
}
