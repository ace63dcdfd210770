/* SPDX-License-Identifier: Apache-2.0 */
/*
 * guestconn against a fake guest agent: a thread on the other end of a
 * socketpair that speaks lib/proto frames the way airlock-guest does
 * (docs/guest-protocol.md), including the stale bytes a reconnecting host
 * finds on the channel; then the checks guestreply.c makes of what a
 * guest sends (entries, process lists, watch events, ADOPT answers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guestconn.h"
#include "guestreply.h"
#include "macros.h"
#include "proto.h"

/* ---- fake guest helpers (server thread) ---- */

struct guest {
        int fd;
        struct proto_reader r;
};

static void guest_send_json(struct guest *g, uint8_t type, uint32_t stream, const char *json) {
        assert_int_equal(proto_write_frame(g->fd, type, stream, json, strlen(json)), 0);
}

/* Reads the next frame; returns its JSON payload (NULL for data frames) and
 * header. Returns false on EOF. */
static bool guest_recv(struct guest *g, struct proto_header *h, json_t **ret_json) {
        const uint8_t *payload;
        int k = proto_reader_read(&g->r, g->fd, h, &payload);
        if (k <= 0)
                return false;
        if (ret_json) {
                json_error_t err;
                *ret_json = json_loadb((const char *) payload, h->length, 0, &err);
        }
        proto_reader_pop(&g->r, h);
        return true;
}

/* More members of the fake guest's HELLO reply (",\"features\":[...]"). */
static const char *hello_extra = "";

/* Answers the host's HELLO with its nonce, after writing stale junk: a
 * frame cut short, random bytes, a HELLO with a wrong nonce. */
static void guest_handshake(struct guest *g, bool stale) {
        struct proto_header h;
        json_t *m = NULL;
        assert_true(guest_recv(g, &h, &m));
        assert_int_equal(h.type, PROTO_HELLO);
        assert_int_equal(h.stream, 0);
        const char *nonce = json_string_value(json_object_get(m, "nonce"));
        assert_non_null(nonce);
        assert_int_equal(strlen(nonce), 32);
        assert_int_equal(json_integer_value(json_object_get(m, "version")), 1);

        if (stale) {
                /* old output cut mid-frame: header promises 1000 bytes, 10 come */
                uint8_t hdr[PROTO_HEADER_SIZE];
                proto_header_encode(&(struct proto_header){ .version = 1, .type = PROTO_STDOUT, .stream = 7,
                                                             .length = 1000 },
                                    hdr);
                assert_int_equal(write(g->fd, hdr, sizeof hdr), (ssize_t) sizeof hdr);
                assert_int_equal(write(g->fd, "0123456789", 10), 10);
                assert_int_equal(write(g->fd, "garbage ALK", 11), 11);
                guest_send_json(g, PROTO_HELLO, 0, "{\"nonce\":\"00000000000000000000000000000000\",\"version\":1}");
                guest_send_json(g, PROTO_STDOUT, 3, "old output");
        }
        char reply[512];
        snprintf(reply, sizeof reply,
                 "{\"nonce\":\"%s\",\"version\":1,\"agent\":\"fake-guest 0.1\",\"boot_id\":\"b00t\"%s}",
                 nonce, hello_extra);
        guest_send_json(g, PROTO_HELLO, 0, reply);
        json_decref(m);
}

struct fake {
        pthread_t thread;
        struct guest g;
        int host_fd;
};

static void fake_start(struct fake *f, void *(*fn)(void *)) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        f->host_fd = sv[0];
        f->g.fd = sv[1];
        assert_int_equal(proto_reader_init(&f->g.r), 0);
        assert_int_equal(pthread_create(&f->thread, NULL, fn, &f->g), 0);
}

static void fake_join(struct fake *f) {
        assert_int_equal(pthread_join(f->thread, NULL), 0);
        close(f->g.fd);
        proto_reader_release(&f->g.r);
}

static struct guestconn *fake_open(struct fake *f, void *(*fn)(void *)) {
        fake_start(f, fn);
        struct guestconn *c = NULL;
        assert_int_equal(guestconn_open(f->host_fd, "test=guestconn", 2000, &c), 0);
        assert_non_null(c);
        return c;
}

/* Waits for the host to close the channel. */
static void guest_drain(struct guest *g) {
        struct proto_header h;
        while (guest_recv(g, &h, NULL))
                ;
}

/* ---- tests ---- */

/* Serves requests: PING -> RESULT {}, LIST -> RESULT, STAT -> ERROR ENOENT,
 * MKDIR -> nothing (the host times out), until EOF. */
static void *guest_requests(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, true);
        struct proto_header h;
        json_t *m;
        while (guest_recv(g, &h, &m)) {
                assert_true(h.stream != 0);
                switch (h.type) {
                case PROTO_PING:
                        guest_send_json(g, PROTO_RESULT, h.stream, "{}");
                        break;
                case PROTO_LIST:
                        assert_string_equal(json_string_value(json_object_get(m, "path")), "/");
                        /* noise on the stream first: not a reply */
                        guest_send_json(g, PROTO_STDOUT, h.stream, "x");
                        guest_send_json(g, PROTO_RESULT, h.stream, "{\"entries\":[{\"name\":\"etc\"}]}");
                        break;
                case PROTO_STAT:
                        guest_send_json(g, PROTO_ERROR, h.stream, "{\"errno\":2,\"message\":\"no such file\"}");
                        break;
                case PROTO_RENAME:
                        guest_send_json(g, PROTO_ERROR, h.stream, "{\"errno\":-5}"); /* nonsense errno */
                        break;
                case PROTO_MKDIR:
                        break; /* never answers */
                default:
                        fail_msg("unexpected frame type %u", h.type);
                }
                json_decref(m);
        }
        return NULL;
}

static void test_handshake_and_calls(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_requests);
        assert_true(guestconn_alive(c));

        assert_int_equal(guestconn_ping(c, 2000), 0);

        json_t *req = json_pack("{s:s}", "path", "/");
        json_t *res = NULL;
        assert_int_equal(guestconn_call(c, PROTO_LIST, req, 2000, &res, NULL), 0);
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(res, "entries"), 0), "name")),
                            "etc");
        json_decref(res);

        char *msg = NULL;
        res = (json_t *) 0x1;
        assert_int_equal(guestconn_call(c, PROTO_STAT, req, 2000, &res, &msg), -ENOENT);
        assert_ptr_equal(res, (json_t *) 0x1);
        assert_string_equal(msg, "no such file");
        free(msg);
        assert_int_equal(guestconn_call(c, PROTO_STAT, req, 2000, NULL, NULL), -ENOENT);
        assert_int_equal(guestconn_call(c, PROTO_RENAME, req, 2000, NULL, NULL), -EIO);

        assert_int_equal(guestconn_call(c, PROTO_MKDIR, req, 100, NULL, NULL), -ETIMEDOUT);
        /* still usable after a timeout */
        assert_int_equal(guestconn_ping(c, 2000), 0);
        assert_int_equal(req->refcount, 1); /* not consumed */
        json_decref(req);

        assert_int_equal(guestconn_call(c, PROTO_LIST, NULL, 100, NULL, NULL), -EINVAL);

        guestconn_free(c);
        fake_join(&f);
}

/* Holds back its reply to LIST until a PING comes, as a guest whose
 * notification of the LIST was lost would: then answers both. */
static void *guest_needs_nudge(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        struct proto_header h;
        json_t *m;
        uint32_t list_stream = 0;
        unsigned pings = 0;
        while (guest_recv(g, &h, &m)) {
                if (h.type == PROTO_LIST) {
                        list_stream = h.stream;
                } else if (h.type == PROTO_PING) {
                        pings++;
                        assert_int_not_equal(h.stream, list_stream);
                        guest_send_json(g, PROTO_RESULT, h.stream, "{}");
                        if (list_stream)
                                guest_send_json(g, PROTO_RESULT, list_stream, "{\"entries\":[]}");
                        list_stream = 0;
                } else {
                        fail_msg("unexpected frame type %u", h.type);
                }
                json_decref(m);
        }
        assert_int_equal(pings, 1); /* one PING per unanswered call, and no more */
        return NULL;
}

/* A call unanswered for NUDGE_MS sends one PING, and its reply that came
 * with the PING's is taken: the call succeeds within its timeout. */
static void test_unanswered_call_is_nudged(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_needs_nudge);
        json_t *req = json_pack("{s:s}", "path", "/");
        json_t *res = NULL;
        assert_int_equal(guestconn_call(c, PROTO_LIST, req, 20000, &res, NULL), 0);
        assert_non_null(json_object_get(res, "entries"));
        json_decref(res);
        json_decref(req);
        guestconn_free(c);
        fake_join(&f);
        (void) state;
}

static void *guest_silent(void *arg) {
        struct guest *g = arg;
        guest_drain(g); /* reads our HELLO, never answers */
        return NULL;
}

static void *guest_wrong_version(void *arg) {
        struct guest *g = arg;
        struct proto_header h;
        json_t *m = NULL;
        assert_true(guest_recv(g, &h, &m));
        char reply[256];
        snprintf(reply, sizeof reply, "{\"nonce\":\"%s\",\"version\":2}",
                 json_string_value(json_object_get(m, "nonce")));
        guest_send_json(g, PROTO_HELLO, 0, reply);
        json_decref(m);
        guest_drain(g);
        return NULL;
}

static void *guest_hangup(void *arg) {
        struct guest *g = arg;
        struct proto_header h;
        assert_true(guest_recv(g, &h, NULL));
        shutdown(g->fd, SHUT_RDWR);
        return NULL;
}

static void test_handshake_failures(void **state) {
        struct fake f;
        struct guestconn *c = (struct guestconn *) 0x1;

        fake_start(&f, guest_silent);
        assert_int_equal(guestconn_open(f.host_fd, "t", 100, &c), -ETIMEDOUT);
        fake_join(&f);

        fake_start(&f, guest_wrong_version);
        assert_int_equal(guestconn_open(f.host_fd, "t", 2000, &c), -EPROTONOSUPPORT);
        fake_join(&f);

        fake_start(&f, guest_hangup);
        assert_int_equal(guestconn_open(f.host_fd, "t", 2000, &c), -ECONNRESET);
        fake_join(&f);

        assert_ptr_equal(c, (struct guestconn *) 0x1);
        assert_int_equal(guestconn_open(-1, "t", 100, &c), -EBADF);
        guestconn_free(NULL);
}

/* A process: EXEC answered with RESULT {"pid"}, then STDOUT/STDERR data, a
 * guest PING on stream 0 (we must answer it), and EXIT. */
static void *guest_exec(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        struct proto_header h;
        json_t *m = NULL;
        assert_true(guest_recv(g, &h, &m));
        assert_int_equal(h.type, PROTO_EXEC);
        uint32_t s = h.stream;
        json_decref(m);
        guest_send_json(g, PROTO_RESULT, s, "{\"pid\":42}");
        guest_send_json(g, PROTO_STDOUT, s, "hello ");
        guest_send_json(g, PROTO_STDERR, s, "oops");
        guest_send_json(g, PROTO_PING, 0, "{}");
        /* the host's answer to our ping (from its reader thread) and the
         * test's stdin (from the main thread) come in either order */
        bool pong = false, input = false;
        while (!pong || !input) {
                m = NULL;
                assert_true(guest_recv(g, &h, &m)); /* NULL for raw stdin */
                if (h.type == PROTO_RESULT) {
                        assert_int_equal(h.stream, 0);
                        pong = true;
                } else {
                        assert_int_equal(h.type, PROTO_STDIN);
                        assert_int_equal(h.stream, s);
                        assert_int_equal(h.length, 5);
                        input = true;
                }
                json_decref(m);
        }
        guest_send_json(g, PROTO_STDOUT, s, "world");
        guest_send_json(g, PROTO_EXIT, s, "{\"exit_code\":0,\"signal\":0}");
        guest_drain(g);
        return NULL;
}

struct sink {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char out[256];
        size_t out_len;
        int nerr, nexit, ndead, nother;
};

static void sink_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct sink *s = userdata;
        pthread_mutex_lock(&s->lock);
        switch (type) {
        case PROTO_STDOUT:
                memcpy(s->out + s->out_len, payload, MIN(len, sizeof s->out - 1 - s->out_len));
                s->out_len += MIN(len, sizeof s->out - 1 - s->out_len);
                break;
        case PROTO_STDERR:
                s->nerr++;
                break;
        case PROTO_EXIT:
                s->nexit++;
                break;
        case 0:
                assert_null(payload);
                s->ndead++;
                break;
        default:
                s->nother++;
        }
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

static void sink_wait(struct sink *s, int *counter, int want) {
        pthread_mutex_lock(&s->lock);
        for (int i = 0; *counter < want && i < 200; i++) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 10 * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&s->cond, &s->lock, &ts);
        }
        assert_int_equal(*counter, want);
        pthread_mutex_unlock(&s->lock);
}

static void test_stream_exec(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_exec);
        struct sink s = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

        uint32_t id = 0;
        assert_int_equal(guestconn_stream_open(c, sink_handler, &s, &id), 0);
        assert_true(id != 0);
        assert_int_equal(guestconn_call_stream(c, 999, PROTO_EXEC, NULL, 100, NULL, NULL), -EINVAL);
        json_t *req = json_pack("{s:[s]}", "argv", "true");
        assert_int_equal(guestconn_call_stream(c, 999, PROTO_EXEC, req, 100, NULL, NULL), -ENOENT);
        json_t *res = NULL;
        assert_int_equal(guestconn_call_stream(c, id, PROTO_EXEC, req, 2000, &res, NULL), 0);
        json_decref(req);
        assert_int_equal(json_integer_value(json_object_get(res, "pid")), 42);
        json_decref(res);

        assert_int_equal(guestconn_send(c, PROTO_STDIN, id, "input", 5), 0);
        sink_wait(&s, &s.nexit, 1);
        pthread_mutex_lock(&s.lock);
        s.out[s.out_len] = 0;
        assert_string_equal(s.out, "hello world");
        assert_int_equal(s.nerr, 1);
        assert_int_equal(s.nother, 0); /* the RESULT went to the call, not the handler */
        pthread_mutex_unlock(&s.lock);

        /* closed: no type-0 call for it when the channel goes */
        guestconn_stream_close(c, id);
        guestconn_free(c);
        assert_int_equal(s.ndead, 0);
        fake_join(&f);
}

/* Lets the host register streams and start a call, then dies. */
static void *guest_dies(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        struct proto_header h;
        json_t *m = NULL;
        assert_true(guest_recv(g, &h, &m)); /* the call that will never be answered */
        json_decref(m);
        guest_send_json(g, PROTO_STDOUT, 1, "last words");
        shutdown(g->fd, SHUT_RDWR);
        return NULL;
}

static void test_channel_death(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_dies);
        struct sink s1 = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        struct sink s2 = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        uint32_t a, b;
        assert_int_equal(guestconn_stream_open(c, sink_handler, &s1, &a), 0);
        assert_int_equal(guestconn_stream_open(c, sink_handler, &s2, &b), 0);
        assert_int_equal(a, 1);
        assert_true(b > a);

        json_t *req = json_object();
        assert_int_equal(guestconn_call(c, PROTO_STAT, req, 5000, NULL, NULL), -ECONNRESET);
        sink_wait(&s1, &s1.ndead, 1);
        sink_wait(&s2, &s2.ndead, 1);
        assert_false(guestconn_alive(c));
        assert_int_equal(s1.out_len, 10);

        /* everything fails fast now */
        assert_int_equal(guestconn_call(c, PROTO_STAT, req, 5000, NULL, NULL), -ECONNRESET);
        assert_int_equal(guestconn_send_json(c, PROTO_STDIN_CLOSE, a, req), -ECONNRESET);
        uint32_t x;
        assert_int_equal(guestconn_stream_open(c, sink_handler, &s1, &x), -ECONNRESET);
        json_decref(req);

        guestconn_stream_close(c, a);
        guestconn_free(c);
        /* the type-0 notification came exactly once */
        assert_int_equal(s1.ndead, 1);
        assert_int_equal(s2.ndead, 1);
        fake_join(&f);
}

static void *guest_idle(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        guest_drain(g);
        return NULL;
}

/* guestconn_free with open streams: their handlers get type 0. */
static void test_free_fails_streams(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_idle);
        struct sink s = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        uint32_t id;
        assert_int_equal(guestconn_stream_open(c, sink_handler, &s, &id), 0);
        guestconn_free(c);
        assert_int_equal(s.ndead, 1);
        fake_join(&f);
}

/* Floods PINGs on stream 0 and never reads the answers, until the host
 * hangs up. */
static void *guest_ping_flood(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        while (proto_write_frame(g->fd, PROTO_PING, 0, "{}", 2) == 0)
                ;
        return NULL;
}

struct ping_call {
        struct guestconn *c;
        pid_t tid; /* atomic: the thread's, once it runs */
};

static void *call_ping(void *arg) {
        struct ping_call *pc = arg;
        __atomic_store_n(&pc->tid, gettid(), __ATOMIC_RELEASE);
        json_t *req = json_object();
        intptr_t r = guestconn_call(pc->c, PROTO_PING, req, 120000, NULL, NULL);
        json_decref(req);
        return (void *) r;
}

/* The number of the syscall thread tid of this process is blocked in, -1
 * while it runs (/proc/self/task/TID/syscall). */
static long thread_syscall(pid_t tid) {
        char path[64], buf[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int) tid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        bool ok = fgets(buf, sizeof buf, f);
        fclose(f);
        char *end;
        long nr = strtol(buf, &end, 10);
        return ok && end != buf ? nr : -1;
}

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Takes the host's LIST, then floods PINGs and reads nothing more: the
 * node's answers fill the channel and its sends stall. */
static void *guest_takes_one_then_floods(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        struct proto_header h;
        json_t *m = NULL;
        assert_true(guest_recv(g, &h, &m));
        assert_int_equal(h.type, PROTO_LIST);
        json_decref(m);
        while (proto_write_frame(g->fd, PROTO_PING, 0, "{}", 2) == 0)
                ;
        return NULL;
}

/* The PING of an unanswered call never waits on a stalled channel: the
 * call ends at its own timeout, while the channel is still open (a PING
 * that waited would end it only when the stall closes the channel, a
 * minute later). */
static void test_nudge_never_waits_on_a_stalled_channel(void **state) {
        signal(SIGPIPE, SIG_IGN);
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_takes_one_then_floods);
        json_t *req = json_pack("{s:s}", "path", "/");
        assert_int_equal(guestconn_call(c, PROTO_LIST, req, 7000, NULL, NULL), -ETIMEDOUT);
        assert_true(guestconn_alive(c));
        json_decref(req);
        guestconn_free(c);
        fake_join(&f);
        (void) state;
}

/* A guest that stops reading stalls the node's sends to it (for up to the
 * stall timeout, a minute): guestconn_shutdown() fails them at once, so a
 * delete does not wait for it. Shut down only once both are stuck: the
 * reader on the full channel, a caller behind it. */
static void test_shutdown_unblocks_senders(void **state) {
        signal(SIGPIPE, SIG_IGN); /* the flooding fake writes into a closed socket */
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_ping_flood);
        /* the reader answers the PINGs until the guest's side is full */
        uint64_t deadline = mono_ms() + 10000;
        for (;;) {
                struct pollfd p = { .fd = f.host_fd, .events = POLLOUT };
                if (poll(&p, 1, 0) == 0)
                        break;
                if (mono_ms() > deadline)
                        fail_msg("the channel to a guest that reads nothing never filled up (10 s)");
                usleep(1000);
        }
        struct ping_call pc = { .c = c };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, call_ping, &pc), 0);
        /* the call waits for the writer lock the stalled reader holds
         * (futex), or, where it took the lock first, for room on the full
         * channel in the send path's poll (the reader then waits for it):
         * either way it is stuck until the shutdown */
        deadline = mono_ms() + 10000;
        for (;;) {
                pid_t tid = __atomic_load_n(&pc.tid, __ATOMIC_ACQUIRE);
                long nr = tid > 0 ? thread_syscall(tid) : -1;
                if (nr == SYS_futex || nr == SYS_poll || nr == SYS_ppoll)
                        break;
                if (mono_ms() > deadline)
                        fail_msg("the PING call never blocked behind the stalled channel (10 s)");
                usleep(1000);
        }
        uint64_t t0 = mono_ms();
        guestconn_shutdown(c);
        void *ret;
        assert_int_equal(pthread_join(t, &ret), 0);
        uint64_t took = mono_ms() - t0;
        if (took >= 5000)
                fail_msg("the call blocked behind the stalled channel took %llu ms to fail after "
                         "guestconn_shutdown()",
                         (unsigned long long) took);
        assert_true((intptr_t) ret < 0);
        for (int i = 0; i < 500 && guestconn_alive(c); i++)
                usleep(10 * 1000);
        assert_false(guestconn_alive(c));
        guestconn_free(c);
        guestconn_shutdown(NULL);
        fake_join(&f);
}

/* Features come from the HELLO reply; unknown names and non-strings are
 * ignored, and an agent that names none has none. */
static void *guest_handshake_only(void *arg) {
        struct guest *g = arg;
        guest_handshake(g, false);
        guest_drain(g);
        return NULL;
}

static void test_features(void **state) {
        struct fake f;
        struct guestconn *c = fake_open(&f, guest_handshake_only);
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_USER));
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_PROCESSES));
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_WATCH));
        guestconn_free(c);
        fake_join(&f);

        hello_extra = ",\"features\":[\"user\",\"bogus\",7,{\"watch\":1},\"watch\"]";
        c = fake_open(&f, guest_handshake_only);
        hello_extra = "";
        assert_true(guestconn_has(c, GUESTCONN_FEATURE_USER));
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_PROCESSES));
        assert_true(guestconn_has(c, GUESTCONN_FEATURE_WATCH));
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_USER | GUESTCONN_FEATURE_PROCESSES));
        guestconn_free(c);
        fake_join(&f);

        hello_extra = ",\"features\":\"user\"";
        c = fake_open(&f, guest_handshake_only);
        hello_extra = "";
        assert_false(guestconn_has(c, GUESTCONN_FEATURE_USER));
        guestconn_free(c);
        fake_join(&f);
}

/* ---- what the node takes from the guest's replies (guestreply.c) ---- */

/* A reply as the node would parse it, but with "\u0000" allowed: the
 * checks must hold without the parser's help too. */
static json_t *parse(const char *s) {
        json_t *j = json_loads(s, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        return j;
}

/* guestreply_entry() of a JSON text; NULL when refused. */
static json_t *entry_of(const char *s, bool root_ok) {
        json_t *j = parse(s);
        json_t *e = guestreply_entry(j, root_ok);
        json_decref(j);
        return e;
}

#define ENTRY_BASE "\"name\":\"f\",\"size\":1,\"mode\":420,\"mtime\":5"

static void test_reply_entry(void **state) {
        /* an older agent's entry: the five fields */
        json_t *e = entry_of("{" ENTRY_BASE ",\"type\":\"file\"}", false);
        assert_non_null(e);
        assert_int_equal(json_object_size(e), 5);
        json_decref(e);

        /* owner, group and ids; a symlink's target */
        e = entry_of("{" ENTRY_BASE
                     ",\"type\":\"symlink\",\"uid\":1000,\"gid\":4294967295,\"owner\":\"user\","
                     "\"group\":\"1234\",\"symlink_target\":\"../x\",\"extra\":\"dropped\"}",
                     false);
        assert_non_null(e);
        assert_int_equal(json_object_size(e), 10);
        assert_int_equal(json_integer_value(json_object_get(e, "uid")), 1000);
        assert_int_equal(json_integer_value(json_object_get(e, "gid")), 4294967295LL);
        assert_string_equal(json_string_value(json_object_get(e, "owner")), "user");
        assert_string_equal(json_string_value(json_object_get(e, "group")), "1234");
        assert_string_equal(json_string_value(json_object_get(e, "symlink_target")), "../x");
        assert_null(json_object_get(e, "extra"));
        json_decref(e);

        /* a target on anything but a symlink is not passed on */
        e = entry_of("{" ENTRY_BASE ",\"type\":\"file\",\"symlink_target\":\"/etc\"}", false);
        assert_non_null(e);
        assert_null(json_object_get(e, "symlink_target"));
        json_decref(e);

        char big[GUESTREPLY_OWNER_MAX + 128];
        int k = snprintf(big, sizeof big, "{" ENTRY_BASE ",\"type\":\"file\",\"owner\":\"");
        memset(big + k, 'o', GUESTREPLY_OWNER_MAX + 1);
        snprintf(big + k + GUESTREPLY_OWNER_MAX + 1, sizeof big - (size_t) k - GUESTREPLY_OWNER_MAX - 1,
                 "\"}");
        static const char *const bad[] = {
                "{" ENTRY_BASE ",\"type\":\"file\",\"uid\":-1}",
                "{" ENTRY_BASE ",\"type\":\"file\",\"uid\":4294967296}",
                "{" ENTRY_BASE ",\"type\":\"file\",\"gid\":\"0\"}",
                "{" ENTRY_BASE ",\"type\":\"file\",\"owner\":\"\"}",
                "{" ENTRY_BASE ",\"type\":\"file\",\"owner\":7}",
                "{" ENTRY_BASE ",\"type\":\"file\",\"group\":\"a\\u0000b\"}",
                "{" ENTRY_BASE ",\"type\":\"symlink\",\"symlink_target\":\"\"}",
                "{" ENTRY_BASE ",\"type\":\"symlink\",\"symlink_target\":null}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                e = entry_of(bad[i], false);
                if (e)
                        fail_msg("entry %s was taken", bad[i]);
        }
        assert_null(entry_of(big, false));
        big[k + GUESTREPLY_OWNER_MAX] = '"';
        big[k + GUESTREPLY_OWNER_MAX + 1] = '}';
        big[k + GUESTREPLY_OWNER_MAX + 2] = 0;
        e = entry_of(big, false);
        assert_non_null(e);
        json_decref(e);
}

/* guestreply_processes() of {"processes":[entry]}; NULL when refused. */
static json_t *processes_of(const char *entry) {
        char buf[2048];
        snprintf(buf, sizeof buf, "{\"processes\":[%s]}", entry);
        json_t *j = parse(buf);
        json_t *p = guestreply_processes(j);
        json_decref(j);
        return p;
}

#define PROC_BASE "\"argv\":[\"sh\",\"-c\",\"x\"],\"cwd\":\"/tmp\",\"env\":{\"A\":\"B\"}"

static void test_reply_processes(void **state) {
        json_t *p = processes_of("{\"pid\":42," PROC_BASE ",\"tag\":\"t\",\"pty\":true,\"attached\":false,"
                                 "\"truncated\":true,\"secret\":1}");
        assert_non_null(p);
        json_t *e = json_array_get(json_object_get(p, "processes"), 0);
        assert_int_equal(json_integer_value(json_object_get(e, "pid")), 42);
        assert_int_equal(json_array_size(json_object_get(e, "argv")), 3);
        assert_string_equal(json_string_value(json_object_get(e, "cwd")), "/tmp");
        assert_string_equal(json_string_value(json_object_get(json_object_get(e, "env"), "A")), "B");
        assert_string_equal(json_string_value(json_object_get(e, "tag")), "t");
        assert_true(json_is_true(json_object_get(e, "pty")));
        assert_true(json_is_false(json_object_get(e, "attached")));
        assert_true(json_is_true(json_object_get(e, "truncated")));
        assert_null(json_object_get(e, "secret"));
        json_decref(p);

        /* booleans default to false; truncated only when true; no tag */
        p = processes_of("{\"pid\":1," PROC_BASE ",\"truncated\":false}");
        assert_non_null(p);
        e = json_array_get(json_object_get(p, "processes"), 0);
        assert_true(json_is_false(json_object_get(e, "pty")));
        assert_true(json_is_false(json_object_get(e, "attached")));
        assert_null(json_object_get(e, "truncated"));
        assert_null(json_object_get(e, "tag"));
        json_decref(p);

        p = processes_of("");
        assert_non_null(p);
        assert_int_equal(json_array_size(json_object_get(p, "processes")), 0);
        json_decref(p);

        static const char *const bad[] = {
                "{\"pid\":0," PROC_BASE "}",
                "{\"pid\":4194305," PROC_BASE "}",
                "{\"pid\":\"1\"," PROC_BASE "}",
                "{" PROC_BASE "}",
                "{\"pid\":1,\"argv\":[],\"cwd\":\"/\",\"env\":{}}",
                "{\"pid\":1,\"argv\":[1],\"cwd\":\"/\",\"env\":{}}",
                "{\"pid\":1,\"argv\":[\"a\\u0000\"],\"cwd\":\"/\",\"env\":{}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"tmp\",\"env\":{}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"/a/../b\",\"env\":{}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"env\":{}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"/\"}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"/\",\"env\":{\"A=B\":\"x\"}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"/\",\"env\":{\"\":\"x\"}}",
                "{\"pid\":1,\"argv\":[\"sh\"],\"cwd\":\"/\",\"env\":{\"A\":1}}",
                "{\"pid\":1," PROC_BASE ",\"tag\":7}",
                "{\"pid\":1," PROC_BASE ",\"pty\":1}",
                "{\"pid\":1," PROC_BASE ",\"attached\":\"yes\"}",
                "{\"pid\":1," PROC_BASE "},{\"pid\":1," PROC_BASE "}",
                "7",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                p = processes_of(bad[i]);
                if (p)
                        fail_msg("process entry %s was taken", bad[i]);
        }
        /* a tag of 256 bytes is one, 257 is not */
        char entry[1024];
        for (size_t extra = 0; extra < 2; extra++) {
                int k = snprintf(entry, sizeof entry, "{\"pid\":1," PROC_BASE ",\"tag\":\"");
                memset(entry + k, 't', 256 + extra);
                snprintf(entry + k + 256 + extra, sizeof entry - (size_t) k - 256 - extra, "\"}");
                p = processes_of(entry);
                assert_true(extra ? p == NULL : p != NULL);
                json_decref(p);
        }

        /* at most 256 entries */
        json_t *many = json_pack("{s:[]}", "processes");
        assert_non_null(many);
        for (int i = 1; i <= 257; i++)
                json_array_append_new(
                        json_object_get(many, "processes"),
                        json_pack("{s:i, s:[s], s:s, s:{}}", "pid", i, "argv", "x", "cwd", "/", "env"));
        assert_null(guestreply_processes(many));
        json_array_remove(json_object_get(many, "processes"), 256);
        p = guestreply_processes(many);
        assert_non_null(p);
        assert_int_equal(json_array_size(json_object_get(p, "processes")), 256);
        json_decref(p);
        json_decref(many);
        json_t *none = parse("{}");
        assert_null(guestreply_processes(none));
        json_decref(none);
}

static json_t *event_of(const char *s) {
        json_t *j = parse(s);
        json_t *e = guestreply_watch_event(j);
        json_decref(j);
        return e;
}

static void test_reply_watch_event(void **state) {
        static const char *const types[] = { "create", "write", "remove", "rename", "chmod" };
        char buf[256];
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
                snprintf(buf, sizeof buf, "{\"name\":\"sub/x.txt\",\"type\":\"%s\",\"entry\":{}}", types[i]);
                json_t *e = event_of(buf);
                assert_non_null(e);
                assert_int_equal(json_object_size(e), 2);
                assert_string_equal(json_string_value(json_object_get(e, "name")), "sub/x.txt");
                assert_string_equal(json_string_value(json_object_get(e, "type")), types[i]);
                json_decref(e);
        }
        json_t *e = event_of("{\"type\":\"overflow\",\"name\":\"/etc/passwd\"}");
        assert_non_null(e);
        assert_int_equal(json_object_size(e), 1);
        json_decref(e);
        e = event_of("{\"name\":\"..a/b..\",\"type\":\"create\"}");
        assert_non_null(e);
        json_decref(e);

        static const char *const bad[] = {
                "{\"name\":\"x\",\"type\":\"delete\"}",
                "{\"name\":\"x\"}",
                "{\"name\":\"x\",\"type\":1}",
                "{\"type\":\"create\"}",
                "{\"name\":\"\",\"type\":\"create\"}",
                "{\"name\":\"/x\",\"type\":\"create\"}",
                "{\"name\":\"x/\",\"type\":\"create\"}",
                "{\"name\":\"a//b\",\"type\":\"create\"}",
                "{\"name\":\".\",\"type\":\"create\"}",
                "{\"name\":\"..\",\"type\":\"create\"}",
                "{\"name\":\"a/../b\",\"type\":\"create\"}",
                "{\"name\":\"./a\",\"type\":\"create\"}",
                "{\"name\":\"a\\u0000\",\"type\":\"create\"}",
                "{\"name\":7,\"type\":\"create\"}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                e = event_of(bad[i]);
                if (e)
                        fail_msg("event %s was taken", bad[i]);
        }
        assert_null(guestreply_watch_event(NULL));
}

/* METRICS from a guest the node cannot trust: numbers of the right kind,
 * used never above total, a percentage within 0..100. */
static void test_reply_metrics(void **state) {
        json_t *j = parse("{\"cpu_count\":2,\"cpu_used_pct\":12.5,\"mem_total\":1000,\"mem_used\":400,"
                          "\"mem_cache\":100,\"disk_total\":5000,\"disk_used\":0,\"extra\":\"x\"}");
        json_t *m = guestreply_metrics(j);
        assert_non_null(m);
        assert_int_equal(json_object_size(m), 7); /* rebuilt: nothing else passes */
        assert_true(json_number_value(json_object_get(m, "cpu_used_pct")) == 12.5);
        assert_int_equal(json_integer_value(json_object_get(m, "mem_used")), 400);
        json_decref(m);
        json_decref(j);
        static const char *const bad[] = {
                "{\"cpu_count\":0,\"cpu_used_pct\":1,\"mem_total\":1,\"mem_used\":1,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":101,\"mem_total\":1,\"mem_used\":1,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":-1,\"mem_total\":1,\"mem_used\":1,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":\"5\",\"mem_total\":1,\"mem_used\":1,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":1,\"mem_total\":1,\"mem_used\":2,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":1,\"mem_total\":1,\"mem_used\":1,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":9}",
                "{\"cpu_count\":1,\"cpu_used_pct\":1,\"mem_total\":-1,\"mem_used\":0,\"mem_cache\":0,\"disk_total\":1,\"disk_used\":1}",
                "{\"cpu_count\":1,\"cpu_used_pct\":1,\"mem_total\":1,\"mem_used\":1,\"disk_total\":1,\"disk_used\":1}",
                "{}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                j = parse(bad[i]);
                m = guestreply_metrics(j);
                if (m)
                        fail_msg("metrics %s were taken", bad[i]);
                json_decref(j);
        }
        assert_null(guestreply_metrics(NULL));
}

static void test_reply_adopt(void **state) {
        bool pty = false;
        uint64_t dropped = 7;
        json_t *j = parse("{\"pid\":42,\"pty\":true,\"dropped\":1000}");
        assert_int_equal(guestreply_adopt(j, 42, &pty, &dropped), 0);
        assert_true(pty);
        assert_int_equal(dropped, 1000);
        assert_int_equal(guestreply_adopt(j, 43, &pty, &dropped), -EBADMSG);
        json_decref(j);
        j = parse("{\"pid\":42}");
        assert_int_equal(guestreply_adopt(j, 42, &pty, &dropped), 0);
        assert_false(pty);
        assert_int_equal(dropped, 0);
        json_decref(j);
        static const char *const bad[] = { "{}", "{\"pid\":\"42\"}", "{\"pid\":42,\"pty\":1}",
                                           "{\"pid\":42,\"dropped\":-1}", "{\"pid\":42,\"dropped\":\"1\"}" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                j = parse(bad[i]);
                pty = true;
                dropped = 9;
                assert_int_equal(guestreply_adopt(j, 42, &pty, &dropped), -EBADMSG);
                assert_true(pty);
                assert_int_equal(dropped, 9);
                json_decref(j);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_shutdown_unblocks_senders),
                cmocka_unit_test(test_handshake_and_calls),
                cmocka_unit_test(test_unanswered_call_is_nudged),
                cmocka_unit_test(test_nudge_never_waits_on_a_stalled_channel),
                cmocka_unit_test(test_handshake_failures),
                cmocka_unit_test(test_stream_exec),
                cmocka_unit_test(test_channel_death),
                cmocka_unit_test(test_free_fails_streams),
                cmocka_unit_test(test_features),
                cmocka_unit_test(test_reply_entry),
                cmocka_unit_test(test_reply_processes),
                cmocka_unit_test(test_reply_watch_event),
                cmocka_unit_test(test_reply_adopt),
                cmocka_unit_test(test_reply_metrics),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
