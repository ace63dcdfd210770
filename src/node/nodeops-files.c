/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The file ops of docs/node-protocol.md: file.write and file.read (a
 * transfer on its own guest stream, bounded both ways), file.list,
 * file.stat, file.remove, file.mkdir, file.rename (one guest call each) and
 * file.watch (the guest's events relayed until either side ends it).
 * Each takes an optional "user" the guest runs it as (its permissions, its
 * ownership of what it makes); a user the guest does not have is refused
 * as exec refuses it. All but file.watch take an optional "volume", the id
 * of a volume the sandbox holds: the path is then in that volume, whose
 * mount the guest takes as "/" (a symlink or ".." cannot leave it).
 * file.setattr changes owner, group and mode.
 */
#include "nodeops-ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cap.h"
#include "config.h"
#include "conn.h"
#include "guestconn.h"
#include "guestreply.h"
#include "log.h"
#include "macros.h"
#include "nodeops-req.h"
#include "nodeutil.h"
#include "proto.h"
#include "sandbox.h"
#include "util.h"

/* file.read: guest data waiting for the client, at most. */
#define READ_QUEUE_MAX (4u << 20)
/* file.read / file.write: no progress for this long ends the transfer. */
#define TRANSFER_IDLE_MS 60000
/* file.watch: events waiting for the client, at most; beyond, they are
 * dropped and the client told so with an overflow event. */
#define WATCH_QUEUE_MAX 4096
/* An attached client that says nothing is checked for hang-up this often. */
#define WATCH_POLL_MS 1000

/* ---- files ---- */

/* An older agent ignores "user" and would act as root: a file op as
 * another user needs an agent that says it has them (HELLO files_user). */
static int user_supported(struct node_conn *c, struct guestconn *g, const char *user) {
        if (!user || strcmp(user, "root") == 0 || guestconn_has(g, GUESTCONN_FEATURE_FILES_USER))
                return 0;
        return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                "the sandbox's guest agent is older and runs file calls only as root");
}

/* The guest's root for the op's "volume" (NULL without one): where the
 * sandbox mounts it, with an agent that takes a root (an older one would
 * take the path as the guest's). Replies itself on failure. */
static int volume_root(struct node_conn *c, json_t *req, struct sandbox *s, struct guestconn *g,
                       const char **ret) {
        const char *id = NULL;
        int r = nodeops_field_string(c, req, "volume", false, 64, &id);
        *ret = NULL;
        if (r < 0 || !id)
                return r;
        const char *root = sandbox_volume_path(s, id);
        if (!root)
                return conn_reply_error(c, -ENOENT, "not_found", "sandbox %s does not hold volume %s", s->id,
                                        id);
        if (!guestconn_has(g, GUESTCONN_FEATURE_FILES_ROOT))
                return conn_reply_error(
                        c, -EOPNOTSUPP, "unavailable",
                        "the sandbox's guest agent is older and cannot reach a volume's files alone");
        *ret = root;
        return 0;
}

/* A file op's sandbox (a reference, *ret_s) and its guest channel, its
 * capability checked for need, the op's user supported by its agent and,
 * with ret_root, the root of its "volume" (file.watch takes none).
 * Replies itself on failure (*ret_s is then NULL). */
static int file_op_sandbox(struct node_conn *c, json_t *req, uint32_t need, const char *user,
                           struct sandbox **ret_s, struct guestconn **ret_g, const char **ret_root) {
        int r = nodeops_req_sandbox(c, req, need, 0, ret_s, ret_g);
        if (r >= 0 && (r = user_supported(c, *ret_g, user)) >= 0 && ret_root)
                r = volume_root(c, req, *ret_s, *ret_g, ret_root);
        if (r < 0 && *ret_s) {
                sandbox_unref(*ret_s);
                *ret_s = NULL;
        }
        return r;
}

/* The guest request for path (and user and root, when given). NULL on
 * ENOMEM. */
static json_t *guest_req(const char *key, const char *path, const char *user, const char *root) {
        json_t *m = json_pack("{s:s}", key, path);
        if (m && ((user && json_object_set_new(m, "user", json_string(user)) < 0) ||
                  (root && json_object_set_new(m, "root", json_string(root)) < 0))) {
                json_decref(m);
                return NULL;
        }
        return m;
}

/* A guest failure of a file op; ESRCH for the op's user is the client's
 * mistake, in exec's words (airlockd tells it by them), with the node's
 * own copy of the name. */
static int reply_failure(struct node_conn *c, int r, const char *msg, const char *what, const char *user) {
        if (r == -ESRCH && user)
                return conn_reply_error(c, r, "invalid", "unknown user '%s'", user);
        return nodeops_reply_guest_failure(c, r, msg, what);
}

struct qitem {
        struct qitem *next;
        size_t len;
        uint8_t data[];
};

/* One guest file transfer on its own stream. */
struct xfer {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool done;       /* write: RESULT or ERROR arrived; read: FILE_END */
        bool dead;       /* the channel died */
        bool cancelled;  /* read: the client is gone, discard */
        int err;         /* negative guest errno from ERROR */
        char *msg;       /* its message */
        json_t *result;  /* write: RESULT payload */
        struct qitem *head, *tail;
        size_t queued;
};

static void xfer_init(struct xfer *x) {
        *x = (struct xfer){ 0 };
        pthread_mutex_init(&x->lock, NULL);
        node_cond_init(&x->cond);
}

static void xfer_release(struct xfer *x) {
        while (x->head) {
                struct qitem *q = x->head;
                x->head = q->next;
                free(q);
        }
        free(x->msg);
        json_decref(x->result);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
}

/* Records a guest ERROR payload (x->lock held). */
static void xfer_set_error(struct xfer *x, const uint8_t *payload, size_t len) {
        json_error_t jerr;
        json_t *m = json_loadb((const char *) payload, len, 0, &jerr);
        json_t *e = json_object_get(m, "errno");
        const char *msg = json_string_value(json_object_get(m, "message"));
        x->err = json_is_integer(e) && json_integer_value(e) > 0 && json_integer_value(e) < 4096
                         ? (int) -json_integer_value(e)
                         : -EIO;
        free(x->msg);
        x->msg = strndup(msg ? msg : strerror(-x->err), 1024);
        json_decref(m);
}

static void write_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct xfer *x = userdata;
        pthread_mutex_lock(&x->lock);
        if (type == PROTO_RESULT && !x->done) {
                json_error_t jerr;
                x->result = json_loadb((const char *) payload, len, 0, &jerr);
                x->done = true;
        } else if (type == PROTO_ERROR && !x->done) {
                xfer_set_error(x, payload, len);
                x->done = true;
        } else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Replies with the outcome of a failed transfer (x->lock not held). */
static int reply_xfer_failure(struct node_conn *c, struct xfer *x, const char *what, const char *user) {
        if (x->err == -ESRCH && user)
                return conn_reply_error(c, x->err, "invalid", "unknown user '%s'", user);
        if (x->err < 0)
                return conn_reply_error(c, x->err, node_guest_errno_code(-x->err), "%s: %s", what, x->msg);
        return conn_reply_error(c, -ECONNRESET, "guest", "%s: the guest channel closed", what);
}

int nodeops_file_write(struct node_conn *c, json_t *req) {
        const char *path, *user;
        uint64_t mode;
        int r;
        if ((r = nodeops_field_path(c, req, "path", true, &path)) < 0 ||
            (r = nodeops_field_uint(c, req, "mode", 0644, 0, 07777, &mode)) < 0 ||
            (r = nodeops_field_user(c, req, &user)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        const char *root;
        if ((r = file_op_sandbox(c, req, CAP_ACCESS_FILES_WRITE, user, &s, &g, &root)) < 0)
                return r;

        struct xfer x;
        xfer_init(&x);
        uint32_t stream = 0;
        uint64_t total = 0;
        bool started = false;
        json_t *m = guest_req("path", path, user, root);
        if (m && json_object_set_new(m, "mode", json_integer((json_int_t) mode)) < 0) {
                json_decref(m);
                m = NULL;
        }
        r = m ? guestconn_stream_open(g, write_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_send_json(g, PROTO_FILE_WRITE, stream, m);
        json_decref(m);
        if (r < 0) {
                conn_reply_errno(c, r, "starting the guest transfer failed");
                goto out;
        }
        started = true;

        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                r = conn_read_frame(c, TRANSFER_IDLE_MS, &h, &payload);
                if (r <= 0) {
                        if (r == 0)
                                r = -ECONNRESET;
                        conn_reply_errno(c, r, "reading the upload failed");
                        goto out;
                }
                if (h.type == PROTO_NODE_END) {
                        json_error_t jerr;
                        json_t *end = json_loadb((const char *) payload, h.length, 0, &jerr);
                        bool abort = json_is_true(json_object_get(end, "abort"));
                        json_decref(end);
                        conn_pop_frame(c, &h);
                        if (abort) {
                                r = conn_reply_error(c, -ECANCELED, "invalid", "upload aborted by the client");
                                goto out;
                        }
                        break;
                }
                if (h.type != PROTO_NODE_DATA) {
                        conn_pop_frame(c, &h);
                        r = conn_reply_error(c, -EINVAL, "invalid", "expected node-data or node-end, got %s",
                                             proto_type_name(h.type));
                        goto out;
                }
                if (total + h.length > nodeops_config()->max_file_size) {
                        conn_pop_frame(c, &h);
                        r = conn_reply_error(c, -EFBIG, "too_large", "file larger than %llu bytes",
                                             (unsigned long long) nodeops_config()->max_file_size);
                        goto out;
                }
                pthread_mutex_lock(&x.lock);
                bool failed = x.done || x.dead;
                pthread_mutex_unlock(&x.lock);
                if (failed) {
                        conn_pop_frame(c, &h);
                        r = reply_xfer_failure(c, &x, "writing the file failed", user);
                        goto out;
                }
                for (size_t off = 0; off < h.length && r >= 0; off += PROTO_DATA_CHUNK)
                        r = guestconn_send(g, PROTO_FILE_DATA, stream, payload + off,
                                           MIN((size_t) PROTO_DATA_CHUNK, h.length - off));
                total += h.length;
                conn_pop_frame(c, &h);
                if (r < 0) {
                        reply_xfer_failure(c, &x, "writing the file failed", user);
                        goto out;
                }
        }

        r = guestconn_send(g, PROTO_FILE_END, stream, "{}", 2);
        started = false; /* the guest finishes (or fails) it now */
        pthread_mutex_lock(&x.lock);
        struct timespec ts;
        node_deadline_after_ms(&ts, TRANSFER_IDLE_MS);
        while (r >= 0 && !x.done && !x.dead)
                if (pthread_cond_timedwait(&x.cond, &x.lock, &ts) == ETIMEDOUT)
                        break;
        bool ok = x.done && x.err == 0;
        bool done = x.done || x.dead;
        pthread_mutex_unlock(&x.lock);
        if (ok) {
                r = conn_reply_ok(c, json_pack("{s:I}", "size",
                                               guestreply_uint(json_object_get(x.result, "size"), INT64_MAX,
                                                               (json_int_t) total)));
        } else if (!done)
                r = conn_reply_error(c, -ETIMEDOUT, "timeout", "the guest did not confirm the write");
        else
                r = reply_xfer_failure(c, &x, "writing the file failed", user);
out:
        if (started) {
                /* tell the guest to discard its temporary file */
                json_t *a = json_pack("{s:b}", "abort", 1);
                if (a)
                        guestconn_send_json(g, PROTO_FILE_END, stream, a);
                json_decref(a);
        }
        if (stream)
                guestconn_stream_close(g, stream);
        xfer_release(&x);
        return r;
}

static void read_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct xfer *x = userdata;
        pthread_mutex_lock(&x->lock);
        if (type == PROTO_FILE_DATA) {
                /* backpressure: the guest channel waits while the client is slow */
                while (x->queued >= READ_QUEUE_MAX && !x->cancelled)
                        pthread_cond_wait(&x->cond, &x->lock);
                if (!x->cancelled && len > 0) {
                        struct qitem *q = malloc(sizeof *q + len);
                        if (q) {
                                q->next = NULL;
                                q->len = len;
                                memcpy(q->data, payload, len);
                                if (x->tail)
                                        x->tail->next = q;
                                else
                                        x->head = q;
                                x->tail = q;
                                x->queued += len;
                        } else {
                                x->err = -ENOMEM;
                                x->msg = strdup("out of memory");
                        }
                }
        } else if (type == PROTO_FILE_END)
                x->done = true;
        else if (type == PROTO_ERROR && !x->done)
                xfer_set_error(x, payload, len);
        else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

int nodeops_file_read(struct node_conn *c, json_t *req) {
        const char *path, *user;
        int r;
        if ((r = nodeops_field_path(c, req, "path", true, &path)) < 0 || (r = nodeops_field_user(c, req, &user)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        const char *root;
        if ((r = file_op_sandbox(c, req, CAP_ACCESS_FILES_READ, user, &s, &g, &root)) < 0)
                return r;

        struct xfer x;
        xfer_init(&x);
        uint32_t stream = 0;
        _cleanup_free_ char *msg = NULL;
        json_t *res = NULL;
        json_t *m = guest_req("path", path, user, root);
        r = m ? guestconn_stream_open(g, read_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_FILE_READ, m, NODEOPS_GUEST_CALL_MS, &res, &msg);
        json_decref(m);
        if (r < 0) {
                reply_failure(c, r, msg, "reading the file failed", user);
                goto out;
        }
        r = conn_reply_ok(c, json_pack("{s:I, s:I}", "size",
                                       guestreply_uint(json_object_get(res, "size"), INT64_MAX, 0), "mode",
                                       guestreply_uint(json_object_get(res, "mode"), 07777, 0)));
        json_decref(res);
        if (r < 0)
                goto out;

        uint64_t idle_since = now_monotonic_ns();
        for (;;) {
                pthread_mutex_lock(&x.lock);
                struct qitem *q = x.head;
                if (q) {
                        x.head = q->next;
                        if (!x.head)
                                x.tail = NULL;
                        x.queued -= q->len;
                        pthread_cond_broadcast(&x.cond);
                }
                bool done = x.done, dead = x.dead;
                int err = x.err;
                if (!q && !done && !dead && err == 0) {
                        struct timespec ts;
                        node_deadline_after_ms(&ts, 1000);
                        pthread_cond_timedwait(&x.cond, &x.lock, &ts);
                        pthread_mutex_unlock(&x.lock);
                        if (conn_hung_up(c))
                                goto out;
                        if (now_monotonic_ns() - idle_since > TRANSFER_IDLE_MS * 1000000ULL) {
                                conn_reply_error(c, -ETIMEDOUT, "timeout", "the guest stopped sending the file");
                                goto out;
                        }
                        continue;
                }
                pthread_mutex_unlock(&x.lock);
                if (q) {
                        r = conn_send_data(c, q->data, q->len);
                        free(q);
                        idle_since = now_monotonic_ns();
                        if (r < 0)
                                goto out;
                        continue;
                }
                if (err < 0) {
                        /* a late error travels as a reply frame inside the stream */
                        reply_xfer_failure(c, &x, "reading the file failed", user);
                        goto out;
                }
                if (done) {
                        conn_send_end(c, NULL);
                        goto out;
                }
                conn_reply_error(c, -ECONNRESET, "guest", "reading the file failed: the guest channel closed");
                goto out;
        }
out:
        pthread_mutex_lock(&x.lock);
        x.cancelled = true; /* frees a handler waiting for queue room */
        pthread_cond_broadcast(&x.cond);
        pthread_mutex_unlock(&x.lock);
        if (stream)
                guestconn_stream_close(g, stream);
        xfer_release(&x);
        return r;
}

/* LIST / STAT / REMOVE: one guest call; the result's checked fields go into
 * the reply (STAT's under "entry"). */
static int file_simple(struct node_conn *c, json_t *req, uint8_t type, const char *what) {
        const char *path, *user;
        bool recursive = false;
        int r;
        if ((r = nodeops_field_path(c, req, "path", true, &path)) < 0 || (r = nodeops_field_user(c, req, &user)) < 0)
                return r;
        if (type == PROTO_REMOVE && (r = nodeops_field_bool(c, req, "recursive", false, &recursive)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        uint32_t need = type == PROTO_REMOVE ? CAP_ACCESS_FILES_WRITE : CAP_ACCESS_FILES_READ;
        const char *root;
        if ((r = file_op_sandbox(c, req, need, user, &s, &g, &root)) < 0)
                return r;

        _cleanup_(json_decrefp) json_t *m = guest_req("path", path, user, root);
        if (!m)
                return -ENOMEM;
        if (type == PROTO_REMOVE)
                json_object_set_new(m, "recursive", json_boolean(recursive));
        json_t *res = NULL;
        _cleanup_free_ char *msg = NULL;
        r = guestconn_call(g, type, m, NODEOPS_GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return reply_failure(c, r, msg, what, user);
        json_t *out = NULL;
        if (type == PROTO_STAT) {
                json_t *e = guestreply_entry(res, true);
                out = e ? json_pack("{s:o}", "entry", e) : NULL;
        } else if (type == PROTO_LIST)
                out = guestreply_list(res);
        json_decref(res);
        if (type == PROTO_REMOVE)
                return conn_reply_ok(c, NULL);
        if (!out)
                return conn_reply_error(c, -EBADMSG, "guest", "%s: the guest agent sent a malformed reply", what);
        return conn_reply_ok(c, out);
}

int nodeops_file_list(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_LIST, "listing failed");
}

int nodeops_file_stat(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_STAT, "stat failed");
}

int nodeops_file_remove(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_REMOVE, "remove failed");
}

/* The checked STAT entry of path as user sees it, or NULL (for a reply
 * that can do without: the path was changed meanwhile, the guest failed). */
static json_t *stat_entry(struct guestconn *g, const char *path, const char *user, const char *root) {
        _cleanup_(json_decrefp) json_t *m = guest_req("path", path, user, root), *res = NULL;
        if (!m || guestconn_call(g, PROTO_STAT, m, NODEOPS_GUEST_CALL_MS, &res, NULL) < 0)
                return NULL;
        return guestreply_entry(res, true);
}

/* MKDIR and RENAME: one guest call, then the entry of the directory made
 * or of the new name (E2B answers with it), when the guest gives it. */
static int file_change(struct node_conn *c, json_t *req, uint8_t type, const char *what) {
        const char *path, *to = NULL, *user;
        bool parents = false;
        int r;
        if ((r = nodeops_field_path(c, req, type == PROTO_RENAME ? "from" : "path", true, &path)) < 0 ||
            (type == PROTO_RENAME && (r = nodeops_field_path(c, req, "to", true, &to)) < 0) ||
            (type == PROTO_MKDIR && (r = nodeops_field_bool(c, req, "parents", false, &parents)) < 0) ||
            (r = nodeops_field_user(c, req, &user)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        const char *root;
        if ((r = file_op_sandbox(c, req, CAP_ACCESS_FILES_WRITE, user, &s, &g, &root)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *m =
                guest_req(type == PROTO_RENAME ? "from" : "path", path, user, root);
        _cleanup_free_ char *msg = NULL;
        if (!m || json_object_set_new(m, type == PROTO_RENAME ? "to" : "parents",
                                      type == PROTO_RENAME ? json_string(to) : json_boolean(parents)) < 0)
                return -ENOMEM;
        r = guestconn_call(g, type, m, NODEOPS_GUEST_CALL_MS, NULL, &msg);
        if (r < 0)
                return reply_failure(c, r, msg, what, user);
        json_t *e = stat_entry(g, to ?: path, user, root);
        return conn_reply_ok(c, e ? json_pack("{s:o}", "entry", e) : NULL);
}

int nodeops_file_mkdir(struct node_conn *c, json_t *req) {
        return file_change(c, req, PROTO_MKDIR, "mkdir failed");
}

int nodeops_file_rename(struct node_conn *c, json_t *req) {
        return file_change(c, req, PROTO_RENAME, "rename failed");
}

/* SETATTR: owner, group and mode, each optional; answers with the entry. */
int nodeops_file_setattr(struct node_conn *c, json_t *req) {
        const char *path;
        uint64_t v[3];
        static const char *const keys[] = {"uid", "gid", "mode"};
        static const uint64_t max[] = {UINT32_MAX - 1, UINT32_MAX - 1, 07777};
        int r;
        if ((r = nodeops_field_path(c, req, "path", true, &path)) < 0)
                return r;
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if ((r = nodeops_field_uint(c, req, keys[i], UINT64_MAX, 0, max[i], &v[i])) < 0)
                        return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        const char *root;
        if ((r = file_op_sandbox(c, req, CAP_ACCESS_FILES_WRITE, NULL, &s, &g, &root)) < 0)
                return r;
        if (!guestconn_has(g, GUESTCONN_FEATURE_FILES_ROOT))
                return conn_reply_error(
                        c, -EOPNOTSUPP, "unavailable",
                        "the sandbox's guest agent is older and cannot change owners or modes");
        _cleanup_(json_decrefp) json_t *m = guest_req("path", path, NULL, root);
        for (size_t i = 0; m && i < ARRAY_SIZE(keys); i++)
                if (v[i] != UINT64_MAX &&
                    json_object_set_new(m, keys[i], json_integer((json_int_t) v[i])) < 0)
                        return -ENOMEM;
        if (!m)
                return -ENOMEM;
        _cleanup_free_ char *msg = NULL;
        r = guestconn_call(g, PROTO_SETATTR, m, NODEOPS_GUEST_CALL_MS, NULL, &msg);
        if (r < 0)
                return reply_failure(c, r, msg, "setattr failed", NULL);
        json_t *e = stat_entry(g, path, NULL, root);
        return conn_reply_ok(c, e ? json_pack("{s:o}", "entry", e) : NULL);
}

/* ---- file.watch ---- */

/* What the guest's reader thread hands the client's thread: checked
 * events, bounded, and how the watch ended. */
struct watch_queue {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        json_t *events;   /* array, at most WATCH_QUEUE_MAX */
        bool overflow;    /* events were dropped since the queue was last taken */
        uint64_t invalid; /* malformed events the guest sent, dropped */
        bool ended, dead; /* the guest's ERROR (err, msg); the channel died */
        int err;
        char *msg;
};

static void watch_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct watch_queue *q = userdata;
        pthread_mutex_lock(&q->lock);
        if (q->ended || q->dead) {
                /* a watch's last frame is its ERROR */
        } else if (type == PROTO_WATCH_EVENT) {
                json_error_t jerr;
                _cleanup_(json_decrefp) json_t *m =
                        json_loadb((const char *) payload, len, JSON_REJECT_DUPLICATES, &jerr);
                json_t *ev = guestreply_watch_event(m);
                if (!ev)
                        q->invalid++;
                else if (json_array_size(q->events) >= WATCH_QUEUE_MAX ||
                         json_array_append_new(q->events, ev) < 0)
                        q->overflow = true;
        } else if (type == PROTO_ERROR) {
                json_t *res = NULL;
                q->ended = true;
                if (guestreply_parse(type, payload, len, &q->err, &res, &q->msg) < 0)
                        q->err = -EBADMSG;
                json_decref(res);
        } else if (type == 0)
                q->dead = true;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
}

/* NODE_END {"error":{"code","message"}}: the watch ended from the
 * sandbox's side (message: the guest's words, made valid UTF-8). */
static int watch_end_error(struct node_conn *c, const char *code, const char *message) {
        _cleanup_free_ char *clean = utf8_sanitize(message, strlen(message), NULL);
        return conn_send_end(
                c, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", clean ?: "watch ended"));
}

int nodeops_file_watch(struct node_conn *c, json_t *req) {
        const char *path, *user;
        bool recursive;
        int r;
        if ((r = nodeops_field_path(c, req, "path", true, &path)) < 0 ||
            (r = nodeops_field_bool(c, req, "recursive", false, &recursive)) < 0 ||
            (r = nodeops_field_user(c, req, &user)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = file_op_sandbox(c, req, CAP_ACCESS_FILES_READ, user, &s, &g, NULL)) < 0)
                return r;
        if (!guestconn_has(g, GUESTCONN_FEATURE_WATCH))
                return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                        "the sandbox's guest agent is older and cannot watch directories");

        struct watch_queue q = { .events = json_array() };
        pthread_mutex_init(&q.lock, NULL);
        node_cond_init(&q.cond);
        uint32_t stream = 0;
        _cleanup_free_ char *msg = NULL;
        json_t *m = guest_req("path", path, user, NULL);
        if (m && json_object_set_new(m, "recursive", json_boolean(recursive)) < 0) {
                json_decref(m);
                m = NULL;
        }
        r = m && q.events ? guestconn_stream_open(g, watch_handler, &q, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_WATCH, m, NODEOPS_GUEST_CALL_MS, NULL, &msg);
        json_decref(m);
        if (r < 0) {
                if (msg && (r == -EMFILE || r == -EAGAIN))
                        conn_reply_error(c, r, "unavailable", "watch failed: %s", msg);
                else if (msg && (r == -E2BIG || r == -ENOSPC))
                        conn_reply_error(c, r, "too_large", "watch failed: %s", msg);
                else
                        reply_failure(c, r, msg, "watch failed", user);
                goto out;
        }
        r = conn_reply_ok(c, NULL);
        if (r < 0)
                goto end;

        for (;;) {
                pthread_mutex_lock(&q.lock);
                if (json_array_size(q.events) == 0 && !q.overflow && !q.ended && !q.dead) {
                        struct timespec ts;
                        node_deadline_after_ms(&ts, WATCH_POLL_MS);
                        pthread_cond_timedwait(&q.cond, &q.lock, &ts);
                        pthread_mutex_unlock(&q.lock);
                        if (conn_hung_up(c))
                                break;
                        continue;
                }
                /* the events go out without the lock: the guest's reader
                 * never waits for a slow client */
                json_t *batch = q.events;
                q.events = json_array();
                bool overflow = q.overflow, ended = q.ended, dead = q.dead;
                q.overflow = false;
                int err = q.err;
                _cleanup_free_ char *why = q.msg ? strdup(q.msg) : NULL;
                pthread_mutex_unlock(&q.lock);
                size_t i;
                json_t *ev;
                r = 0;
                json_array_foreach(batch, i, ev) {
                        if (r >= 0)
                                r = conn_send_event(c, json_incref(ev));
                }
                json_decref(batch);
                if (r >= 0 && overflow)
                        r = conn_send_event(c, json_pack("{s:s}", "type", "overflow"));
                if (r < 0 || !q.events)
                        break;
                /* ended by the guest (its directory went) or with the
                 * channel: nothing to tell the guest */
                if (ended) {
                        watch_end_error(c, err == -EBADMSG ? "guest" : node_guest_errno_code(-err),
                                        why ? why : "the watch ended");
                        goto out;
                }
                if (dead) {
                        _cleanup_free_ char *serr = sandbox_error(s);
                        _cleanup_free_ char *text = strdup_printf("the guest channel closed%s%s",
                                                                  serr ? ": " : "", serr ? serr : "");
                        watch_end_error(c, "guest", text ? text : "the guest channel closed");
                        goto out;
                }
        }
end:
        /* the client went away: the guest stops watching */
        guestconn_send(g, PROTO_WATCH_END, stream, "{}", 2);
out:
        if (stream)
                guestconn_stream_close(g, stream);
        if (q.invalid > 0)
                log_emit(LOG_LEVEL_WARN, c->ctx, "the guest sent %llu malformed watch events (dropped)",
                         (unsigned long long) q.invalid);
        json_decref(q.events);
        free(q.msg);
        pthread_mutex_destroy(&q.lock);
        pthread_cond_destroy(&q.cond);
        return r;
}
