/* SPDX-License-Identifier: Apache-2.0 */
#include "guestconn.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "guestreply.h"
#include "log.h"
#include "macros.h"
#include "nodemetrics.h"
#include "nodeutil.h"
#include "proto.h"
#include "util.h"

#define NONCE_BYTES 16
/* How much the agent's leftovers from an earlier connection we are willing
 * to wade through before its HELLO reply: one maximal frame. */
#define HANDSHAKE_BUF_MAX (PROTO_HEADER_SIZE + PROTO_MAX_PAYLOAD)
/* A guest that takes no byte of a frame for this long is treated as hung. */
#define SEND_STALL_MS 60000
/* A call unanswered this long sends the guest one PING on a stream of its
 * own: new bytes on the channel are a new notification both ways, so a
 * reply (or a request) whose virtio notification was lost, as suspected
 * after a pause or a restore under nested KVM, is picked up with it rather
 * than waiting out the call's timeout. Harmless to a call that is merely
 * slow: the guest answers the PING, which nobody waits for. */
#define NUDGE_MS 5000

/* A guestconn_call() waiting for RESULT/ERROR on a stream. Lives on the
 * caller's stack; the reader touches it only under g->lock while it is
 * linked from a stream entry. */
struct call {
        bool done;
        int error;           /* 0 for RESULT, else negative errno */
        json_t *result;      /* RESULT payload */
        char *message;       /* ERROR message */
};

struct stream {
        uint32_t id;
        guestconn_handler_fn handler; /* NULL for a stream that only carries a call */
        void *userdata;
        struct call *call;  /* the next RESULT/ERROR on this stream goes here */
        bool dead_notified; /* handler already got its type-0 call */
};

struct guestconn {
        int fd;
        char *ctx;
        struct proto_reader reader;

        pthread_t thread;
        bool thread_started;

        pthread_mutex_t lock; /* everything below */
        pthread_cond_t cond;  /* call completion, dispatch end */
        bool dead;
        uint32_t next_stream;
        struct stream *streams;
        size_t nstreams, cap;
        uint32_t dispatching; /* stream whose handler runs right now, 0 = none */

        pthread_mutex_t wlock; /* one frame at a time on the wire */

        /* from the HELLO reply, and an UPGRADE's RESULT: features under
         * lock's protection, read atomically */
        unsigned features;               /* GUESTCONN_FEATURE_* */
        char agent[GUESTCONN_AGENT_MAX]; /* "airlock-guest 0.2.0"; "" when it did not say */
        uint64_t used_ns; /* monotonic: the last frame that is use (is_use()); atomic */
        bool ping_failed; /* reader only: an answer to a guest PING could not be sent */
};

/* Frames that are someone using the sandbox (for idle suspend): not the
 * node's own housekeeping (PING, SYNC, FREEZE/THAW, HELLO, IDENTITY) and
 * not bare replies. */
static bool is_use(uint8_t type) {
        switch (type) {
        case PROTO_HELLO:
        case PROTO_PING:
        case PROTO_SYNC:
        case PROTO_FREEZE:
        case PROTO_THAW:
        case PROTO_IDENTITY:
        case PROTO_RESULT:
        case PROTO_ERROR:
        case PROTO_WATCH_EVENT: /* what changed the files was use, not the watch */
                return false;
        default:
                return true;
        }
}

/* The features of a HELLO reply that the node knows; others are ignored. */
static unsigned reply_features(json_t *reply) {
        static const struct {
                const char *name;
                unsigned bit;
        } known[] = {
                {"user", GUESTCONN_FEATURE_USER},
                {"processes", GUESTCONN_FEATURE_PROCESSES},
                {"watch", GUESTCONN_FEATURE_WATCH},
                {"metrics", GUESTCONN_FEATURE_METRICS},
                {"files_user", GUESTCONN_FEATURE_FILES_USER},
                {"upgrade", GUESTCONN_FEATURE_UPGRADE},
                {"volumes", GUESTCONN_FEATURE_VOLUMES},
                {"files_root", GUESTCONN_FEATURE_FILES_ROOT},
        };
        json_t *list = json_object_get(reply, "features"), *v;
        unsigned bits = 0;
        size_t i;
        json_array_foreach(list, i, v) {
                for (size_t k = 0; k < ARRAY_SIZE(known); k++)
                        if (json_is_string(v) && strcmp(json_string_value(v), known[k].name) == 0)
                                bits |= known[k].bit;
        }
        return bits;
}

static int send_frame(struct guestconn *g, uint8_t type, uint32_t stream, const void *payload, size_t len);

/* Takes the agent's name and features from a HELLO reply or an UPGRADE's
 * RESULT (a name that is no short printable string is not kept). */
static void set_agent(struct guestconn *g, json_t *reply) {
        const char *name = json_string_value(json_object_get(reply, "agent"));
        bool printable = name && strlen(name) < GUESTCONN_AGENT_MAX;
        for (const char *p = name; printable && *p; p++)
                printable = *p >= 0x20 && *p < 0x7f;
        pthread_mutex_lock(&g->lock);
        snprintf(g->agent, sizeof g->agent, "%s", printable ? name : "");
        __atomic_store_n(&g->features, reply_features(reply), __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g->lock);
}

/* ---- stream table (callers hold g->lock) ---- */

static struct stream *stream_find(struct guestconn *g, uint32_t id) {
        for (size_t i = 0; i < g->nstreams; i++)
                if (g->streams[i].id == id)
                        return &g->streams[i];
        return NULL;
}

static void stream_remove(struct guestconn *g, struct stream *s) {
        size_t i = (size_t) (s - g->streams);
        g->streams[i] = g->streams[--g->nstreams];
}

/* Picks the next free non-zero id and appends an entry for it. */
static int stream_add(struct guestconn *g, guestconn_handler_fn handler, void *userdata, struct stream **ret) {
        if (g->nstreams == g->cap) {
                size_t ncap = g->cap ? g->cap * 2 : 16;
                struct stream *n = realloc(g->streams, ncap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                g->streams = n;
                g->cap = ncap;
        }
        uint32_t id;
        do {
                id = g->next_stream++;
                if (g->next_stream == 0) /* wrapped: 0 is the connection stream */
                        g->next_stream = 1;
        } while (id == 0 || stream_find(g, id));

        struct stream *s = &g->streams[g->nstreams++];
        *s = (struct stream){ .id = id, .handler = handler, .userdata = userdata };
        *ret = s;
        return 0;
}

static void call_finish(struct guestconn *g, struct call *c, int error, json_t *result, char *message) {
        c->done = true;
        c->error = error;
        c->result = result;
        c->message = message;
        pthread_cond_broadcast(&g->cond);
}

/* ---- reader thread ---- */

/* Turns a RESULT/ERROR payload into a call outcome (under g->lock). */
static void complete_call(struct guestconn *g, struct call *c, uint8_t type, const uint8_t *payload, size_t len) {
        int error = 0;
        json_t *result = NULL;
        char *message = NULL;
        if (guestreply_parse(type, payload, len, &error, &result, &message) < 0) {
                log_emit(LOG_LEVEL_WARN, g->ctx, "guest sent a malformed %s payload", proto_type_name(type));
                nodemetrics_guest_error("malformed");
                error = -EBADMSG;
        }
        call_finish(g, c, error, result, message);
}

/* Runs handler for stream s outside the lock, with the dispatch marker set so
 * that guestconn_stream_close() can wait for it. Called and returns with
 * g->lock held; s is invalid afterwards. */
static void run_handler(struct guestconn *g, struct stream *s, uint8_t type, const uint8_t *payload, size_t len) {
        guestconn_handler_fn fn = s->handler;
        void *ud = s->userdata;
        g->dispatching = s->id;
        pthread_mutex_unlock(&g->lock);
        fn(ud, type, payload, len);
        pthread_mutex_lock(&g->lock);
        g->dispatching = 0;
        pthread_cond_broadcast(&g->cond);
}

static void dispatch(struct guestconn *g, const struct proto_header *h, const uint8_t *payload) {
        if (h->stream == 0) {
                /* Connection-level frames. The agent may probe us too. */
                if (h->type == PROTO_PING && !g->ping_failed) {
                        int r = send_frame(g, PROTO_RESULT, 0, "{}", 2);
                        if (r < 0) {
                                /* once: a guest flooding PINGs it never reads
                                 * the answers of must not make a log line of
                                 * each one still buffered; the channel is
                                 * of no use any more */
                                g->ping_failed = true;
                                log_emit(LOG_LEVEL_WARN, g->ctx, "failed to answer guest ping: %s; closing the channel",
                                         strerror(-r));
                                shutdown(g->fd, SHUT_RDWR);
                        }
                } else if (h->type != PROTO_PING)
                        log_emit(LOG_LEVEL_DEBUG, g->ctx, "ignoring %s frame on stream 0", proto_type_name(h->type));
                return;
        }

        pthread_mutex_lock(&g->lock);
        struct stream *s = stream_find(g, h->stream);
        if (!s) {
                /* Normal after a stream was closed or a call timed out. */
                log_emit(LOG_LEVEL_DEBUG, g->ctx, "dropping %s frame for unknown stream %u",
                         proto_type_name(h->type), h->stream);
        } else if (s->call && (h->type == PROTO_RESULT || h->type == PROTO_ERROR)) {
                struct call *c = s->call;
                s->call = NULL;
                complete_call(g, c, h->type, payload, h->length);
        } else if (s->handler) {
                run_handler(g, s, h->type, payload, h->length);
        } else {
                log_emit(LOG_LEVEL_DEBUG, g->ctx, "dropping %s frame on call stream %u", proto_type_name(h->type),
                         h->stream);
        }
        pthread_mutex_unlock(&g->lock);
}

/* The channel is gone: fail waiters, tell every handler once. */
static void mark_dead(struct guestconn *g) {
        pthread_mutex_lock(&g->lock);
        g->dead = true;
        for (size_t i = 0; i < g->nstreams; i++)
                if (g->streams[i].call) {
                        call_finish(g, g->streams[i].call, -ECONNRESET, NULL, NULL);
                        g->streams[i].call = NULL;
                }
        for (;;) {
                /* Rescan after every handler: the table may change while it
                 * runs (streams closed from other threads or the handler). */
                struct stream *s = NULL;
                for (size_t i = 0; i < g->nstreams && !s; i++)
                        if (g->streams[i].handler && !g->streams[i].dead_notified)
                                s = &g->streams[i];
                if (!s)
                        break;
                s->dead_notified = true;
                run_handler(g, s, 0, NULL, 0);
        }
        pthread_mutex_unlock(&g->lock);
}

static void *reader_main(void *arg) {
        struct guestconn *g = arg;
        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                int k = proto_reader_read(&g->reader, g->fd, &h, &payload);
                if (k == 0) {
                        log_emit(LOG_LEVEL_INFO, g->ctx, "guest channel closed");
                        break;
                }
                if (k < 0) {
                        log_errno(LOG_LEVEL_WARN, k, g->ctx, "guest channel failed: %m");
                        nodemetrics_guest_error("failed");
                        break;
                }
                if (is_use(h.type))
                        __atomic_store_n(&g->used_ns, now_monotonic_ns(), __ATOMIC_RELAXED);
                dispatch(g, &h, payload);
                proto_reader_pop(&g->reader, &h);
        }
        mark_dead(g);
        return NULL;
}

/* ---- writing ---- */

/* One whole frame with sendmsg(MSG_NOSIGNAL): a guest channel that went away
 * must give -EPIPE, not kill the node with SIGPIPE. The guest is untrusted
 * and may stop reading: a write that makes no progress for SEND_STALL_MS
 * fails with -ETIMEDOUT and shuts the channel down (a frame cut short
 * leaves no usable stream anyway), so no node thread waits on it forever. */
/* Sends one frame; with try_only, only when that needs no wait: the
 * writer lock free and room for the first bytes at once (-EAGAIN when
 * not; a frame begun is always finished). */
static int send_frame_how(struct guestconn *g, uint8_t type, uint32_t stream, const void *payload, size_t len,
                          bool try_only) {
        if (len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;
        uint8_t hdr[PROTO_HEADER_SIZE];
        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION, .type = type, .stream = stream,
                                                     .length = (uint32_t) len },
                            hdr);
        struct iovec iov[2] = { { hdr, sizeof hdr }, { (void *) payload, len } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1 };
        int r = 0;

        if (!try_only)
                pthread_mutex_lock(&g->wlock);
        else if (pthread_mutex_trylock(&g->wlock) != 0)
                return -EAGAIN;
        if (is_use(type))
                __atomic_store_n(&g->used_ns, now_monotonic_ns(), __ATOMIC_RELAXED);
        bool begun = false;
        while (mh.msg_iovlen > 0) {
                ssize_t k = sendmsg(g->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                r = negative_errno();
                                break;
                        }
                        if (try_only && !begun) {
                                r = -EAGAIN;
                                break;
                        }
                        struct pollfd p = { .fd = g->fd, .events = POLLOUT };
                        int n = poll(&p, 1, SEND_STALL_MS);
                        if (n < 0 && errno != EINTR) {
                                r = negative_errno();
                                break;
                        }
                        if (n == 0) {
                                log_emit(LOG_LEVEL_WARN, g->ctx,
                                         "guest accepted nothing for %d ms: closing the channel", SEND_STALL_MS);
                                nodemetrics_guest_error("stalled");
                                shutdown(g->fd, SHUT_RDWR); /* the reader sees EOF and fails every stream */
                                r = -ETIMEDOUT;
                                break;
                        }
                        continue;
                }
                begun = true;
                size_t adv = (size_t) k;
                while (mh.msg_iovlen > 0 && adv >= mh.msg_iov[0].iov_len) {
                        adv -= mh.msg_iov[0].iov_len;
                        mh.msg_iov++;
                        mh.msg_iovlen--;
                }
                if (mh.msg_iovlen > 0) {
                        mh.msg_iov[0].iov_base = (uint8_t *) mh.msg_iov[0].iov_base + adv;
                        mh.msg_iov[0].iov_len -= adv;
                }
        }
        pthread_mutex_unlock(&g->wlock);
        return r;
}

static int send_frame(struct guestconn *g, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        return send_frame_how(g, type, stream, payload, len, false);
}

int guestconn_send(struct guestconn *g, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        if (!guestconn_alive(g))
                return -ECONNRESET;
        return send_frame(g, type, stream, payload, len);
}

int guestconn_send_json(struct guestconn *g, uint8_t type, uint32_t stream, json_t *obj) {
        if (!obj || !json_is_object(obj))
                return -EINVAL;
        _cleanup_free_ char *text = json_dumps(obj, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        return guestconn_send(g, type, stream, text, strlen(text));
}

/* ---- handshake ---- */

static int handshake(struct guestconn *g, int timeout_ms) {
        uint8_t raw[NONCE_BYTES];
        char nonce[2 * NONCE_BYTES + 1];
        int r = random_bytes(raw, sizeof raw);
        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof raw; i++)
                snprintf(nonce + 2 * i, 3, "%02x", raw[i]);

        json_t *hello = json_pack("{s:s, s:i}", "nonce", nonce, "version", PROTO_VERSION);
        if (!hello)
                return -ENOMEM;
        r = guestconn_send_json(g, PROTO_HELLO, 0, hello);
        json_decref(hello);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, g->ctx, "failed to send HELLO: %m");

        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ull;
        size_t cap = 64u << 10, len = 0;
        uint64_t dropped = 0;
        _cleanup_free_ uint8_t *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;

        for (;;) {
                size_t start, end, keep;
                json_t *reply = NULL;
                if (guestreply_find_hello(buf, len, nonce, &start, &end, &reply, &keep) > 0) {
                        json_t *ver = json_object_get(reply, "version");
                        if (!json_is_integer(ver) || json_integer_value(ver) != PROTO_VERSION) {
                                json_decref(reply);
                                return log_errno(LOG_LEVEL_ERROR, -EPROTONOSUPPORT, g->ctx,
                                                 "guest agent speaks another protocol version");
                        }
                        set_agent(g, reply);
                        log_emit(LOG_LEVEL_INFO, g->ctx,
                                 "guest channel up: agent %s, boot_id %s, features 0x%x, "
                                 "%llu stale bytes skipped",
                                 json_string_value(json_object_get(reply, "agent")) ?: "?",
                                 json_string_value(json_object_get(reply, "boot_id")) ?: "?", g->features,
                                 (unsigned long long) (dropped + start));
                        json_decref(reply);
                        /* Whatever followed the reply is the first real traffic. */
                        return proto_reader_feed(&g->reader, buf + end, len - end);
                }
                if (keep > 0) {
                        memmove(buf, buf + keep, len - keep);
                        len -= keep;
                        dropped += keep;
                }
                if (len == cap) {
                        if (cap >= HANDSHAKE_BUF_MAX) {
                                /* A stale header claiming a huge length pins the
                                 * buffer: give up on that candidate. */
                                memmove(buf, buf + 1, --len);
                                dropped++;
                        } else {
                                size_t ncap = MIN(cap * 2, (size_t) HANDSHAKE_BUF_MAX);
                                uint8_t *nb = realloc(buf, ncap);
                                if (!nb)
                                        return -ENOMEM;
                                buf = nb;
                                cap = ncap;
                        }
                }

                uint64_t now = now_monotonic_ns();
                if (now >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, g->ctx,
                                         "no HELLO reply from the guest agent within %d ms", timeout_ms);
                struct pollfd p = { .fd = g->fd, .events = POLLIN };
                int k = poll(&p, 1, (int) MIN((deadline - now + 999999) / 1000000, (uint64_t) INT32_MAX));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        continue;
                ssize_t n = recv(g->fd, buf + len, cap - len, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return log_errno(LOG_LEVEL_ERROR, negative_errno(), g->ctx,
                                         "reading the guest channel failed: %m");
                }
                if (n == 0)
                        return log_errno(LOG_LEVEL_ERROR, -ECONNRESET, g->ctx,
                                         "guest channel closed during the handshake");
                len += (size_t) n;
        }
}

/* ---- life cycle ---- */

static void guestconn_release(struct guestconn *g) {
        if (g->fd >= 0)
                close(g->fd);
        proto_reader_release(&g->reader);
        pthread_mutex_destroy(&g->lock);
        pthread_mutex_destroy(&g->wlock);
        pthread_cond_destroy(&g->cond);
        free(g->streams);
        free(g->ctx);
        free(g);
}

int guestconn_open(int fd, const char *ctx, int timeout_ms, struct guestconn **ret) {
        _cleanup_close_ int owned = fd;
        if (fd < 0)
                return -EBADF;

        struct guestconn *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->fd = TAKE_FD(owned);
        g->next_stream = 1;
        g->ctx = strdup(ctx ?: "");
        node_cond_init(&g->cond);
        pthread_mutex_init(&g->lock, NULL);
        pthread_mutex_init(&g->wlock, NULL);
        int r = proto_reader_init(&g->reader);
        if (r < 0 || !g->ctx) {
                guestconn_release(g);
                return r < 0 ? r : -ENOMEM;
        }

        r = handshake(g, timeout_ms);
        if (r < 0) {
                nodemetrics_guest_error("handshake");
                guestconn_release(g);
                return r;
        }

        /* The reader must not take process signals (the node may handle them
         * with signalfd, which requires them blocked in every thread). */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&g->thread, NULL, reader_main, g);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                guestconn_release(g);
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to start the guest channel reader: %m");
        }
        g->thread_started = true;
        *ret = g;
        return 0;
}

void guestconn_free(struct guestconn *g) {
        if (!g)
                return;
        if (g->thread_started) {
                /* Wakes the reader (read returns 0) and any writer blocked on
                 * backpressure (EPIPE); the reader then fails every stream. */
                shutdown(g->fd, SHUT_RDWR);
                pthread_join(g->thread, NULL);
        }
        guestconn_release(g);
}

void guestconn_shutdown(struct guestconn *g) {
        if (g)
                shutdown(g->fd, SHUT_RDWR);
}

bool guestconn_alive(struct guestconn *g) {
        pthread_mutex_lock(&g->lock);
        bool alive = !g->dead;
        pthread_mutex_unlock(&g->lock);
        return alive;
}

int guestconn_stream_open(struct guestconn *g, guestconn_handler_fn handler, void *userdata, uint32_t *ret_stream) {
        if (!handler)
                return -EINVAL;
        pthread_mutex_lock(&g->lock);
        int r = -ECONNRESET;
        struct stream *s;
        if (!g->dead)
                r = stream_add(g, handler, userdata, &s);
        if (r >= 0)
                *ret_stream = s->id;
        pthread_mutex_unlock(&g->lock);
        return r;
}

void guestconn_stream_close(struct guestconn *g, uint32_t stream) {
        if (stream == 0) /* never a stream of ours; 0 also means "no dispatch" below */
                return;
        pthread_mutex_lock(&g->lock);
        struct stream *s = stream_find(g, stream);
        if (s) {
                if (s->call)
                        call_finish(g, s->call, -ECANCELED, NULL, NULL);
                stream_remove(g, s);
        }
        /* The handler may be running right now on the reader thread: wait
         * for it, unless we are that handler closing its own stream. */
        if (g->thread_started && !pthread_equal(pthread_self(), g->thread))
                while (g->dispatching == stream)
                        pthread_cond_wait(&g->cond, &g->lock);
        pthread_mutex_unlock(&g->lock);
}

/* Waits for c under g->lock until done or deadline. */
static void call_wait(struct guestconn *g, struct call *c, int timeout_ms) {
        struct timespec ts;
        node_deadline_after_ms(&ts, timeout_ms);
        while (!c->done)
                if (pthread_cond_timedwait(&g->cond, &g->lock, &ts) == ETIMEDOUT)
                        break;
}

/* Sends one PING on a stream of its own, which nobody waits on, when that
 * needs no wait; called and returns with g->lock held. Its stream id, or 0
 * when none was sent. */
static uint32_t nudge(struct guestconn *g) {
        struct stream *n;
        if (stream_add(g, NULL, NULL, &n) < 0)
                return 0;
        uint32_t id = n->id;
        pthread_mutex_unlock(&g->lock);
        /* never a wait: a channel another write holds, or one the guest
         * takes nothing from, has bytes on the way already */
        int r = send_frame_how(g, PROTO_PING, id, "{}", 2, true);
        pthread_mutex_lock(&g->lock);
        if (r < 0 && (n = stream_find(g, id)))
                stream_remove(g, n);
        return r < 0 ? 0 : id;
}

static int call_on(struct guestconn *g, uint32_t stream, bool fresh, uint8_t type, json_t *req, int timeout_ms,
                   json_t **ret_result, char **ret_message) {
        if (!req || !json_is_object(req))
                return -EINVAL;
        _cleanup_free_ char *text = json_dumps(req, JSON_COMPACT);
        if (!text)
                return -ENOMEM;

        struct call c = { 0 };
        struct stream *s;
        int r = 0;
        pthread_mutex_lock(&g->lock);
        if (g->dead)
                r = -ECONNRESET;
        else if (fresh)
                r = stream_add(g, NULL, NULL, &s);
        else if (!(s = stream_find(g, stream)))
                r = -ENOENT;
        else if (s->call)
                r = -EBUSY;
        if (r >= 0) {
                s->call = &c;
                stream = s->id;
        }
        pthread_mutex_unlock(&g->lock);
        if (r < 0)
                return r;

        /* Registered before sending, so the reply cannot overtake us. */
        uint64_t t0 = now_monotonic_ns();
        r = send_frame(g, type, stream, text, strlen(text));

        uint32_t nudged = 0;
        pthread_mutex_lock(&g->lock);
        if (r >= 0) {
                timeout_ms = MAX(timeout_ms, 0);
                call_wait(g, &c, MIN(timeout_ms, NUDGE_MS));
                if (!c.done && !g->dead && timeout_ms > NUDGE_MS) {
                        nudged = nudge(g);
                        call_wait(g, &c, timeout_ms - NUDGE_MS);
                }
        }
        s = stream_find(g, stream);
        if (s && s->call == &c)
                s->call = NULL;
        if (fresh && s)
                stream_remove(g, s);
        if (nudged && (s = stream_find(g, nudged)))
                stream_remove(g, s); /* a PING's reply after this is dropped, as a timed-out call's is */
        pthread_mutex_unlock(&g->lock);
        if (nudged && c.done)
                log_emit(LOG_LEVEL_INFO, g->ctx, "the guest answered %s after %llu ms (sent a PING at %d ms)",
                         proto_type_name(type), (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                         NUDGE_MS);

        if (r < 0)
                return log_errno(LOG_LEVEL_WARN, r, g->ctx, "failed to send %s: %m", proto_type_name(type));
        if (!c.done)
                return -ETIMEDOUT;
        if (c.error < 0) {
                if (ret_message && c.message)
                        *ret_message = c.message;
                else
                        free(c.message);
                return c.error;
        }
        if (ret_result)
                *ret_result = c.result;
        else
                json_decref(c.result);
        return 0;
}

int guestconn_call(struct guestconn *g, uint8_t type, json_t *req, int timeout_ms, json_t **ret_result,
                   char **ret_message) {
        return call_on(g, 0, true, type, req, timeout_ms, ret_result, ret_message);
}

int guestconn_call_stream(struct guestconn *g, uint32_t stream, uint8_t type, json_t *req, int timeout_ms,
                          json_t **ret_result, char **ret_message) {
        return call_on(g, stream, false, type, req, timeout_ms, ret_result, ret_message);
}

void guestconn_agent(struct guestconn *g, char buf[static GUESTCONN_AGENT_MAX]) {
        pthread_mutex_lock(&g->lock);
        memcpy(buf, g->agent, GUESTCONN_AGENT_MAX);
        pthread_mutex_unlock(&g->lock);
}

void guestconn_agent_replaced(struct guestconn *g, json_t *result) {
        set_agent(g, result);
}

size_t guestconn_calls_in_flight(struct guestconn *g) {
        size_t n = 0;
        pthread_mutex_lock(&g->lock);
        for (size_t i = 0; i < g->nstreams; i++)
                n += g->streams[i].call != NULL;
        pthread_mutex_unlock(&g->lock);
        return n;
}

bool guestconn_has(struct guestconn *g, unsigned feature) {
        return (__atomic_load_n(&g->features, __ATOMIC_ACQUIRE) & feature) == feature;
}

void guestconn_used_restore(struct guestconn *g, uint64_t used_ns) {
        __atomic_store_n(&g->used_ns, used_ns, __ATOMIC_RELAXED);
}

uint64_t guestconn_used_ns(struct guestconn *g) {
        return __atomic_load_n(&g->used_ns, __ATOMIC_RELAXED);
}

int guestconn_ping(struct guestconn *g, int timeout_ms) {
        json_t *req = json_object();
        if (!req)
                return -ENOMEM;
        int r = guestconn_call(g, PROTO_PING, req, timeout_ms, NULL, NULL);
        json_decref(req);
        return r;
}
