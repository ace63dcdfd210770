/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests for the guest agent: the pure logic of guest_lib (path checks,
 * request parsing and limits, env merging), then the real airlock-guest
 * binary in host test mode (--port on a Unix socket this test listens on),
 * driven frame by frame like the host would.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "proto.h"
#include "request.h"
#include "util.h"

/* ---- guest_lib ---------------------------------------------------------- */

/* A literal payload as the (pointer, length) pair the parsers take. */
#define J(s) (s), strlen(s)

/* Builds "/" followed by n-1 path bytes ("/aaaa/aaaa..."). */
static char *long_path(size_t n) {
        char *p = malloc(n + 1);
        assert_non_null(p);
        for (size_t i = 0; i < n; i++)
                p[i] = i % 5 == 0 ? '/' : 'a';
        p[n] = 0;
        return p;
}

static void test_path_validate(void **state) {
        assert_int_equal(guest_path_validate("/"), 0);
        assert_int_equal(guest_path_validate("/a/b"), 0);
        assert_int_equal(guest_path_validate("//a//b/"), 0);
        assert_int_equal(guest_path_validate("/a/..b"), 0);
        assert_int_equal(guest_path_validate("/a/b.."), 0);
        assert_int_equal(guest_path_validate("/..."), 0);
        assert_int_equal(guest_path_validate("/./a"), 0);
        assert_int_equal(guest_path_validate("/.."), -EINVAL);
        assert_int_equal(guest_path_validate("/a/../b"), -EINVAL);
        assert_int_equal(guest_path_validate("/a/.."), -EINVAL);
        assert_int_equal(guest_path_validate("/a/../"), -EINVAL);
        assert_int_equal(guest_path_validate("a/b"), -EINVAL);
        assert_int_equal(guest_path_validate("./a"), -EINVAL);
        assert_int_equal(guest_path_validate(""), -EINVAL);
        assert_int_equal(guest_path_validate(NULL), -EINVAL);

        char *p = long_path(GUEST_MAX_PATH);
        assert_int_equal(guest_path_validate(p), 0);
        free(p);
        p = long_path(GUEST_MAX_PATH + 1);
        assert_int_equal(guest_path_validate(p), -EINVAL);
        free(p);
}

/* Parses an EXEC payload given as a C string. */
static int exec_parse(const char *json, struct guest_exec_request **ret) {
        return guest_exec_request_parse(json, strlen(json), ret);
}

static void test_exec_parse(void **state) {
        struct guest_exec_request *req = NULL;

        assert_int_equal(exec_parse("{\"argv\":[\"ls\",\"-l\"]}", &req), 0);
        assert_string_equal(req->argv[0], "ls");
        assert_string_equal(req->argv[1], "-l");
        assert_null(req->argv[2]);
        assert_non_null(req->env);
        assert_null(req->env[0]);
        assert_string_equal(req->cwd, "/");
        assert_int_equal(req->uid, 0);
        assert_false(req->has_uid);
        assert_false(req->pty);
        assert_int_equal(req->rows, 24);
        assert_int_equal(req->cols, 80);
        guest_exec_request_free(req);

        assert_int_equal(exec_parse("{\"argv\":[\"sh\"],\"env\":{\"A\":\"1\",\"B\":\"\"},\"cwd\":\"/tmp\","
                                    "\"uid\":1000,\"gid\":100,\"pty\":true,\"rows\":50,\"cols\":132}",
                                    &req),
                         0);
        assert_string_equal(req->env[0], "A=1");
        assert_string_equal(req->env[1], "B=");
        assert_string_equal(req->cwd, "/tmp");
        assert_true(req->has_uid);
        assert_int_equal(req->uid, 1000);
        assert_int_equal(req->gid, 100);
        assert_true(req->pty);
        assert_int_equal(req->rows, 50);
        assert_int_equal(req->cols, 132);
        guest_exec_request_free(req);

        req = NULL;
        static const char *const bad[] = {
                "",
                "{",
                "[]",
                "{}",
                "{\"argv\":[]}",
                "{\"argv\":\"sh\"}",
                "{\"argv\":[1]}",
                "{\"argv\":[\"\"]}",
                "{\"argv\":[\"a\\u0000b\"]}",
                "{\"argv\":[\"sh\"],\"env\":[]}",
                "{\"argv\":[\"sh\"],\"env\":{\"A=B\":\"x\"}}",
                "{\"argv\":[\"sh\"],\"env\":{\"\":\"x\"}}",
                "{\"argv\":[\"sh\"],\"env\":{\"A\":1}}",
                "{\"argv\":[\"sh\"],\"cwd\":\"tmp\"}",
                "{\"argv\":[\"sh\"],\"cwd\":\"/a/../b\"}",
                "{\"argv\":[\"sh\"],\"uid\":-1}",
                "{\"argv\":[\"sh\"],\"uid\":4294967295}",
                "{\"argv\":[\"sh\"],\"gid\":\"0\"}",
                "{\"argv\":[\"sh\"],\"pty\":1}",
                "{\"argv\":[\"sh\"],\"rows\":70000}",
                "{\"argv\":[\"sh\"],\"argv\":[\"ls\"]}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                int r = exec_parse(bad[i], &req);
                if (r != -EINVAL)
                        fail_msg("payload %s gave %d", bad[i], r);
                assert_null(req);
        }
}

/* {"argv":["x",...argc times],"env":{"K0":"v",...envc times}}. */
static char *exec_with_counts(size_t argc, size_t envc) {
        size_t cap = 64 + argc * 4 + envc * 24, n = 0;
        char *s = malloc(cap);
        assert_non_null(s);
        n += (size_t) snprintf(s + n, cap - n, "{\"argv\":[");
        for (size_t i = 0; i < argc; i++)
                n += (size_t) snprintf(s + n, cap - n, "%s\"x\"", i ? "," : "");
        n += (size_t) snprintf(s + n, cap - n, "],\"env\":{");
        for (size_t i = 0; i < envc; i++)
                n += (size_t) snprintf(s + n, cap - n, "%s\"K%zu\":\"v\"", i ? "," : "", i);
        snprintf(s + n, cap - n, "}}");
        assert_true(n + 2 < cap);
        return s;
}

static void test_exec_limits(void **state) {
        struct guest_exec_request *req = NULL;
        char *s;

        s = exec_with_counts(GUEST_MAX_ARGV, GUEST_MAX_ENV);
        assert_int_equal(exec_parse(s, &req), 0);
        assert_int_equal(guest_strv_length(req->argv), GUEST_MAX_ARGV);
        assert_int_equal(guest_strv_length(req->env), GUEST_MAX_ENV);
        guest_exec_request_free(req);
        req = NULL;
        free(s);

        s = exec_with_counts(GUEST_MAX_ARGV + 1, 0);
        assert_int_equal(exec_parse(s, &req), -E2BIG);
        free(s);
        s = exec_with_counts(1, GUEST_MAX_ENV + 1);
        assert_int_equal(exec_parse(s, &req), -E2BIG);
        free(s);
        assert_null(req);

        /* one string of exactly 128 KiB passes, one byte more does not */
        for (size_t extra = 0; extra < 2; extra++) {
                size_t n = GUEST_MAX_STRING + extra;
                s = malloc(n + 64);
                assert_non_null(s);
                int k = snprintf(s, n + 64, "{\"argv\":[\"echo\",\"");
                memset(s + k, 'y', n);
                memcpy(s + k + n, "\"]}", 4);
                int r = exec_parse(s, &req);
                if (extra == 0) {
                        assert_int_equal(r, 0);
                        assert_int_equal(strlen(req->argv[1]), n);
                        guest_exec_request_free(req);
                        req = NULL;
                } else
                        assert_int_equal(r, -EINVAL);
                free(s);
        }
}

/* Finds "KEY=" in a vector and returns the value. */
static const char *env_get(char **env, const char *key) {
        size_t kl = strlen(key);
        for (char **e = env; *e; e++)
                if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=')
                        return *e + kl + 1;
        return NULL;
}

static void test_env_merge(void **state) {
        char *base[] = { "A=base", "B=base", "HOME=/home/x", NULL };
        char *overlay[] = { "B=over", "C=over", NULL };
        char **env = NULL;

        assert_int_equal(guest_env_merge(base, overlay, "/root", &env), 0);
        assert_string_equal(env_get(env, "A"), "base");
        assert_string_equal(env_get(env, "B"), "over");
        assert_string_equal(env_get(env, "C"), "over");
        assert_string_equal(env_get(env, "HOME"), "/home/x"); /* given wins over default */
        assert_string_equal(env_get(env, "PATH"), GUEST_DEFAULT_PATH);
        assert_int_equal(guest_strv_length(env), 5);
        guest_strv_free(env);

        char *path_overlay[] = { "PATH=/opt/bin", NULL };
        assert_int_equal(guest_env_merge(NULL, path_overlay, "/", &env), 0);
        assert_string_equal(env_get(env, "PATH"), "/opt/bin");
        assert_string_equal(env_get(env, "HOME"), "/");
        assert_int_equal(guest_strv_length(env), 2);
        guest_strv_free(env);

        assert_int_equal(guest_env_merge(NULL, NULL, NULL, &env), 0);
        assert_int_equal(guest_strv_length(env), 1);
        guest_strv_free(env);
}

static void test_small_parsers(void **state) {
        char *nonce = NULL;
        assert_int_equal(guest_hello_parse(J("{\"nonce\":\"ab12\",\"version\":1}"), &nonce), 0);
        assert_string_equal(nonce, "ab12");
        free(nonce);
        nonce = NULL;
        assert_int_equal(guest_hello_parse(J("{\"nonce\":\"x\",\"version\":2}"), &nonce), -EPROTONOSUPPORT);
        assert_int_equal(guest_hello_parse(J("{\"nonce\":7}"), &nonce), -EINVAL);
        assert_null(nonce);

        int sig = -1;
        assert_int_equal(guest_signal_parse(J("{\"signal\":9}"), &sig), 0);
        assert_int_equal(sig, 9);
        assert_int_equal(guest_signal_parse(J("{\"signal\":0}"), &sig), -EINVAL);
        assert_int_equal(guest_signal_parse(J("{\"signal\":65}"), &sig), -EINVAL);
        assert_int_equal(guest_signal_parse(J("{}"), &sig), -EINVAL);

        uint16_t rows = 0, cols = 0;
        assert_int_equal(guest_resize_parse(J("{\"rows\":40,\"cols\":100}"), &rows, &cols), 0);
        assert_int_equal(rows, 40);
        assert_int_equal(cols, 100);
        assert_int_equal(guest_resize_parse(J("{\"rows\":40}"), &rows, &cols), -EINVAL);

        bool abort_ = true;
        assert_int_equal(guest_file_end_parse(J("{}"), &abort_), 0);
        assert_false(abort_);
        assert_int_equal(guest_file_end_parse(J("{\"abort\":true}"), &abort_), 0);
        assert_true(abort_);
        assert_int_equal(guest_file_end_parse(J("{\"abort\":\"yes\"}"), &abort_), -EINVAL);
}

static void test_identity_parse(void **state) {
        struct guest_identity *id = NULL;
        char json[512];
        snprintf(json, sizeof json,
                 "{\"sandbox_id\":\"sbx-1\",\"hostname\":\"box-1\",\"env\":{\"LANG\":\"C.UTF-8\"},"
                 "\"time_ns\":1700000000123456789,\"seed\":\"%s\"}",
                 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        assert_int_equal(guest_identity_parse(json, strlen(json), &id), 0);
        assert_string_equal(id->sandbox_id, "sbx-1");
        assert_string_equal(id->hostname, "box-1");
        assert_string_equal(id->env[0], "LANG=C.UTF-8");
        assert_true(id->has_time);
        assert_true(id->time_ns == 1700000000123456789ull);
        assert_true(id->has_seed);
        assert_int_equal(id->seed[0], 0);
        assert_int_equal(id->seed[31], 0x1f);
        guest_identity_free(id);

        assert_int_equal(guest_identity_parse("{}", 2, &id), 0);
        assert_null(id->hostname);
        assert_false(id->has_seed);
        guest_identity_free(id);
        id = NULL;

        static const char *const bad[] = {
                "{\"seed\":\"00\"}",
                "{\"seed\":\"zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"}",
                "{\"hostname\":\"bad host\"}",
                "{\"hostname\":\"\"}",
                "{\"sandbox_id\":\"a/b\"}",
                "{\"time_ns\":-1}",
                "{\"env\":{\"A\":null}}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(guest_identity_parse(bad[i], strlen(bad[i]), &id), -EINVAL);
        assert_null(id);
}

static void test_path_request_parse(void **state) {
        struct guest_path_request req;
        const char *j;

        j = "{\"path\":\"/tmp/f\"}";
        assert_int_equal(guest_path_request_parse(PROTO_FILE_WRITE, j, strlen(j), &req), 0);
        assert_string_equal(req.path, "/tmp/f");
        assert_int_equal(req.mode, 0644);
        guest_path_request_release(&req);

        j = "{\"path\":\"/tmp/f\",\"mode\":493}";
        assert_int_equal(guest_path_request_parse(PROTO_FILE_WRITE, j, strlen(j), &req), 0);
        assert_int_equal(req.mode, 0755);
        guest_path_request_release(&req);

        j = "{\"path\":\"/tmp/f\",\"mode\":4096}";
        assert_int_equal(guest_path_request_parse(PROTO_FILE_WRITE, j, strlen(j), &req), -EINVAL);

        j = "{\"from\":\"/a\",\"to\":\"/b\"}";
        assert_int_equal(guest_path_request_parse(PROTO_RENAME, j, strlen(j), &req), 0);
        assert_string_equal(req.path, "/a");
        assert_string_equal(req.to, "/b");
        guest_path_request_release(&req);

        j = "{\"from\":\"/a\",\"to\":\"/../b\"}";
        assert_int_equal(guest_path_request_parse(PROTO_RENAME, j, strlen(j), &req), -EINVAL);
        j = "{\"from\":\"/a\"}";
        assert_int_equal(guest_path_request_parse(PROTO_RENAME, j, strlen(j), &req), -EINVAL);

        j = "{\"path\":\"/d\",\"recursive\":true}";
        assert_int_equal(guest_path_request_parse(PROTO_REMOVE, j, strlen(j), &req), 0);
        assert_true(req.flag);
        guest_path_request_release(&req);

        j = "{\"path\":\"/d\",\"parents\":true}";
        assert_int_equal(guest_path_request_parse(PROTO_MKDIR, j, strlen(j), &req), 0);
        assert_true(req.flag);
        guest_path_request_release(&req);

        j = "{\"path\":\"relative\"}";
        assert_int_equal(guest_path_request_parse(PROTO_STAT, j, strlen(j), &req), -EINVAL);
        j = "{}";
        assert_int_equal(guest_path_request_parse(PROTO_LIST, j, strlen(j), &req), -EINVAL);
        assert_int_equal(guest_path_request_parse(PROTO_PING, j, strlen(j), &req), -EOPNOTSUPP);
}

static void test_utf8_sanitize(void **state) {
        char *s = NULL;
        assert_int_equal(guest_utf8_sanitize("caf\xc3\xa9", 5, &s), 0);
        assert_string_equal(s, "caf\xc3\xa9");
        free(s);
        assert_int_equal(guest_utf8_sanitize("a\xff"
                                             "b\xc0\xaf",
                                             5, &s),
                         0);
        assert_string_equal(s, "a\xef\xbf\xbd"
                               "b\xef\xbf\xbd\xef\xbf\xbd");
        free(s);
        assert_int_equal(guest_utf8_sanitize("\xed\xa0\x80", 3, &s), 0); /* a surrogate */
        assert_string_equal(s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
        free(s);
}

/* ---- the agent binary in host test mode --------------------------------- */

#define TIMEOUT_MS 15000

struct harness {
        char dir[64];
        char sock[128];
        pid_t agent;
        int fd;
        struct proto_reader reader;
};

struct frame {
        uint8_t type;
        uint32_t stream;
        uint8_t *data;
        size_t len;
};

static void frame_release(struct frame *f) {
        free(f->data);
        *f = (struct frame){ 0 };
}

/* meson passes the agent it built (tests/unit/meson.build); run by hand,
 * the one of this build dir */
static const char *agent_binary(void) {
        const char *e = getenv("AIRLOCK_GUEST_BINARY");
        return e && *e ? e : AIRLOCK_BUILD_DIR "/src/guest/airlock-guest";
}

static int harness_setup(void **state) {
        struct harness *h = calloc(1, sizeof *h);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        assert_non_null(h);
        *state = h;
        h->fd = -1;
        h->agent = -1;
        /* the agent is part of every build: without it the agent tests
         * fail, all of them, rather than pass untested */
        if (access(agent_binary(), X_OK) < 0) {
                fprintf(stderr, "the guest agent %s cannot be run: %s (AIRLOCK_GUEST_BINARY names another)\n",
                        agent_binary(), strerror(errno));
                return -1;
        }

        snprintf(h->dir, sizeof h->dir, "/tmp/test-guest-XXXXXX");
        assert_non_null(mkdtemp(h->dir));
        snprintf(h->sock, sizeof h->sock, "%s/chan.sock", h->dir);
        assert_true(strlen(h->sock) < sizeof sa.sun_path);
        memcpy(sa.sun_path, h->sock, strlen(h->sock) + 1);
        int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(ls >= 0);
        assert_int_equal(bind(ls, (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal(listen(ls, 1), 0);

        h->agent = fork();
        assert_true(h->agent >= 0);
        if (h->agent == 0) {
                execl(agent_binary(), "airlock-guest", "--port", h->sock, "--log-level", "warn",
                      (char *) NULL);
                _exit(127);
        }
        struct pollfd p = { .fd = ls, .events = POLLIN };
        assert_int_equal(poll(&p, 1, TIMEOUT_MS), 1);
        h->fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        assert_true(h->fd >= 0);
        close(ls); /* the agent stops when this connection ends */
        assert_int_equal(proto_reader_init(&h->reader), 0);
        return 0;
}

static int harness_teardown(void **state) {
        struct harness *h = *state;
        if (h->fd >= 0)
                close(h->fd);
        if (h->agent > 0) {
                /* it should stop on its own once the channel is gone */
                int status;
                for (int i = 0; i < 200 && waitpid(h->agent, &status, WNOHANG) == 0; i++)
                        usleep(10 * 1000);
                kill(h->agent, SIGKILL);
                waitpid(h->agent, NULL, 0);
        }
        if (h->dir[0])
                rm_rf(h->dir);
        proto_reader_release(&h->reader);
        free(h);
        return 0;
}

static struct harness *harness_get(void **state) {
        struct harness *h = *state;
        if (h->fd < 0)
                fail_msg("no agent: its start failed");
        return h;
}

static void send_raw(struct harness *h, uint8_t type, uint32_t stream, const void *data, size_t len) {
        assert_int_equal(proto_write_frame(h->fd, type, stream, data, len), 0);
}

static void send_json(struct harness *h, uint8_t type, uint32_t stream, const char *json) {
        send_raw(h, type, stream, json, strlen(json));
}

/* Receives the next frame (failing the test after TIMEOUT_MS). */
static void recv_frame(struct harness *h, struct frame *ret) {
        for (;;) {
                struct proto_header hd;
                const uint8_t *p;
                int r = proto_reader_next(&h->reader, &hd, &p);
                assert_true(r >= 0);
                if (r == 1) {
                        ret->type = hd.type;
                        ret->stream = hd.stream;
                        ret->len = hd.length;
                        ret->data = malloc(hd.length + 1);
                        assert_non_null(ret->data);
                        memcpy(ret->data, p, hd.length);
                        ret->data[hd.length] = 0;
                        proto_reader_pop(&h->reader, &hd);
                        return;
                }
                struct pollfd pf = { .fd = h->fd, .events = POLLIN };
                if (poll(&pf, 1, TIMEOUT_MS) != 1)
                        fail_msg("timed out waiting for a frame");
                assert_true(proto_reader_fill(&h->reader, h->fd) > 0);
        }
}

/* Receives the next frame and checks type and stream. */
static void expect_frame(struct harness *h, uint8_t type, uint32_t stream, struct frame *ret) {
        recv_frame(h, ret);
        if (ret->type != type || ret->stream != stream)
                fail_msg("expected %s on %u, got %s on %u: %.*s", proto_type_name(type), stream,
                         proto_type_name(ret->type), ret->stream, (int) MIN(ret->len, 200u),
                         (char *) ret->data);
}

/* Expects ERROR on stream with that errno. */
static void expect_error(struct harness *h, uint32_t stream, int err) {
        struct frame f;
        expect_frame(h, PROTO_ERROR, stream, &f);
        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
        assert_non_null(j);
        if (json_integer_value(json_object_get(j, "errno")) != err)
                fail_msg("expected errno %d, got %s", err, (char *) f.data);
        assert_true(json_is_string(json_object_get(j, "message")));
        json_decref(j);
        frame_release(&f);
}

/* Expects RESULT on stream and returns its JSON. */
static json_t *expect_result(struct harness *h, uint32_t stream) {
        struct frame f;
        expect_frame(h, PROTO_RESULT, stream, &f);
        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
        assert_non_null(j);
        frame_release(&f);
        return j;
}

struct run_result {
        char out[4096], err[4096];
        size_t out_len, err_len;
        int exit_code, signal;
        pid_t pid;
};

/* Collects a process's STDOUT/STDERR until its EXIT. */
static void collect_process(struct harness *h, uint32_t stream, struct run_result *res) {
        for (;;) {
                struct frame f;
                recv_frame(h, &f);
                assert_int_equal(f.stream, stream);
                if (f.type == PROTO_STDOUT || f.type == PROTO_STDERR) {
                        assert_true(f.len <= PROTO_DATA_CHUNK);
                        char *b = f.type == PROTO_STDOUT ? res->out : res->err;
                        size_t *n = f.type == PROTO_STDOUT ? &res->out_len : &res->err_len;
                        size_t take = MIN(f.len, 4095 - *n);
                        memcpy(b + *n, f.data, take);
                        *n += take;
                        b[*n] = 0;
                } else {
                        assert_int_equal(f.type, PROTO_EXIT);
                        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
                        assert_non_null(j);
                        res->exit_code = (int) json_integer_value(json_object_get(j, "exit_code"));
                        res->signal = (int) json_integer_value(json_object_get(j, "signal"));
                        json_decref(j);
                        frame_release(&f);
                        return;
                }
                frame_release(&f);
        }
}

/* EXEC that must succeed; returns the pid. */
static pid_t exec_ok(struct harness *h, uint32_t stream, const char *json) {
        send_json(h, PROTO_EXEC, stream, json);
        json_t *j = expect_result(h, stream);
        pid_t pid = (pid_t) json_integer_value(json_object_get(j, "pid"));
        assert_true(pid > 0);
        json_decref(j);
        return pid;
}

static void test_agent_hello_ping(void **state) {
        struct harness *h = harness_get(state);
        struct frame f;

        /* garbage first: the agent resynchronises on the magic */
        assert_int_equal(write(h->fd, "noise", 5), 5);
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"c0ffee\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "nonce")), "c0ffee");
        assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
        assert_string_equal(json_string_value(json_object_get(j, "agent")), GUEST_AGENT_NAME);
        assert_true(json_is_string(json_object_get(j, "boot_id")));
        json_decref(j);
        frame_release(&f);

        /* PING says how long the guest has been idle; a ping is not use */
        send_json(h, PROTO_PING, 0, "{}");
        j = expect_result(h, 0);
        assert_true(json_is_integer(json_object_get(j, "idle_ms")));
        json_int_t idle1 = json_integer_value(json_object_get(j, "idle_ms"));
        json_decref(j);
        usleep(50 * 1000);
        send_json(h, PROTO_PING, 0, "{}");
        j = expect_result(h, 0);
        assert_true(json_integer_value(json_object_get(j, "idle_ms")) >= idle1 + 40);
        json_decref(j);

        /* host test mode: FREEZE/THAW answer without freezing the host's
         * root, so file requests keep working in between */
        send_json(h, PROTO_FREEZE, 0, "{}");
        j = expect_result(h, 0);
        json_decref(j);
        send_json(h, PROTO_PING, 0, "{}");
        j = expect_result(h, 0);
        json_decref(j);
        send_json(h, PROTO_THAW, 0, "{}");
        j = expect_result(h, 0);
        json_decref(j);
        send_json(h, PROTO_FREEZE, 0, "not json");
        expect_error(h, 0, EINVAL);

        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"x\",\"version\":7}");
        expect_error(h, 0, EPROTONOSUPPORT);
}

static void test_agent_exec_pipes(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        exec_ok(h, 10, "{\"argv\":[\"/bin/sh\",\"-c\",\"echo hi; echo err >&2; exit 3\"]}");
        collect_process(h, 10, &res);
        assert_string_equal(res.out, "hi\n");
        assert_string_equal(res.err, "err\n");
        assert_int_equal(res.exit_code, 3);
        assert_int_equal(res.signal, 0);

        /* env, cwd and the PATH default reach the process */
        memset(&res, 0, sizeof res);
        exec_ok(h, 11,
                "{\"argv\":[\"sh\",\"-c\",\"echo $FOO; pwd; echo "
                "$PATH\"],\"env\":{\"FOO\":\"bar\"},\"cwd\":\"/tmp\"}");
        collect_process(h, 11, &res);
        assert_string_equal(res.out, "bar\n/tmp\n" GUEST_DEFAULT_PATH "\n");
        assert_int_equal(res.exit_code, 0);
}

static void test_agent_exec_errors(void **state) {
        struct harness *h = harness_get(state);

        send_json(h, PROTO_EXEC, 12, "{\"argv\":[\"/nonexistent/airlock-binary\"]}");
        expect_error(h, 12, ENOENT);
        send_json(h, PROTO_EXEC, 13, "{\"argv\":[\"no-such-command-airlock\"]}");
        expect_error(h, 13, ENOENT);
        send_json(h, PROTO_EXEC, 14, "{\"argv\":[\"true\"],\"cwd\":\"/nonexistent-dir\"}");
        expect_error(h, 14, ENOENT);
        send_json(h, PROTO_EXEC, 0, "{\"argv\":[\"true\"]}");
        expect_error(h, 0, EINVAL);
        send_json(h, PROTO_EXEC, 15, "{\"argv\":");
        expect_error(h, 15, EINVAL);
        send_json(h, 99, 16, "{}");
        expect_error(h, 16, EOPNOTSUPP);
        send_json(h, PROTO_STDOUT, 17, "x");
        expect_error(h, 17, EOPNOTSUPP);

        /* an oversized header is refused, and the agent carries on */
        uint8_t raw[PROTO_HEADER_SIZE];
        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION,
                                                    .type = PROTO_PING,
                                                    .stream = 18,
                                                    .length = PROTO_MAX_PAYLOAD + 1 },
                            raw);
        assert_int_equal(write(h->fd, raw, sizeof raw), (ssize_t) sizeof raw);
        expect_error(h, 18, EMSGSIZE);
        send_json(h, PROTO_PING, 19, "{}");
        json_decref(expect_result(h, 19));
}

static void test_agent_stdin(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        exec_ok(h, 20, "{\"argv\":[\"cat\"]}");
        send_raw(h, PROTO_STDIN, 20, "hello ", 6);
        send_raw(h, PROTO_STDIN, 20, "world\n", 6);
        send_json(h, PROTO_STDIN_CLOSE, 20, "{}");
        collect_process(h, 20, &res);
        assert_string_equal(res.out, "hello world\n");
        assert_int_equal(res.exit_code, 0);
}

static void test_agent_signal(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        exec_ok(h, 21, "{\"argv\":[\"sleep\",\"100\"]}");
        send_json(h, PROTO_SIGNAL, 21, "{\"signal\":9}");
        collect_process(h, 21, &res);
        assert_int_equal(res.exit_code, 137);
        assert_int_equal(res.signal, 9);

        send_json(h, PROTO_SIGNAL, 21, "{\"signal\":\"KILL\"}");
        expect_error(h, 21, EINVAL);
}

static void test_agent_exit_with_grandchild(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        /* the grandchild keeps stdout open: EXIT still comes ~100 ms after */
        uint64_t t0 = now_monotonic_ns();
        exec_ok(h, 22, "{\"argv\":[\"sh\",\"-c\",\"sleep 2 & echo started; exit 4\"]}");
        collect_process(h, 22, &res);
        assert_int_equal(res.exit_code, 4);
        assert_string_equal(res.out, "started\n");
        assert_true(now_monotonic_ns() - t0 < 5000ull * 1000 * 1000);
}

static void test_agent_pty(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        exec_ok(h, 23,
                "{\"argv\":[\"sh\",\"-c\",\"tty; stty size\"],\"pty\":true,\"rows\":33,\"cols\":101}");
        collect_process(h, 23, &res);
        assert_int_equal(res.exit_code, 0);
        assert_non_null(strstr(res.out, "/dev/pts/"));
        assert_non_null(strstr(res.out, "33 101"));
        assert_int_equal(res.err_len, 0);
}

/* The state letter of /proc/PID/stat (R, S, Z...), 0 when there is no
 * such process. */
static char proc_state(pid_t pid) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold anything */
        return p && p[1] == ' ' ? p[2] : 0;
}

/* Waits until the agent reaped its child pid (gone from /proc, not a
 * zombie any more), failing after TIMEOUT_MS. */
static void wait_reaped(pid_t pid) {
        uint64_t deadline = now_monotonic_ns() + TIMEOUT_MS * 1000000ull;
        while (proc_state(pid) != 0) {
                if (now_monotonic_ns() > deadline)
                        fail_msg("the agent did not reap its killed child %d within %d ms", (int) pid, TIMEOUT_MS);
                usleep(10 * 1000);
        }
}

static void test_agent_hello_detaches(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };
        struct frame f;

        pid_t pid = exec_ok(h, 24, "{\"argv\":[\"sleep\",\"100\"]}");
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"again\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        frame_release(&f);
        /* a new host (restarted node, fork child) may use its stream id
         * again... */
        exec_ok(h, 24, "{\"argv\":[\"echo\",\"again\"]}");
        collect_process(h, 24, &res);
        assert_int_equal(res.exit_code, 0);
        assert_string_equal(res.out, "again\n");
        /* ...and finds it still running after a whole exec: not killed,
         * not a zombie */
        char st = proc_state(pid);
        if (st != 'S' && st != 'R')
                fail_msg("the process of the old host is not running after a new HELLO (state %c)", st ? st : '-');
        /* a detached process is reaped without an EXIT to the new host: once
         * it is gone, an EXIT would come before the answer to a PING */
        assert_int_equal(kill(pid, SIGKILL), 0);
        wait_reaped(pid);
        send_json(h, PROTO_PING, 0, "{}");
        json_decref(expect_result(h, 0));
}

/* Writes path with len pattern bytes in 64 KiB FILE_DATA frames. */
static void file_write(struct harness *h, uint32_t stream, const char *path, const uint8_t *data,
                       size_t len) {
        char json[512];
        snprintf(json, sizeof json, "{\"path\":\"%s\",\"mode\":384}", path);
        send_json(h, PROTO_FILE_WRITE, stream, json);
        for (size_t off = 0; off < len; off += PROTO_DATA_CHUNK)
                send_raw(h, PROTO_FILE_DATA, stream, data + off, MIN((size_t) PROTO_DATA_CHUNK, len - off));
        send_json(h, PROTO_FILE_END, stream, "{}");
}

static void test_agent_files(void **state) {
        struct harness *h = harness_get(state);
        char path[256], json[512];
        const size_t len = (3u << 19) + 12345; /* 1.5 MiB and a bit */
        uint8_t *data = malloc(len);
        struct stat st;

        assert_non_null(data);
        for (size_t i = 0; i < len; i++)
                data[i] = (uint8_t) (i * 7 + (i >> 11));
        snprintf(path, sizeof path, "%s/a/b/file.bin", h->dir);
        file_write(h, 30, path, data, len);
        json_t *j = expect_result(h, 30);
        assert_int_equal(json_integer_value(json_object_get(j, "size")), len);
        json_decref(j);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, len);
        assert_int_equal(st.st_mode & 07777, 0600);

        /* read it back: RESULT, DATA*, END */
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_FILE_READ, 31, json);
        j = expect_result(h, 31);
        assert_int_equal(json_integer_value(json_object_get(j, "size")), len);
        assert_int_equal(json_integer_value(json_object_get(j, "mode")), 0600);
        json_decref(j);
        size_t got = 0;
        int frames = 0;
        for (;;) {
                struct frame f;
                recv_frame(h, &f);
                assert_int_equal(f.stream, 31);
                if (f.type == PROTO_FILE_END) {
                        frame_release(&f);
                        break;
                }
                assert_int_equal(f.type, PROTO_FILE_DATA);
                assert_true(f.len <= PROTO_DATA_CHUNK);
                assert_true(got + f.len <= len);
                assert_memory_equal(f.data, data + got, f.len);
                got += f.len;
                frames++;
                frame_release(&f);
        }
        assert_int_equal(got, len);
        assert_true(frames >= 24);

        /* LIST and STAT */
        snprintf(json, sizeof json, "{\"path\":\"%s/a/b\"}", h->dir);
        send_json(h, PROTO_LIST, 32, json);
        j = expect_result(h, 32);
        json_t *entries = json_object_get(j, "entries");
        assert_int_equal(json_array_size(entries), 1);
        json_t *e = json_array_get(entries, 0);
        assert_string_equal(json_string_value(json_object_get(e, "name")), "file.bin");
        assert_string_equal(json_string_value(json_object_get(e, "type")), "file");
        assert_int_equal(json_integer_value(json_object_get(e, "size")), len);
        assert_true(json_integer_value(json_object_get(e, "mtime")) > 0);
        json_decref(j);

        snprintf(json, sizeof json, "{\"path\":\"%s/a\"}", h->dir);
        send_json(h, PROTO_STAT, 33, json);
        j = expect_result(h, 33);
        assert_string_equal(json_string_value(json_object_get(j, "name")), "a");
        assert_string_equal(json_string_value(json_object_get(j, "type")), "dir");
        json_decref(j);

        /* MKDIR, RENAME */
        snprintf(json, sizeof json, "{\"path\":\"%s/m/n\",\"parents\":true}", h->dir);
        send_json(h, PROTO_MKDIR, 34, json);
        json_decref(expect_result(h, 34));
        snprintf(json, sizeof json, "{\"path\":\"%s/m/n\"}", h->dir);
        send_json(h, PROTO_MKDIR, 35, json);
        expect_error(h, 35, EEXIST);
        snprintf(json, sizeof json, "{\"from\":\"%s\",\"to\":\"%s/m/n/moved\"}", path, h->dir);
        send_json(h, PROTO_RENAME, 36, json);
        json_decref(expect_result(h, 36));
        snprintf(path, sizeof path, "%s/m/n/moved", h->dir);
        assert_int_equal(stat(path, &st), 0);

        /* REMOVE: a symlink inside the tree must not be followed out */
        char outside[256], link[256];
        snprintf(outside, sizeof outside, "%s/outside", h->dir);
        assert_int_equal(mkdir(outside, 0755), 0);
        snprintf(link, sizeof link, "%s/m/n/link", h->dir);
        assert_int_equal(symlink(outside, link), 0);
        snprintf(json, sizeof json, "{\"path\":\"%s/m\"}", h->dir);
        send_json(h, PROTO_REMOVE, 37, json);
        expect_error(h, 37, ENOTEMPTY);
        snprintf(json, sizeof json, "{\"path\":\"%s/m\",\"recursive\":true}", h->dir);
        send_json(h, PROTO_REMOVE, 38, json);
        json_decref(expect_result(h, 38));
        assert_int_equal(stat(path, &st), -1);
        assert_int_equal(stat(outside, &st), 0);
        send_json(h, PROTO_REMOVE, 39, json);
        expect_error(h, 39, ENOENT);
        send_json(h, PROTO_LIST, 40, json);
        expect_error(h, 40, ENOENT);
        free(data);
}

static void test_agent_file_errors(void **state) {
        struct harness *h = harness_get(state);
        char json[512], path[256];
        struct stat st;

        send_json(h, PROTO_FILE_READ, 41, "{\"path\":\"relative/x\"}");
        expect_error(h, 41, EINVAL);
        send_json(h, PROTO_FILE_READ, 42, "{\"path\":\"/tmp/../etc/passwd\"}");
        expect_error(h, 42, EINVAL);
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", h->dir);
        send_json(h, PROTO_FILE_READ, 43, json);
        expect_error(h, 43, EISDIR);
        snprintf(json, sizeof json, "{\"path\":\"%s/missing\"}", h->dir);
        send_json(h, PROTO_FILE_READ, 44, json);
        expect_error(h, 44, ENOENT);

        /* an aborted write leaves nothing behind */
        snprintf(path, sizeof path, "%s/aborted", h->dir);
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_FILE_WRITE, 45, json);
        send_raw(h, PROTO_FILE_DATA, 45, "partial", 7);
        send_json(h, PROTO_FILE_END, 45, "{\"abort\":true}");
        expect_error(h, 45, ECANCELED);
        assert_int_equal(stat(path, &st), -1);
        send_json(h, PROTO_LIST, 46, json + 0);
        expect_error(h, 46, ENOENT);

        /* a small write with the default mode; DATA after END is ignored */
        const uint8_t small[] = "tiny";
        snprintf(path, sizeof path, "%s/small", h->dir);
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_FILE_WRITE, 47, json);
        send_raw(h, PROTO_FILE_DATA, 47, small, 4);
        send_json(h, PROTO_FILE_END, 47, "{}");
        json_decref(expect_result(h, 47));
        send_raw(h, PROTO_FILE_DATA, 47, small, 4);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, 4);
        assert_int_equal(st.st_mode & 07777, 0644);
        send_json(h, PROTO_PING, 48, "{}");
        json_decref(expect_result(h, 48));
}

static void test_agent_identity(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        /* host test mode: env is kept, hostname/clock/RNG of the host untouched */
        send_json(h, PROTO_IDENTITY, 0,
                  "{\"sandbox_id\":\"sbx-test\",\"hostname\":\"not-applied\",\"env\":{\"SANDBOX\":\"yes\"},"
                  "\"time_ns\":1,\"seed\":"
                  "\"0000000000000000000000000000000000000000000000000000000000000000\"}");
        json_decref(expect_result(h, 0));
        exec_ok(h, 50, "{\"argv\":[\"sh\",\"-c\",\"echo $SANDBOX $OVER\"],\"env\":{\"OVER\":\"1\"}}");
        collect_process(h, 50, &res);
        assert_string_equal(res.out, "yes 1\n");
        assert_true(time(NULL) > 1000000000);

        send_json(h, PROTO_IDENTITY, 0, "{\"seed\":\"short\"}");
        expect_error(h, 0, EINVAL);
}

int main(void) {
        const struct CMUnitTest unit[] = {
                cmocka_unit_test(test_path_validate),      cmocka_unit_test(test_exec_parse),
                cmocka_unit_test(test_exec_limits),        cmocka_unit_test(test_env_merge),
                cmocka_unit_test(test_small_parsers),      cmocka_unit_test(test_identity_parse),
                cmocka_unit_test(test_path_request_parse), cmocka_unit_test(test_utf8_sanitize),
        };
        /* in order, on one agent: HELLO first */
        const struct CMUnitTest agent[] = {
                cmocka_unit_test(test_agent_hello_ping),  cmocka_unit_test(test_agent_exec_pipes),
                cmocka_unit_test(test_agent_exec_errors), cmocka_unit_test(test_agent_stdin),
                cmocka_unit_test(test_agent_signal),      cmocka_unit_test(test_agent_exit_with_grandchild),
                cmocka_unit_test(test_agent_pty),         cmocka_unit_test(test_agent_hello_detaches),
                cmocka_unit_test(test_agent_files),       cmocka_unit_test(test_agent_file_errors),
                cmocka_unit_test(test_agent_identity),
        };
        signal(SIGPIPE, SIG_IGN);
        int r = cmocka_run_group_tests_name("guest_lib", unit, NULL, NULL);
        r += cmocka_run_group_tests_name("agent", agent, harness_setup, harness_teardown);
        return r;
}
