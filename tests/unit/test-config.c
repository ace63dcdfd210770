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
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "privsep.h"
#include "util.h"

static const char *const env_vars[] = {
        "AIRLOCK_DATA_DIR", "AIRLOCK_LISTEN", "AIRLOCK_NODE_SOCKET", "AIRLOCK_NODE_BINARY",
        "AIRLOCK_DATABASE", "AIRLOCK_LOG_LEVEL", "AIRLOCK_SNAPSHOT_POLICY", "AIRLOCK_SNAPSHOT_TICK_MS",
        "AIRLOCK_IDLE_TIMEOUT_S", "AIRLOCK_IDLE_CHECK_MS", "AIRLOCK_NETWORK_DEFAULT",
        "AIRLOCK_E2B_TEMPLATES", "AIRLOCK_E2B_DOMAIN",
        "AIRLOCK_STORE", "AIRLOCK_CLUSTER_LISTEN", "AIRLOCK_ADVERTISE", "AIRLOCK_LOCAL_NODE",
        "AIRLOCK_LOCAL_NODE_LISTEN", "AIRLOCK_NODE_NAME",
        "AIRLOCK_NODE_LOST_AFTER_S",
};

static int clear_env(void **state) {
        for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
                unsetenv(env_vars[i]);
        return 0;
}

/* Field by field: a struct copy need not copy the padding. */
static void assert_policy_equal(const struct retention_policy *a, const struct retention_policy *b) {
        assert_int_equal(a->disk_every_s, b->disk_every_s);
        assert_int_equal(a->full_every_s, b->full_every_s);
        assert_int_equal(a->full_keep, b->full_keep);
        assert_int_equal(a->n_tiers, b->n_tiers);
        for (size_t i = 0; i < a->n_tiers; i++) {
                assert_int_equal(a->tiers[i].every_s, b->tiers[i].every_s);
                assert_int_equal(a->tiers[i].for_s, b->tiers[i].for_s);
        }
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
        assert_string_equal(c.database, "sqlite:/var/lib/airlock/control/airlock.db");
        assert_true(c.spawn_node);
        assert_int_equal(c.max_json_body, 1u << 20);
        assert_int_equal(c.max_upload, 1ull << 30);
        const struct sockaddr_in *a = (const struct sockaddr_in *) &c.listen_addr;
        assert_int_equal(a->sin_family, AF_INET);
        assert_int_equal(ntohs(a->sin_port), 7420);
        assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
        assert_non_null(strstr(c.node_binary, "airlock-node"));
        assert_policy_equal(&c.snapshot_policy, &retention_policy_default);
        assert_int_equal(c.snapshot_tick_ms, 1000);
        assert_int_equal(c.idle_timeout_s, 6 * 3600);
        assert_int_equal(c.idle_check_ms, 30000);
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
        assert_string_equal(c.database, "sqlite:/srv/alk/control/airlock.db");
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

static void test_snapshot_knobs(void **state) {
        struct daemon_config c;
        char err[256] = "";
        /* the environment's policy applies over the built-in one */
        setenv("AIRLOCK_SNAPSHOT_POLICY", "{\"disk_every\":1,\"full_every\":0,\"tiers\":[{\"every\":1,\"for\":4}]}", 1);
        setenv("AIRLOCK_SNAPSHOT_TICK_MS", "200", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.snapshot_policy.disk_every_s, 1);
        assert_int_equal(c.snapshot_policy.full_every_s, 0);
        assert_int_equal(c.snapshot_policy.full_keep, retention_policy_default.full_keep);
        assert_int_equal(c.snapshot_policy.n_tiers, 1);
        assert_int_equal(c.snapshot_policy.tiers[0].every_s, 1);
        assert_int_equal(c.snapshot_policy.tiers[0].for_s, 4);
        assert_int_equal(c.snapshot_tick_ms, 200);

        /* a flag applies over the environment's policy; the tick flag wins */
        assert_int_equal(load(&c, err, 4, "--snapshot-policy", "{\"full_keep\":2}", "--snapshot-tick-ms", "100"), 0);
        assert_int_equal(c.snapshot_policy.disk_every_s, 1);
        assert_int_equal(c.snapshot_policy.full_keep, 2);
        assert_int_equal(c.snapshot_policy.n_tiers, 1);
        assert_int_equal(c.snapshot_tick_ms, 100);
        unsetenv("AIRLOCK_SNAPSHOT_POLICY");
        unsetenv("AIRLOCK_SNAPSHOT_TICK_MS");

        /* --print-config shows both, the policy as JSON that parses back */
        assert_int_equal(load(&c, err, 2, "--snapshot-policy", "{\"disk_every\":30}"), 0);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        config_print(&c, f);
        fclose(f);
        assert_non_null(strstr(text, "snapshot_tick_ms=1000\n"));
        char *p = strstr(text, "snapshot_policy=");
        assert_non_null(p);
        p += strlen("snapshot_policy=");
        *strchrnul(p, '\n') = 0;
        struct retention_policy back;
        assert_int_equal(retention_policy_from_string(p, &retention_policy_default, &back, NULL), 0);
        assert_policy_equal(&back, &c.snapshot_policy);
        assert_int_equal(back.disk_every_s, 30);
        free(text);
}

static void test_snapshot_knobs_invalid(void **state) {
        struct daemon_config c;
        memset(&c, 0x5a, sizeof c);
        struct daemon_config before = c;
        char err[256] = "";
        /* the parser's message, naming where the policy came from */
        setenv("AIRLOCK_SNAPSHOT_POLICY", "{\"disk_every\":-1}", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_non_null(strstr(err, "AIRLOCK_SNAPSHOT_POLICY"));
        assert_non_null(strstr(err, "disk_every must not be negative"));
        assert_memory_equal(&c, &before, sizeof c); /* untouched on failure */
        setenv("AIRLOCK_SNAPSHOT_POLICY", "{\"disk_every\":", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_non_null(strstr(err, "not valid JSON"));
        setenv("AIRLOCK_SNAPSHOT_POLICY", "{\"hourly\":1}", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_non_null(strstr(err, "unknown key 'hourly'"));
        unsetenv("AIRLOCK_SNAPSHOT_POLICY");
        assert_int_equal(load(&c, err, 2, "--snapshot-policy", "[]"), -EINVAL);
        assert_non_null(strstr(err, "--snapshot-policy"));
        assert_int_equal(load(&c, err, 2, "--snapshot-policy", "{\"tiers\":[{\"every\":0,\"for\":1}]}"), -EINVAL);
        assert_non_null(strstr(err, "tiers[0].every"));

        setenv("AIRLOCK_SNAPSHOT_TICK_MS", "99", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_non_null(strstr(err, "AIRLOCK_SNAPSHOT_TICK_MS"));
        unsetenv("AIRLOCK_SNAPSHOT_TICK_MS");
        assert_int_equal(load(&c, err, 2, "--snapshot-tick-ms", "60001"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--snapshot-tick-ms", "1s"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--snapshot-tick-ms", "60000"), 0);
        assert_int_equal(c.snapshot_tick_ms, 60000);

        /* idle suspend: 0 turns it off; bounded */
        setenv("AIRLOCK_IDLE_TIMEOUT_S", "0", 1);
        setenv("AIRLOCK_IDLE_CHECK_MS", "500", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.idle_timeout_s, 0);
        assert_int_equal(c.idle_check_ms, 500);
        assert_int_equal(load(&c, err, 2, "--idle-timeout-s", "60"), 0);
        assert_int_equal(c.idle_timeout_s, 60);
        unsetenv("AIRLOCK_IDLE_TIMEOUT_S");
        unsetenv("AIRLOCK_IDLE_CHECK_MS");
        assert_int_equal(load(&c, err, 2, "--idle-timeout-s", "-1"), -EINVAL);
        assert_non_null(strstr(err, "--idle-timeout-s"));
        assert_int_equal(load(&c, err, 2, "--idle-check-ms", "99"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--idle-timeout-s", "31536001"), -EINVAL);
}

/* The egress default: allow-all unless the environment or a flag says
 * deny-all; an allowlist needs rules, so it is no node default. */
static void test_network_default(void **state) {
        struct daemon_config c;
        char err[256];
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.network_default, NETPOLICY_ALLOW_ALL);
        setenv("AIRLOCK_NETWORK_DEFAULT", "deny-all", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.network_default, NETPOLICY_DENY_ALL);
        assert_int_equal(load(&c, err, 2, "--network-default", "allow-all"), 0);
        assert_int_equal(c.network_default, NETPOLICY_ALLOW_ALL);
        setenv("AIRLOCK_NETWORK_DEFAULT", "allowlist", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        assert_string_equal(err, "AIRLOCK_NETWORK_DEFAULT: must be allow-all or deny-all");
        unsetenv("AIRLOCK_NETWORK_DEFAULT");
        assert_int_equal(load(&c, err, 2, "--network-default", "deny_all"), -EINVAL);
        assert_string_equal(err, "--network-default: must be allow-all or deny-all");

        assert_int_equal(load(&c, err, 2, "--network-default", "deny-all"), 0);
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        assert_non_null(f);
        config_print(&c, f);
        fclose(f);
        assert_non_null(strstr(out, "\nnetwork_default=deny-all\n"));
        free(out);
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

/* A data dir of the layout before privilege separation: the first start
 * moves airlockd's files into DATA_DIR/control; a second start moves
 * nothing (and loses nothing). */
static void test_control_dir_migration(void **state) {
        char dir[] = "/tmp/test-config-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char *argv[] = { (char *) "airlockd", (char *) "--data-dir", dir, NULL };
        struct daemon_config c;
        char err[256];
        assert_int_equal(config_load(3, argv, &c, err, sizeof err), 0);
        char path[4300];
        snprintf(path, sizeof path, "%s/airlock.db", dir);
        assert_int_equal(file_write_atomic(path, "db", 2, 0600), 0);
        snprintf(path, sizeof path, "%s/admin.token", dir);
        assert_int_equal(file_write_atomic(path, "tok\n", 4, 0600), 0);
        snprintf(path, sizeof path, "%s/keys/public", dir);
        assert_int_equal(mkdir_p(path, 0755), 0);

        assert_int_equal(privsep_control_dir(&c), 0);
        snprintf(path, sizeof path, "%s/control/airlock.db", dir);
        assert_int_equal(access(path, F_OK), 0);
        snprintf(path, sizeof path, "%s/control/admin.token", dir);
        assert_int_equal(access(path, F_OK), 0);
        snprintf(path, sizeof path, "%s/control/keys/public", dir);
        assert_int_equal(access(path, F_OK), 0);
        snprintf(path, sizeof path, "%s/admin.token", dir);
        assert_int_equal(access(path, F_OK), -1);
        assert_string_equal(c.database + strlen("sqlite:"), strcat(strcpy(path, dir), "/control/airlock.db"));

        /* a stray old file after the move stays where it is */
        snprintf(path, sizeof path, "%s/admin.token", dir);
        assert_int_equal(file_write_atomic(path, "new\n", 4, 0600), 0);
        assert_int_equal(privsep_control_dir(&c), 0);
        assert_int_equal(access(path, F_OK), 0);
        assert_int_equal(rm_rf(dir), 0);
}

/* The E2B template names: the default map, one given, and each way a map
 * or a domain can be wrong, said in the message. */
static void test_e2b(void **state) {
        struct daemon_config c;
        char err[256] = "";
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.n_e2b_templates, 2);
        assert_string_equal(c.e2b_templates[0].e2b, "base");
        assert_string_equal(c.e2b_templates[0].airlock, "python");
        assert_string_equal(c.e2b_templates[1].e2b, "code-interpreter-v1");
        assert_string_equal(c.e2b_domain, "");
        setenv("AIRLOCK_E2B_TEMPLATES", "base=minimal", 1);
        setenv("AIRLOCK_E2B_DOMAIN", "sbx.example.org", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_int_equal(c.n_e2b_templates, 1);
        assert_string_equal(c.e2b_templates[0].airlock, "minimal");
        assert_string_equal(c.e2b_domain, "sbx.example.org");
        assert_int_equal(load(&c, err, 2, "--e2b-templates", "a=b,c=d"), 0);
        assert_int_equal(c.n_e2b_templates, 2);
        static const char *const bad_maps[] = { "base", "=python", "base=", "base=py/thon", "a=b,a=c", ".x=y" };
        for (size_t i = 0; i < sizeof bad_maps / sizeof bad_maps[0]; i++) {
                err[0] = 0;
                assert_int_equal(load(&c, err, 2, "--e2b-templates", bad_maps[i]), -EINVAL);
                assert_non_null(strstr(err, "--e2b-templates"));
        }
        static const char *const bad_domains[] = { "-x.org", "a..b", ".org", "a_b.org", "x.org." };
        for (size_t i = 0; i < sizeof bad_domains / sizeof bad_domains[0]; i++) {
                err[0] = 0;
                assert_int_equal(load(&c, err, 2, "--e2b-domain", bad_domains[i]), -EINVAL);
                assert_non_null(strstr(err, "DNS name"));
        }
}

/* The cluster's settings: one machine by default; a shared store's
 * replica has no node of its own and may not be given one. */
static void test_cluster(void **state) {
        struct daemon_config c;
        char err[256] = "";
        assert_int_equal(load(&c, err, 0), 0);
        assert_false(c.shared_store);
        assert_true(c.local_node);
        assert_string_equal(c.cluster_listen, "");
        assert_int_equal(c.node_lost_after_s, 15);

        /* SQLite with a cluster port: its own node and joined ones */
        assert_int_equal(load(&c, err, 2, "--cluster-listen", "0.0.0.0:7422"), 0);
        assert_true(c.local_node);
        assert_true(c.spawn_node);
        assert_string_equal(c.advertise, "0.0.0.0:7422");

        /* a shared store: no node on the Unix socket, nothing spawned by
         * airlockd; this machine's node joins the cluster (by default over
         * the loopback, named after the host) unless --no-local-node */
        setenv("AIRLOCK_STORE", "postgres://airlock@db/airlock", 1);
        assert_int_equal(load(&c, err, 4, "--cluster-listen", "10.0.0.5:7422", "--advertise", "db.example:7422"), 0);
        assert_string_equal(c.database, "postgres://airlock@db/airlock");
        assert_true(c.shared_store);
        assert_false(c.local_node);
        assert_false(c.spawn_node);
        assert_true(c.join_local);
        assert_string_equal(c.advertise, "db.example:7422");
        assert_string_equal(c.local_node_listen, "127.0.0.1:7421");
        char host[65];
        node_name_default(host);
        assert_string_equal(c.local_node_name, host);
        assert_int_equal(load(&c, err, 0), 0);
        assert_true(c.join_local);
        assert_string_equal(c.cluster_listen, "127.0.0.1:7422");
        assert_string_equal(c.advertise, "127.0.0.1:7422");
        assert_int_equal(load(&c, err, 5, "--local-node", "--local-node-listen", "10.0.0.5:7431", "--local-node-name",
                              "box-1"),
                         0);
        assert_true(c.join_local);
        assert_string_equal(c.local_node_listen, "10.0.0.5:7431");
        assert_string_equal(c.local_node_name, "box-1");
        assert_int_equal(load(&c, err, 2, "--local-node-name", "no/slash"), -EINVAL);
        assert_non_null(strstr(err, "--local-node-name"));
        assert_int_equal(load(&c, err, 2, "--local-node-listen", "nohost"), -EINVAL);
        assert_int_equal(load(&c, err, 1, "--no-local-node"), 0);
        assert_false(c.join_local);
        assert_string_equal(c.cluster_listen, "");
        unsetenv("AIRLOCK_STORE");

        assert_int_equal(load(&c, err, 2, "--store", "postgresql:///airlock"), 0);
        assert_true(c.shared_store);
        assert_int_equal(load(&c, err, 1, "--no-local-node"), 0);
        assert_false(c.local_node);
        assert_false(c.spawn_node);
        assert_false(c.join_local);
        setenv("AIRLOCK_LOCAL_NODE", "0", 1);
        assert_int_equal(load(&c, err, 0), 0);
        assert_false(c.local_node);
        setenv("AIRLOCK_LOCAL_NODE", "maybe", 1);
        assert_int_equal(load(&c, err, 0), -EINVAL);
        unsetenv("AIRLOCK_LOCAL_NODE");

        /* bad values say what was wrong */
        assert_int_equal(load(&c, err, 2, "--cluster-listen", "nohost"), -EINVAL);
        assert_non_null(strstr(err, "HOST:PORT"));
        assert_int_equal(load(&c, err, 2, "--advertise", "10.0.0.5:7422"), -EINVAL);
        assert_non_null(strstr(err, "--cluster-listen"));
        assert_int_equal(load(&c, err, 2, "--node-lost-after-s", "2"), -EINVAL);
        assert_int_equal(load(&c, err, 2, "--node-lost-after-s", "30"), 0);
        assert_int_equal(c.node_lost_after_s, 30);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_network_default, clear_env),
                cmocka_unit_test_setup(test_defaults, clear_env),
                cmocka_unit_test_setup(test_env, clear_env),
                cmocka_unit_test_setup(test_flags_override_env, clear_env),
                cmocka_unit_test_setup(test_invalid, clear_env),
                cmocka_unit_test_setup(test_snapshot_knobs, clear_env),
                cmocka_unit_test_setup(test_snapshot_knobs_invalid, clear_env),
                cmocka_unit_test(test_parse_listen),
                cmocka_unit_test_setup(test_e2b, clear_env),
                cmocka_unit_test_setup(test_cluster, clear_env),
                cmocka_unit_test_setup(test_control_dir_migration, clear_env),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
