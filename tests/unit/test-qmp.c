/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/qmp against a scripted fake QEMU: a thread on the other end of a
 * socketpair (or a Unix socket) that greets, reads commands and answers the
 * way QEMU 7.2 does, plus the misbehaviour a confused QEMU could show.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macros.h"
#include "qmp.h"

#define GREETING "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}}, \"capabilities\": [\"oob\"]}}\r\n"

/* ---- fake server helpers (run on the server thread) ---- */

static void srv_send(int fd, const char *fmt, ...) {
        char *s;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        assert_true(n >= 0);
        assert_int_equal(send(fd, s, (size_t) n, MSG_NOSIGNAL), n);
        free(s);
}

/* Reads one command line; returns the parsed object (NULL on EOF). Any fd
 * that came with it lands in *ret_fd when ret_fd is given. */
static json_t *srv_recv(int fd, int *ret_fd) {
        char line[65536];
        size_t len = 0;
        for (;;) {
                char c;
                union {
                        struct cmsghdr h;
                        char buf[CMSG_SPACE(sizeof(int))];
                } control;
                struct iovec iov = { &c, 1 };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                     .msg_controllen = sizeof control.buf };
                ssize_t k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (k <= 0)
                        return NULL;
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                        int got;
                        memcpy(&got, CMSG_DATA(cm), sizeof got);
                        if (ret_fd)
                                *ret_fd = got;
                        else
                                close(got);
                }
                if (c == '\n')
                        break;
                assert_true(len < sizeof line - 1);
                line[len++] = c;
        }
        json_error_t err;
        json_t *m = json_loadb(line, len, 0, &err);
        assert_non_null(m);
        return m;
}

/* Reads a command, checks its name, returns its id. */
static json_int_t srv_expect(int fd, const char *cmd) {
        json_t *m = srv_recv(fd, NULL);
        assert_non_null(m);
        assert_string_equal(json_string_value(json_object_get(m, "execute")), cmd);
        json_int_t id = json_integer_value(json_object_get(m, "id"));
        json_decref(m);
        return id;
}

static void srv_handshake(int fd) {
        srv_send(fd, GREETING);
        json_int_t id = srv_expect(fd, "qmp_capabilities");
        srv_send(fd, "{\"return\": {}, \"id\": %lld}\r\n", (long long) id);
}

struct fake {
        pthread_t thread;
        int client_fd;
        int server_fd;
};

static void fake_start(struct fake *f, void *(*fn)(void *)) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        f->client_fd = sv[0];
        f->server_fd = sv[1];
        assert_int_equal(pthread_create(&f->thread, NULL, fn, (void *) (intptr_t) sv[1]), 0);
}

static void fake_join(struct fake *f) {
        assert_int_equal(pthread_join(f->thread, NULL), 0);
        close(f->server_fd);
}

static struct qmp *fake_connect(struct fake *f, void *(*fn)(void *)) {
        fake_start(f, fn);
        struct qmp *q = NULL;
        assert_int_equal(qmp_connect_fd(f->client_fd, 2000, &q), 0);
        assert_non_null(q);
        return q;
}

/* ---- tests ---- */

static void *srv_basic(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        json_int_t id = srv_expect(fd, "query-status");
        /* events may come before the answer */
        srv_send(fd, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"STOP\"}\r\n");
        srv_send(fd, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 3}, \"event\": \"RESUME\"}\r\n");
        srv_send(fd, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": true}, \"id\": %lld}\r\n",
                 (long long) id);
        /* arguments are passed through */
        json_t *m = srv_recv(fd, NULL);
        assert_string_equal(json_string_value(json_object_get(m, "execute")), "migrate-set-capabilities");
        json_t *caps = json_object_get(json_object_get(m, "arguments"), "capabilities");
        assert_string_equal(json_string_value(json_object_get(json_array_get(caps, 0), "capability")),
                            "x-ignore-shared");
        srv_send(fd, "{\"return\": {}, \"id\": %lld}\r\n", (long long) json_integer_value(json_object_get(m, "id")));
        json_decref(m);
        return NULL;
}

static void test_greeting_return_events(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_basic);

        json_t *ret = NULL;
        assert_int_equal(qmp_execute(q, "query-status", NULL, 2000, &ret), 0);
        assert_string_equal(json_string_value(json_object_get(ret, "status")), "running");
        json_decref(ret);
        assert_int_equal(qmp_event_count(q), 2);
        assert_string_equal(qmp_event_recent(q, 0), "RESUME");
        assert_string_equal(qmp_event_recent(q, 1), "STOP");
        assert_null(qmp_event_recent(q, 2));
        assert_string_equal(qmp_last_error(q), "");

        json_t *args = json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared", "state", 1);
        assert_int_equal(qmp_execute(q, "migrate-set-capabilities", args, 2000, NULL), 0);
        /* not consumed */
        assert_int_equal(args->refcount, 1);
        json_decref(args);

        qmp_free(q);
        fake_join(&f);
}

static void *srv_errors(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        json_int_t id = srv_expect(fd, "migrate");
        srv_send(fd, "{\"id\": %lld, \"error\": {\"class\": \"GenericError\", \"desc\": \"boom\"}}\r\n",
                 (long long) id);
        id = srv_expect(fd, "no-such-command");
        srv_send(fd, "{\"id\": %lld, \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command "
                     "no-such-command has not been found\"}}\r\n",
                 (long long) id);
        id = srv_expect(fd, "device_del");
        srv_send(fd, "{\"id\": %lld, \"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"x\"}}\r\n",
                 (long long) id);
        /* after errors the connection still works */
        id = srv_expect(fd, "cont");
        srv_send(fd, "{\"return\": {}, \"id\": %lld}\r\n", (long long) id);
        return NULL;
}

static void test_errors(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_errors);
        json_t *ret = (json_t *) 0x1;

        assert_int_equal(qmp_execute(q, "migrate", NULL, 2000, &ret), -EIO);
        assert_ptr_equal(ret, (json_t *) 0x1); /* untouched on failure */
        assert_string_equal(qmp_last_error(q), "GenericError: boom");
        assert_int_equal(qmp_execute(q, "no-such-command", NULL, 2000, NULL), -EOPNOTSUPP);
        assert_non_null(strstr(qmp_last_error(q), "CommandNotFound"));
        assert_int_equal(qmp_execute(q, "device_del", NULL, 2000, NULL), -ENODEV);
        assert_int_equal(qmp_execute(q, "cont", NULL, 2000, NULL), 0);
        assert_string_equal(qmp_last_error(q), "");

        /* bad arguments never reach the wire */
        json_t *notobj = json_integer(1);
        assert_int_equal(qmp_execute(q, "cont", notobj, 2000, NULL), -EINVAL);
        json_decref(notobj);

        qmp_free(q);
        fake_join(&f);
}

static void *srv_late(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        json_int_t id1 = srv_expect(fd, "slow");
        /* no answer until the next command arrives: the client times out */
        json_int_t id2 = srv_expect(fd, "fast");
        assert_true(id2 > id1);
        srv_send(fd, "{\"return\": \"late\", \"id\": %lld}\r\n", (long long) id1);
        srv_send(fd, "{\"return\": \"stale\", \"id\": \"not-a-number\"}\r\n");
        srv_send(fd, "{\"return\": \"fast\", \"id\": %lld}\r\n", (long long) id2);
        return NULL;
}

static void test_timeout_then_late_reply_skipped(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_late);
        assert_int_equal(qmp_execute(q, "slow", NULL, 100, NULL), -ETIMEDOUT);
        assert_non_null(strstr(qmp_last_error(q), "Timeout"));
        json_t *ret = NULL;
        assert_int_equal(qmp_execute(q, "fast", NULL, 2000, &ret), 0);
        assert_string_equal(json_string_value(ret), "fast");
        json_decref(ret);
        qmp_free(q);
        fake_join(&f);
}

static void *srv_overlong(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        srv_expect(fd, "query-status");
        char *big = malloc(QMP_MAX_LINE + 64);
        assert_non_null(big);
        memset(big, ' ', QMP_MAX_LINE + 64);
        big[0] = '{';
        size_t off = 0, n = QMP_MAX_LINE + 64;
        while (off < n) {
                ssize_t k = send(fd, big + off, n - off, MSG_NOSIGNAL);
                if (k <= 0)
                        break; /* client gave up and closed: fine */
                off += (size_t) k;
        }
        free(big);
        return NULL;
}

static void test_overlong_line(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_overlong);
        assert_int_equal(qmp_execute(q, "query-status", NULL, 5000, NULL), -EMSGSIZE);
        /* desynchronised for good */
        assert_int_equal(qmp_execute(q, "query-status", NULL, 100, NULL), -ENOTCONN);
        qmp_free(q); /* closes: unblocks the sender */
        fake_join(&f);
}

static void *srv_garbage(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        srv_expect(fd, "a");
        srv_send(fd, "this is not json\r\n");
        return NULL;
}

static void test_garbage_line(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_garbage);
        assert_int_equal(qmp_execute(q, "a", NULL, 2000, NULL), -EBADMSG);
        assert_int_equal(qmp_execute(q, "a", NULL, 100, NULL), -ENOTCONN);
        qmp_free(q);
        fake_join(&f);
}

static void *srv_eof(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        srv_expect(fd, "quit");
        shutdown(fd, SHUT_RDWR);
        return NULL;
}

static void test_eof(void **state) {
        struct fake f;
        struct qmp *q = fake_connect(&f, srv_eof);
        assert_int_equal(qmp_execute(q, "quit", NULL, 2000, NULL), -ECONNRESET);
        qmp_free(q);
        fake_join(&f);
}

static void *srv_bad_greeting(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_send(fd, "{\"return\": {}}\r\n");
        return NULL;
}

static void *srv_silent(void *arg) {
        int fd = (int) (intptr_t) arg;
        char c;
        (void) !read(fd, &c, 1); /* until the client closes */
        return NULL;
}

static void test_connect_failures(void **state) {
        struct fake f;
        struct qmp *q = (struct qmp *) 0x1;

        fake_start(&f, srv_bad_greeting);
        assert_int_equal(qmp_connect_fd(f.client_fd, 2000, &q), -EBADMSG);
        assert_ptr_equal(q, (struct qmp *) 0x1);
        fake_join(&f);

        fake_start(&f, srv_silent);
        assert_int_equal(qmp_connect_fd(f.client_fd, 50, &q), -ETIMEDOUT);
        fake_join(&f);

        assert_int_equal(qmp_connect_fd(-1, 50, &q), -EBADF);
        assert_int_equal(qmp_connect("/nonexistent/qmp.sock", 50, &q), -ENOENT);
        char longpath[200];
        memset(longpath, 'a', sizeof longpath - 1);
        longpath[sizeof longpath - 1] = 0;
        assert_int_equal(qmp_connect(longpath, 50, &q), -ENAMETOOLONG);
        assert_ptr_equal(q, (struct qmp *) 0x1);
        qmp_free(NULL);
}

static void *srv_getfd(void *arg) {
        int fd = (int) (intptr_t) arg;
        srv_handshake(fd);
        int got = -1;
        json_t *m = srv_recv(fd, &got);
        assert_string_equal(json_string_value(json_object_get(m, "execute")), "getfd");
        assert_string_equal(json_string_value(json_object_get(json_object_get(m, "arguments"), "fdname")), "state");
        assert_true(got >= 0);
        /* prove it is the real file: write through it */
        assert_int_equal(write(got, "via-scm", 7), 7);
        close(got);
        srv_send(fd, "{\"return\": {}, \"id\": %lld}\r\n", (long long) json_integer_value(json_object_get(m, "id")));
        json_decref(m);
        return NULL;
}

static void *accept_then_getfd(void *a) {
        int lfd = (int) (intptr_t) a;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        assert_true(fd >= 0);
        srv_getfd((void *) (intptr_t) fd);
        close(fd);
        return NULL;
}

static void test_send_fd_over_unix_socket(void **state) {
        char dir[] = "/tmp/test-qmp-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[64];
        snprintf(path, sizeof path, "%s/qmp.sock", dir);

        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(lfd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        assert_int_equal(bind(lfd, (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal(listen(lfd, 1), 0);

        /* the server thread accepts, then runs the script */
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, accept_then_getfd, (void *) (intptr_t) lfd), 0);

        struct qmp *q = NULL;
        assert_int_equal(qmp_connect(path, 2000, &q), 0);

        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(qmp_send_fd(q, p[1], "state"), 0);
        char buf[16] = { 0 };
        assert_int_equal(read(p[0], buf, sizeof buf), 7);
        assert_memory_equal(buf, "via-scm", 7);
        close(p[0]);
        close(p[1]);

        assert_int_equal(qmp_send_fd(q, -1, "x"), -EINVAL);
        assert_int_equal(qmp_send_fd(q, 0, ""), -EINVAL);

        qmp_free(q);
        assert_int_equal(pthread_join(t, NULL), 0);
        close(lfd);
        unlink(path);
        rmdir(dir);
}

static void test_parse_message(void **state) {
        enum qmp_msg_kind k;
        json_t *m = NULL;
        static const char greet[] = "{\"QMP\": {\"version\": {}, \"capabilities\": []}}";
        assert_int_equal(qmp_parse_message(greet, strlen(greet), &k, &m), 0);
        assert_int_equal(k, QMP_MSG_GREETING);
        json_decref(m);

        static const char ret[] = "{\"return\": [1, 2], \"id\": 3}\r";
        assert_int_equal(qmp_parse_message(ret, strlen(ret), &k, NULL), 0);
        assert_int_equal(k, QMP_MSG_RETURN);
        static const char ev[] = "{\"event\": \"SHUTDOWN\", \"data\": {\"guest\": true}}";
        assert_int_equal(qmp_parse_message(ev, strlen(ev), &k, NULL), 0);
        assert_int_equal(k, QMP_MSG_EVENT);
        static const char err[] = "{\"error\": {\"class\": \"GenericError\", \"desc\": \"x\"}}";
        assert_int_equal(qmp_parse_message(err, strlen(err), &k, NULL), 0);
        assert_int_equal(k, QMP_MSG_ERROR);

        static const char *const bad[] = {
                "",
                "[]",
                "42",
                "{}",
                "{\"return\": 1, \"event\": \"X\"}",         /* ambiguous */
                "{\"event\": 5}",                           /* event name not a string */
                "{\"error\": {\"class\": \"X\"}}",            /* no desc */
                "{\"error\": \"boom\"}",
                "{\"QMP\": 1}",
                "{\"return\": 1, \"return\": 2}",           /* duplicate keys */
                "{\"return\": \"a\\u0000b\"}",              /* NUL inside a string */
                "{\"return\": 1} trailing",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                m = (json_t *) 0x1;
                assert_int_equal(qmp_parse_message(bad[i], strlen(bad[i]), &k, &m), -EBADMSG);
                assert_ptr_equal(m, (json_t *) 0x1);
        }
        /* embedded NUL byte in the raw line */
        static const char nul[] = "{\"return\": 1}\0junk";
        assert_int_equal(qmp_parse_message(nul, sizeof nul - 1, &k, NULL), -EBADMSG);
        assert_int_equal(qmp_parse_message(greet, QMP_MAX_LINE + 1, &k, NULL), -EMSGSIZE);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_greeting_return_events),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_timeout_then_late_reply_skipped),
                cmocka_unit_test(test_overlong_line),
                cmocka_unit_test(test_garbage_line),
                cmocka_unit_test(test_eof),
                cmocka_unit_test(test_connect_failures),
                cmocka_unit_test(test_send_fd_over_unix_socket),
                cmocka_unit_test(test_parse_message),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
