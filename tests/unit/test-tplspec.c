/* SPDX-License-Identifier: Apache-2.0 */
/* lib/tplspec: JSON specs and Dockerfiles into one canonical form; every
 * refusal names the field or line and why. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tplspec.h"

static struct tplspec *parse_json(const char *text, char *err) {
        json_error_t je;
        _cleanup_(json_decrefp) json_t *j = json_loads(text, 0, &je);
        if (!j)
                fail_msg("test JSON does not parse: %s", je.text);
        struct tplspec *s = NULL;
        int r = tplspec_parse_json(j, &s, err);
        return r < 0 ? NULL : s;
}

static char *canonical(const struct tplspec *s) {
        _cleanup_(json_decrefp) json_t *j = tplspec_to_json(s);
        assert_non_null(j);
        return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

/* The canonical form reads back as itself. */
static void assert_roundtrip(const struct tplspec *s) {
        _cleanup_free_ char *a = canonical(s);
        char err[TPLSPEC_ERR_MAX] = "";
        _cleanup_(tplspec_freep) struct tplspec *again = parse_json(a, err);
        if (!again)
                fail_msg("canonical form refused: %s (%s)", err, a);
        _cleanup_free_ char *b = canonical(again);
        assert_string_equal(a, b);
}

static const char *const NODE_JSON =
        "{\"name\":\"node-web\",\"base\":{\"debian\":\"bookworm\",\"packages\":[\"nodejs\",\"npm\"]},"
        "\"steps\":[{\"workdir\":\"/app\"},{\"copy\":[\"package.json\",\"server.js\"],\"to\":\"/app/\"},"
        "{\"run\":\"npm ci\"},{\"env\":{\"PORT\":\"3000\",\"NODE_ENV\":\"production\"}},{\"user\":\"node\"}],"
        "\"start\":[\"node\",\"server.js\"],\"ready\":{\"port\":3000},\"memory_mib\":512,\"vcpus\":1,\"disk_mib\":2048}";

static const char *const NODE_DOCKERFILE = "# a Node.js server\n"
                                           "FROM debian:bookworm\n"
                                           "WORKDIR /app\n"
                                           "COPY package.json server.js /app/\n"
                                           "RUN apt-get install -y nodejs npm && \\\n"
                                           "    npm ci\n"
                                           "ENV PORT=3000 NODE_ENV=\"production\"\n"
                                           "USER node\n"
                                           "EXPOSE 3000/tcp\n"
                                           "CMD [\"node\", \"server.js\"]\n";

static void test_json(void **state) {
        char err[TPLSPEC_ERR_MAX] = "";
        _cleanup_(tplspec_freep) struct tplspec *s = parse_json(NODE_JSON, err);
        if (!s)
                fail_msg("refused: %s", err);
        assert_string_equal(s->name, "node-web");
        assert_int_equal(s->base, TPLSPEC_BASE_DEBIAN);
        assert_string_equal(s->from, "bookworm");
        assert_string_equal(s->packages[1], "npm");
        assert_int_equal(s->n_steps, 6); /* the env step of two is two */
        assert_int_equal(s->steps[2].kind, TPLSPEC_RUN);
        assert_string_equal(s->steps[2].argv[0], "/bin/sh");
        assert_string_equal(s->steps[2].argv[2], "npm ci");
        assert_string_equal(s->steps[1].srcs[1], "server.js");
        assert_string_equal(s->steps[1].dst, "/app/");
        assert_string_equal(s->start[0], "node");
        assert_int_equal(s->ready_port, 3000);
        assert_int_equal(s->ready_timeout_s, 60);
        assert_int_equal(s->memory_mib, 512);
        _cleanup_free_ const char **srcs = tplspec_context_paths(s);
        assert_string_equal(srcs[0], "package.json");
        assert_null(srcs[2]);
        assert_roundtrip(s);
}

static void test_dockerfile(void **state) {
        char err[TPLSPEC_ERR_MAX] = "";
        struct tplspec *s = NULL;
        assert_int_equal(tplspec_parse_dockerfile(NODE_DOCKERFILE, strlen(NODE_DOCKERFILE), "node-web", &s, err), 0);
        _cleanup_(tplspec_freep) struct tplspec *owned = s;
        assert_int_equal(s->base, TPLSPEC_BASE_DEBIAN);
        assert_int_equal(s->n_steps, 6);
        assert_string_equal(s->steps[2].argv[2], "apt-get install -y nodejs npm &&  npm ci");
        assert_string_equal(s->steps[3].key, "PORT");
        assert_string_equal(s->steps[4].value, "production");
        assert_int_equal(s->steps[5].kind, TPLSPEC_USER);
        assert_string_equal(s->start[1], "server.js");
        assert_int_equal(s->ready_port, 3000);
        assert_roundtrip(s);

        /* a template as the base; HEALTHCHECK over EXPOSE; the old ENV form */
        const char *df = "FROM python\nENV GREETING hello world\nRUN [\"pip\", \"install\", \"flask\"]\n"
                         "CMD python3 -m http.server 8000\nEXPOSE 8000\nHEALTHCHECK CMD curl -sf localhost:8000\n";
        struct tplspec *t = NULL;
        assert_int_equal(tplspec_parse_dockerfile(df, strlen(df), "py-web", &t, err), 0);
        _cleanup_(tplspec_freep) struct tplspec *owned_t = t;
        assert_int_equal(t->base, TPLSPEC_BASE_TEMPLATE);
        assert_string_equal(t->from, "python");
        assert_string_equal(t->steps[0].value, "hello world");
        assert_string_equal(t->steps[1].argv[0], "pip");
        assert_string_equal(t->start[2], "python3 -m http.server 8000");
        assert_int_equal(t->ready_port, 0);
        assert_string_equal(t->ready_cmd[2], "curl -sf localhost:8000");
}

static void refused_json(const char *text, const char *says) {
        char err[TPLSPEC_ERR_MAX] = "";
        _cleanup_(tplspec_freep) struct tplspec *s = parse_json(text, err);
        if (s)
                fail_msg("accepted: %s", text);
        if (!strstr(err, says))
                fail_msg("%s: message \"%s\" does not say \"%s\"", text, err, says);
}

static void refused_dockerfile(const char *text, const char *says) {
        char err[TPLSPEC_ERR_MAX] = "";
        struct tplspec *s = NULL;
        int r = tplspec_parse_dockerfile(text, strlen(text), "t", &s, err);
        tplspec_free(s);
        if (r != -EINVAL)
                fail_msg("accepted: %s", text);
        if (!strstr(err, says))
                fail_msg("%s: message \"%s\" does not say \"%s\"", text, err, says);
}

static void test_refusals(void **state) {
        refused_json("[]", "JSON object");
        refused_json("{\"name\":\"Web\",\"base\":{\"template\":\"minimal\"}}", "\"name\"");
        refused_json("{\"name\":\"web\"}", "\"base\" is required");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\",\"oci\":\"oci:x\"}}", "one of");
        refused_json("{\"name\":\"web\",\"base\":{\"oci\":\"http://x\"}}", "docker-archive");
        refused_json("{\"name\":\"web\",\"base\":{\"debian\":\"bookworm\",\"packages\":[\"Bad\"]}}", "packages[0]");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"copy\":\"../etc\",\"to\":\"/x\"}]}",
                     "steps[0]: source");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"copy\":\"/etc/passwd\",\"to\":\"/x\"}]}",
                     "relative");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"run\":\"a\",\"user\":\"b\"}]}",
                     "steps[0] must have one");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"workdir\":\"app\"}]}",
                     "absolute");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"env\":{\"1A\":\"x\"}}]}",
                     "environment variable name");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[{\"run\":[]}]}", "steps[0].run");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"ready\":{\"port\":80}}", "start command");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"start\":\"x\",\"ready\":{\"port\":0}}",
                     "\"port\"");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"memory_mib\":8}", "\"memory_mib\"");
        refused_json("{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"cpus\":2}", "unknown field \"cpus\"");
        refused_dockerfile("RUN true\n", "first instruction must be FROM");
        refused_dockerfile("FROM minimal\nFROM python\n", "one FROM");
        refused_dockerfile("FROM minimal AS build\n", "FROM takes one");
        refused_dockerfile("FROM minimal\nADD x /x\n", "line 2: ADD is not supported");
        refused_dockerfile("FROM minimal\nCOPY --chown=1 a /a\n", "no COPY options");
        refused_dockerfile("FROM minimal\nCOPY a\n", "COPY SRC... DST");
        refused_dockerfile("FROM minimal\nRUN [\"a\",\n", "exec form");
        refused_dockerfile("FROM minimal\nEXPOSE http\n", "EXPOSE takes a port");
        refused_dockerfile("# nothing\n\n", "no FROM");
        refused_dockerfile("FROM registry.example/x y\n", "FROM takes one");
        refused_dockerfile("FROM minimal\nCOPY a\xff\xfe /a\n", "not UTF-8");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_json),
                cmocka_unit_test(test_dockerfile),
                cmocka_unit_test(test_refusals),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
