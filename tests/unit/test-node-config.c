/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the node agent's configuration and request helpers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "nodeutil.h"

static const char *const env_vars[] = {
        "AIRLOCK_DATA_DIR",       "AIRLOCK_SOCKET",          "AIRLOCK_TEMPLATES_DIR",  "AIRLOCK_IMAGES_DIR",
        "AIRLOCK_GUEST_BINARY",   "AIRLOCK_QEMU",            "AIRLOCK_ACCEL",          "AIRLOCK_PREBUILD",
        "AIRLOCK_STORAGE",        "AIRLOCK_VOLUME_GIB",      "AIRLOCK_LOG_LEVEL",      "AIRLOCK_MAX_SANDBOXES",
        "AIRLOCK_EXEC_MAX_OUTPUT", "AIRLOCK_MAX_FILE_SIZE",  "AIRLOCK_SESSION_BUFFER", "AIRLOCK_EXEC_TIMEOUT_MAX",
        "AIRLOCK_MAX_CONNECTIONS", "AIRLOCK_POOL_SIZE",      "AIRLOCK_POOL_MAX", "AIRLOCK_VMM_UID_BASE",   "AIRLOCK_OBJSTORE_DIR",
        "AIRLOCK_CAP_KEYS_DIR",    "AIRLOCK_JOIN",           "AIRLOCK_JOIN_TOKEN_FILE", "AIRLOCK_CLUSTER_LISTEN",
        "AIRLOCK_NODE_NAME",
};

static int clear_env(void **state) {
        for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
                unsetenv(env_vars[i]);
        return 0;
}

/* Loads with the given flags (argv[0] added). */
static int load(struct node_config **ret, enum node_config_action *action, int n, ...) {
        char *argv[16] = { (char *) "airlock-node" };
        va_list ap;
        va_start(ap, n);
        for (int i = 0; i < n && i < 14; i++)
                argv[i + 1] = va_arg(ap, char *);
        va_end(ap);
        return node_config_load(n + 1, argv, ret, action);
}

static void test_defaults(void **state) {
        struct node_config *c = NULL;
        enum node_config_action a;
        assert_int_equal(load(&c, &a, 0), 0);
        assert_int_equal(a, NODE_CONFIG_RUN);
        assert_string_equal(c->data_dir, "/var/lib/airlock");
        assert_string_equal(c->socket_path, "/var/lib/airlock/run/node.sock");
        assert_null(c->templates_dir);
        assert_string_equal(c->accel, "auto");
        assert_string_equal(c->qemu_binary, "qemu-system-x86_64");
        assert_int_equal(c->n_prebuild, 2);
        assert_string_equal(c->prebuild[0], "minimal");
        assert_string_equal(c->prebuild[1], "python");
        assert_null(c->prebuild[2]);
        assert_int_equal(c->storage, NODE_STORAGE_AUTO);
        assert_int_equal(c->volume_gib, 64);
        assert_int_equal(c->max_sandboxes, 64);
        assert_int_equal(c->exec_max_output, 1 << 20);
        assert_int_equal(c->max_file_size, 1ULL << 30);
        assert_int_equal(c->session_buffer, 1 << 20);
        assert_int_equal(c->exec_timeout_max_s, 24 * 3600);
        assert_int_equal(c->pool_size, 2);
        assert_non_null(strstr(c->images_dir, "/images"));
        assert_non_null(strstr(c->guest_binary, "/src/guest/airlock-guest"));
        node_config_free(c);
        /* warm pools: 0 disables them, at most NODE_POOL_SIZE_MAX */
        assert_int_equal(load(&c, NULL, 2, "--pool-size", "0"), 0);
        assert_int_equal(c->pool_size, 0);
        node_config_free(c);
        c = NULL;
        assert_int_equal(load(&c, NULL, 2, "--pool-size", "33"), -EINVAL);
        assert_null(c);
        /* a pool grows up to pool-max: 16 by default, never below the size */
        assert_int_equal(load(&c, NULL, 0), 0);
        assert_int_equal(c->pool_max, 16);
        node_config_free(c);
        assert_int_equal(load(&c, NULL, 2, "--pool-size", "20"), 0);
        assert_int_equal(c->pool_max, 20);
        node_config_free(c);
        assert_int_equal(load(&c, NULL, 4, "--pool-size", "4", "--pool-max", "4"), 0);
        assert_int_equal(c->pool_max, 4);
        node_config_free(c);
        c = NULL;
        assert_int_equal(load(&c, NULL, 4, "--pool-size", "4", "--pool-max", "3"), -EINVAL);
        assert_null(c);
        assert_int_equal(load(&c, NULL, 2, "--pool-max", "33"), -EINVAL);
        assert_null(c);
}

static void test_env_overrides(void **state) {
        setenv("AIRLOCK_DATA_DIR", "/tmp/n", 1);
        setenv("AIRLOCK_ACCEL", "tcg", 1);
        setenv("AIRLOCK_PREBUILD", "minimal", 1);
        setenv("AIRLOCK_STORAGE", "copy", 1);
        setenv("AIRLOCK_VOLUME_GIB", "8", 1);
        setenv("AIRLOCK_EXEC_MAX_OUTPUT", "64K", 1);
        setenv("AIRLOCK_MAX_FILE_SIZE", "2GiB", 1);
        setenv("AIRLOCK_TEMPLATES_DIR", "/tmp/tpl", 1);
        setenv("AIRLOCK_LOG_LEVEL", "debug", 1);
        struct node_config *c = NULL;
        assert_int_equal(load(&c, NULL, 0), 0);
        assert_string_equal(c->data_dir, "/tmp/n");
        assert_string_equal(c->socket_path, "/tmp/n/run/node.sock");
        assert_string_equal(c->accel, "tcg");
        assert_int_equal(c->n_prebuild, 1);
        assert_int_equal(c->storage, NODE_STORAGE_COPY);
        assert_int_equal(c->volume_gib, 8);
        assert_int_equal(c->exec_max_output, 64 << 10);
        assert_int_equal(c->max_file_size, 2ULL << 30);
        assert_string_equal(c->templates_dir, "/tmp/tpl");
        assert_int_equal(c->log_level, LOG_LEVEL_DEBUG);
        node_config_free(c);

        /* flags win over the environment; an empty prebuild list is allowed */
        assert_int_equal(load(&c, NULL, 4, "--data-dir", "/srv/a", "--prebuild=", "--socket=/run/x.sock"), 0);
        assert_string_equal(c->data_dir, "/srv/a");
        assert_string_equal(c->socket_path, "/run/x.sock");
        assert_int_equal(c->n_prebuild, 0);
        node_config_free(c);
}

static void test_invalid(void **state) {
        struct node_config *c = NULL;
        static const char *const bad_env[][2] = {
                { "AIRLOCK_ACCEL", "hvf" },         { "AIRLOCK_STORAGE", "nfs" },
                { "AIRLOCK_VOLUME_GIB", "0" },      { "AIRLOCK_VOLUME_GIB", "-1" },
                { "AIRLOCK_MAX_SANDBOXES", "x" },   { "AIRLOCK_EXEC_MAX_OUTPUT", "10" },
                { "AIRLOCK_PREBUILD", "../etc" },   { "AIRLOCK_PREBUILD", "a,,.hidden" },
                { "AIRLOCK_DATA_DIR", "relative" }, { "AIRLOCK_LOG_LEVEL", "loud" },
                { "AIRLOCK_MAX_FILE_SIZE", "1Q" },  { "AIRLOCK_SESSION_BUFFER", "99999999999999999999" },
                { "AIRLOCK_EXEC_TIMEOUT_MAX", "0" },
        };
        for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) {
                clear_env(NULL);
                setenv(bad_env[i][0], bad_env[i][1], 1);
                assert_int_equal(load(&c, NULL, 0), -EINVAL);
        }
        clear_env(NULL);
        assert_int_equal(load(&c, NULL, 1, "--no-such-flag"), -EINVAL);
        assert_int_equal(load(&c, NULL, 1, "stray"), -EINVAL);
        assert_int_equal(load(&c, NULL, 1, "--accel"), -EINVAL);
        /* a socket path longer than sun_path */
        char longdir[200];
        memset(longdir, 'a', sizeof longdir - 1);
        longdir[0] = '/';
        longdir[sizeof longdir - 1] = 0;
        assert_int_equal(load(&c, NULL, 2, "--data-dir", longdir), -EINVAL);
}

static void test_actions(void **state) {
        struct node_config *c = NULL;
        enum node_config_action a;
        assert_int_equal(load(&c, &a, 1, "--print-config"), 0);
        assert_int_equal(a, NODE_CONFIG_PRINT);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        node_config_print(c, f);
        fclose(f);
        assert_non_null(strstr(buf, "data_dir=/var/lib/airlock\n"));
        assert_non_null(strstr(buf, "prebuild=minimal,python\n"));
        assert_non_null(strstr(buf, "exec_max_output=1048576\n"));
        assert_non_null(strstr(buf, "pool_size=2\n"));
        free(buf);
        node_config_free(c);
        assert_int_equal(load(&c, &a, 1, "--help"), 0);
        assert_int_equal(a, NODE_CONFIG_HELP);
        node_config_free(c);
}

/* What airlock-node as root hands airlock-nodemgr --worker: the resolved
 * settings under their own names; loading again from them (and the same
 * flags, which the unprivileged node gets) gives the same configuration. */
static void test_export(void **state) {
        setenv("AIRLOCK_STORAGE", "copy", 1);
        struct node_config *c = NULL;
        assert_int_equal(load(&c, NULL, 12, "--join", "10.0.0.1:7422", "--join-token-file", "/etc/airlock/token",
                              "--data-dir", "/srv/w1", "--vmm-uid-base", "3000000", "--log-level", "debug",
                              "--templates-dir", "/srv/tpl"),
                         0);
        /* a node of a cluster: the keys the replicas send, in DATA_DIR/cluster */
        assert_string_equal(c->cap_keys_dir, "/srv/w1/cluster/keys");
        assert_int_equal(node_config_export(c), 0);
        node_config_free(c);
        assert_string_equal(getenv("AIRLOCK_DATA_DIR"), "/srv/w1");
        assert_string_equal(getenv("AIRLOCK_SOCKET"), "/srv/w1/run/node.sock");
        assert_string_equal(getenv("AIRLOCK_CAP_KEYS_DIR"), "/srv/w1/cluster/keys");
        assert_string_equal(getenv("AIRLOCK_VMM_UID_BASE"), "3000000");
        assert_string_equal(getenv("AIRLOCK_STORAGE"), "copy");
        assert_string_equal(getenv("AIRLOCK_VOLUME_GIB"), "64");
        assert_string_equal(getenv("AIRLOCK_LOG_LEVEL"), "debug");
        assert_string_equal(getenv("AIRLOCK_TEMPLATES_DIR"), "/srv/tpl");
        assert_string_equal(getenv("AIRLOCK_JOIN_TOKEN_FILE"), "/etc/airlock/token");
        assert_string_equal(getenv("AIRLOCK_QEMU"), "qemu-system-x86_64");
        assert_non_null(strstr(getenv("AIRLOCK_GUEST_BINARY"), "/src/guest/airlock-guest"));
        /* unset ones stay unset: the node's defaults hold */
        assert_null(getenv("AIRLOCK_OBJSTORE_DIR"));
        /* the unprivileged node: the environment, then the same flags */
        assert_int_equal(load(&c, NULL, 2, "--join", "10.0.0.1:7422"), 0);
        assert_string_equal(c->data_dir, "/srv/w1");
        assert_string_equal(c->cap_keys_dir, "/srv/w1/cluster/keys");
        assert_int_equal(c->vmm_uid_base, 3000000);
        assert_int_equal(c->storage, NODE_STORAGE_COPY);
        assert_int_equal(c->log_level, LOG_LEVEL_DEBUG);
        assert_string_equal(c->templates_dir, "/srv/tpl");
        assert_string_equal(c->join_token_file, "/etc/airlock/token");
        node_config_free(c);
}

static void test_parse_size(void **state) {
        uint64_t v;
        assert_int_equal(node_parse_size("0", 100, &v), 0);
        assert_int_equal(v, 0);
        assert_int_equal(node_parse_size("1K", UINT64_MAX, &v), 0);
        assert_int_equal(v, 1024);
        assert_int_equal(node_parse_size("3MiB", UINT64_MAX, &v), 0);
        assert_int_equal(v, 3 << 20);
        assert_int_equal(node_parse_size("1G", 1 << 20, &v), -ERANGE);
        assert_int_equal(node_parse_size("", 10, &v), -EINVAL);
        assert_int_equal(node_parse_size("K", 10, &v), -EINVAL);
        assert_int_equal(node_parse_size("12Kb", UINT64_MAX, &v), -EINVAL);
        assert_int_equal(node_parse_size("-5", UINT64_MAX, &v), -EINVAL);
        assert_int_equal(node_parse_size("99999999999T", UINT64_MAX, &v), -ERANGE);
}

static void check_sanitize(const char *in, size_t inlen, const char *want, size_t wantlen) {
        size_t n = 0;
        char *out = utf8_sanitize(in, inlen, &n);
        assert_non_null(out);
        assert_int_equal(n, wantlen);
        assert_memory_equal(out, want, wantlen);
        assert_int_equal(out[n], 0);
        free(out);
}

#define FFFD "\xef\xbf\xbd"
#define CHECK(in, want) check_sanitize(in, sizeof(in) - 1, want, sizeof(want) - 1)

static void test_utf8_sanitize(void **state) {
        CHECK("", "");
        CHECK("hello\n", "hello\n");
        CHECK("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
        CHECK("a\0b", "a\0b");                         /* NUL is valid UTF-8 */
        CHECK("\xff", FFFD);                           /* never valid */
        CHECK("a\x80z", "a" FFFD "z");                 /* lone continuation */
        CHECK("\xc0\xaf", FFFD FFFD);                  /* overlong: C0 never starts anything */
        CHECK("\xe0\x80\xaf", FFFD FFFD FFFD);         /* overlong 3-byte */
        CHECK("\xed\xa0\x80", FFFD FFFD FFFD);         /* surrogate U+D800 */
        CHECK("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD); /* > U+10FFFF */
        CHECK("\xe2\x82", FFFD);                       /* truncated at the end: one maximal subpart */
        CHECK("\xe2\x82x", FFFD "x");
        CHECK("\xf0\x9f\x98", FFFD);
        CHECK("\xc3", FFFD);

        /* utf8_cut never splits a character */
        const char *s = "a\xe2\x82\xac";
        assert_int_equal(utf8_cut(s, 4, 10), 4);
        assert_int_equal(utf8_cut(s, 4, 3), 1);
        assert_int_equal(utf8_cut(s, 4, 2), 1);
        assert_int_equal(utf8_cut(s, 4, 1), 1);
        assert_int_equal(utf8_cut(s, 4, 0), 0);
}

static void test_paths(void **state) {
        assert_true(node_path_is_valid("/"));
        assert_true(node_path_is_valid("/tmp/a.txt"));
        assert_true(node_path_is_valid("/a/..b/c.."));
        assert_true(node_path_is_valid("/a//b/"));
        assert_false(node_path_is_valid(NULL));
        assert_false(node_path_is_valid(""));
        assert_false(node_path_is_valid("relative"));
        assert_false(node_path_is_valid("/.."));
        assert_false(node_path_is_valid("/a/../b"));
        assert_false(node_path_is_valid("/a/.."));
        char *big = malloc(NODE_PATH_MAX + 2);
        assert_non_null(big);
        memset(big, 'a', NODE_PATH_MAX + 1);
        big[0] = '/';
        big[NODE_PATH_MAX + 1] = 0;
        assert_false(node_path_is_valid(big));
        big[NODE_PATH_MAX] = 0;
        assert_true(node_path_is_valid(big));
        free(big);
}

static void test_error_codes(void **state) {
        assert_string_equal(node_errno_code(-EINVAL), "invalid");
        assert_string_equal(node_errno_code(-ENOENT), "not_found");
        assert_string_equal(node_errno_code(-EEXIST), "conflict");
        assert_string_equal(node_errno_code(-EFBIG), "too_large");
        assert_string_equal(node_errno_code(-ETIMEDOUT), "timeout");
        assert_string_equal(node_errno_code(-ECONNRESET), "guest");
        assert_string_equal(node_errno_code(-ENOMEM), "internal");
        assert_string_equal(node_guest_errno_code(ENOENT), "not_found");
        assert_string_equal(node_guest_errno_code(EISDIR), "invalid");
        assert_string_equal(node_guest_errno_code(ENOTDIR), "invalid");
        assert_string_equal(node_guest_errno_code(EINVAL), "invalid");
        assert_string_equal(node_guest_errno_code(ENAMETOOLONG), "invalid");
        assert_string_equal(node_guest_errno_code(ELOOP), "invalid");
        assert_string_equal(node_guest_errno_code(EFBIG), "too_large");
        assert_string_equal(node_guest_errno_code(EEXIST), "conflict");
        assert_string_equal(node_guest_errno_code(ENOTEMPTY), "conflict");
        assert_string_equal(node_guest_errno_code(EACCES), "forbidden");
        assert_string_equal(node_guest_errno_code(EPERM), "forbidden");
        assert_string_equal(node_guest_errno_code(EIO), "guest");
        assert_string_equal(node_guest_errno_code(ESRCH), "guest");
}

static void test_user_names(void **state) {
        assert_true(node_user_name_is_valid("root"));
        assert_true(node_user_name_is_valid("user"));
        assert_true(node_user_name_is_valid("_x-9"));
        assert_true(node_user_name_is_valid("a2345678901234567890123456789012"));
        assert_false(node_user_name_is_valid("a23456789012345678901234567890123"));
        assert_false(node_user_name_is_valid(""));
        assert_false(node_user_name_is_valid(NULL));
        assert_false(node_user_name_is_valid("Root"));
        assert_false(node_user_name_is_valid("-x"));
        assert_false(node_user_name_is_valid("1x"));
        assert_false(node_user_name_is_valid("a b"));
        assert_false(node_user_name_is_valid("a:b"));
}

/* Which of two guest agents is newer (the upgrade's rule). */
/* One a CPU, within the bounds asked for. */
static void test_cpus_within(void **state) {
        (void) state;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        assert_true(cpus >= 1);
        assert_int_equal(node_cpus_within(1, 1000), (unsigned) cpus);
        assert_int_equal(node_cpus_within(1, 1), 1);
        assert_int_equal(node_cpus_within(1000, 2000), 1000);
}

static void test_agent_versions(void **state) {
        (void) state;
        assert_string_equal(node_agent_version("airlock-guest 0.2.0"), "0.2.0");
        assert_string_equal(node_agent_version("0.3"), "0.3");
        assert_true(node_agent_version_cmp("airlock-guest 0.2.0", "airlock-guest 0.99.0") < 0);
        assert_true(node_agent_version_cmp("airlock-guest 0.10.0", "airlock-guest 0.9.9") > 0);
        assert_int_equal(node_agent_version_cmp("airlock-guest 1.2", "airlock-guest 1.2.0"), 0);
        assert_true(node_agent_version_cmp("airlock-guest 1.2.1", "airlock-guest 1.2") > 0);
        /* a part that is no number counts as 0; nothing is older than all */
        assert_true(node_agent_version_cmp("", "airlock-guest 0.1.0") < 0);
        assert_int_equal(node_agent_version_cmp("airlock-guest 0.2.0-test", "airlock-guest 0.2.0"), 0);
        assert_true(node_agent_version_cmp("airlock-guest 99999999999999999999999", "airlock-guest 1") > 0);
}

static void test_base64(void **state) {
        char *s = node_base64_encode("hi\n\xff", 4);
        assert_non_null(s);
        assert_string_equal(s, "aGkK/w==");
        uint8_t *d = NULL;
        size_t n = 0;
        assert_int_equal(node_base64_decode(s, &d, &n), 0);
        assert_int_equal(n, 4);
        assert_memory_equal(d, "hi\n\xff", 4);
        free(d);
        free(s);
        assert_int_equal(node_base64_decode("", &d, &n), 0);
        assert_int_equal(n, 0);
        free(d);
        assert_int_equal(node_base64_decode("a!==", &d, &n), -EINVAL);
        assert_int_equal(node_base64_decode("aGkK/w==x", &d, &n), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_defaults, clear_env),
                cmocka_unit_test_setup(test_env_overrides, clear_env),
                cmocka_unit_test_setup(test_invalid, clear_env),
                cmocka_unit_test_setup(test_actions, clear_env),
                cmocka_unit_test_setup(test_export, clear_env),
                cmocka_unit_test(test_parse_size),
                cmocka_unit_test(test_utf8_sanitize),
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_error_codes),
                cmocka_unit_test(test_user_names),
                cmocka_unit_test(test_base64),
                cmocka_unit_test(test_agent_versions),
                cmocka_unit_test(test_cpus_within),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
