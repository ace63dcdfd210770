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

#include "unit-skip.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
        assert_true(req->has_cwd);
        assert_null(req->user);
        assert_null(req->tag);
        guest_exec_request_free(req);

        /* a user (up to 32 bytes) and a tag (up to 256) */
        assert_int_equal(exec_parse("{\"argv\":[\"sh\"],\"user\":\"_a23456789012345678901234567-_9\","
                                    "\"tag\":\"my tag\"}",
                                    &req),
                         0);
        assert_string_equal(req->user, "_a23456789012345678901234567-_9");
        assert_string_equal(req->tag, "my tag");
        assert_false(req->has_cwd);
        assert_false(req->has_uid);
        guest_exec_request_free(req);
        char tag[GUEST_MAX_TAG + 64];
        for (size_t extra = 0; extra < 2; extra++) {
                int k = snprintf(tag, sizeof tag, "{\"argv\":[\"sh\"],\"tag\":\"");
                memset(tag + k, 't', GUEST_MAX_TAG + extra);
                snprintf(tag + k + GUEST_MAX_TAG + extra, sizeof tag - (size_t) k - GUEST_MAX_TAG - extra,
                         "\"}");
                req = NULL;
                assert_int_equal(exec_parse(tag, &req), extra ? -EINVAL : 0);
                if (!extra)
                        assert_int_equal(strlen(req->tag), GUEST_MAX_TAG);
                guest_exec_request_free(req);
        }

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
                "{\"argv\":[\"sh\"],\"user\":\"Root\"}",
                "{\"argv\":[\"sh\"],\"user\":\"1user\"}",
                "{\"argv\":[\"sh\"],\"user\":\"\"}",
                "{\"argv\":[\"sh\"],\"user\":\"a b\"}",
                "{\"argv\":[\"sh\"],\"user\":\"a23456789012345678901234567890123\"}",
                "{\"argv\":[\"sh\"],\"user\":7}",
                "{\"argv\":[\"sh\"],\"user\":\"root\",\"uid\":0}",
                "{\"argv\":[\"sh\"],\"user\":\"root\",\"gid\":0}",
                "{\"argv\":[\"sh\"],\"tag\":1}",
                "{\"argv\":[\"sh\"],\"tag\":\"a\\u0000b\"}",
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

        int32_t pid = -1;
        assert_int_equal(guest_adopt_parse(J("{\"pid\":42}"), &pid), 0);
        assert_int_equal(pid, 42);
        assert_int_equal(guest_adopt_parse(J("{\"pid\":2147483647}"), &pid), 0);
        assert_int_equal(pid, INT32_MAX);
        assert_int_equal(guest_adopt_parse(J("{\"pid\":2147483648}"), &pid), -EINVAL);
        assert_int_equal(guest_adopt_parse(J("{\"pid\":0}"), &pid), -EINVAL);
        assert_int_equal(guest_adopt_parse(J("{\"pid\":-1}"), &pid), -EINVAL);
        assert_int_equal(guest_adopt_parse(J("{\"pid\":\"1\"}"), &pid), -EINVAL);
        assert_int_equal(guest_adopt_parse(J("{}"), &pid), -EINVAL);
        assert_int_equal(pid, INT32_MAX);

        bool abort_ = true;
        assert_int_equal(guest_file_end_parse(J("{}"), &abort_), 0);
        assert_false(abort_);
        assert_int_equal(guest_file_end_parse(J("{\"abort\":true}"), &abort_), 0);
        assert_true(abort_);
        assert_int_equal(guest_file_end_parse(J("{\"abort\":\"yes\"}"), &abort_), -EINVAL);
}

/* VOLUME_MOUNT: a slot of the machine's, a path that hides nothing of the
 * system's, a bounded wait; everything else refused. */
static void test_volume_mount_parse(void **state) {
        (void) state;
        struct guest_volume_mount m = { 0 };
        const char *ok = "{\"slot\":3,\"path\":\"/workspace/data\",\"read_only\":true,\"wait_ms\":100}";
        assert_int_equal(guest_volume_mount_parse(ok, strlen(ok), &m), 0);
        assert_int_equal(m.slot, 3);
        assert_string_equal(m.path, "/workspace/data");
        assert_true(m.read_only);
        assert_int_equal(m.wait_ms, 100);
        free(m.path);
        const char *dflt = "{\"slot\":0,\"path\":\"/data\"}";
        memset(&m, 0, sizeof m);
        assert_int_equal(guest_volume_mount_parse(dflt, strlen(dflt), &m), 0);
        assert_false(m.read_only);
        assert_int_equal(m.wait_ms, GUEST_VOLUME_WAIT_MS_DEFAULT);
        free(m.path);
        static const char *const bad[] = {
                "{\"path\":\"/data\"}",                    /* no slot */
                "{\"slot\":4,\"path\":\"/data\"}",       /* past the machine's slots */
                "{\"slot\":-1,\"path\":\"/data\"}",
                "{\"slot\":0}",                              /* no path */
                "{\"slot\":0,\"path\":\"data\"}",        /* relative */
                "{\"slot\":0,\"path\":\"/\"}",           /* the root */
                "{\"slot\":0,\"path\":\"/usr\"}",        /* the system's */
                "{\"slot\":0,\"path\":\"/etc/x\"}",
                "{\"slot\":0,\"path\":\"/proc\"}",
                "{\"slot\":0,\"path\":\"/run/airlock\"}",
                "{\"slot\":0,\"path\":\"/data/../etc\"}",
                "{\"slot\":0,\"path\":\"/data/\"}",
                "{\"slot\":0,\"path\":\"//etc\"}",
                "{\"slot\":0,\"path\":\"/data\",\"read_only\":1}",
                "{\"slot\":0,\"path\":\"/data\",\"wait_ms\":60001}",
                "[]",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                memset(&m, 0, sizeof m);
                assert_int_equal(guest_volume_mount_parse(bad[i], strlen(bad[i]), &m), -EINVAL);
                assert_null(m.path);
        }
        /* near misses of the system's trees are a user's */
        assert_true(proto_volume_path_is_allowed("/usrdata"));
        assert_true(proto_volume_path_is_allowed("/home/user/work"));
        assert_true(proto_volume_path_is_allowed("/var/lib/db"));
        assert_false(proto_volume_path_is_allowed("/lib64/x"));
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

static void test_user_name(void **state) {
        assert_true(guest_user_name_is_valid("root"));
        assert_true(guest_user_name_is_valid("user"));
        assert_true(guest_user_name_is_valid("_apt"));
        assert_true(guest_user_name_is_valid("a-b_c9"));
        assert_true(guest_user_name_is_valid("a2345678901234567890123456789012"));
        assert_false(guest_user_name_is_valid("a23456789012345678901234567890123"));
        assert_false(guest_user_name_is_valid(""));
        assert_false(guest_user_name_is_valid(NULL));
        assert_false(guest_user_name_is_valid("-a"));
        assert_false(guest_user_name_is_valid("9a"));
        assert_false(guest_user_name_is_valid("User"));
        assert_false(guest_user_name_is_valid("a.b"));
        assert_false(guest_user_name_is_valid("a:b"));
        assert_false(guest_user_name_is_valid("a/b"));
}

/* Writes text to dir/name and returns the path (static buffer per slot). */
static const char *write_file(const char *dir, const char *name, const char *text, char *buf, size_t n) {
        snprintf(buf, n, "%s/%s", dir, name);
        assert_int_equal(file_write_atomic(buf, text, strlen(text), 0644), 0);
        return buf;
}

static void test_users(void **state) {
        char dir[] = "/tmp/test-guest-users-XXXXXX", pw[256], gr[256], missing[256];
        struct guest_user *u = NULL;

        assert_non_null(mkdtemp(dir));
        write_file(dir, "passwd",
                   "root:x:0:0:root:/root:/bin/bash\n"
                   "# not an entry\n"
                   "+nis::::::\n"
                   "short:x:5\n"
                   "badid:x:abc:1::/:/bin/sh\n"
                   "user:x:1000:1000:A User,,,:/home/user:/bin/bash\n"
                   "user:x:1001:1001::/home/second:/bin/sh\n"
                   "bare:x:1002:1002:::\n"
                   "minusone:x:4294967295:1::/:\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
                   pw, sizeof pw);
        write_file(dir, "group",
                   "root:x:0:\n"
                   "user:x:1000:\n"
                   "sudo:x:27:admin,user\n"
                   "docker:x:999:user\n"
                   "other:x:50:usera,auser\n"
                   "again:x:27:user\n"
                   "nogroup:x:65534:",
                   gr, sizeof gr);
        snprintf(missing, sizeof missing, "%s/missing", dir);

        assert_int_equal(guest_user_lookup(pw, gr, "user", &u), 0);
        assert_string_equal(u->name, "user");
        assert_int_equal(u->uid, 1000); /* the first entry wins */
        assert_int_equal(u->gid, 1000);
        assert_string_equal(u->home, "/home/user");
        assert_string_equal(u->shell, "/bin/bash");
        assert_int_equal(u->n_groups, 3); /* 1000, sudo, docker; "again" repeats 27 */
        assert_int_equal(u->groups[0], 1000);
        assert_int_equal(u->groups[1], 27);
        assert_int_equal(u->groups[2], 999);
        guest_user_free(u);
        u = NULL;

        assert_int_equal(guest_user_lookup(pw, gr, "bare", &u), 0);
        assert_string_equal(u->home, "/");
        assert_string_equal(u->shell, "/bin/sh");
        assert_int_equal(u->n_groups, 1);
        guest_user_free(u);
        u = NULL;

        /* without a group file: the primary group only */
        assert_int_equal(guest_user_lookup(pw, missing, "root", &u), 0);
        assert_int_equal(u->uid, 0);
        assert_int_equal(u->n_groups, 1);
        guest_user_free(u);
        u = NULL;

        assert_int_equal(guest_user_lookup(pw, gr, "nosuch", &u), -ESRCH);
        assert_int_equal(guest_user_lookup(pw, gr, "badid", &u), -ESRCH);
        assert_int_equal(guest_user_lookup(pw, gr, "short", &u), -ESRCH);
        assert_int_equal(guest_user_lookup(pw, gr, "minusone", &u), -ESRCH);
        assert_int_equal(guest_user_lookup(pw, gr, "+nis", &u), -ESRCH);
        assert_int_equal(guest_user_lookup(missing, gr, "root", &u), -ESRCH);
        assert_null(u);

        struct guest_idmap *m = NULL;
        assert_int_equal(guest_idmap_load(pw, gr, &m), 0);
        assert_string_equal(guest_idmap_user(m, 0), "root");
        assert_string_equal(guest_idmap_user(m, 1000), "user");
        assert_string_equal(guest_idmap_user(m, 1001), "user");
        assert_string_equal(guest_idmap_user(m, 65534), "nobody");
        assert_null(guest_idmap_user(m, 4242));
        assert_string_equal(guest_idmap_group(m, 27), "sudo"); /* the first entry wins */
        assert_string_equal(guest_idmap_group(m, 65534), "nogroup");
        assert_null(guest_idmap_group(m, 1001));
        guest_idmap_free(m);
        m = NULL;
        /* missing files map nothing, and that is no error */
        assert_int_equal(guest_idmap_load(missing, missing, &m), 0);
        assert_null(guest_idmap_user(m, 0));
        assert_null(guest_idmap_group(m, 0));
        guest_idmap_free(m);
        assert_null(guest_idmap_user(NULL, 0));
        rm_rf(dir);
}

static size_t dump_size(json_t *j) {
        return json_dumpb(j, NULL, 0, JSON_COMPACT);
}

static void test_process_info(void **state) {
        struct guest_exec_request *req = NULL;
        assert_int_equal(
                exec_parse("{\"argv\":[\"/bin/bash\",\"-l\",\"-c\",\"sleep 1\"],\"env\":{\"A\":\"B\"},"
                           "\"tag\":\"t\",\"pty\":true}",
                           &req),
                0);
        json_t *info = guest_process_info(req, "/home/user");
        assert_non_null(info);
        assert_int_equal(json_array_size(json_object_get(info, "argv")), 4);
        assert_string_equal(json_string_value(json_array_get(json_object_get(info, "argv"), 3)), "sleep 1");
        assert_string_equal(json_string_value(json_object_get(json_object_get(info, "env"), "A")), "B");
        assert_int_equal(json_object_size(json_object_get(info, "env")), 1);
        assert_string_equal(json_string_value(json_object_get(info, "cwd")), "/home/user");
        assert_string_equal(json_string_value(json_object_get(info, "tag")), "t");
        assert_true(json_is_true(json_object_get(info, "pty")));
        assert_null(json_object_get(info, "truncated"));
        /* small enough: the same object back */
        json_t *fit = guest_process_info_fit(info, 4096);
        assert_ptr_equal(fit, info);
        json_decref(fit);
        json_decref(info);
        guest_exec_request_free(req);

        /* argv of 3000 entries of 100 bytes, env of 100 entries, a long cwd:
         * cut to 64 KiB and to 2 KiB, still well-formed */
        size_t cap = 8u << 20, n = 0;
        char *big = malloc(cap);
        assert_non_null(big);
        n += (size_t) snprintf(big + n, cap - n, "{\"argv\":[");
        for (size_t i = 0; i < 3000; i++) {
                n += (size_t) snprintf(big + n, cap - n, "%s\"", i ? "," : "");
                for (size_t k = 0; k < 100; k++) {
                        /* a newline: escaped again when the info is dumped */
                        if (k % 10 == 9) {
                                big[n++] = '\\';
                                big[n++] = 'n';
                        } else
                                big[n++] = (char) ('a' + (i + k) % 26);
                }
                big[n++] = '"';
        }
        n += (size_t) snprintf(big + n, cap - n, "],\"env\":{");
        for (size_t i = 0; i < 100; i++)
                n += (size_t) snprintf(big + n, cap - n, "%s\"K%zu\":\"%0200zu\"", i ? "," : "", i, i);
        n += (size_t) snprintf(big + n, cap - n, "},\"tag\":\"keep\"}");
        req = NULL;
        assert_int_equal(guest_exec_request_parse(big, n, &req), 0);
        char cwd[600] = "/";
        for (size_t i = 1; i < 590; i++)
                cwd[i] = i % 50 == 0 ? '/' : 'd';
        info = guest_process_info(req, cwd);
        assert_non_null(info);
        assert_true(dump_size(info) > GUEST_MAX_PROCESS_INFO);
        static const size_t maxes[] = { GUEST_MAX_PROCESS_INFO, 8192, 2048 };
        for (size_t m = 0; m < sizeof maxes / sizeof maxes[0]; m++) {
                fit = guest_process_info_fit(info, maxes[m]);
                assert_non_null(fit);
                assert_true(dump_size(fit) <= maxes[m]);
                assert_true(json_is_true(json_object_get(fit, "truncated")));
                assert_string_equal(json_string_value(json_object_get(fit, "tag")), "keep");
                assert_true(json_is_boolean(json_object_get(fit, "pty")));
                assert_true(json_array_size(json_object_get(fit, "argv")) >= 1);
                assert_true(json_is_object(json_object_get(fit, "env")));
                const char *c = json_string_value(json_object_get(fit, "cwd"));
                assert_non_null(c);
                assert_int_equal(guest_path_validate(c), 0);
                assert_int_equal(strncmp(cwd, c, strlen(c)), 0);
                json_decref(fit);
        }
        json_decref(info);
        guest_exec_request_free(req);
        free(big);
}

static void test_path_request_parse(void **state) {
        struct guest_path_request req;
        const char *j;

        /* a volume's root; SETATTR's owner, group and mode, each optional */
        j = "{\"path\":\"/f\",\"root\":\"/workspace\",\"uid\":1000,\"mode\":384}";
        assert_int_equal(guest_path_request_parse(PROTO_SETATTR, j, strlen(j), &req), 0);
        assert_string_equal(req.root, "/workspace");
        assert_int_equal(req.uid, 1000);
        assert_int_equal(req.gid, -1);
        assert_true(req.has_mode);
        assert_int_equal(req.mode, 0600);
        guest_path_request_release(&req);
        j = "{\"path\":\"/f\"}";
        assert_int_equal(guest_path_request_parse(PROTO_SETATTR, j, strlen(j), &req), 0);
        assert_null(req.root);
        assert_false(req.has_mode);
        assert_int_equal(req.uid, -1);
        guest_path_request_release(&req);
        /* (uid_t) -1 is chown's "unchanged", not an id */
        j = "{\"path\":\"/f\",\"gid\":4294967295}";
        assert_int_equal(guest_path_request_parse(PROTO_SETATTR, j, strlen(j), &req), -EINVAL);
        j = "{\"path\":\"/f\",\"root\":\"/w/../etc\"}";
        assert_int_equal(guest_path_request_parse(PROTO_LIST, j, strlen(j), &req), -EINVAL);
        j = "{\"path\":\"/f\",\"root\":\"w\"}";
        assert_int_equal(guest_path_request_parse(PROTO_STAT, j, strlen(j), &req), -EINVAL);
        j = "{\"path\":\"/f\",\"root\":\"/w\"}";
        assert_int_equal(guest_path_request_parse(PROTO_WATCH, j, strlen(j), &req), -EINVAL);

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

        j = "{\"path\":\"/d\",\"recursive\":true}";
        assert_int_equal(guest_path_request_parse(PROTO_WATCH, j, strlen(j), &req), 0);
        assert_true(req.flag);
        guest_path_request_release(&req);
        j = "{\"path\":\"/d\"}";
        assert_int_equal(guest_path_request_parse(PROTO_WATCH, j, strlen(j), &req), 0);
        assert_false(req.flag);
        guest_path_request_release(&req);
        j = "{\"path\":\"/d\",\"recursive\":1}";
        assert_int_equal(guest_path_request_parse(PROTO_WATCH, j, strlen(j), &req), -EINVAL);

        /* user: optional on every file request, a valid user name */
        j = "{\"path\":\"/d\"}";
        assert_int_equal(guest_path_request_parse(PROTO_STAT, j, strlen(j), &req), 0);
        assert_null(req.user);
        guest_path_request_release(&req);
        j = "{\"path\":\"/tmp/f\",\"mode\":384,\"user\":\"alice\"}";
        assert_int_equal(guest_path_request_parse(PROTO_FILE_WRITE, j, strlen(j), &req), 0);
        assert_string_equal(req.user, "alice");
        assert_int_equal(req.mode, 0600);
        guest_path_request_release(&req);
        assert_null(req.user);
        j = "{\"from\":\"/a\",\"to\":\"/b\",\"user\":\"root\"}";
        assert_int_equal(guest_path_request_parse(PROTO_RENAME, j, strlen(j), &req), 0);
        assert_string_equal(req.user, "root");
        guest_path_request_release(&req);
        j = "{\"path\":\"/d\",\"recursive\":true,\"user\":\"_svc-1\"}";
        assert_int_equal(guest_path_request_parse(PROTO_WATCH, j, strlen(j), &req), 0);
        assert_string_equal(req.user, "_svc-1");
        guest_path_request_release(&req);
        j = "{\"path\":\"/d\",\"user\":null}";
        assert_int_equal(guest_path_request_parse(PROTO_LIST, j, strlen(j), &req), 0);
        assert_null(req.user);
        guest_path_request_release(&req);
        static const char *const bad_users[] = {
                "{\"path\":\"/d\",\"user\":\"\"}",
                "{\"path\":\"/d\",\"user\":\"Alice\"}",
                "{\"path\":\"/d\",\"user\":\"a/b\"}",
                "{\"path\":\"/d\",\"user\":\"1abc\"}",
                "{\"path\":\"/d\",\"user\":\"a\\u0000b\"}",
                "{\"path\":\"/d\",\"user\":\"abcdefghijklmnopqrstuvwxyz0123456\"}", /* 33 bytes */
                "{\"path\":\"/d\",\"user\":0}",
                "{\"path\":\"/d\",\"user\":[\"root\"]}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad_users); i++) {
                j = bad_users[i];
                if (guest_path_request_parse(PROTO_REMOVE, j, strlen(j), &req) != -EINVAL)
                        fail_msg("accepted %s", j);
        }
        j = "{\"path\":\"/d\",\"user\":\"abcdefghijklmnopqrstuvwxyz012345\"}"; /* 32 bytes */
        assert_int_equal(guest_path_request_parse(PROTO_MKDIR, j, strlen(j), &req), 0);
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
        return e && *e ? e : AIRLOCK_GUEST_PATH;
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
        /* what the node checks before it asks for a user, PROCESSES, WATCH, METRICS,
         * a file request's user, UPGRADE, VOLUME_MOUNT */
        json_t *features = json_object_get(j, "features");
        assert_int_equal(json_array_size(features), 8);
        assert_string_equal(json_string_value(json_array_get(features, 0)), "user");
        assert_string_equal(json_string_value(json_array_get(features, 1)), "processes");
        assert_string_equal(json_string_value(json_array_get(features, 2)), "watch");
        assert_string_equal(json_string_value(json_array_get(features, 3)), "metrics");
        assert_string_equal(json_string_value(json_array_get(features, 4)), "files_user");
        assert_string_equal(json_string_value(json_array_get(features, 5)), "upgrade");
        assert_string_equal(json_string_value(json_array_get(features, 6)), "volumes");
        assert_string_equal(json_string_value(json_array_get(features, 7)), "files_root");
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

        /* METRICS: what a sandbox uses, within what it has; looking is not use */
        send_json(h, PROTO_PING, 0, "{}");
        j = expect_result(h, 0);
        json_int_t idle_before = json_integer_value(json_object_get(j, "idle_ms"));
        json_decref(j);
        for (int k = 0; k < 2; k++) {
                send_json(h, PROTO_METRICS, 5, "{}");
                j = expect_result(h, 5);
                assert_true(json_integer_value(json_object_get(j, "cpu_count")) >= 1);
                double pct = json_number_value(json_object_get(j, "cpu_used_pct"));
                assert_true(pct >= 0 && pct <= 100);
                json_int_t mt = json_integer_value(json_object_get(j, "mem_total"));
                json_int_t mu = json_integer_value(json_object_get(j, "mem_used"));
                json_int_t dt = json_integer_value(json_object_get(j, "disk_total"));
                json_int_t du = json_integer_value(json_object_get(j, "disk_used"));
                assert_true(mt > 0 && mu > 0 && mu <= mt);
                assert_true(dt > 0 && du <= dt);
                assert_true(json_integer_value(json_object_get(j, "mem_cache")) >= 0);
                json_decref(j);
        }
        send_json(h, PROTO_PING, 0, "{}");
        j = expect_result(h, 0);
        assert_true(json_integer_value(json_object_get(j, "idle_ms")) >= idle_before);
        json_decref(j);
        send_json(h, PROTO_METRICS, 5, "[1]");
        expect_error(h, 5, EINVAL);

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
        /* a missing cwd is told from a missing program */
        send_json(h, PROTO_EXEC, 14, "{\"argv\":[\"true\"],\"cwd\":\"/nonexistent-dir\"}");
        expect_error(h, 14, ENOTDIR);
        send_json(h, PROTO_EXEC, 14, "{\"argv\":[\"true\"],\"cwd\":\"/etc/passwd\"}");
        expect_error(h, 14, ENOTDIR);
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
        /* owner and group by name from /etc/passwd and /etc/group */
        assert_int_equal(json_integer_value(json_object_get(e, "uid")), st.st_uid);
        assert_int_equal(json_integer_value(json_object_get(e, "gid")), st.st_gid);
        struct passwd *pw = getpwuid(st.st_uid);
        struct group *gr = getgrgid(st.st_gid);
        char num[32];
        snprintf(num, sizeof num, "%u", (unsigned) st.st_uid);
        assert_string_equal(json_string_value(json_object_get(e, "owner")), pw ? pw->pw_name : num);
        snprintf(num, sizeof num, "%u", (unsigned) st.st_gid);
        assert_string_equal(json_string_value(json_object_get(e, "group")), gr ? gr->gr_name : num);
        assert_null(json_object_get(e, "symlink_target"));
        json_decref(j);

        snprintf(json, sizeof json, "{\"path\":\"%s/a\"}", h->dir);
        send_json(h, PROTO_STAT, 33, json);
        j = expect_result(h, 33);
        assert_string_equal(json_string_value(json_object_get(j, "name")), "a");
        assert_string_equal(json_string_value(json_object_get(j, "type")), "dir");
        assert_true(json_is_string(json_object_get(j, "owner")));
        json_decref(j);

        /* a symlink names its target, in STAT and in LIST */
        char lnk[300];
        snprintf(lnk, sizeof lnk, "%s/a/b/lnk", h->dir);
        assert_int_equal(symlink("file.bin", lnk), 0);
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", lnk);
        send_json(h, PROTO_STAT, 33, json);
        j = expect_result(h, 33);
        assert_string_equal(json_string_value(json_object_get(j, "type")), "symlink");
        assert_string_equal(json_string_value(json_object_get(j, "symlink_target")), "file.bin");
        json_decref(j);
        snprintf(json, sizeof json, "{\"path\":\"%s/a/b\"}", h->dir);
        send_json(h, PROTO_LIST, 33, json);
        j = expect_result(h, 33);
        entries = json_object_get(j, "entries");
        assert_int_equal(json_array_size(entries), 2);
        e = json_array_get(entries, 1);
        assert_string_equal(json_string_value(json_object_get(e, "name")), "lnk");
        assert_string_equal(json_string_value(json_object_get(e, "symlink_target")), "file.bin");
        json_decref(j);
        assert_int_equal(unlink(lnk), 0);

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

/* Expects ERROR on stream with that errno and a message containing text. */
static void expect_error_msg(struct harness *h, uint32_t stream, int err, const char *text) {
        struct frame f;
        expect_frame(h, PROTO_ERROR, stream, &f);
        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
        assert_non_null(j);
        if (json_integer_value(json_object_get(j, "errno")) != err ||
            !strstr(json_string_value(json_object_get(j, "message")) ?: "", text))
                fail_msg("expected errno %d with \"%s\", got %s", err, text, (char *) f.data);
        json_decref(j);
        frame_release(&f);
}

/* The passwd entry of name in this host's /etc/passwd, as the agent in
 * host test mode reads it: false when there is none. */
static bool host_user(const char *name, char *home, size_t hn, char *shell, size_t sn, uid_t *uid) {
        FILE *f = fopen("/etc/passwd", "re");
        char line[1024];
        bool found = false;
        if (!f)
                return false;
        while (!found && fgets(line, sizeof line, f)) {
                char *fields[7], *p = line;
                size_t i = 0;
                line[strcspn(line, "\n")] = 0;
                for (; i < 7 && p; i++) {
                        fields[i] = p;
                        p = i < 6 ? strchr(p, ':') : NULL;
                        if (p)
                                *p++ = 0;
                }
                if (i == 7 && strcmp(fields[0], name) == 0) {
                        snprintf(home, hn, "%s", fields[5][0] ? fields[5] : "/");
                        snprintf(shell, sn, "%s", fields[6][0] ? fields[6] : "/bin/sh");
                        *uid = (uid_t) strtoul(fields[2], NULL, 10);
                        found = true;
                }
        }
        fclose(f);
        return found;
}

static void test_agent_exec_user(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };
        char home[256], shell[256], want[1024];
        uid_t uid;

        send_json(h, PROTO_EXEC, 72, "{\"argv\":[\"true\"],\"user\":\"no-such-user-airlock\"}");
        expect_error_msg(h, 72, ESRCH, "unknown user 'no-such-user-airlock'");
        send_json(h, PROTO_EXEC, 72, "{\"argv\":[\"true\"],\"user\":\"root\",\"uid\":0}");
        expect_error(h, 72, EINVAL);

        /* a named user's groups are set even when it is the agent's own */
        if (geteuid() != 0)
                unit_skip("not root: only a root agent runs a process as a named user");
        /* the user's home, name, shell and groups; its home is the cwd */
        assert_true(host_user("root", home, sizeof home, shell, sizeof shell, &uid));
        exec_ok(h, 70,
                "{\"argv\":[\"sh\",\"-c\",\"echo $HOME $USER $LOGNAME $SHELL; pwd\"],\"user\":\"root\"}");
        collect_process(h, 70, &res);
        struct stat st;
        bool home_is_dir = stat(home, &st) == 0 && S_ISDIR(st.st_mode);
        snprintf(want, sizeof want, "%s root root %s\n%s\n", home, shell, home_is_dir ? home : "/");
        assert_string_equal(res.out, want);
        assert_int_equal(res.exit_code, 0);

        /* the request's env wins over the user's, and a cwd given over its home */
        memset(&res, 0, sizeof res);
        exec_ok(h, 71,
                "{\"argv\":[\"sh\",\"-c\",\"echo $HOME $USER; pwd\"],\"user\":\"root\","
                "\"env\":{\"USER\":\"mine\"},\"cwd\":\"/tmp\"}");
        collect_process(h, 71, &res);
        snprintf(want, sizeof want, "%s mine\n/tmp\n", home);
        assert_string_equal(res.out, want);
}

/* another user's uid, gid and groups (the agent must be root) */
static void test_agent_exec_other_user(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };
        char home[256], shell[256], want[512];
        uid_t uid;

        if (geteuid() != 0)
                unit_skip("not root: only a root agent runs a process as another user");
        if (!host_user("nobody", home, sizeof home, shell, sizeof shell, &uid))
                unit_skip("no user 'nobody' here");
        exec_ok(h, 73,
                "{\"argv\":[\"sh\",\"-c\",\"id -u; id -G | wc -w\"],\"user\":\"nobody\",\"cwd\":\"/\"}");
        collect_process(h, 73, &res);
        snprintf(want, sizeof want, "%u\n", (unsigned) uid);
        assert_int_equal(strncmp(res.out, want, strlen(want)), 0);
        assert_int_equal(res.exit_code, 0);
        /* a cwd the user may not enter fails before the process starts */
        char dir[256];
        snprintf(dir, sizeof dir, "%s/private", h->dir);
        assert_int_equal(mkdir(dir, 0700), 0);
        char json[512];
        snprintf(json, sizeof json, "{\"argv\":[\"true\"],\"user\":\"nobody\",\"cwd\":\"%s\"}", dir);
        send_json(h, PROTO_EXEC, 74, json);
        expect_error_msg(h, 74, EACCES, "cwd ");
}

/* Waits for path to exist (failing after TIMEOUT_MS). */
static void wait_file(const char *path) {
        uint64_t deadline = now_monotonic_ns() + TIMEOUT_MS * 1000000ull;
        while (access(path, F_OK) < 0) {
                if (now_monotonic_ns() > deadline)
                        fail_msg("%s did not appear within %d ms", path, TIMEOUT_MS);
                usleep(10 * 1000);
        }
}

/* Waits until the agent has read all that pid wrote to its stdout and
 * stderr pipes (failing after TIMEOUT_MS): a reader of our own on each
 * pipe (opened through /proc, never read) sees no unread bytes. The agent
 * keeps what it reads in the same step, so a detached process' output is
 * then in its ring. */
static void wait_output_read(pid_t pid) {
        uint64_t deadline = now_monotonic_ns() + TIMEOUT_MS * 1000000ull;
        for (int i = 1; i <= 2; i++) {
                char path[64];
                snprintf(path, sizeof path, "/proc/%d/fd/%d", (int) pid, i);
                int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
                assert_true(fd >= 0);
                int unread;
                while (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0) {
                        if (now_monotonic_ns() > deadline)
                                fail_msg("the agent left %d bytes unread in %s for %d ms", unread, path,
                                         TIMEOUT_MS);
                        usleep(10 * 1000);
                }
                assert_int_equal(ioctl(fd, FIONREAD, &unread), 0);
                close(fd);
        }
}

static void touch(const char *path) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

/* FILE_WRITE of a short text as user (NULL: none), answered on stream. */
static void file_write_as(struct harness *h, uint32_t stream, const char *path, const char *user,
                          uint32_t mode, const char *text) {
        char json[1024];
        if (user)
                snprintf(json, sizeof json, "{\"path\":\"%s\",\"mode\":%u,\"user\":\"%s\"}", path, mode, user);
        else
                snprintf(json, sizeof json, "{\"path\":\"%s\",\"mode\":%u}", path, mode);
        send_json(h, PROTO_FILE_WRITE, stream, json);
        send_raw(h, PROTO_FILE_DATA, stream, text, strlen(text));
        send_json(h, PROTO_FILE_END, stream, "{}");
}

/* Sends a file request {"path":path,"user":user} of type on stream. */
static void send_path_as(struct harness *h, uint8_t type, uint32_t stream, const char *path, const char *user) {
        char json[1024];
        snprintf(json, sizeof json, "{\"path\":\"%s\",\"user\":\"%s\"}", path, user);
        send_json(h, type, stream, json);
}

static void test_agent_files_user(void **state) {
        struct harness *h = harness_get(state);
        static const char bad[] = "no-such-user-airlock";
        char dir[256], path[512], json[2048];
        struct stat st;

        /* an unknown user: refused before anything is made, read or removed */
        snprintf(dir, sizeof dir, "%s/fu", h->dir);
        snprintf(path, sizeof path, "%s/sub/x", dir);
        file_write_as(h, 90, path, bad, 0644, "no");
        expect_error_msg(h, 90, ESRCH, "unknown user 'no-such-user-airlock'");
        assert_int_equal(stat(dir, &st), -1);
        send_path_as(h, PROTO_MKDIR, 91, dir, bad);
        expect_error_msg(h, 91, ESRCH, "unknown user");
        assert_int_equal(stat(dir, &st), -1);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof path, "%s/keep", dir);
        touch(path);
        send_path_as(h, PROTO_REMOVE, 92, path, bad);
        expect_error_msg(h, 92, ESRCH, "unknown user");
        assert_int_equal(stat(path, &st), 0);
        snprintf(json, sizeof json, "{\"from\":\"%s\",\"to\":\"%s/moved\",\"user\":\"%s\"}", path, dir, bad);
        send_json(h, PROTO_RENAME, 93, json);
        expect_error_msg(h, 93, ESRCH, "unknown user");
        assert_int_equal(stat(path, &st), 0);
        static const uint8_t reads[] = { PROTO_FILE_READ, PROTO_STAT, PROTO_LIST, PROTO_WATCH };
        for (size_t i = 0; i < ARRAY_SIZE(reads); i++) {
                send_path_as(h, reads[i], 94, reads[i] == PROTO_FILE_READ || reads[i] == PROTO_STAT ? path : dir,
                             bad);
                expect_error_msg(h, 94, ESRCH, "unknown user");
        }

        /* root is the agent itself */
        snprintf(path, sizeof path, "%s/root.txt", dir);
        file_write_as(h, 95, path, "root", 0644, "root\n");
        json_decref(expect_result(h, 95));
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, geteuid());
}

/* another user's permissions and ownership (the agent must be root) */
static void test_agent_files_other_user(void **state) {
        struct harness *h = harness_get(state);
        char dir[256], path[512], json[2048];
        struct stat st;

        if (geteuid() != 0)
                unit_skip("not root: only a root agent acts on files as another user");
        struct passwd *pw = getpwnam("nobody");
        if (!pw)
                unit_skip("no user 'nobody' here");
        uid_t uid = pw->pw_uid;
        gid_t gid = pw->pw_gid;
        snprintf(dir, sizeof dir, "%s/fo", h->dir);
        assert_int_equal(mkdir(dir, 0777), 0);
        assert_int_equal(chmod(h->dir, 0711), 0);
        assert_int_equal(chmod(dir, 0777), 0);

        snprintf(path, sizeof path, "%s/mine/n.txt", dir);
        file_write_as(h, 96, path, "nobody", 0640, "nobody's\n");
        json_decref(expect_result(h, 96));
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, uid);
        assert_int_equal(st.st_gid, gid);
        assert_int_equal(st.st_mode & 07777, 0640);
        snprintf(path, sizeof path, "%s/mine", dir);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, uid); /* the parent it made */
        snprintf(path, sizeof path, "%s/made", dir);
        send_path_as(h, PROTO_MKDIR, 97, path, "nobody");
        json_decref(expect_result(h, 97));
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_uid, uid);
        assert_int_equal(st.st_gid, gid);
        send_path_as(h, PROTO_STAT, 98, path, "nobody");
        json_t *j = expect_result(h, 98);
        assert_int_equal(json_integer_value(json_object_get(j, "uid")), uid);
        json_decref(j);

        /* what root keeps to itself stays root's */
        snprintf(path, sizeof path, "%s/secret", dir);
        file_write_as(h, 99, path, NULL, 0600, "secret\n");
        json_decref(expect_result(h, 99));
        send_path_as(h, PROTO_FILE_READ, 100, path, "nobody");
        expect_error(h, 100, EACCES);
        assert_int_equal(chmod(dir, 01777), 0); /* sticky: only owners replace or remove */
        file_write_as(h, 101, path, "nobody", 0644, "overwritten\n");
        expect_error(h, 101, EPERM); /* the rename on FILE_END, as nobody */
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_FILE_READ, 102, json);
        j = expect_result(h, 102);
        assert_int_equal(json_integer_value(json_object_get(j, "size")), 7);
        json_decref(j);
        struct frame f;
        expect_frame(h, PROTO_FILE_DATA, 102, &f);
        assert_memory_equal(f.data, "secret\n", 7);
        frame_release(&f);
        expect_frame(h, PROTO_FILE_END, 102, &f);
        frame_release(&f);
        send_path_as(h, PROTO_REMOVE, 103, path, "nobody");
        expect_error(h, 103, EPERM);
        assert_int_equal(stat(path, &st), 0);
        char priv[300];
        snprintf(priv, sizeof priv, "%s/private", dir);
        assert_int_equal(mkdir(priv, 0700), 0);
        send_path_as(h, PROTO_LIST, 104, priv, "nobody");
        expect_error(h, 104, EACCES);
        send_path_as(h, PROTO_WATCH, 105, priv, "nobody");
        expect_error(h, 105, EACCES);
        snprintf(path, sizeof path, "%s/x", priv);
        send_path_as(h, PROTO_STAT, 106, path, "nobody");
        expect_error(h, 106, EACCES);

        /* and the agent is root again after each of them */
        snprintf(path, sizeof path, "%s/after", priv);
        file_write_as(h, 107, path, NULL, 0644, "root again\n");
        json_decref(expect_result(h, 107));
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, 0);
        assert_int_equal(st.st_gid, getegid());
        assert_int_equal(chmod(h->dir, 0700), 0);
}

/* PROCESSES on stream; returns the entry of pid (a new reference), NULL
 * when it is not listed. */
static json_t *processes_entry(struct harness *h, uint32_t stream, pid_t pid) {
        send_json(h, PROTO_PROCESSES, stream, "{}");
        json_t *j = expect_result(h, stream);
        json_t *list = json_object_get(j, "processes"), *found = NULL, *e;
        size_t i;
        assert_true(json_is_array(list));
        json_array_foreach(list, i, e) {
                assert_true(json_is_integer(json_object_get(e, "pid")));
                if (json_integer_value(json_object_get(e, "pid")) == pid)
                        found = json_incref(e);
        }
        json_decref(j);
        return found;
}

static void test_agent_processes_adopt(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };
        char json[1024], go[256], done[256];
        struct frame f;

        /* prints, waits for "go", prints while detached, then echoes a line */
        snprintf(go, sizeof go, "%s/go", h->dir);
        snprintf(done, sizeof done, "%s/done", h->dir);
        snprintf(json, sizeof json,
                 "{\"argv\":[\"sh\",\"-c\",\"echo started; while [ ! -e %s ]; do sleep 0.02; done; "
                 "echo during; echo more >&2; touch %s; read x; echo got $x\"],\"env\":{\"K\":\"V\"},"
                 "\"cwd\":\"/tmp\",\"tag\":\"t1\"}",
                 go, done);
        pid_t pid = exec_ok(h, 60, json);
        expect_frame(h, PROTO_STDOUT, 60, &f);
        assert_memory_equal(f.data, "started\n", 8);
        frame_release(&f);

        json_t *e = processes_entry(h, 61, pid);
        assert_non_null(e);
        json_t *argv = json_object_get(e, "argv");
        assert_int_equal(json_array_size(argv), 3);
        assert_string_equal(json_string_value(json_array_get(argv, 0)), "sh");
        assert_string_equal(json_string_value(json_object_get(e, "cwd")), "/tmp");
        assert_int_equal(json_object_size(json_object_get(e, "env")), 1); /* not the defaults */
        assert_string_equal(json_string_value(json_object_get(json_object_get(e, "env"), "K")), "V");
        assert_string_equal(json_string_value(json_object_get(e, "tag")), "t1");
        assert_true(json_is_false(json_object_get(e, "pty")));
        assert_true(json_is_true(json_object_get(e, "attached")));
        json_decref(e);

        /* attached to stream 60: no second stream */
        snprintf(json, sizeof json, "{\"pid\":%d}", (int) pid);
        send_json(h, PROTO_ADOPT, 62, json);
        expect_error(h, 62, EBUSY);

        /* a new host connection: detached, still listed */
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"adopt\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        frame_release(&f);
        e = processes_entry(h, 63, pid);
        assert_non_null(e);
        assert_true(json_is_false(json_object_get(e, "attached")));
        json_decref(e);

        /* its output while detached is kept and replayed on ADOPT */
        touch(go);
        wait_file(done);
        wait_output_read(pid); /* what came before the touch is in the ring */
        send_json(h, PROTO_ADOPT, 64, json);
        json_t *j = expect_result(h, 64);
        assert_int_equal(json_integer_value(json_object_get(j, "pid")), pid);
        assert_true(json_is_false(json_object_get(j, "pty")));
        assert_int_equal(json_integer_value(json_object_get(j, "dropped")), 0);
        json_decref(j);
        expect_frame(h, PROTO_STDOUT, 64, &f);
        assert_int_equal(f.len, 7);
        assert_memory_equal(f.data, "during\n", 7);
        frame_release(&f);
        expect_frame(h, PROTO_STDERR, 64, &f);
        assert_memory_equal(f.data, "more\n", 5);
        frame_release(&f);
        /* stdin reaches it on the new stream, and EXIT ends that */
        send_raw(h, PROTO_STDIN, 64, "hi\n", 3);
        collect_process(h, 64, &res);
        assert_string_equal(res.out, "got hi\n");
        assert_int_equal(res.exit_code, 0);
        wait_reaped(pid);
        e = processes_entry(h, 65, pid);
        assert_null(e);

        send_json(h, PROTO_ADOPT, 66, json);
        expect_error(h, 66, ENOENT);
        send_json(h, PROTO_ADOPT, 0, json);
        expect_error(h, 0, EINVAL);
        send_json(h, PROTO_ADOPT, 66, "{\"pid\":\"x\"}");
        expect_error(h, 66, EINVAL);
        send_json(h, PROTO_PROCESSES, 66, "[]");
        expect_error(h, 66, EINVAL);
}

static void test_agent_adopt_ring(void **state) {
        struct harness *h = harness_get(state);
        char json[1024], go[256], done[256];
        struct frame f;

        /* 200000 bytes while detached: the last 64 KiB (less the record
         * headers) are kept, the rest counted as dropped */
        snprintf(go, sizeof go, "%s/go2", h->dir);
        snprintf(done, sizeof done, "%s/done2", h->dir);
        snprintf(json, sizeof json,
                 "{\"argv\":[\"sh\",\"-c\",\"while [ ! -e %s ]; do sleep 0.02; done; "
                 "head -c 199996 /dev/zero | tr '\\\\0' x; echo END; touch %s; sleep 100\"]}",
                 go, done);
        pid_t pid = exec_ok(h, 67, json);
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"ring\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        frame_release(&f);
        touch(go);
        wait_file(done);
        wait_output_read(pid);
        snprintf(json, sizeof json, "{\"pid\":%d}", (int) pid);
        send_json(h, PROTO_ADOPT, 68, json);
        json_t *j = expect_result(h, 68);
        json_int_t dropped = json_integer_value(json_object_get(j, "dropped"));
        json_decref(j);
        /* replayed: one record, then the PING answer marks its end */
        send_json(h, PROTO_PING, 69, "{}");
        size_t got = 0;
        bool end_seen = false;
        for (;;) {
                recv_frame(h, &f);
                if (f.type == PROTO_RESULT && f.stream == 69) {
                        frame_release(&f);
                        break;
                }
                assert_int_equal(f.type, PROTO_STDOUT);
                assert_int_equal(f.stream, 68);
                got += f.len;
                end_seen = f.len >= 4 && memcmp(f.data + f.len - 4, "END\n", 4) == 0;
                frame_release(&f);
        }
        assert_true(end_seen);
        assert_int_equal((size_t) dropped + got, 200000);
        assert_true(got <= 64u << 10);
        assert_true(got >= (64u << 10) - 64);
        send_json(h, PROTO_SIGNAL, 68, "{\"signal\":9}");
        struct run_result res = { 0 };
        collect_process(h, 68, &res);
        assert_int_equal(res.signal, 9);
}

static void test_agent_resize(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = { 0 };

        exec_ok(h, 75,
                "{\"argv\":[\"sh\",\"-c\",\"read x; stty size\"],\"pty\":true,\"rows\":24,\"cols\":80}");
        send_json(h, PROTO_RESIZE, 75, "{\"rows\":40,\"cols\":120}");
        send_raw(h, PROTO_STDIN, 75, "\n", 1);
        collect_process(h, 75, &res);
        assert_non_null(strstr(res.out, "40 120"));

        /* pipes have no terminal to size */
        exec_ok(h, 76, "{\"argv\":[\"cat\"]}");
        send_json(h, PROTO_RESIZE, 76, "{\"rows\":40,\"cols\":120}");
        expect_error(h, 76, ENOTTY);
        send_json(h, PROTO_RESIZE, 76, "{\"rows\":0,\"cols\":120}");
        expect_error(h, 76, EINVAL);
        send_json(h, PROTO_STDIN_CLOSE, 76, "{}");
        memset(&res, 0, sizeof res);
        collect_process(h, 76, &res);
        assert_int_equal(res.exit_code, 0);
}

/* Expects WATCH_EVENT on stream with name and type. */
static void expect_event(struct harness *h, uint32_t stream, const char *name, const char *type) {
        struct frame f;
        expect_frame(h, PROTO_WATCH_EVENT, stream, &f);
        json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
        assert_non_null(j);
        const char *n = json_string_value(json_object_get(j, "name")),
                   *t = json_string_value(json_object_get(j, "type"));
        if (!n || !t || strcmp(n, name) != 0 || strcmp(t, type) != 0)
                fail_msg("expected %s of %s on %u, got %s", type, name, stream, (char *) f.data);
        json_decref(j);
        frame_release(&f);
}

struct want_event {
        uint32_t stream;
        const char *name, *type;
};

/* Expects exactly the n events of want, in order per stream (the order
 * across streams is the agent's). */
static void expect_events(struct harness *h, const struct want_event *want, size_t n) {
        bool *seen = calloc(n, sizeof *seen);
        assert_non_null(seen);
        for (size_t got = 0; got < n; got++) {
                struct frame f;
                recv_frame(h, &f);
                if (f.type != PROTO_WATCH_EVENT)
                        fail_msg("expected a watch event, got %s on %u: %s", proto_type_name(f.type),
                                 f.stream, (char *) f.data);
                json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
                assert_non_null(j);
                const char *nm = json_string_value(json_object_get(j, "name")) ?: "";
                const char *t = json_string_value(json_object_get(j, "type")) ?: "";
                size_t i = 0;
                while (i < n && (seen[i] || want[i].stream != f.stream))
                        i++;
                if (i == n || strcmp(want[i].name, nm) != 0 || strcmp(want[i].type, t) != 0)
                        fail_msg("unexpected event on %u: %s (wanted %s of %s)", f.stream, (char *) f.data,
                                 i < n ? want[i].type : "none", i < n ? want[i].name : "-");
                seen[i] = true;
                json_decref(j);
                frame_release(&f);
        }
        free(seen);
}
#define EXPECT_EVENTS(h, ...)                                                          \
        do {                                                                           \
                const struct want_event w_[] = { __VA_ARGS__ };                        \
                expect_events(h, w_, sizeof w_ / sizeof w_[0]);                        \
        } while (0)

/* Writes a few bytes to path (created when missing). */
static void put(const char *path, const char *text) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
}

static void test_agent_watch(void **state) {
        struct harness *h = harness_get(state);
        char dir[256], path[512], path2[512], json[1024];

        snprintf(dir, sizeof dir, "%s/w", h->dir);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof path, "%s/pre", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/pre/deep", dir);
        assert_int_equal(mkdir(path, 0755), 0);

        /* refused: missing, a file, relative, malformed */
        snprintf(json, sizeof json, "{\"path\":\"%s/missing\"}", dir);
        send_json(h, PROTO_WATCH, 80, json);
        expect_error(h, 80, ENOENT);
        snprintf(path, sizeof path, "%s/file", dir);
        put(path, "x");
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_WATCH, 80, json);
        expect_error(h, 80, ENOTDIR);
        assert_int_equal(unlink(path), 0);
        send_json(h, PROTO_WATCH, 80, "{\"path\":\"w\"}");
        expect_error(h, 80, EINVAL);
        send_json(h, PROTO_WATCH, 0, "{\"path\":\"/\"}");
        expect_error(h, 0, EINVAL);

        /* one watch of the directory alone, one recursive */
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", dir);
        send_json(h, PROTO_WATCH, 80, json);
        json_decref(expect_result(h, 80));
        send_json(h, PROTO_WATCH, 80, json);
        expect_error(h, 80, EEXIST);
        snprintf(json, sizeof json, "{\"path\":\"%s\",\"recursive\":true}", dir);
        send_json(h, PROTO_WATCH, 81, json);
        json_decref(expect_result(h, 81));

        /* create + write, rename, chmod, remove of a file */
        snprintf(path, sizeof path, "%s/a", dir);
        put(path, "data");
        EXPECT_EVENTS(h, { 80, "a", "create" }, { 80, "a", "write" }, { 81, "a", "create" },
                      { 81, "a", "write" });
        snprintf(path2, sizeof path2, "%s/b", dir);
        assert_int_equal(rename(path, path2), 0);
        EXPECT_EVENTS(h, { 80, "a", "rename" }, { 80, "b", "create" }, { 81, "a", "rename" },
                      { 81, "b", "create" });
        assert_int_equal(chmod(path2, 0600), 0);
        EXPECT_EVENTS(h, { 80, "b", "chmod" }, { 81, "b", "chmod" });
        assert_int_equal(unlink(path2), 0);
        EXPECT_EVENTS(h, { 80, "b", "remove" }, { 81, "b", "remove" });

        /* below the directory: only the recursive watch, with the relative name */
        snprintf(path, sizeof path, "%s/pre/deep/f", dir);
        touch(path);
        expect_event(h, 81, "pre/deep/f", "create");
        /* a subdirectory made later is watched too */
        snprintf(path, sizeof path, "%s/new", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        EXPECT_EVENTS(h, { 80, "new", "create" }, { 81, "new", "create" });
        snprintf(path, sizeof path, "%s/new/g", dir);
        touch(path);
        expect_event(h, 81, "new/g", "create");
        /* one moved away is forgotten, its new name watched */
        snprintf(path, sizeof path, "%s/new", dir);
        snprintf(path2, sizeof path2, "%s/pre/moved", dir);
        assert_int_equal(rename(path, path2), 0);
        /* what it holds is named under its new name */
        EXPECT_EVENTS(h, { 80, "new", "rename" }, { 81, "new", "rename" }, { 81, "pre/moved", "create" },
                      { 81, "pre/moved/g", "create" });
        snprintf(path, sizeof path, "%s/pre/moved/g", dir);
        assert_int_equal(unlink(path), 0);
        expect_event(h, 81, "pre/moved/g", "remove");
        /* files in a new directory before its watch began (`mkdir -p t/s;
         * echo > t/s/f` outruns the agent; a tree moved in is that for
         * sure): named as created after the directory */
        snprintf(path, sizeof path, "%s/tree-src", h->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/tree-src/s", h->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/tree-src/s/f", h->dir);
        put(path, "early");
        snprintf(path, sizeof path, "%s/tree-src", h->dir);
        snprintf(path2, sizeof path2, "%s/tree", dir);
        assert_int_equal(rename(path, path2), 0);
        EXPECT_EVENTS(h, { 80, "tree", "create" }, { 81, "tree", "create" }, { 81, "tree/s", "create" },
                      { 81, "tree/s/f", "create" });
        /* and watched from then on */
        snprintf(path, sizeof path, "%s/tree/s/later", dir);
        touch(path);
        expect_event(h, 81, "tree/s/later", "create");

        /* repeats in one batch go out once */
        snprintf(path, sizeof path, "%s/c", dir);
        touch(path);
        EXPECT_EVENTS(h, { 80, "c", "create" }, { 81, "c", "create" });
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        for (int i = 0; i < 200; i++)
                assert_int_equal(write(fd, "y", 1), 1);
        close(fd);
        /* then a marker: its creation on both streams ends the count */
        snprintf(path, sizeof path, "%s/end", dir);
        touch(path);
        unsigned writes = 0, ends = 0;
        while (ends < 2) {
                struct frame f;
                recv_frame(h, &f);
                assert_int_equal(f.type, PROTO_WATCH_EVENT);
                json_t *j = json_loadb((const char *) f.data, f.len, 0, NULL);
                const char *nm = json_string_value(json_object_get(j, "name")) ?: "";
                if (strcmp(nm, "end") == 0)
                        ends++;
                else {
                        assert_string_equal(nm, "c");
                        assert_string_equal(json_string_value(json_object_get(j, "type")), "write");
                        writes++;
                }
                json_decref(j);
                frame_release(&f);
        }
        /* both watches saw the writes, but 200 writes are not 400 events */
        assert_true(writes >= 2 && writes < 400);

        /* WATCH_END: nothing more on that stream */
        send_json(h, PROTO_WATCH_END, 80, "{}");
        send_json(h, PROTO_WATCH_END, 80, "{}"); /* ended already: ignored */
        /* An event the agent read before WATCH_END still goes out; the
         * PING's answer says both ends have been read, so "d" comes after. */
        send_json(h, PROTO_PING, 82, "{}");
        json_decref(expect_result(h, 82));
        snprintf(path, sizeof path, "%s/d", dir);
        touch(path);
        expect_event(h, 81, "d", "create");

        /* at most 16 watches: 81 and 15 more */
        snprintf(json, sizeof json, "{\"path\":\"%s/pre\"}", dir);
        for (uint32_t s = 83; s < 98; s++) {
                send_json(h, PROTO_WATCH, s, json);
                json_decref(expect_result(h, s));
        }
        send_json(h, PROTO_WATCH, 98, json);
        expect_error(h, 98, EMFILE);
        for (uint32_t s = 83; s < 98; s++)
                send_json(h, PROTO_WATCH_END, s, "{}");

        /* the watched directory goes: the watch ends with ERROR */
        snprintf(path, sizeof path, "%s/gone", h->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_WATCH, 99, json);
        json_decref(expect_result(h, 99));
        assert_int_equal(rmdir(path), 0);
        expect_error(h, 99, ENOENT);
        send_json(h, PROTO_WATCH_END, 81, "{}");
        send_json(h, PROTO_PING, 82, "{}");
        json_decref(expect_result(h, 82));
}

/* The test builds' agents an upgrade replaces this one with
 * (tests/meson.build). */
static const char *test_agent(const char *env) {
        const char *e = getenv(env);
        if (!e || !*e)
                fail_msg("%s is not set (meson test sets it)", env);
        return e;
}

/* Copies agent to DIR/name (the agent removes what it staged). */
static void stage(struct harness *h, const char *agent, const char *name, char *ret, size_t n) {
        snprintf(ret, n, "%s/%s", h->dir, name);
        assert_int_equal(file_clone_or_copy(agent, ret, NULL), 0);
        assert_int_equal(chmod(ret, 0755), 0);
}

/* Sends UPGRADE of path on stream. */
static void send_upgrade(struct harness *h, uint32_t stream, const char *path) {
        char json[700];
        snprintf(json, sizeof json, "{\"path\":\"%s\"}", path);
        send_json(h, PROTO_UPGRADE, stream, json);
}

/* STDIN line on stream, and the same line back on its STDOUT. */
static void echo_line(struct harness *h, uint32_t stream, const char *line) {
        struct frame f;
        send_raw(h, PROTO_STDIN, stream, line, strlen(line));
        expect_frame(h, PROTO_STDOUT, stream, &f);
        assert_int_equal(f.len, strlen(line));
        assert_memory_equal(f.data, line, strlen(line));
        frame_release(&f);
}

static bool has_feature(json_t *reply, const char *name) {
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(reply, "features"), i,
                           v) if (json_is_string(v) && strcmp(json_string_value(v), name) == 0) return true;
        return false;
}

static void test_agent_upgrade(void **state) {
        struct harness *h = harness_get(state);
        struct run_result res = {0};
        char dir[300], path[600], staged[600], json[1024];
        struct frame f;

        /* what the agent holds: a default environment, a process reading its
         * stdin (pipes), one on a PTY, a detached one whose output waits in
         * its ring, a recursive watch */
        send_json(h, PROTO_IDENTITY, 0, "{\"env\":{\"KEPT\":\"yes\"}}");
        json_decref(expect_result(h, 0));
        pid_t cat = exec_ok(h, 90, "{\"argv\":[\"cat\"]}");
        echo_line(h, 90, "before\n");
        exec_ok(h, 91, "{\"argv\":[\"sh\",\"-c\",\"read x; echo pty:$x\"],\"pty\":true}");
        snprintf(dir, sizeof dir, "%s/uw", h->dir);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(json, sizeof json, "{\"path\":\"%s\",\"recursive\":true}", dir);
        send_json(h, PROTO_WATCH, 92, json);
        json_decref(expect_result(h, 92));
        snprintf(path, sizeof path, "%s/a", dir);
        touch(path);
        expect_event(h, 92, "a", "create");

        /* refused: a path that is no file, a binary that is no agent; the
         * agent runs on, everything kept */
        snprintf(path, sizeof path, "%s/missing", h->dir);
        send_upgrade(h, 93, path);
        expect_error_msg(h, 93, ENOENT, "the staged agent");
        send_json(h, PROTO_UPGRADE, 93, "{\"path\":\"relative\"}");
        expect_error(h, 93, EINVAL);
        stage(h, "/bin/false", "false", staged, sizeof staged);
        send_upgrade(h, 93, staged);
        expect_error_msg(h, 93, ENOEXEC, "check failed");
        stage(h, "/bin/true", "true", staged, sizeof staged);
        send_upgrade(h, 93, staged);
        expect_error_msg(h, 93, ENOEXEC, "no airlock-guest");
        echo_line(h, 90, "still\n");

        /* an agent that passes the check but cannot take over: the old one
         * comes back from the same state and says why */
        stage(h, test_agent("AIRLOCK_GUEST_NORESUME"), "noresume", staged, sizeof staged);
        send_upgrade(h, 94, staged);
        expect_error_msg(h, 94, ENOEXEC, "built to fail here");
        assert_int_equal(waitpid(h->agent, NULL, WNOHANG), 0);
        echo_line(h, 90, "rolled back\n");
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"n1\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        assert_non_null(strstr((char *) f.data, "\"airlock-guest 0.2.0\""));
        frame_release(&f);
        /* the HELLO detached every process: attach cat again (ADOPT), and
         * give the watch a new stream */
        snprintf(json, sizeof json, "{\"pid\":%d}", (int) cat);
        send_json(h, PROTO_ADOPT, 95, json);
        json_decref(expect_result(h, 95));
        echo_line(h, 95, "adopted\n");
        snprintf(json, sizeof json, "{\"path\":\"%s\",\"recursive\":true}", dir);
        send_json(h, PROTO_WATCH, 96, json);
        json_decref(expect_result(h, 96));
        exec_ok(h, 97, "{\"argv\":[\"sh\",\"-c\",\"read x; echo pty:$x\"],\"pty\":true}");

        /* the upgrade: the same process (pid), a new agent */
        stage(h, test_agent("AIRLOCK_GUEST_NEXT"), "next", staged, sizeof staged);
        send_upgrade(h, 98, staged);
        json_t *up = expect_result(h, 98);
        assert_string_equal(json_string_value(json_object_get(up, "agent")), "airlock-guest 0.99.0");
        assert_string_equal(json_string_value(json_object_get(up, "previous")), "airlock-guest 0.2.0");
        assert_true(has_feature(up, "upgrade"));
        json_decref(up);
        assert_int_equal(waitpid(h->agent, NULL, WNOHANG), 0);
        assert_int_equal(access(staged, F_OK), -1); /* what it staged is gone */

        /* everything it held still works, on the same streams */
        echo_line(h, 95, "after\n");
        snprintf(path, sizeof path, "%s/sub", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        expect_event(h, 96, "sub", "create");
        snprintf(path, sizeof path, "%s/sub/b", dir);
        touch(path);
        expect_event(h, 96, "sub/b", "create");
        send_raw(h, PROTO_STDIN, 97, "hi\n", 3);
        char pty_out[256] = "";
        for (bool exited = false; !exited;) {
                recv_frame(h, &f);
                if (f.stream != 97 || (f.type != PROTO_STDOUT && f.type != PROTO_EXIT))
                        fail_msg("unexpected %s on %u", proto_type_name(f.type), f.stream);
                if (f.type == PROTO_STDOUT)
                        strncat(pty_out, (char *) f.data, sizeof pty_out - strlen(pty_out) - 1);
                exited = f.type == PROTO_EXIT;
                frame_release(&f);
        }
        assert_non_null(strstr(pty_out, "pty:hi"));
        exec_ok(h, 99, "{\"argv\":[\"sh\",\"-c\",\"echo $KEPT\"]}");
        collect_process(h, 99, &res);
        assert_string_equal(res.out, "yes\n");
        json_t *e = processes_entry(h, 100, cat);
        assert_non_null(e);
        assert_true(json_is_true(json_object_get(e, "attached")));
        json_decref(e);
        send_json(h, PROTO_STDIN_CLOSE, 95, "{}");
        memset(&res, 0, sizeof res);
        collect_process(h, 95, &res);
        assert_int_equal(res.exit_code, 0);
        send_json(h, PROTO_HELLO, 0, "{\"nonce\":\"n2\",\"version\":1}");
        expect_frame(h, PROTO_HELLO, 0, &f);
        assert_non_null(strstr((char *) f.data, "\"airlock-guest 0.99.0\""));
        frame_release(&f);
}

int main(void) {
        const struct CMUnitTest unit[] = {
                cmocka_unit_test(test_path_validate),      cmocka_unit_test(test_exec_parse),
                cmocka_unit_test(test_exec_limits),        cmocka_unit_test(test_env_merge),
                cmocka_unit_test(test_small_parsers),      cmocka_unit_test(test_identity_parse),
                cmocka_unit_test(test_volume_mount_parse),
                cmocka_unit_test(test_path_request_parse), cmocka_unit_test(test_utf8_sanitize),
                cmocka_unit_test(test_user_name),          cmocka_unit_test(test_users),
                cmocka_unit_test(test_process_info),
        };
        /* in order, on one agent: HELLO first */
        const struct CMUnitTest agent[] = {
                cmocka_unit_test(test_agent_hello_ping),
                cmocka_unit_test(test_agent_exec_pipes),
                cmocka_unit_test(test_agent_exec_errors),
                cmocka_unit_test(test_agent_stdin),
                cmocka_unit_test(test_agent_signal),
                cmocka_unit_test(test_agent_exit_with_grandchild),
                cmocka_unit_test(test_agent_pty),
                cmocka_unit_test(test_agent_hello_detaches),
                cmocka_unit_test(test_agent_files),
                cmocka_unit_test(test_agent_file_errors),
                cmocka_unit_test(test_agent_identity),
                cmocka_unit_test(test_agent_exec_user),
                cmocka_unit_test(test_agent_exec_other_user),
                cmocka_unit_test(test_agent_files_user),
                cmocka_unit_test(test_agent_files_other_user),
                cmocka_unit_test(test_agent_processes_adopt),
                cmocka_unit_test(test_agent_adopt_ring),
                cmocka_unit_test(test_agent_resize),
                cmocka_unit_test(test_agent_watch),
                cmocka_unit_test(test_agent_upgrade),
        };
        signal(SIGPIPE, SIG_IGN);
        int r = cmocka_run_group_tests_name("guest_lib", unit, NULL, NULL);
        r += cmocka_run_group_tests_name("agent", agent, harness_setup, harness_teardown);
        return unit_exit(r);
}
