/* SPDX-License-Identifier: Apache-2.0 */
#include "qmp.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macros.h"
#include "unixsock.h"
#include "util.h"

#define QMP_READ_CHUNK (16u << 10)

struct qmp {
        int fd;
        /* Bytes received and not yet consumed. Never more than QMP_MAX_LINE + 1
         * (one full line plus its '\n'): that is the whole memory a server can
         * make us hold. `scanned` is how far we already looked for a '\n'. */
        char *buf;
        size_t len, cap, scanned;
        bool broken; /* desynchronised or closed: every later call fails */
        int64_t next_id;
        char error[1024];
        uint64_t nevents;
        char events[QMP_EVENT_RING][64];
};

void qmp_free(struct qmp *q) {
        if (!q)
                return;
        if (q->fd >= 0)
                close(q->fd);
        free(q->buf);
        free(q);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct qmp *, qmp_free);

const char *qmp_last_error(const struct qmp *q) {
        return q->error;
}

uint64_t qmp_event_count(const struct qmp *q) {
        return q->nevents;
}

const char *qmp_event_recent(const struct qmp *q, size_t i) {
        if (i >= QMP_EVENT_RING || i >= q->nevents)
                return NULL;
        return q->events[(q->nevents - 1 - i) % QMP_EVENT_RING];
}

static void set_error(struct qmp *q, const char *class, const char *desc) {
        snprintf(q->error, sizeof q->error, "%s: %s", class, desc);
}

/* Marks the connection unusable: after a framing or protocol violation we can
 * no longer tell which reply belongs to which command. */
static int fail_broken(struct qmp *q, int r, const char *what) {
        q->broken = true;
        set_error(q, "ProtocolError", what);
        return r;
}

static uint64_t deadline_from(int timeout_ms) {
        if (timeout_ms < 0)
                return UINT64_MAX;
        return now_monotonic_ns() + (uint64_t) timeout_ms * 1000000ull;
}

/* Milliseconds left until deadline for poll(2): -1 = forever, 0 = expired. */
static int remaining_ms(uint64_t deadline) {
        if (deadline == UINT64_MAX)
                return -1;
        uint64_t now = now_monotonic_ns();
        if (now >= deadline)
                return 0;
        uint64_t ms = (deadline - now + 999999) / 1000000;
        return ms > INT32_MAX ? INT32_MAX : (int) ms;
}

/* Waits for events on q->fd. 1 when ready, -ETIMEDOUT, or -errno. */
static int wait_fd(struct qmp *q, short events, uint64_t deadline) {
        for (;;) {
                int ms = remaining_ms(deadline);
                struct pollfd p = { .fd = q->fd, .events = events };
                int k = poll(&p, 1, ms);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -ETIMEDOUT;
                return 1;
        }
}

int qmp_parse_message(const char *line, size_t len, enum qmp_msg_kind *ret_kind, json_t **ret_msg) {
        if (len > QMP_MAX_LINE)
                return -EMSGSIZE;

        json_error_t jerr;
        /* JSON_ALLOW_NUL is not set: a NUL inside a string is rejected, so
         * every string we hand out is a proper C string. */
        _cleanup_(json_decrefp) json_t *m = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!m || !json_is_object(m))
                return -EBADMSG;

        json_t *greeting = json_object_get(m, "QMP");
        json_t *event = json_object_get(m, "event");
        json_t *ret = json_object_get(m, "return");
        json_t *error = json_object_get(m, "error");
        /* Exactly one of the four discriminating keys, or it is not QMP. */
        if (!!greeting + !!event + !!ret + !!error != 1)
                return -EBADMSG;

        enum qmp_msg_kind kind;
        if (greeting) {
                if (!json_is_object(greeting))
                        return -EBADMSG;
                kind = QMP_MSG_GREETING;
        } else if (event) {
                if (!json_is_string(event))
                        return -EBADMSG;
                kind = QMP_MSG_EVENT;
        } else if (ret) {
                kind = QMP_MSG_RETURN;
        } else {
                if (!json_is_object(error) || !json_is_string(json_object_get(error, "class")) ||
                    !json_is_string(json_object_get(error, "desc")))
                        return -EBADMSG;
                kind = QMP_MSG_ERROR;
        }

        *ret_kind = kind;
        if (ret_msg)
                *ret_msg = TAKE_PTR(m);
        return 0;
}

/* Drops the first n bytes of the receive buffer. */
static void buf_consume(struct qmp *q, size_t n) {
        memmove(q->buf, q->buf + n, q->len - n);
        q->len -= n;
        q->scanned = 0;
}

/*
 * Reads the next non-blank line and parses it. 0 with kind and message,
 * -ETIMEDOUT (connection still fine), or a fatal error that marks q broken.
 */
static int read_message(struct qmp *q, uint64_t deadline, enum qmp_msg_kind *ret_kind, json_t **ret_msg) {
        for (;;) {
                char *nl = q->len > q->scanned ? memchr(q->buf + q->scanned, '\n', q->len - q->scanned) : NULL;
                if (nl) {
                        size_t linelen = (size_t) (nl - q->buf);
                        size_t content = linelen;
                        while (content > 0 && (q->buf[content - 1] == '\r' || q->buf[content - 1] == ' ' ||
                                               q->buf[content - 1] == '\t'))
                                content--;
                        if (content == 0) {
                                buf_consume(q, linelen + 1);
                                continue;
                        }
                        enum qmp_msg_kind kind;
                        json_t *m = NULL;
                        int r = qmp_parse_message(q->buf, content, &kind, &m);
                        buf_consume(q, linelen + 1);
                        if (r < 0)
                                return fail_broken(q, r, "server sent a line that is not a QMP message");
                        *ret_kind = kind;
                        *ret_msg = m;
                        return 0;
                }
                q->scanned = q->len;
                if (q->len > QMP_MAX_LINE)
                        return fail_broken(q, -EMSGSIZE, "server sent a line longer than 1 MiB");

                if (q->len == q->cap) {
                        size_t ncap = MIN(MAX(q->cap * 2, (size_t) QMP_READ_CHUNK), (size_t) QMP_MAX_LINE + 1);
                        char *nb = realloc(q->buf, ncap);
                        if (!nb)
                                return -ENOMEM;
                        q->buf = nb;
                        q->cap = ncap;
                }

                int r = wait_fd(q, POLLIN, deadline);
                if (r < 0)
                        return r == -ETIMEDOUT ? r : fail_broken(q, r, "poll failed");
                ssize_t k = recv(q->fd, q->buf + q->len, q->cap - q->len, MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return fail_broken(q, negative_errno(), "read failed");
                }
                if (k == 0)
                        return fail_broken(q, -ECONNRESET, "server closed the connection");
                q->len += (size_t) k;
        }
}

/* Sends all of data; fd (if >= 0) rides along with the first byte. */
static int send_all(struct qmp *q, const char *data, size_t n, int fd, uint64_t deadline) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } control = { 0 };
        bool fd_pending = fd >= 0;

        while (n > 0) {
                struct iovec iov = { .iov_base = (void *) data, .iov_len = n };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                if (fd_pending) {
                        mh.msg_control = control.buf;
                        mh.msg_controllen = sizeof control.buf;
                        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &fd, sizeof(int));
                }
                ssize_t k = sendmsg(q->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                int r = wait_fd(q, POLLOUT, deadline);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        return negative_errno();
                }
                fd_pending = false;
                data += k;
                n -= (size_t) k;
        }
        return 0;
}

static void remember_event(struct qmp *q, const json_t *m) {
        snprintf(q->events[q->nevents % QMP_EVENT_RING], sizeof q->events[0], "%s",
                 json_string_value(json_object_get(m, "event")));
        q->nevents++;
}

static int execute_full(struct qmp *q, const char *cmd, json_t *args, int fd, uint64_t deadline,
                        json_t **ret_return) {
        if (q->broken)
                return -ENOTCONN;
        if (!cmd || (args && !json_is_object(args)))
                return -EINVAL;

        int64_t id = ++q->next_id;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:I}", "execute", cmd, "id", (json_int_t) id);
        if (!req)
                return -ENOMEM;
        if (args && json_object_set(req, "arguments", args) < 0)
                return -ENOMEM;
        _cleanup_free_ char *text = json_dumps(req, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        /* json_dumps escapes control characters, so the command is one line. */
        char *line = realloc(text, n + 2);
        if (!line)
                return -ENOMEM;
        text = line;
        text[n] = '\n';
        text[n + 1] = 0;

        int r = send_all(q, text, n + 1, fd, deadline);
        if (r < 0) {
                /* A partial command on the wire would make QEMU misparse the
                 * next one: the connection is done for. */
                return fail_broken(q, r, "failed to send command");
        }

        for (;;) {
                enum qmp_msg_kind kind;
                _cleanup_(json_decrefp) json_t *m = NULL;
                r = read_message(q, deadline, &kind, &m);
                if (r < 0) {
                        if (r == -ETIMEDOUT)
                                set_error(q, "Timeout", cmd);
                        return r;
                }

                if (kind == QMP_MSG_EVENT) {
                        remember_event(q, m);
                        continue;
                }
                if (kind == QMP_MSG_GREETING)
                        return fail_broken(q, -EBADMSG, "unexpected greeting");

                /* A reply carries our id. One with another id is the late answer
                 * to a command that timed out: skip it. A reply without an id is
                 * QEMU rejecting the request before it could read the id (that
                 * cannot happen with what we send, but it is an answer to us). */
                json_t *jid = json_object_get(m, "id");
                if (jid && (!json_is_integer(jid) || json_integer_value(jid) != id))
                        continue;

                if (kind == QMP_MSG_RETURN) {
                        q->error[0] = 0;
                        if (ret_return)
                                *ret_return = json_incref(json_object_get(m, "return"));
                        return 0;
                }

                json_t *e = json_object_get(m, "error");
                const char *class = json_string_value(json_object_get(e, "class"));
                set_error(q, class, json_string_value(json_object_get(e, "desc")));
                if (strcmp(class, "CommandNotFound") == 0)
                        return -EOPNOTSUPP;
                if (strcmp(class, "DeviceNotFound") == 0 || strcmp(class, "DeviceNotActive") == 0 ||
                    strcmp(class, "KVMMissingCap") == 0)
                        return -ENODEV;
                return -EIO;
        }
}

int qmp_read_events(struct qmp *q) {
        if (q->broken)
                return -ENOTCONN;
        int n = 0;
        for (;;) {
                enum qmp_msg_kind kind;
                _cleanup_(json_decrefp) json_t *m = NULL;
                int r = read_message(q, now_monotonic_ns(), &kind, &m);
                if (r == -ETIMEDOUT)
                        return n;
                if (r < 0)
                        return r;
                if (kind == QMP_MSG_GREETING)
                        return fail_broken(q, -EBADMSG, "unexpected greeting");
                if (kind == QMP_MSG_EVENT) {
                        remember_event(q, m);
                        n++;
                }
        }
}

int qmp_fd(const struct qmp *q) {
        return q->broken ? -1 : q->fd;
}

int qmp_execute(struct qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret_return) {
        return execute_full(q, cmd, args, -1, deadline_from(timeout_ms), ret_return);
}

int qmp_send_fd(struct qmp *q, int fd, const char *name) {
        if (fd < 0 || !name || !*name || strlen(name) > 63)
                return -EINVAL;
        _cleanup_(json_decrefp) json_t *args = json_pack("{s:s}", "fdname", name);
        if (!args)
                return -ENOMEM;
        return execute_full(q, "getfd", args, fd, deadline_from(QMP_DEFAULT_TIMEOUT_MS), NULL);
}

int qmp_connect_fd(int fd, int timeout_ms, struct qmp **ret) {
        _cleanup_close_ int owned = fd;
        if (fd < 0)
                return -EBADF;

        _cleanup_(qmp_freep) struct qmp *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->fd = TAKE_FD(owned);

        uint64_t deadline = deadline_from(timeout_ms);
        enum qmp_msg_kind kind;
        _cleanup_(json_decrefp) json_t *greeting = NULL;
        int r = read_message(q, deadline, &kind, &greeting);
        if (r < 0)
                return r;
        if (kind != QMP_MSG_GREETING)
                return -EBADMSG;

        r = execute_full(q, "qmp_capabilities", NULL, -1, deadline, NULL);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(q);
        return 0;
}

int qmp_connect(const char *path, int timeout_ms, struct qmp **ret) {
        if (!path)
                return -ENAMETOOLONG;
        int fd, r = unix_connect(path, 0, &fd);
        if (r < 0)
                return r;
        return qmp_connect_fd(fd, timeout_ms, ret);
}
