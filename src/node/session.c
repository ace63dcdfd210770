/* SPDX-License-Identifier: Apache-2.0 */
#include "session.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "conn.h"
#include "guestconn.h"
#include "guestreply.h"
#include "log.h"
#include "nodeutil.h"
#include "proto.h"
#include "sandbox.h"
#include "util.h"

#define EXEC_START_MS 30000
/* Bounds the chunk list even when output arrives a byte at a time. */
#define MAX_CHUNKS 4096
/* Merged chunks grow up to this size. */
#define CHUNK_MAX PROTO_DATA_CHUNK
/* An attached client that says nothing is checked for hang-up this often. */
#define ATTACH_POLL_MS 1000

struct chunk {
        struct chunk *next;
        uint64_t start; /* offset of data[0] in the session's whole output */
        size_t len, cap;
        uint8_t type; /* PROTO_STDOUT / PROTO_STDERR */
        uint8_t *data;
};

struct session {
        char id[65];
        char ctx[160];
        unsigned refs;
        struct sandbox *sbx; /* reference */
        struct guestconn *gc;
        uint32_t stream;
        long long pid;
        bool pty;           /* a terminal: RESIZE means something */
        unsigned execution; /* of its sandbox when it started: a newer one revokes it */

        pthread_mutex_t lock; /* everything below */
        pthread_cond_t cond;  /* output, exit */
        struct chunk *head, *tail;
        size_t nchunks;
        size_t buffered;  /* bytes in the chunk list */
        uint64_t total;   /* bytes of output ever received */
        uint64_t dropped; /* bytes dropped from the front */
        bool exited;
        int exit_code;
        int signal;
        char *error;
        uint64_t exited_at; /* monotonic ns */
        bool stdin_closed;

        struct session *next; /* table */
};

static const struct node_config *ccfg;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct session *table;

void session_init(const struct node_config *cfg) {
        sandbox_on_delete(session_sandbox_deleted);
        ccfg = cfg;
}

static struct session *session_ref(struct session *x) {
        __atomic_add_fetch(&x->refs, 1, __ATOMIC_SEQ_CST);
        return x;
}

static void session_unref(struct session *x) {
        if (!x || __atomic_sub_fetch(&x->refs, 1, __ATOMIC_SEQ_CST) > 0)
                return;
        /* after this the handler never runs again */
        if (x->stream)
                guestconn_stream_close(x->gc, x->stream);
        while (x->head) {
                struct chunk *c = x->head;
                x->head = c->next;
                free(c->data);
                free(c);
        }
        free(x->error);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
        sandbox_unref(x->sbx);
        free(x);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct session *, session_unref);

/* Appends output (x->lock held), merging into the tail chunk when it can,
 * then drops the oldest chunks beyond the buffer and chunk-count limits. */
static void append_output(struct session *x, uint8_t type, const uint8_t *data, size_t len) {
        if (len == 0)
                return;
        struct chunk *t = x->tail;
        if (t && t->type == type && t->len + len <= CHUNK_MAX) {
                if (t->len + len > t->cap) {
                        size_t ncap = MIN(MAX(t->cap * 2, t->len + len), (size_t) CHUNK_MAX);
                        uint8_t *nd = realloc(t->data, ncap);
                        if (!nd)
                                goto drop;
                        t->data = nd;
                        t->cap = ncap;
                }
                memcpy(t->data + t->len, data, len);
                t->len += len;
        } else {
                struct chunk *c = calloc(1, sizeof *c);
                uint8_t *d = c ? malloc(len) : NULL;
                if (!d) {
                        free(c);
                        goto drop;
                }
                memcpy(d, data, len);
                *c = (struct chunk){ .start = x->total, .len = len, .cap = len, .type = type, .data = d };
                if (x->tail)
                        x->tail->next = c;
                else
                        x->head = c;
                x->tail = c;
                x->nchunks++;
        }
        x->total += len;
        x->buffered += len;
        while (x->head && x->head != x->tail &&
               (x->buffered > ccfg->session_buffer || x->nchunks > MAX_CHUNKS)) {
                struct chunk *c = x->head;
                x->head = c->next;
                x->buffered -= c->len;
                x->dropped += c->len;
                x->nchunks--;
                free(c->data);
                free(c);
        }
        return;
drop:
        /* out of memory: count it as lost, keep offsets consistent */
        x->total += len;
        x->dropped += len;
}

static void session_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct session *x = userdata;
        pthread_mutex_lock(&x->lock);
        switch (type) {
        case PROTO_STDOUT:
        case PROTO_STDERR:
                append_output(x, type, payload, len);
                break;
        case PROTO_EXIT: {
                json_error_t jerr;
                json_t *m = json_loadb((const char *) payload, len, 0, &jerr);
                json_t *code = json_object_get(m, "exit_code");
                json_t *sig = json_object_get(m, "signal");
                if (!x->exited) {
                        x->exited = true;
                        x->exit_code = json_is_integer(code) ? (int) json_integer_value(code) : -1;
                        x->signal = json_is_integer(sig) ? (int) json_integer_value(sig) : 0;
                        x->exited_at = now_monotonic_ns();
                }
                json_decref(m);
                break;
        }
        case 0:
                if (!x->exited) {
                        x->exited = true;
                        x->exit_code = -1;
                        x->error = strdup("guest channel closed");
                        x->exited_at = now_monotonic_ns();
                }
                break;
        default:
                log_emit(LOG_LEVEL_DEBUG, x->ctx, "ignoring %s frame on a session stream", proto_type_name(type));
                break;
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Finds a session and returns a reference, or NULL. */
static struct session *session_find(const char *id) {
        pthread_mutex_lock(&table_lock);
        struct session *x = table;
        while (x && strcmp(x->id, id) != 0)
                x = x->next;
        if (x)
                session_ref(x);
        pthread_mutex_unlock(&table_lock);
        return x;
}

/* Takes x out of the table; returns true if it was there (the table's
 * reference is then the caller's). */
static bool table_remove(struct session *x) {
        pthread_mutex_lock(&table_lock);
        bool found = false;
        for (struct session **p = &table; *p; p = &(*p)->next)
                if (*p == x) {
                        *p = x->next;
                        found = true;
                        break;
                }
        pthread_mutex_unlock(&table_lock);
        return found;
}

/* Replies with the guest's refusal of an EXEC or ADOPT (or the channel's
 * failure). An unknown user is the client's mistake, "invalid", in words
 * of the node's own (the guest's message is not needed to say it). */
static int reply_open_failure(struct node_conn *c, int r, const char *msg, uint8_t type, json_t *req) {
        const char *user = json_string_value(json_object_get(req, "user"));
        if (type == PROTO_EXEC && msg && r == -ESRCH && user)
                return conn_reply_error(c, r, "invalid", "unknown user '%s'", user);
        if (type == PROTO_ADOPT && msg && r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no process %lld in the sandbox",
                                        (long long) json_integer_value(json_object_get(req, "pid")));
        if (type == PROTO_ADOPT && msg && r == -EBUSY)
                return conn_reply_error(c, r, "conflict", "process %lld is attached to another stream",
                                        (long long) json_integer_value(json_object_get(req, "pid")));
        const char *what = type == PROTO_EXEC ? "exec failed" : "adopt failed";
        if (msg)
                return conn_reply_error(c, r, node_guest_errno_code(-r), "%s: %s", what, msg);
        if (r == -EBADMSG)
                return conn_reply_error(c, r, "guest", "%s: the guest agent sent a malformed reply", what);
        return conn_reply_errno(c, r, what);
}

/*
 * Makes session session_id of s on a new guest stream, for a process EXEC
 * starts (req: the EXEC request) or one ADOPT attaches again (req
 * {"pid":n}: a process the guest kept after its host connection ended).
 * Replies to the client either way.
 */
static int session_open(struct node_conn *c, struct sandbox *s, const char *session_id, uint8_t type,
                        json_t *req) {
        struct guestconn *gc = NULL;
        int r;
        struct session *x = calloc(1, sizeof *x);
        if (!x)
                return -ENOMEM;
        snprintf(x->id, sizeof x->id, "%s", session_id);
        snprintf(x->ctx, sizeof x->ctx, "%s session=%s", s->ctx, session_id);
        x->refs = 1; /* the caller's, until it goes into the table */
        x->sbx = sandbox_ref(s);
        pthread_mutex_lock(&s->lock);
        x->execution = s->execution;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_init(&x->lock, NULL);
        node_cond_init(&x->cond);
        _cleanup_(session_unrefp) struct session *own = x;

        /* reserve the id and the slot first, so two starts cannot race; and
         * look at the sandbox again under the table lock: a delete marks it
         * before it sweeps the table, so a session added here is either
         * refused or found by that sweep, never left behind (lock order:
         * table_lock, then the sandbox's lock) */
        long long adopt_pid = type == PROTO_ADOPT ? json_integer_value(json_object_get(req, "pid")) : 0;
        char owner[sizeof x->id] = "";
        pthread_mutex_lock(&table_lock);
        unsigned n = 0;
        bool taken = false, gone = sandbox_guest(s, &gc) < 0;
        /* the sandbox's finished session that ended first: forgotten before
         * its time when the sandbox is at the limit (an agent runs many
         * short commands; only the running ones are its limit) */
        struct session **oldest = NULL;
        uint64_t oldest_at = UINT64_MAX;
        for (struct session **p = &table; *p; p = &(*p)->next) {
                struct session *y = *p;
                if (y->sbx != s)
                        continue;
                pthread_mutex_lock(&y->lock);
                if (y->exited && y->exited_at < oldest_at) {
                        oldest = p;
                        oldest_at = y->exited_at;
                }
                pthread_mutex_unlock(&y->lock);
        }
        for (struct session *y = table; y; y = y->next)
                n += y->sbx == s;
        struct session *forget = NULL;
        if (n >= SESSION_MAX_PER_SANDBOX && oldest) {
                forget = *oldest;
                *oldest = forget->next;
                n--;
        }
        for (struct session *y = table; y; y = y->next) {
                taken = taken || strcmp(y->id, session_id) == 0;
                /* a process one session has: attach to that one instead */
                if (adopt_pid && !owner[0] && y->sbx == s && y->gc == gc && y->pid == adopt_pid) {
                        pthread_mutex_lock(&y->lock);
                        if (!y->exited)
                                snprintf(owner, sizeof owner, "%s", y->id);
                        pthread_mutex_unlock(&y->lock);
                }
        }
        if (!gone && !taken && !owner[0] && n < SESSION_MAX_PER_SANDBOX) {
                x->gc = gc; /* before others can find it */
                session_ref(x);
                x->next = table;
                table = x;
        }
        pthread_mutex_unlock(&table_lock);
        if (forget) {
                log_emit(LOG_LEVEL_DEBUG, forget->ctx, "forgetting finished session: its sandbox is at the limit");
                session_unref(forget);
        }
        if (gone) {
                _cleanup_free_ char *why = sandbox_error(s);
                return conn_reply_error(c, -ECONNRESET, "guest", "sandbox is not running: %s",
                                        why ? why : "unknown");
        }
        if (taken)
                return conn_reply_error(c, -EEXIST, "conflict", "session %s exists", session_id);
        if (owner[0])
                return conn_reply_error(c, -EBUSY, "conflict", "process %lld belongs to session %s",
                                        adopt_pid, owner);
        if (n >= SESSION_MAX_PER_SANDBOX)
                return conn_reply_error(c, -EUSERS, "unavailable", "sandbox has %u sessions (the limit)", n);

        /* an older agent would ignore "user" and run the process as root */
        const char *missing = NULL;
        if (type == PROTO_ADOPT && !guestconn_has(gc, GUESTCONN_FEATURE_PROCESSES))
                missing = "adopt";
        else if (json_object_get(req, "user") && !guestconn_has(gc, GUESTCONN_FEATURE_USER))
                missing = "a user";
        if (missing) {
                if (table_remove(x))
                        session_unref(x);
                return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                        "the sandbox's guest agent is older and cannot do %s", missing);
        }

        r = guestconn_stream_open(gc, session_handler, x, &x->stream);
        _cleanup_free_ char *msg = NULL;
        json_t *res = NULL;
        bool pty = json_is_true(json_object_get(req, "pty"));
        uint64_t dropped = 0;
        if (r >= 0)
                r = guestconn_call_stream(gc, x->stream, type, req, EXEC_START_MS, &res, &msg);
        if (r >= 0 && type == PROTO_ADOPT)
                r = guestreply_adopt(res, adopt_pid, &pty, &dropped);
        if (r < 0) {
                json_decref(res);
                if (table_remove(x))
                        session_unref(x);
                return reply_open_failure(c, r, msg, type, req);
        }
        x->pid = type == PROTO_ADOPT ? adopt_pid
                                     : guestreply_uint(json_object_get(res, "pid"), GUESTREPLY_PID_MAX, -1);
        json_decref(res);
        pthread_mutex_lock(&x->lock);
        x->pty = pty;
        if (dropped > 0) {
                /* lost before anything the replay brought, which may be
                 * buffered already: attach then says so first */
                for (struct chunk *ch = x->head; ch; ch = ch->next)
                        ch->start += dropped;
                x->total += dropped;
                x->dropped += dropped;
        }
        pthread_mutex_unlock(&x->lock);
        log_emit(LOG_LEVEL_INFO, x->ctx, "session %s: pid=%lld", type == PROTO_ADOPT ? "adopted" : "started",
                 x->pid);
        return conn_reply_ok(c, json_pack("{s:{s:s, s:I}}", "session", "id", x->id, "pid", (json_int_t) x->pid));
}

int session_start(struct node_conn *c, struct sandbox *s, const char *session_id, json_t *exec_req) {
        return session_open(c, s, session_id, PROTO_EXEC, exec_req);
}

int session_adopt(struct node_conn *c, struct sandbox *s, const char *session_id, long long pid) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:I}", "pid", (json_int_t) pid);
        if (!req)
                return -ENOMEM;
        return session_open(c, s, session_id, PROTO_ADOPT, req);
}

int session_of_pid(struct sandbox *s, struct guestconn *gc, long long pid, char ret_id[static 65]) {
        int r = -ENOENT;
        pthread_mutex_lock(&table_lock);
        for (struct session *y = table; y && r < 0; y = y->next) {
                if (y->sbx != s || y->gc != gc || y->pid != pid)
                        continue;
                pthread_mutex_lock(&y->lock);
                if (!y->exited) {
                        snprintf(ret_id, 65, "%s", y->id);
                        r = 0;
                }
                pthread_mutex_unlock(&y->lock);
        }
        pthread_mutex_unlock(&table_lock);
        return r;
}

/* A session belongs to the execution it started in: once its sandbox runs
 * another one (a restore, recovery, wake) it is revoked, which ends it like
 * an exit, so its stream stops and it takes no more input. */
#define REVOKED_ERROR "revoked: the sandbox's execution was replaced"

static void revoke_if_replaced(struct session *x) {
        pthread_mutex_lock(&x->sbx->lock);
        bool replaced = x->sbx->execution != x->execution;
        pthread_mutex_unlock(&x->sbx->lock);
        if (!replaced)
                return;
        pthread_mutex_lock(&x->lock);
        if (!x->exited) { /* one that ended before keeps its own ending */
                x->exited = true;
                x->exit_code = -1;
                x->exited_at = now_monotonic_ns();
                free(x->error);
                x->error = strdup(REVOKED_ERROR);
        }
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

int session_sandbox(const char *session_id, struct sandbox **ret) {
        struct session *x = session_find(session_id);
        if (!x)
                return -ENOENT;
        *ret = sandbox_ref(x->sbx);
        session_unref(x);
        return 0;
}

/* Sends one chunk's bytes [from, len) as an event. */
static int send_output(struct node_conn *c, uint8_t type, const uint8_t *data, size_t len) {
        _cleanup_free_ char *b64 = node_base64_encode(data, len);
        if (!b64)
                return -ENOMEM;
        return conn_send_event(c, json_pack("{s:s, s:s}", "type", type == PROTO_STDERR ? "stderr" : "stdout", "data",
                                            b64));
}

int session_attach(struct node_conn *c, const char *session_id, bool from_now) {
        _cleanup_(session_unrefp) struct session *x = session_find(session_id);
        if (!x)
                return conn_reply_error(c, -ENOENT, "not_found", "no session %s", session_id);
        int r = conn_reply_ok(c, json_pack("{s:{s:s, s:I}}", "session", "id", x->id, "pid", (json_int_t) x->pid));
        if (r < 0)
                return r;

        uint64_t pos = 0; /* offset in the session's output this client has */
        if (from_now) { /* what came before is another client's */
                pthread_mutex_lock(&x->lock);
                pos = x->total;
                pthread_mutex_unlock(&x->lock);
        }
        _cleanup_free_ uint8_t *buf = malloc(CHUNK_MAX);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                revoke_if_replaced(x);
                pthread_mutex_lock(&x->lock);
                struct chunk *ch = x->head;
                while (ch && ch->start + ch->len <= pos)
                        ch = ch->next;
                uint64_t lost = 0;
                size_t n = 0;
                uint8_t type = 0;
                if (ch) {
                        if (ch->start > pos) {
                                lost = ch->start - pos;
                                pos = ch->start;
                        }
                        size_t off = (size_t) (pos - ch->start);
                        /* at most buf's size per event: a chunk made of one
                         * guest frame can be 1 MiB (the guest is untrusted;
                         * its own chunks are 64 KiB), and copying it whole
                         * overflowed buf */
                        n = MIN(ch->len - off, (size_t) CHUNK_MAX);
                        memcpy(buf, ch->data + off, n);
                        type = ch->type;
                } else if (x->total > pos) {
                        lost = x->total - pos; /* dropped for lack of memory */
                        pos = x->total;
                }
                bool exited = x->exited;
                int code = x->exit_code, sig = x->signal;
                _cleanup_free_ char *error = x->error ? strdup(x->error) : NULL;
                if (!ch && lost == 0 && !exited) {
                        struct timespec ts;
                        node_deadline_after_ms(&ts, ATTACH_POLL_MS);
                        pthread_cond_timedwait(&x->cond, &x->lock, &ts);
                        pthread_mutex_unlock(&x->lock);
                        if (conn_hung_up(c))
                                return 0;
                        continue;
                }
                pthread_mutex_unlock(&x->lock);

                if (lost > 0) {
                        r = conn_send_event(c, json_pack("{s:s, s:I}", "type", "dropped", "bytes", (json_int_t) lost));
                        if (r < 0)
                                return 0;
                }
                if (n > 0) {
                        r = send_output(c, type, buf, n);
                        if (r < 0)
                                return 0;
                        pos += n;
                        continue;
                }
                if (lost > 0)
                        continue;
                /* no more output and the process is gone */
                json_t *ev = json_pack("{s:s, s:i}", "type", "exit", "exit_code", code);
                if (ev && sig)
                        json_object_set_new(ev, "signal", json_integer(sig));
                if (ev && error)
                        json_object_set_new(ev, "error", json_string(error));
                if (conn_send_event(c, ev) >= 0)
                        conn_send_end(c, NULL);
                return 0;
        }
}

/* Looks up a live session for stdin/signal; replies on failure. */
static int live_session(struct node_conn *c, const char *session_id, struct session **ret) {
        struct session *x = session_find(session_id);
        if (!x)
                return conn_reply_error(c, -ENOENT, "not_found", "no session %s", session_id);
        revoke_if_replaced(x);
        pthread_mutex_lock(&x->lock);
        bool exited = x->exited, revoked = exited && x->error && strcmp(x->error, REVOKED_ERROR) == 0;
        pthread_mutex_unlock(&x->lock);
        if (exited) {
                session_unref(x);
                return conn_reply_error(c, -ESRCH, "conflict", "session %s %s", session_id,
                                        revoked ? "was " REVOKED_ERROR : "has exited");
        }
        *ret = x;
        return 0;
}

int session_stdin(struct node_conn *c, const char *session_id, const uint8_t *data, size_t len, bool close_stdin) {
        _cleanup_(session_unrefp) struct session *x = NULL;
        int r = live_session(c, session_id, &x);
        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        bool closed = x->stdin_closed;
        if (close_stdin)
                x->stdin_closed = true;
        pthread_mutex_unlock(&x->lock);
        if (closed)
                return conn_reply_error(c, -EPIPE, "conflict", "stdin of session %s is closed", session_id);
        for (size_t off = 0; off < len && r >= 0; off += PROTO_DATA_CHUNK)
                r = guestconn_send(x->gc, PROTO_STDIN, x->stream, data + off, MIN((size_t) PROTO_DATA_CHUNK, len - off));
        if (r >= 0 && close_stdin)
                r = guestconn_send(x->gc, PROTO_STDIN_CLOSE, x->stream, "{}", 2);
        if (r < 0)
                return conn_reply_errno(c, r, "writing to the guest failed");
        return conn_reply_ok(c, NULL);
}

int session_signal(struct node_conn *c, const char *session_id, int signo) {
        _cleanup_(session_unrefp) struct session *x = NULL;
        int r = live_session(c, session_id, &x);
        if (r < 0)
                return r;
        json_t *m = json_pack("{s:i}", "signal", signo);
        r = m ? guestconn_send_json(x->gc, PROTO_SIGNAL, x->stream, m) : -ENOMEM;
        json_decref(m);
        if (r < 0)
                return conn_reply_errno(c, r, "signalling the guest failed");
        return conn_reply_ok(c, NULL);
}

int session_resize(struct node_conn *c, const char *session_id, unsigned rows, unsigned cols) {
        _cleanup_(session_unrefp) struct session *x = NULL;
        int r = live_session(c, session_id, &x);
        if (r < 0)
                return r;
        pthread_mutex_lock(&x->lock);
        bool pty = x->pty;
        pthread_mutex_unlock(&x->lock);
        if (!pty)
                return conn_reply_error(c, -ENOTTY, "conflict", "session %s has no terminal", session_id);
        json_t *m = json_pack("{s:i, s:i}", "rows", (int) rows, "cols", (int) cols);
        r = m ? guestconn_send_json(x->gc, PROTO_RESIZE, x->stream, m) : -ENOMEM;
        json_decref(m);
        if (r < 0)
                return conn_reply_errno(c, r, "resizing the terminal failed");
        return conn_reply_ok(c, NULL);
}

void session_sandbox_deleted(struct sandbox *s) {
        for (;;) {
                pthread_mutex_lock(&table_lock);
                struct session *x = NULL;
                for (struct session **p = &table; *p; p = &(*p)->next)
                        if ((*p)->sbx == s) {
                                x = *p;
                                *p = x->next;
                                break;
                        }
                pthread_mutex_unlock(&table_lock);
                if (!x)
                        return;
                pthread_mutex_lock(&x->lock);
                if (!x->exited) {
                        x->exited = true;
                        x->exit_code = -1;
                        free(x->error);
                        x->error = strdup("sandbox deleted");
                        x->exited_at = now_monotonic_ns();
                }
                pthread_cond_broadcast(&x->cond);
                pthread_mutex_unlock(&x->lock);
                session_unref(x);
        }
}

void session_gc(void) {
        uint64_t now = now_monotonic_ns();
        for (;;) {
                pthread_mutex_lock(&table_lock);
                struct session *x = NULL;
                for (struct session **p = &table; *p; p = &(*p)->next) {
                        struct session *y = *p;
                        pthread_mutex_lock(&y->lock);
                        bool old = y->exited && now - y->exited_at > (uint64_t) SESSION_RETAIN_S * 1000000000ULL;
                        pthread_mutex_unlock(&y->lock);
                        if (old) {
                                x = y;
                                *p = y->next;
                                break;
                        }
                }
                pthread_mutex_unlock(&table_lock);
                if (!x)
                        return;
                log_emit(LOG_LEVEL_DEBUG, x->ctx, "forgetting finished session");
                session_unref(x);
        }
}
