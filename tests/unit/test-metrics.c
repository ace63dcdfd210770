/* SPDX-License-Identifier: Apache-2.0 */
/* lib/metrics: the text format, label escaping, histograms, limits, and
 * the JSON round trip by which a node's metrics reach airlockd. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

static char *render(struct metrics_registry *r) {
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(metrics_render(&r, 1, &text, &len), 0);
        assert_int_equal(strlen(text), len);
        return text;
}

static void test_counter_gauge_text(void **state) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *r = NULL;
        assert_int_equal(metrics_registry_new(&r), 0);
        struct metrics_family *c = NULL, *g = NULL, *again = NULL;
        const char *const labels[] = { "verb", "outcome", NULL };
        assert_int_equal(metrics_family(r, "airlock_verbs_total", METRICS_COUNTER, "Verbs.\nBy outcome", labels, NULL,
                                        0, &c),
                         0);
        assert_int_equal(metrics_family(r, "airlock_verbs_total", METRICS_COUNTER, "x", labels, NULL, 0, &again), 0);
        assert_ptr_equal(c, again);
        /* the same name with another shape is refused */
        assert_int_equal(metrics_family(r, "airlock_verbs_total", METRICS_GAUGE, "x", labels, NULL, 0, &again), -EEXIST);
        assert_int_equal(metrics_family(r, "airlock_up", METRICS_GAUGE, "Up.", NULL, NULL, 0, &g), 0);
        metrics_add(c, (const char *const[]){ "pause", "ok" }, 1);
        metrics_add(c, (const char *const[]){ "pause", "ok" }, 2);
        metrics_add(c, (const char *const[]){ "pause", "ok" }, -5); /* a counter does not go down */
        metrics_add(c, (const char *const[]){ "say \"hi\"\\", "line\nbreak" }, 1);
        metrics_set(g, NULL, 1);
        metrics_set(g, NULL, 0.5);
        _cleanup_free_ char *text = render(r);
        assert_string_equal(text, "# HELP airlock_up Up.\n"
                                  "# TYPE airlock_up gauge\n"
                                  "airlock_up 0.5\n"
                                  "# HELP airlock_verbs_total Verbs.\\nBy outcome\n"
                                  "# TYPE airlock_verbs_total counter\n"
                                  "airlock_verbs_total{verb=\"pause\",outcome=\"ok\"} 3\n"
                                  "airlock_verbs_total{verb=\"say \\\"hi\\\"\\\\\",outcome=\"line\\nbreak\"} 1\n");
        metrics_clear(g);
        _cleanup_free_ char *after = render(r);
        assert_non_null(strstr(after, "# TYPE airlock_up gauge\n# HELP airlock_verbs_total"));
}

static void test_histogram(void **state) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *r = NULL;
        assert_int_equal(metrics_registry_new(&r), 0);
        struct metrics_family *h = NULL;
        const double b[] = { 0.1, 1 };
        assert_int_equal(metrics_family(r, "lat_seconds", METRICS_HISTOGRAM, "L.", (const char *const[]){ "v", NULL },
                                        b, 2, &h),
                         0);
        metrics_observe(h, (const char *const[]){ "a" }, 0.05);
        metrics_observe(h, (const char *const[]){ "a" }, 0.1); /* on a bound: that bucket */
        metrics_observe(h, (const char *const[]){ "a" }, 0.5);
        metrics_observe(h, (const char *const[]){ "a" }, 7);
        _cleanup_free_ char *text = render(r);
        assert_string_equal(text, "# HELP lat_seconds L.\n"
                                  "# TYPE lat_seconds histogram\n"
                                  "lat_seconds_bucket{v=\"a\",le=\"0.1\"} 2\n"
                                  "lat_seconds_bucket{v=\"a\",le=\"1\"} 3\n"
                                  "lat_seconds_bucket{v=\"a\",le=\"+Inf\"} 4\n"
                                  "lat_seconds_sum{v=\"a\"} 7.65\n"
                                  "lat_seconds_count{v=\"a\"} 4\n");
        /* buckets must ascend; "le" is not a label of ours */
        const double bad[] = { 1, 0.5 };
        assert_int_equal(metrics_family(r, "x", METRICS_HISTOGRAM, "", NULL, bad, 2, &h), -EINVAL);
        assert_int_equal(metrics_family(r, "y", METRICS_COUNTER, "", (const char *const[]){ "le", NULL }, NULL, 0, &h),
                         -EINVAL);
        assert_int_equal(metrics_family(r, "9z", METRICS_COUNTER, "", NULL, NULL, 0, &h), -EINVAL);
}

/* The series of one family are bounded; past the bound they are counted
 * as dropped, not kept. */
static void test_series_limit(void **state) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *r = NULL;
        assert_int_equal(metrics_registry_new(&r), 0);
        struct metrics_family *f = NULL;
        assert_int_equal(metrics_family(r, "per_sandbox", METRICS_GAUGE, "", (const char *const[]){ "id", NULL }, NULL,
                                        0, &f),
                         0);
        char id[32];
        for (int i = 0; i < METRICS_SERIES_MAX + 5; i++) {
                snprintf(id, sizeof id, "s%d", i);
                metrics_set(f, (const char *const[]){ id }, i);
        }
        _cleanup_free_ char *text = render(r);
        assert_non_null(strstr(text, "airlock_metrics_series_dropped_total 5\n"));
        assert_non_null(strstr(text, "per_sandbox{id=\"s19999\"} 19999\n"));
        assert_null(strstr(text, "per_sandbox{id=\"s20000\"}"));
}

/* A node's registry, through JSON, into airlockd's with a node label; the
 * same family in two registries renders once. */
static void test_json_merge(void **state) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *node = NULL, *into = NULL, *own = NULL;
        assert_int_equal(metrics_registry_new(&node), 0);
        assert_int_equal(metrics_registry_new(&into), 0);
        assert_int_equal(metrics_registry_new(&own), 0);
        struct metrics_family *c = NULL, *h = NULL, *o = NULL;
        const double b[] = { 1 };
        assert_int_equal(metrics_family(node, "caps_total", METRICS_COUNTER, "Caps.",
                                        (const char *const[]){ "decision", NULL }, NULL, 0, &c),
                         0);
        assert_int_equal(metrics_family(node, "lat", METRICS_HISTOGRAM, "Lat.", NULL, b, 1, &h), 0);
        assert_int_equal(metrics_family(own, "caps_total", METRICS_COUNTER, "Caps.",
                                        (const char *const[]){ "decision", "node", NULL }, NULL, 0, &o),
                         0);
        metrics_add(c, (const char *const[]){ "allow" }, 4);
        metrics_observe(h, NULL, 0.5);
        metrics_observe(h, NULL, 2);
        metrics_add(o, (const char *const[]){ "deny", "w9" }, 1);
        _cleanup_(json_decrefp) json_t *j = metrics_to_json(node);
        assert_non_null(j);
        assert_int_equal(metrics_merge_json(into, j, "node", "w1"), 0);
        struct metrics_registry *regs[] = { own, into };
        _cleanup_free_ char *text = NULL;
        size_t len;
        assert_int_equal(metrics_render(regs, 2, &text, &len), 0);
        assert_string_equal(text, "# HELP caps_total Caps.\n"
                                  "# TYPE caps_total counter\n"
                                  "caps_total{decision=\"deny\",node=\"w9\"} 1\n"
                                  "caps_total{decision=\"allow\",node=\"w1\"} 4\n"
                                  "# HELP lat Lat.\n"
                                  "# TYPE lat histogram\n"
                                  "lat_bucket{node=\"w1\",le=\"1\"} 1\n"
                                  "lat_bucket{node=\"w1\",le=\"+Inf\"} 2\n"
                                  "lat_sum{node=\"w1\"} 2.5\n"
                                  "lat_count{node=\"w1\"} 2\n");

        /* what a node may not send */
        const char *bad[] = {
                "{}",
                "{\"families\":[{\"name\":\"1x\",\"type\":\"counter\",\"help\":\"\",\"labels\":[],\"buckets\":[],"
                "\"series\":[]}]}",
                "{\"families\":[{\"name\":\"x\",\"type\":\"summary\",\"help\":\"\",\"labels\":[],\"buckets\":[],"
                "\"series\":[]}]}",
                "{\"families\":[{\"name\":\"x\",\"type\":\"counter\",\"help\":\"\",\"labels\":[\"node\"],"
                "\"buckets\":[],\"series\":[]}]}",
                "{\"families\":[{\"name\":\"x\",\"type\":\"counter\",\"help\":\"\",\"labels\":[\"a\"],\"buckets\":[],"
                "\"series\":[{\"values\":[],\"value\":1}]}]}",
                "{\"families\":[{\"name\":\"x\",\"type\":\"histogram\",\"help\":\"\",\"labels\":[],\"buckets\":[1],"
                "\"series\":[{\"values\":[],\"counts\":[1],\"sum\":1,\"count\":1}]}]}",
                "{\"families\":[{\"name\":\"x\",\"type\":\"gauge\",\"help\":\"\",\"labels\":[],\"buckets\":[],"
                "\"series\":[{\"values\":[],\"value\":\"1\"}]}]}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                _cleanup_(metrics_registry_freep) struct metrics_registry *t = NULL;
                assert_int_equal(metrics_registry_new(&t), 0);
                _cleanup_(json_decrefp) json_t *bj = json_loads(bad[i], 0, NULL);
                assert_non_null(bj);
                if (metrics_merge_json(t, bj, "node", "w1") != -EBADMSG)
                        fail_msg("accepted: %s", bad[i]);
        }
}

static struct metrics_family *shared;

static void *hammer(void *arg) {
        for (int i = 0; i < 20000; i++)
                metrics_add(shared, (const char *const[]){ i % 2 ? "a" : "b" }, 1);
        return NULL;
}

static void test_threads(void **state) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *r = NULL;
        assert_int_equal(metrics_registry_new(&r), 0);
        assert_int_equal(metrics_family(r, "n_total", METRICS_COUNTER, "", (const char *const[]){ "k", NULL }, NULL, 0,
                                        &shared),
                         0);
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
                assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
        for (int i = 0; i < 4; i++)
                pthread_join(t[i], NULL);
        _cleanup_free_ char *text = render(r);
        assert_non_null(strstr(text, "n_total{k=\"a\"} 40000\n"));
        assert_non_null(strstr(text, "n_total{k=\"b\"} 40000\n"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_counter_gauge_text),
                cmocka_unit_test(test_histogram),
                cmocka_unit_test(test_series_limit),
                cmocka_unit_test(test_json_merge),
                cmocka_unit_test(test_threads),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
