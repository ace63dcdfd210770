/* SPDX-License-Identifier: Apache-2.0 */
/* The start-up progress lines (src/daemon/progress.c), fed health
 * replies as the node sends them: one line per change, at most one
 * "still building" line per PROGRESS_STILL_S, done once ready or failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "airlock-config.h"
#include "config.h"
#include "progress.h"

#define S 1000000000ULL
#define T0 (1000 * S)

static struct daemon_config config(const char *data_dir) {
        struct daemon_config c;
        char err[256];
        char *argv[] = { (char *) "airlockd", (char *) "--data-dir", (char *) data_dir, NULL };
        assert_int_equal(config_load(3, argv, &c, err, sizeof err), 0);
        return c;
}

static json_t *health(const char *text) {
        json_error_t e;
        json_t *j = json_loads(text, 0, &e);
        if (!j)
                fail_msg("bad test JSON: %s", e.text);
        return j;
}

/* Feeds text at T0 + s seconds; the lines into out. */
static bool feed(struct progress *p, const char *text, double s, char *out, size_t n) {
        json_t *h = text ? health(text) : NULL;
        bool done = progress_feed(p, h, text ? NULL : "Connection refused", T0 + (uint64_t) (s * (double) S),
                                  out, n);
        json_decref(h);
        return done;
}

static unsigned count_lines(const char *s) {
        unsigned n = 0;
        for (; *s; s++)
                n += *s == '\n';
        return n;
}

#define BUILDING(step, num, ms)                                                                             \
        "{\"ready\":false,\"failed\":false,\"accel\":\"tcg\",\"templates\":["                               \
        "{\"name\":\"minimal\",\"state\":\"ready\"},"                                                       \
        "{\"name\":\"python\",\"state\":\"building\",\"step\":\"" step "\",\"step_number\":" #num           \
        ",\"steps\":4,"                                                                                     \
        "\"elapsed_ms\":" #ms ",\"log\":\"/d/build.log\"}]}"

static void test_duration(void **state) {
        char b[32];
        progress_format_duration(400, b, sizeof b);
        assert_string_equal(b, "0.4s");
        progress_format_duration(9999, b, sizeof b);
        assert_string_equal(b, "9.9s");
        progress_format_duration(45000, b, sizeof b);
        assert_string_equal(b, "45s");
        progress_format_duration(65000, b, sizeof b);
        assert_string_equal(b, "1m05s");
        progress_format_duration(192000, b, sizeof b);
        assert_string_equal(b, "3m12s");
        progress_format_duration((2 * 3600 + 3 * 60 + 10) * 1000ULL, b, sizeof b);
        assert_string_equal(b, "2h03m10s");
}

static void test_describe(void **state) {
        char b[512];
        json_t *t =
                health("{\"name\":\"python\",\"state\":\"building\",\"step\":\"rootfs\",\"step_number\":3,"
                       "\"steps\":4,\"elapsed_ms\":65000,\"log\":\"/x/build.log\"}");
        progress_describe(t, b, sizeof b);
        assert_string_equal(b,
                            "building template python: step 3/4 rootfs (1m05s elapsed; log /x/build.log)");
        json_decref(t);
        t = health("{\"name\":\"python\",\"state\":\"building\",\"elapsed_ms\":1200}");
        progress_describe(t, b, sizeof b);
        assert_string_equal(b, "building template python (1.2s elapsed)");
        json_decref(t);
        t = health("{\"name\":\"python\",\"state\":\"failed\",\"error\":\"rootfs step "
                   "failed\",\"log\":\"/x/f.log\"}");
        progress_describe(t, b, sizeof b);
        assert_string_equal(b, "template python failed: rootfs step failed; build log /x/f.log");
        json_decref(t);
        /* an error that names its log already does not get it twice */
        t = health("{\"name\":\"python\",\"state\":\"failed\",\"error\":\"boom; build log /x/f.log\","
                   "\"log\":\"/x/f.log\"}");
        progress_describe(t, b, sizeof b);
        assert_string_equal(b, "template python failed: boom; build log /x/f.log");
        json_decref(t);
        t = health("{\"name\":\"minimal\",\"state\":\"ready\"}");
        progress_describe(t, b, sizeof b);
        assert_string_equal(b, "template minimal ready");
        json_decref(t);
}

static void test_first_start(void **state) {
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];

        /* nothing to say while templates wait their turn */
        assert_false(feed(&p,
                          "{\"ready\":false,\"templates\":[{\"name\":\"python\",\"state\":\"available\"}]}",
                          0.1, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, BUILDING("kernel", 1, 1000), 1, out, sizeof out));
        assert_string_equal(
                out,
                "airlock: building template python: step 1/4 kernel (1.0s elapsed; log /d/build.log)\n");
        /* the same step again: silent, until PROGRESS_STILL_S passed */
        assert_false(feed(&p, BUILDING("kernel", 1, 2000), 2, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, BUILDING("kernel", 1, 30000), 30.9, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, BUILDING("kernel", 1, 31000), 31, out, sizeof out));
        assert_string_equal(out, "airlock: still building template python: step 1/4 kernel (31s elapsed; "
                                 "log /d/build.log)\n");
        assert_false(feed(&p, BUILDING("kernel", 1, 32000), 32, out, sizeof out));
        assert_string_equal(out, "");
        /* a new step is said at once */
        assert_false(feed(&p, BUILDING("rootfs", 3, 33000), 33, out, sizeof out));
        assert_string_equal(
                out, "airlock: building template python: step 3/4 rootfs (33s elapsed; log /d/build.log)\n");
        /* ready: the lines to paste, and done */
        assert_true(feed(&p,
                         "{\"ready\":true,\"templates\":[{\"name\":\"minimal\",\"state\":\"ready\"},"
                         "{\"name\":\"python\",\"state\":\"ready\"}]}",
                         192, out, sizeof out));
        assert_string_equal(
                out, "airlock: ready after 3m12s — try:\n"
                     "  export PATH=" AIRLOCK_CLI_DIR_PATH ":$PATH\n"
                     "  sbx=$(airlock create) && airlock exec $sbx -- python3 -c 'print(6*7)'\n"
                     "  curl -s -H \"Authorization: Bearer $(cat /var/lib/airlock/control/admin.token)\" "
                     "http://127.0.0.1:7420/v1/sandboxes\n");
        /* and then quiet */
        assert_true(feed(&p, BUILDING("boot", 4, 1), 300, out, sizeof out));
        assert_string_equal(out, "");
}

#define WITH_BACKGROUND(state, step)                                                                        \
        "{\"ready\":true,\"failed\":false,\"templates\":[{\"name\":\"python\",\"state\":\"ready\"},"          \
        "{\"name\":\"code-interpreter\",\"state\":\"" state "\",\"background\":true" step "}]}"

static void test_background_build(void **state) {
        /* ready with a template still building in the background: the
         * ready lines, a line that it builds; its steps and its end follow;
         * done once it is built */
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        /* before the node is ready, a background build is not said */
        assert_false(feed(&p,
                          "{\"ready\":false,\"templates\":[{\"name\":\"python\",\"state\":\"building\","
                          "\"step\":\"rootfs\",\"step_number\":3,\"steps\":4,\"elapsed_ms\":1000},"
                          "{\"name\":\"code-interpreter\",\"state\":\"available\",\"background\":true}]}",
                          1, out, sizeof out));
        assert_null(strstr(out, "code-interpreter"));
        assert_false(feed(&p, WITH_BACKGROUND("available", ""), 60, out, sizeof out));
        assert_non_null(strstr(out, "airlock: ready after 1m00s — try:\n"));
        assert_non_null(strstr(out, "airlock: template code-interpreter is being built in the background"));
        assert_false(feed(&p,
                          WITH_BACKGROUND("building", ",\"step\":\"rootfs\",\"step_number\":3,\"steps\":4,"
                                                      "\"elapsed_ms\":5000"),
                          65, out, sizeof out));
        assert_string_equal(out, "airlock: building template code-interpreter: step 3/4 rootfs (5.0s elapsed)\n");
        assert_true(feed(&p, WITH_BACKGROUND("ready", ""), 200, out, sizeof out));
        assert_string_equal(out, "airlock: template code-interpreter ready (built in the background)\n");
}

static void test_warm_start_elsewhere(void **state) {
        /* already built: one ready line; a non-default place is in the
         * lines to paste, and a template other than python is named */
        struct daemon_config c = config("/srv/alk");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7999", T0);
        char out[4096];
        assert_true(feed(&p, "{\"ready\":true,\"templates\":[{\"name\":\"minimal\",\"state\":\"ready\"}]}",
                         0.3, out, sizeof out));
        assert_non_null(strstr(out, "airlock: ready after 0.3s — try:\n"));
        assert_non_null(strstr(out, " AIRLOCK_URL=http://127.0.0.1:7999 AIRLOCK_DATA_DIR=/srv/alk\n"));
        assert_non_null(
                strstr(out, "sbx=$(airlock create --template minimal) && airlock exec $sbx -- uname -a\n"));
        assert_non_null(strstr(out, "/srv/alk/control/admin.token"));
        assert_int_equal(count_lines(out), 4);
}

static void test_failure(void **state) {
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        assert_false(feed(&p,
                          "{\"ready\":false,\"templates\":[{\"name\":\"minimal\",\"state\":\"building\","
                          "\"step\":\"boot\","
                          "\"step_number\":4,\"steps\":4,\"elapsed_ms\":100},{\"name\":\"python\",\"state\":"
                          "\"available\"}]}",
                          1, out, sizeof out));
        assert_string_equal(out, "airlock: building template minimal: step 4/4 boot (0.1s elapsed)\n");
        /* minimal done, python failed at once: each said, and nothing
         * builds any more: done */
        assert_true(feed(
                &p,
                "{\"ready\":false,\"failed\":true,\"templates\":[{\"name\":\"minimal\",\"state\":\"ready\"},"
                "{\"name\":\"python\",\"state\":\"failed\",\"error\":\"rootfs step failed\","
                "\"log\":\"/t/python-1.failed.log\"}]}",
                5, out, sizeof out));
        assert_string_equal(
                out,
                "airlock: template minimal ready\n"
                "airlock: error: template python failed: rootfs step failed; build log "
                "/t/python-1.failed.log\n"
                "airlock: read the build log and fix the cause; then restart airlockd, or create a python "
                "sandbox, to build it again\n"
                "airlock: not ready: template python failed (GET /v1/health says 503 template_failed); the "
                "others can be used\n");
}

static void test_failure_while_others_build(void **state) {
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        /* a failure is said at once, but the watch goes on while another
         * template still builds */
        assert_false(feed(
                &p,
                "{\"ready\":false,\"failed\":true,\"templates\":[{\"name\":\"broken\",\"state\":\"failed\","
                "\"error\":\"no recipe\"},{\"name\":\"python\",\"state\":\"building\",\"elapsed_ms\":10}]}",
                1, out, sizeof out));
        assert_non_null(strstr(out, "airlock: error: template broken failed: no recipe\n"));
        assert_non_null(strstr(out, "airlock: building template python (0.0s elapsed)\n"));
        assert_true(feed(
                &p,
                "{\"ready\":false,\"failed\":true,\"templates\":[{\"name\":\"broken\",\"state\":\"failed\","
                "\"error\":\"no recipe\"},{\"name\":\"python\",\"state\":\"ready\"}]}",
                2, out, sizeof out));
        /* the failure is not said twice */
        assert_null(strstr(out, "error"));
        assert_non_null(strstr(out, "airlock: template python ready\n"));
        assert_non_null(strstr(out, "airlock: not ready: template broken failed"));
}

static void test_node_down(void **state) {
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        /* a moment without the node is normal */
        assert_false(feed(&p, NULL, 1, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, NULL, 5.9, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, NULL, 6.1, out, sizeof out));
        assert_string_equal(out, "airlock: waiting for airlock-node to answer (Connection refused)\n");
        assert_false(feed(&p, NULL, 20, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, NULL, 37, out, sizeof out));
        assert_non_null(strstr(out, "airlock: still waiting for airlock-node (Connection refused for 36s"));
        /* back: progress as usual */
        assert_false(feed(&p, BUILDING("initramfs", 2, 5), 38, out, sizeof out));
        assert_non_null(strstr(out, "step 2/4 initramfs"));
}

static void test_node_without_templates(void **state) {
        /* a node that only says ready: a line per PROGRESS_STILL_S */
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        assert_false(feed(&p, "{\"ready\":false}", 1, out, sizeof out));
        assert_string_equal(out, "airlock: building the default templates (1.0s elapsed)\n");
        assert_false(feed(&p, "{\"ready\":false}", 20, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(feed(&p, "{\"ready\":false}", 31, out, sizeof out));
        assert_string_equal(out, "airlock: still building the default templates (31s elapsed)\n");
        assert_true(feed(&p, "{\"ready\":true}", 40, out, sizeof out));
        assert_non_null(strstr(out, "airlock: ready after 40s — try:\n"));
        assert_non_null(strstr(out, "sbx=$(airlock create) && "));
}

static void test_replica_without_nodes(void **state) {
        /* --no-local-node: it waits for nodes, says how to add one, and
         * is ready with the first */
        struct daemon_config c;
        char err[256];
        char *argv[] = {(char *) "airlockd",
                        (char *) "--store",
                        (char *) "postgres://db/airlock",
                        (char *) "--no-local-node",
                        (char *) "--cluster-listen",
                        (char *) "10.0.0.5:7422",
                        NULL};
        assert_int_equal(config_load(6, argv, &c, err, sizeof err), 0);
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[4096];
        assert_false(progress_feed_nodes(&p, 0, 0, T0 + 1 * S, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(progress_feed_nodes(&p, 0, 0, T0 + 6 * S, out, sizeof out));
        assert_non_null(
                strstr(out, "airlock: no node is ready (0 joined): this replica runs none of its own"));
        assert_non_null(strstr(out, "airlock-node --join 10.0.0.5:7422 --join-token-file join.token"));
        assert_false(progress_feed_nodes(&p, 0, 1, T0 + 20 * S, out, sizeof out));
        assert_string_equal(out, "");
        assert_false(progress_feed_nodes(&p, 0, 1, T0 + 37 * S, out, sizeof out));
        assert_string_equal(out, "airlock: still no node ready (1 joined; 37s since the start)\n");
        assert_true(progress_feed_nodes(&p, 2, 2, T0 + 40 * S, out, sizeof out));
        assert_non_null(
                strstr(out, "airlock: 2 nodes of the cluster ready\nairlock: ready after 40s — try:\n"));
        assert_true(progress_feed_nodes(&p, 2, 2, T0 + 41 * S, out, sizeof out));
        assert_string_equal(out, "");

        /* no cluster port: nodes join other replicas */
        argv[4] = NULL;
        assert_int_equal(config_load(4, argv, &c, err, sizeof err), 0);
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        assert_false(progress_feed_nodes(&p, 0, 0, T0 + 6 * S, out, sizeof out));
        assert_non_null(strstr(out, "this replica has no cluster port (--cluster-listen)"));
}

static void test_small_buffer(void **state) {
        /* lines that do not fit are cut, never overflow */
        struct daemon_config c = config("/var/lib/airlock");
        struct progress p;
        progress_init(&p, &c, "http://127.0.0.1:7420", T0);
        char out[40];
        assert_true(feed(&p, "{\"ready\":true,\"templates\":[]}", 1, out, sizeof out));
        assert_int_equal(strlen(out), sizeof out - 1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_duration),
                cmocka_unit_test(test_describe),
                cmocka_unit_test(test_first_start),
                cmocka_unit_test(test_background_build),
                cmocka_unit_test(test_warm_start_elsewhere),
                cmocka_unit_test(test_failure),
                cmocka_unit_test(test_failure_while_others_build),
                cmocka_unit_test(test_node_down),
                cmocka_unit_test(test_node_without_templates),
                cmocka_unit_test(test_replica_without_nodes),
                cmocka_unit_test(test_small_buffer),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
