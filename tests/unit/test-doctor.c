/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock doctor`'s pure parts: the listen address of a URL, the lines
 * from a GET /v1/health answer, the report's text and JSON. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "builtin.h"

static void test_listen_from_url(void **state) {
        char b[320];
        assert_int_equal(doctor_listen_from_url("http://127.0.0.1:7420", b, sizeof(b)), 0);
        assert_string_equal(b, "127.0.0.1:7420");
        assert_int_equal(doctor_listen_from_url("http://127.0.0.1:7421/", b, sizeof(b)), 0);
        assert_string_equal(b, "127.0.0.1:7421");
        assert_int_equal(doctor_listen_from_url("http://localhost:9000/v1", b, sizeof(b)), 0);
        assert_string_equal(b, "localhost:9000");
        assert_int_equal(doctor_listen_from_url("http://[::1]:7420", b, sizeof(b)), 0);
        assert_string_equal(b, "[::1]:7420");
        assert_int_equal(doctor_listen_from_url("http://[::1]", b, sizeof(b)), 0);
        assert_string_equal(b, "[::1]:80");
        assert_int_equal(doctor_listen_from_url("http://10.0.0.2", b, sizeof(b)), 0);
        assert_string_equal(b, "10.0.0.2:80");
        assert_int_equal(doctor_listen_from_url("https://10.0.0.2", b, sizeof(b)), 0);
        assert_string_equal(b, "10.0.0.2:443");
        /* names airlockd cannot listen on */
        assert_int_equal(doctor_listen_from_url("http://airlock.example:7420", b, sizeof(b)),
                         -EADDRNOTAVAIL);
        static const char *const bad[] = {"",
                                          "ftp://x",
                                          "http://",
                                          "http://1.2.3.4:",
                                          "http://1.2.3.4:0",
                                          "http://1.2.3.4:70000",
                                          "http://1.2.3.4:12a",
                                          "http://[::1"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(doctor_listen_from_url(bad[i], b, sizeof(b)), -EINVAL);
}

static struct doctor_report *health(long status, const char *text) {
        struct doctor_report *rep = calloc(1, sizeof(*rep));
        assert_non_null(rep);
        json_t *body = text ? json_loads(text, 0, NULL) : NULL;
        if (text)
                assert_non_null(body);
        doctor_health_items(status, body, rep);
        json_decref(body);
        return rep;
}

static const struct doctor_item *find(const struct doctor_report *rep, const char *name) {
        for (size_t i = 0; i < rep->n; i++)
                if (strcmp(rep->items[i].item, name) == 0)
                        return &rep->items[i];
        return NULL;
}

static void test_health_ready(void **state) {
        struct doctor_report *rep =
                health(200, "{\"status\":\"ok\",\"accel\":\"tcg\",\"accel_reason\":\"no vmx\","
                            "\"templates\":[{\"name\":\"minimal\",\"state\":\"ready\"},{\"name\":\"python\","
                            "\"state\":\"ready\"}]}");
        assert_int_equal(rep->n, 2);
        assert_int_equal(find(rep, "node")->status, DOCTOR_OK);
        assert_string_equal(find(rep, "node")->detail, "reachable; accel tcg (no vmx)");
        assert_int_equal(find(rep, "templates")->status, DOCTOR_OK);
        assert_string_equal(find(rep, "templates")->detail, "ready: minimal, python");
        free(rep);
}

static void test_health_building(void **state) {
        struct doctor_report *rep = health(
                503,
                "{\"error\":{\"code\":\"unavailable\",\"message\":\"still building\"},\"templates\":["
                "{\"name\":\"minimal\",\"state\":\"ready\"},{\"name\":\"python\",\"state\":\"building\","
                "\"step\":\"rootfs\",\"step_number\":3,\"steps\":4,\"elapsed_ms\":65000,\"log\":\"/l\"}]}");
        assert_int_equal(find(rep, "node")->status, DOCTOR_OK);
        const struct doctor_item *t = find(rep, "templates");
        assert_int_equal(t->status, DOCTOR_WARN);
        assert_string_equal(t->detail,
                            "python building: step 3/4 rootfs (1m05s elapsed; log /l); ready: minimal");
        assert_true(t->fix[0]);
        free(rep);
}

static void test_health_failed(void **state) {
        struct doctor_report *rep = health(
                503, "{\"error\":{\"code\":\"template_failed\",\"message\":\"template python failed: x\"},"
                     "\"templates\":[{\"name\":\"python\",\"state\":\"failed\",\"error\":\"rootfs step "
                     "failed\",\"log\":\"/t/p.failed.log\"}]}");
        const struct doctor_item *t = find(rep, "templates");
        assert_int_equal(t->status, DOCTOR_ERROR);
        assert_string_equal(t->detail, "python failed: rootfs step failed; build log /t/p.failed.log");
        assert_non_null(strstr(t->fix, "build log"));
        free(rep);
}

static void test_health_node_down(void **state) {
        struct doctor_report *rep = health(503, "{\"error\":{\"code\":\"unavailable\",\"message\":\"the "
                                                "node agent is not available (refused)\"}}");
        assert_int_equal(rep->n, 1);
        const struct doctor_item *n = find(rep, "node");
        assert_int_equal(n->status, DOCTOR_ERROR);
        assert_non_null(strstr(n->detail, "the node agent is not available (refused)"));
        assert_non_null(strstr(n->fix, "prog=airlock-node"));
        free(rep);
        rep = health(404, "{\"error\":{\"code\":\"not_found\",\"message\":\"no such route\"}}");
        assert_int_equal(find(rep, "node")->status, DOCTOR_ERROR);
        assert_non_null(strstr(find(rep, "node")->detail, "HTTP 404"));
        free(rep);
}

static void test_report(void **state) {
        struct doctor_report *rep = health(200, "{\"status\":\"ok\",\"accel\":\"kvm\",\"templates\":[]}");
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        doctor_report_print(rep, f);
        fclose(f);
        assert_string_equal(buf, "ok     node       reachable; accel kvm\n"
                                 "ok     templates  ready: (no default templates)\n");
        free(buf);
        json_t *j = doctor_report_json(rep);
        assert_int_equal(json_array_size(j), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "status")), "ok");
        assert_true(json_is_null(json_object_get(json_array_get(j, 0), "fix")));
        json_decref(j);
        free(rep);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_listen_from_url),  cmocka_unit_test(test_health_ready),
                cmocka_unit_test(test_health_building),  cmocka_unit_test(test_health_failed),
                cmocka_unit_test(test_health_node_down), cmocka_unit_test(test_report),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
