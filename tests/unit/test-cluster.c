/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster.h"
#include "macros.h"

static void test_token(void **state) {
        struct cluster_token t = { 0 }, back;
        memset(t.ca_digest, 'a', 64);
        memset(t.id, '1', CLUSTER_TOKEN_ID_HEX);
        memset(t.secret, 'f', CLUSTER_TOKEN_SECRET_HEX);
        char s[CLUSTER_TOKEN_MAX];
        cluster_token_format(&t, s, sizeof s);
        assert_int_equal(cluster_token_parse(s, &back), 0);
        assert_string_equal(back.ca_digest, t.ca_digest);
        assert_string_equal(back.id, t.id);
        assert_string_equal(back.secret, t.secret);
        char padded[CLUSTER_TOKEN_MAX + 4];
        snprintf(padded, sizeof padded, " %s\n", s);
        assert_int_equal(cluster_token_parse(padded, &back), 0); /* a file's newline */
        char bad[CLUSTER_TOKEN_MAX];
        strcpy(bad, s);
        bad[10] = 'G';
        assert_int_equal(cluster_token_parse(bad, &back), -EINVAL);
        strcpy(bad, s);
        bad[strlen(bad) - 1] = 0;
        assert_int_equal(cluster_token_parse(bad, &back), -EINVAL);
        assert_int_equal(cluster_token_parse("alj2-x", &back), -EINVAL);
        assert_int_equal(cluster_token_parse(NULL, &back), -EINVAL);
}

static void test_labels(void **state) {
        struct cluster_label l[CLUSTER_LABELS_MAX];
        size_t n;
        assert_int_equal(cluster_labels_parse("zone=a,gpu=none", l, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(l[1].key, "gpu");
        assert_string_equal(l[1].value, "none");
        assert_int_equal(cluster_labels_parse("", l, &n), 0);
        assert_int_equal(n, 0);
        const char *bad[] = { "zone", "=a", "zone=", "zone=a,", "zone=a,zone=b", "a b=c", "a=b=c" };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_int_equal(cluster_labels_parse(bad[i], l, &n), -EINVAL);
        assert_int_equal(cluster_labels_parse("zone=a,gpu=none", l, &n), 0);
        json_t *want = json_pack("{s:s}", "zone", "a"), *other = json_pack("{s:s}", "zone", "b"),
               *none = json_object();
        assert_true(cluster_labels_match(l, n, want));
        assert_false(cluster_labels_match(l, n, other));
        assert_true(cluster_labels_match(l, n, none));
        json_decref(want);
        json_decref(other);
        json_decref(none);
}

static void test_address(void **state) {
        assert_true(cluster_address_valid("10.0.0.1:7422"));
        assert_true(cluster_address_valid("node-a.example.org:1"));
        assert_true(cluster_address_valid("[fd00::1]:7422"));
        assert_false(cluster_address_valid("10.0.0.1"));
        assert_false(cluster_address_valid("10.0.0.1:0"));
        assert_false(cluster_address_valid("10.0.0.1:70000"));
        assert_false(cluster_address_valid("::1:5"));
        assert_false(cluster_address_valid("a b:5"));
        assert_false(cluster_address_valid(""));
}

static struct cluster_node_info sample(void) {
        static char *templates[] = { "minimal", "python", NULL };
        struct cluster_node_info n = {
                .name = "node-a", .address = "10.77.0.2:7422", .boot_id = "boot-1",
                .capacity = { .cpus = 2, .memory_mib = 24000, .disk_bytes = 1ULL << 40, .max_sandboxes = 64 },
                .usage = { .sandboxes = 3, .memory_mib = 768, .disk_free_bytes = 1ULL << 39 },
                .templates = templates, .n_templates = 2,
        };
        cluster_labels_parse("zone=a", n.labels, &n.n_labels);
        return n;
}

static void test_roundtrip(void **state) {
        struct cluster_node_info n = sample(), got;
        char err[256] = "";
        json_t *hb = cluster_heartbeat_request(&n);
        assert_non_null(hb);
        assert_int_equal(cluster_heartbeat_parse(hb, &got, err), 0);
        assert_string_equal(got.name, "node-a");
        assert_string_equal(got.address, "10.77.0.2:7422");
        assert_int_equal(got.capacity.memory_mib, 24000);
        assert_int_equal(got.usage.sandboxes, 3);
        assert_int_equal(got.n_templates, 2);
        assert_string_equal(got.templates[1], "python");
        assert_int_equal(got.n_labels, 1);
        assert_false(got.wants_templates_key);
        cluster_node_info_release(&got);
        json_decref(hb);
        /* a node without the templates key asks for it */
        n.wants_templates_key = true;
        hb = cluster_heartbeat_request(&n);
        assert_int_equal(cluster_heartbeat_parse(hb, &got, err), 0);
        assert_true(got.wants_templates_key);
        cluster_node_info_release(&got);
        /* a heartbeat is not a join: no token, no CSR */
        const char *token, *csr;
        assert_int_equal(cluster_join_parse(hb, &token, &csr, &got, err), -EINVAL);
        json_decref(hb);

        json_t *join = cluster_join_request("alj1-x", "CSR", &n);
        assert_int_equal(cluster_join_parse(join, &token, &csr, &got, err), 0);
        assert_string_equal(token, "alj1-x");
        assert_string_equal(csr, "CSR");
        json_decref(join);
}

/* Each field broken in turn is refused with a message naming it. */
static void test_refusals(void **state) {
        struct cluster_node_info n = sample(), got;
        struct {
                const char *key;
                json_t *value;
                const char *says;
        } cases[] = {
                { "name", json_string("Node_A"), "\"name\"" },
                { "address", json_string("nowhere"), "\"address\"" },
                { "boot_id", json_integer(1), "\"boot_id\"" },
                { "labels", json_pack("{s:s}", "a b", "c"), "label" },
                { "capacity", json_pack("{s:i}", "cpus", -1), "\"cpus\"" },
                { "templates", json_pack("[s]", "../etc"), "template" },
                { "want_templates_key", json_string("yes"), "\"want_templates_key\"" },
                { "surprise", json_true(), "unknown field" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                json_t *hb = cluster_heartbeat_request(&n);
                json_object_set_new(hb, cases[i].key, cases[i].value);
                char err[256] = "";
                assert_int_equal(cluster_heartbeat_parse(hb, &got, err), -EINVAL);
                if (!strstr(err, cases[i].says))
                        fail_msg("case %s: message \"%s\" does not say %s", cases[i].key, err, cases[i].says);
                json_decref(hb);
        }
        json_t *many = json_array();
        for (int i = 0; i <= CLUSTER_TEMPLATES_MAX; i++)
                json_array_append_new(many, json_string("t"));
        json_t *hb = cluster_heartbeat_request(&n);
        json_object_set_new(hb, "templates", many);
        char err[256];
        assert_int_equal(cluster_heartbeat_parse(hb, &got, err), -EINVAL);
        json_decref(hb);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token),      cmocka_unit_test(test_labels),   cmocka_unit_test(test_address),
                cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_refusals),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
