/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

static const char *const env_vars[] = {
        "AIRLOCK_DATA_DIR", "AIRLOCK_LISTEN", "AIRLOCK_NODE_SOCKET", "AIRLOCK_NODE_BINARY",
        "AIRLOCK_DATABASE", "AIRLOCK_LOG_LEVEL",
};

static int clear_env(void **state) {
        for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
                unsetenv(env_vars[i]);
        return 0;
}

static int load(struct daemon_config *c, char *err, int argc, ...) {
        char *argv[16] = { (char *) "airlockd" };
        va_list ap;
        va_start(ap, argc);
        for (int i = 0; i < argc && i < 14; i++)
                argv[i + 1] = va_arg(ap, char *);
        va_end(ap);
        return config_load(argc + 1, argv, c, err, 256);
}

static void test_defaults(void **state) {
        struct daemon_config c;
        char err[256] = "";
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.action, CONFIG_RUN);
        assert_string_equal(c.data_dir, "/var/lib/airlock");
        assert_string_equal(c.listen, "127.0.0.1:7420");
        assert_string_equal(c.node_socket, "/var/lib/airlock/run/node.sock");
        assert_string_equal(c.database, "sqlite:/var/lib/airlock/airlock.db");
        assert_true(c.spawn_node);
        assert_int_equal(c.max_json_body, 1u << 20);
        assert_int_equal(c.max_upload, 1ull << 30);
        const struct sockaddr_in *a = (const struct sockaddr_in *) &c.listen_addr;
        assert_int_equal(a->sin_family, AF_INET);
        assert_int_equal(ntohs(a->sin_port), 7420);
        assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
        assert_non_null(strstr(c.node_binary, "airlock-node"));
}

static void test_env(void **state) {
        struct daemon_config c;
        char err[256] = "";
        setenv("AIRLOCK_DATA_DIR", "/srv/alk/", 1);
        setenv("AIRLOCK_LISTEN", "0.0.0.0:8080", 1);
        setenv("AIRLOCK_LOG_LEVEL", "debug", 1);
        setenv("AIRLOCK_NODE_BINARY", "/usr/bin/airlock-node", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_string_equal(c.data_dir, "/srv/alk"); /* trailing slash trimmed */
        assert_string_equal(c.node_socket, "/srv/alk/run/node.sock");
        assert_string_equal(c.database, "sqlite:/srv/alk/airlock.db");
        assert_int_equal(c.log_level, LOG_LEVEL_DEBUG);
        assert_string_equal(c.node_binary, "/usr/bin/airlock-node");
        assert_int_equal(ntohs(((const struct sockaddr_in *) &c.listen_addr)->sin_port), 8080);
}

static void test_flags_override_env(void **state) {
        struct daemon_config c;
        char err[256] = "";
        setenv("AIRLOCK_DATA_DIR", "/srv/env", 1);
        setenv("AIRLOCK_NODE_SOCKET", "/run/env.sock", 1);
        assert_int_equal(load(&c, err, 6, "--data-dir", "/srv/flag", "--no-spawn-node", "--listen", "[::1]:9000",
                              "--print-config"),
                         0);
        assert_string_equal(c.data_dir, "/srv/flag");
        assert_string_equal(c.node_socket, "/run/env.sock"); /* explicit socket is kept */
        assert_false(c.spawn_node);
        assert_int_equal(c.action, CONFIG_PRINT);
        assert_int_equal(c.listen_addr.ss_family, AF_INET6);
        assert_int_equal(load(&c, err, 4, "--node-socket", "/run/x.sock", "--log-level", "warn"), 0);
        assert_string_equal(c.node_socket, "/run/x.sock");
        assert_int_equal(c.log_level, LOG_LEVEL_WARN);
        assert_int_equal(load(&c, err, 1, "--help"), 0);
        assert_int_equal(c.action, CONFIG_HELP);
        assert_int_equal(load(&c, err, 1, "--version"), 0);
        assert_int_equal(c.action, CONFIG_VERSION);
}

static void test_invalid(void **state) {
        struct daemon_config c;
        memset(&c, 0x5a, sizeof c);
        struct daemon_config before = c;
        char err[256] = "";
        assert_int_equal(load(&c, err, 2, "--data-dir", "relative/dir"), -EINVAL);
        assert_non_null(strstr(err, "absolute"));
        assert_memory_equal(&c, &before, sizeof c); /* untouched on failure */
        assert_int_equal(load(&c, err, 2, "--listen", "127.0.0.1"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--listen", "127.0.0.1:99999"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--listen", "nohost:80"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--listen", "[::1:80"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--log-level", "loud"), -EINVAL);
        assert_int_equal(load(&c, err, 1, "--bogus"), -EINVAL);
        assert_int_equal(load(&c, err, 1, "extra"), -EINVAL);
        assert_int_equal(load(&c, err, 1, "--data-dir"), -EINVAL);
        setenv("AIRLOCK_LISTEN", "garbage", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_non_null(strstr(err, "garbage"));
        unsetenv("AIRLOCK_LISTEN");
        char longsock[200];
        memset(longsock, 'a', sizeof longsock);
        longsock[0] = '/';
        longsock[sizeof longsock - 1] = 0;
        assert_int_equal(load(&c, err, 2, "--node-socket", longsock), -EINVAL);
}

static void test_parse_listen(void **state) {
        struct sockaddr_storage ss;
        socklen_t len;
        assert_int_equal(config_parse_listen("localhost:0", &ss, &len), 0);
        assert_int_equal(len, sizeof(struct sockaddr_in));
        assert_int_equal(config_parse_listen("[::]:7420", &ss, &len), 0);
        assert_int_equal(len, sizeof(struct sockaddr_in6));
        assert_int_equal(config_parse_listen(":80", &ss, &len), -EINVAL);
        assert_int_equal(config_parse_listen("1.2.3.4:-1", &ss, &len), -EINVAL);
        assert_int_equal(config_parse_listen("::1:80", &ss, &len), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_defaults, clear_env),
                cmocka_unit_test_setup(test_env, clear_env),
                cmocka_unit_test_setup(test_flags_override_env, clear_env),
                cmocka_unit_test_setup(test_invalid, clear_env),
                cmocka_unit_test(test_parse_listen),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
