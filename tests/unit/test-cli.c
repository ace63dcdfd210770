/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the airlock CLI: the SSE parser, argument syntax, URL
 * encoding, base64, exit-status mapping, client settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"
#include "cli.h"
#include "client.h"
#include "sse.h"

/* ---- SSE ---- */

#define MAX_EVENTS 16

struct recorder {
        size_t n;
        char type[MAX_EVENTS][64];
        char data[MAX_EVENTS][256];
        size_t data_len[MAX_EVENTS];
        char id[MAX_EVENTS][64];
        int fail_at; /* return -ECANCELED on this event number (1-based), 0 never */
};

static int record(const struct sse_event *ev, void *userdata) {
        struct recorder *rec = userdata;
        assert_true(rec->n < MAX_EVENTS);
        assert_int_equal(strlen(ev->data), ev->data_len);
        snprintf(rec->type[rec->n], sizeof(rec->type[0]), "%s", ev->type);
        snprintf(rec->data[rec->n], sizeof(rec->data[0]), "%s", ev->data);
        rec->data_len[rec->n] = ev->data_len;
        snprintf(rec->id[rec->n], sizeof(rec->id[0]), "%s", ev->id);
        rec->n++;
        if (rec->fail_at > 0 && (size_t)rec->fail_at == rec->n)
                return -ECANCELED;
        return 0;
}

/* Parses s in one go, returning the feed result. */
static int parse_all(const char *s, size_t len, size_t max, struct recorder *rec) {
        _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
        assert_int_equal(sse_parser_new(max, record, rec, &p), 0);
        return sse_parser_feed(p, s, len);
}

/* Parses s split into pieces of `step` bytes. */
static int parse_steps(const char *s, size_t len, size_t step, struct recorder *rec) {
        _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
        assert_int_equal(sse_parser_new(0, record, rec, &p), 0);
        for (size_t off = 0; off < len; off += step) {
                int r = sse_parser_feed(p, s + off, MIN(step, len - off));
                if (r < 0)
                        return r;
        }
        return 0;
}

static const char stream_sample[] = "\xEF\xBB\xBF"
                                    ": keep-alive\r\n"
                                    "\r\n"
                                    "event: stdout\r\n"
                                    "data: {\"data\":\"aGVsbG8=\"}\r\n"
                                    "\r\n"
                                    "event:stderr\n"
                                    "data:line1\n"
                                    "data: line2\n"
                                    "id: 7\n"
                                    "\n"
                                    "retry: 100\r"
                                    "foo: bar\r"
                                    "data\r"
                                    "\r"
                                    "event: exit\r\n"
                                    "data: {\"exit_code\":3}\r\n"
                                    "\r\n"
                                    "data: unfinished";

static void check_sample(const struct recorder *rec) {
        assert_int_equal(rec->n, 4);
        assert_string_equal(rec->type[0], "stdout");
        assert_string_equal(rec->data[0], "{\"data\":\"aGVsbG8=\"}");
        assert_string_equal(rec->id[0], "");
        assert_string_equal(rec->type[1], "stderr");
        assert_string_equal(rec->data[1], "line1\nline2");
        assert_string_equal(rec->id[1], "7");
        /* Type resets to "message"; a bare "data" line is empty data. */
        assert_string_equal(rec->type[2], "message");
        assert_string_equal(rec->data[2], "");
        assert_int_equal(rec->data_len[2], 0);
        assert_string_equal(rec->id[2], "7"); /* ids persist */
        assert_string_equal(rec->type[3], "exit");
        assert_string_equal(rec->data[3], "{\"exit_code\":3}");
}

static void test_sse_whole(void **state) {
        struct recorder rec = {};
        assert_int_equal(parse_all(stream_sample, sizeof(stream_sample) - 1, 0, &rec), 0);
        check_sample(&rec);
}

/* Every chunk size from 1 byte up gives the same events. */
static void test_sse_every_chunk_size(void **state) {
        for (size_t step = 1; step <= sizeof(stream_sample); step++) {
                struct recorder rec = {};
                assert_int_equal(parse_steps(stream_sample, sizeof(stream_sample) - 1, step, &rec), 0);
                check_sample(&rec);
        }
}

/* Every single split point, including inside CRLF and inside the BOM. */
static void test_sse_every_split_point(void **state) {
        size_t len = sizeof(stream_sample) - 1;
        for (size_t cut = 0; cut <= len; cut++) {
                struct recorder rec = {};
                _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
                assert_int_equal(sse_parser_new(0, record, &rec, &p), 0);
                assert_int_equal(sse_parser_feed(p, stream_sample, cut), 0);
                assert_int_equal(sse_parser_feed(p, stream_sample + cut, len - cut), 0);
                check_sample(&rec);
        }
}

static void test_sse_line_endings(void **state) {
        static const char *const streams[] = {
                "data: a\n\ndata: b\n\n",
                "data: a\r\n\r\ndata: b\r\n\r\n",
                "data: a\r\rdata: b\r\r",
                "data: a\r\n\rdata: b\n\r\n",
        };
        for (size_t i = 0; i < ARRAY_SIZE(streams); i++) {
                struct recorder rec = {};
                assert_int_equal(parse_all(streams[i], strlen(streams[i]), 0, &rec), 0);
                assert_int_equal(rec.n, 2);
                assert_string_equal(rec.data[0], "a");
                assert_string_equal(rec.data[1], "b");
        }
}

/* CR then LF in the next chunk is one line end, not an empty line. */
static void test_sse_cr_lf_across_chunks(void **state) {
        struct recorder rec = {};
        _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
        assert_int_equal(sse_parser_new(0, record, &rec, &p), 0);
        assert_int_equal(sse_parser_feed(p, "data: x\r", 8), 0);
        assert_int_equal(sse_parser_feed(p, "\ndata: y\r", 9), 0);
        assert_int_equal(rec.n, 0);
        assert_int_equal(sse_parser_feed(p, "\n", 1), 0);
        assert_int_equal(rec.n, 0);
        assert_int_equal(sse_parser_feed(p, "\r\n", 2), 0);
        assert_int_equal(rec.n, 1);
        assert_string_equal(rec.data[0], "x\ny");
}

static void test_sse_comments_and_fields(void **state) {
        static const char s[] = ": only a comment\n\n"
                                ":\n\n"
                                "event: ignored-without-data\n\n"
                                "data:  two spaces\n"
                                "unknown: field\n"
                                "data\n"
                                "\n"
                                "event: a:b\n"
                                "data: x: y\n\n";
        struct recorder rec = {};
        assert_int_equal(parse_all(s, sizeof(s) - 1, 0, &rec), 0);
        assert_int_equal(rec.n, 2);
        /* Only one space after the colon is dropped; a bare "data" adds an
         * empty line. The event without data did not leak its type. */
        assert_string_equal(rec.type[0], "message");
        assert_string_equal(rec.data[0], " two spaces\n");
        assert_string_equal(rec.type[1], "a:b");
        assert_string_equal(rec.data[1], "x: y");
}

static void test_sse_bom_only_at_start(void **state) {
        /* A BOM later in the stream is data, and a partial BOM at the start
         * is given back as data too. */
        static const char s1[] = "data: \xEF\xBB\xBFx\n\n";
        static const char s2[] = "\xEF\xBB"
                                 "data: y\n\n";
        struct recorder rec = {};
        assert_int_equal(parse_all(s1, sizeof(s1) - 1, 0, &rec), 0);
        assert_int_equal(rec.n, 1);
        assert_string_equal(rec.data[0], "\xEF\xBB\xBFx");

        rec = (struct recorder){};
        assert_int_equal(parse_all(s2, sizeof(s2) - 1, 0, &rec), 0);
        assert_int_equal(rec.n, 0); /* field "\xEF\xBBdata" is unknown */
}

static void test_sse_unfinished_event_dropped(void **state) {
        static const char s[] = "event: exit\ndata: {}\n";
        struct recorder rec = {};
        assert_int_equal(parse_all(s, sizeof(s) - 1, 0, &rec), 0);
        assert_int_equal(rec.n, 0);
}

static void test_sse_max_event(void **state) {
        char buf[200];
        struct recorder rec = {};

        /* Exactly at the limit (64 data bytes incl. the joining '\n'). */
        memset(buf, 0, sizeof(buf));
        memcpy(buf, "data: ", 6);
        memset(buf + 6, 'a', 63);
        memcpy(buf + 69, "\n\n", 2);
        assert_int_equal(parse_all(buf, 71, 64, &rec), 0);
        assert_int_equal(rec.n, 1);
        assert_int_equal(rec.data_len[0], 63);

        /* One over. */
        rec = (struct recorder){};
        memset(buf + 6, 'a', 64);
        memcpy(buf + 70, "\n\n", 2);
        assert_int_equal(parse_all(buf, 72, 64, &rec), -EMSGSIZE);
        assert_int_equal(rec.n, 0);

        /* Many small data lines add up. */
        rec = (struct recorder){};
        {
                _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
                assert_int_equal(sse_parser_new(64, record, &rec, &p), 0);
                int r = 0;
                for (int i = 0; i < 40 && r == 0; i++)
                        r = sse_parser_feed(p, "data: abc\n", 10);
                assert_int_equal(r, -EMSGSIZE);
                /* Sticky: the stream is broken for good. */
                assert_int_equal(sse_parser_feed(p, "\n", 1), -EMSGSIZE);
                assert_int_equal(rec.n, 0);
        }

        /* A line that never ends is bounded too (comments included). */
        rec = (struct recorder){};
        {
                _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
                assert_int_equal(sse_parser_new(64, record, &rec, &p), 0);
                int r = sse_parser_feed(p, ":", 1);
                for (int i = 0; i < 100 && r == 0; i++)
                        r = sse_parser_feed(p, "xxxxxxxxxx", 10);
                assert_int_equal(r, -EMSGSIZE);
        }

        /* The type counts against the same budget. */
        rec = (struct recorder){};
        memset(buf, 0, sizeof(buf));
        memcpy(buf, "event: ", 7);
        memset(buf + 7, 't', 60);
        memcpy(buf + 67, "\ndata: 12345\n\n", 14);
        assert_int_equal(parse_all(buf, 81, 64, &rec), -EMSGSIZE);
}

/* The default limit is 1 MiB: a 1 MiB event passes, a bigger one fails. */
static void test_sse_default_limit(void **state) {
        size_t big = SSE_MAX_EVENT_DEFAULT;
        _cleanup_free_ char *s = malloc(big + 16);
        struct recorder rec = {};
        assert_non_null(s);

        memcpy(s, "data: ", 6);
        memset(s + 6, 'z', big - 1);
        memcpy(s + 6 + big - 1, "\n\n", 2);
        {
                _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
                assert_int_equal(sse_parser_new(0, record, &rec, &p), 0);
                assert_int_equal(sse_parser_feed(p, s, 6 + big - 1 + 2), 0);
                assert_int_equal(rec.n, 1);
                assert_int_equal(rec.data_len[0], big - 1);
        }
        memset(s + 6, 'z', big + 1);
        memcpy(s + 6 + big + 1, "\n\n", 2);
        {
                _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
                assert_int_equal(sse_parser_new(0, record, &rec, &p), 0);
                assert_int_equal(sse_parser_feed(p, s, 6 + big + 1 + 2), -EMSGSIZE);
        }
}

static void test_sse_callback_error(void **state) {
        static const char s[] = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
        struct recorder rec = {.fail_at = 2};
        _cleanup_(sse_parser_freep) struct sse_parser *p = NULL;
        assert_int_equal(sse_parser_new(0, record, &rec, &p), 0);
        assert_int_equal(sse_parser_feed(p, s, sizeof(s) - 1), -ECANCELED);
        assert_int_equal(rec.n, 2);
        assert_int_equal(sse_parser_feed(p, "data: 4\n\n", 9), -ECANCELED);
        assert_int_equal(rec.n, 2);
}

static void test_sse_bad_args(void **state) {
        struct sse_parser *p = NULL;
        assert_int_equal(sse_parser_new(0, NULL, NULL, &p), -EINVAL);
        assert_null(p);
        assert_int_equal(sse_parser_feed(NULL, "x", 1), -EINVAL);
        assert_null(sse_parser_free(NULL));
}

/* ---- argument syntax ---- */

static void test_kv(void **state) {
        _cleanup_(json_decrefp) json_t *o = json_object();
        assert_int_equal(cli_kv_add(o, "A=1"), 0);
        assert_int_equal(cli_kv_add(o, "EMPTY="), 0);
        assert_int_equal(cli_kv_add(o, "URL=a=b=c"), 0);
        assert_int_equal(cli_kv_add(o, "A=2"), 0); /* last one wins */
        assert_string_equal(json_string_value(json_object_get(o, "A")), "2");
        assert_string_equal(json_string_value(json_object_get(o, "EMPTY")), "");
        assert_string_equal(json_string_value(json_object_get(o, "URL")), "a=b=c");
        assert_int_equal(json_object_size(o), 3);

        assert_int_equal(cli_kv_add(o, "NOEQUALS"), -EINVAL);
        assert_int_equal(cli_kv_add(o, "=value"), -EINVAL);
        assert_int_equal(cli_kv_add(o, ""), -EINVAL);
        assert_int_equal(cli_kv_add(o, "K=\xff\xfe"), -EILSEQ);
        assert_int_equal(cli_kv_add(o, "\xff=v"), -EILSEQ);
        assert_int_equal(cli_kv_add(NULL, "A=1"), -EINVAL);
        assert_int_equal(json_object_size(o), 3);
}

static void test_id_valid(void **state) {
        char longid[CLI_ID_MAX + 2];
        assert_true(cli_id_is_valid("sbx-1a2b"));
        assert_true(cli_id_is_valid("a.b_c-D9"));
        assert_false(cli_id_is_valid(""));
        assert_false(cli_id_is_valid(NULL));
        assert_false(cli_id_is_valid("."));
        assert_false(cli_id_is_valid(".."));
        assert_false(cli_id_is_valid(".hidden"));
        assert_false(cli_id_is_valid("a/b"));
        assert_false(cli_id_is_valid("a?b"));
        assert_false(cli_id_is_valid("a b"));
        assert_false(cli_id_is_valid("a%2F"));
        memset(longid, 'x', CLI_ID_MAX);
        longid[CLI_ID_MAX] = '\0';
        assert_true(cli_id_is_valid(longid));
        longid[CLI_ID_MAX] = 'x';
        longid[CLI_ID_MAX + 1] = '\0';
        assert_false(cli_id_is_valid(longid));
}

static void check_endpoint(const char *in, const char *sandbox, const char *path) {
        _cleanup_(cli_endpoint_done) struct cli_endpoint e = {};
        assert_int_equal(cli_endpoint_parse(in, &e), 0);
        if (sandbox)
                assert_string_equal(e.sandbox, sandbox);
        else
                assert_null(e.sandbox);
        assert_string_equal(e.path, path);
}

static void test_endpoint(void **state) {
        check_endpoint("sbx-1:/root/file.txt", "sbx-1", "/root/file.txt");
        check_endpoint("sbx-1:/", "sbx-1", "/");
        check_endpoint("sbx-1:/a:b", "sbx-1", "/a:b"); /* only the first ':' splits */
        check_endpoint("-", NULL, "-");
        check_endpoint("file.txt", NULL, "file.txt");
        check_endpoint("./a:b", NULL, "./a:b");
        check_endpoint("/tmp/a:/b", NULL, "/tmp/a:/b");
        check_endpoint("dir/x:/y", NULL, "dir/x:/y");
        check_endpoint(".hidden:/x", NULL, ".hidden:/x"); /* not an id */
        check_endpoint(":/x", NULL, ":/x");

        struct cli_endpoint e = {.sandbox = (char *)"untouched"};
        assert_int_equal(cli_endpoint_parse("sbx-1:relative/path", &e), -EINVAL);
        assert_int_equal(cli_endpoint_parse("sbx-1:", &e), -EINVAL);
        assert_int_equal(cli_endpoint_parse("", &e), -EINVAL);
        assert_int_equal(cli_endpoint_parse(NULL, &e), -EINVAL);
        assert_string_equal(e.sandbox, "untouched");

        /* A prefix longer than any id is a local path. */
        char s[CLI_ID_MAX + 8];
        memset(s, 'x', CLI_ID_MAX + 1);
        memcpy(s + CLI_ID_MAX + 1, ":/a", 4);
        check_endpoint(s, NULL, s);
}

static void check_escape(const char *in, bool keep_slash, const char *want) {
        _cleanup_free_ char *out = NULL;
        assert_int_equal(cli_url_escape(in, keep_slash, &out), 0);
        assert_string_equal(out, want);
}

static void test_url_escape(void **state) {
        check_escape("/root/file.txt", true, "/root/file.txt");
        check_escape("AZaz09-._~", true, "AZaz09-._~");
        check_escape("/a b", true, "/a%20b");
        check_escape("/a%b", true, "/a%25b");
        check_escape("/q?x=1&y=2#f", true, "/q%3Fx%3D1%26y%3D2%23f");
        check_escape("/plus+semi;colon:at@", true, "/plus%2Bsemi%3Bcolon%3Aat%40");
        check_escape("/caf\xc3\xa9", true, "/caf%C3%A9");
        check_escape("/\x01\x7f\xff", true, "/%01%7F%FF");
        check_escape("/a/b", false, "%2Fa%2Fb");
        check_escape("", true, "");
        char *out = NULL;
        assert_int_equal(cli_url_escape(NULL, true, &out), -EINVAL);
        assert_null(out);
}

/* ---- base64 ---- */

static void test_b64_vectors(void **state) {
        static const struct {
                const char *plain, *b64;
        } v[] = {
                {"", ""},
                {"f", "Zg=="},
                {"fo", "Zm8="},
                {"foo", "Zm9v"},
                {"foob", "Zm9vYg=="},
                {"fooba", "Zm9vYmE="},
                {"foobar", "Zm9vYmFy"},
                {"\xff\xfe\xfd", "//79"}, /* the original alphabet, not URL-safe */
        };
        for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
                _cleanup_free_ char *enc = NULL, *dec = NULL;
                size_t n = 99;
                assert_int_equal(cli_b64_encode(v[i].plain, strlen(v[i].plain), &enc), 0);
                assert_string_equal(enc, v[i].b64);
                assert_int_equal(cli_b64_decode(v[i].b64, strlen(v[i].b64), &dec, &n), 0);
                assert_int_equal(n, strlen(v[i].plain));
                assert_memory_equal(dec, v[i].plain, n);
        }
}

static void test_b64_roundtrip_binary(void **state) {
        unsigned char buf[300];
        for (size_t i = 0; i < sizeof(buf); i++)
                buf[i] = (unsigned char)(i * 7 + 3);
        for (size_t len = 0; len <= sizeof(buf); len++) {
                _cleanup_free_ char *enc = NULL, *dec = NULL;
                size_t n = 0;
                assert_int_equal(cli_b64_encode(buf, len, &enc), 0);
                assert_int_equal(strlen(enc), (len + 2) / 3 * 4);
                assert_int_equal(cli_b64_decode(enc, strlen(enc), &dec, &n), 0);
                assert_int_equal(n, len);
                if (len > 0)
                        assert_memory_equal(dec, buf, len);
        }
}

static void test_b64_invalid(void **state) {
        static const char *const bad[] = {"Zg=",       "Zg",   "Z",        "Zm9v!",
                                          "Zm9v YmFy", "-_==", "Zg==Zg==", "===="};
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                char *dec = NULL;
                assert_int_equal(cli_b64_decode(bad[i], strlen(bad[i]), &dec, NULL), -EINVAL);
                assert_null(dec);
        }
}

/* ---- exit status ---- */

static int status_of(const char *json) {
        _cleanup_(json_decrefp) json_t *j = json_loads(json, 0, NULL);
        return cli_exit_status(j);
}

static void test_exit_status(void **state) {
        assert_int_equal(status_of("{\"exit_code\":0}"), 0);
        assert_int_equal(status_of("{\"exit_code\":3}"), 3);
        assert_int_equal(status_of("{\"exit_code\":255}"), 255);
        assert_int_equal(status_of("{\"exit_code\":256}"), 255);
        assert_int_equal(status_of("{\"exit_code\":-9}"), 137);
        assert_int_equal(status_of("{\"exit_code\":-1,\"signal\":15}"), 143);
        assert_int_equal(status_of("{\"exit_code\":0,\"signal\":0}"), 0);
        assert_int_equal(status_of("{\"signal\":2}"), 130);
        assert_int_equal(status_of("{\"exit_code\":137,\"timed_out\":true}"), 124);
        assert_int_equal(status_of("{\"exit_code\":1,\"timed_out\":false}"), 1);
        assert_int_equal(status_of("{\"exit_code\":\"1\"}"), 255);
        assert_int_equal(status_of("{}"), 255);
        assert_int_equal(status_of("[]"), 255);
        assert_int_equal(cli_exit_status(NULL), 255);
}

/* ---- exec arguments ---- */

static int parse_exec(struct cli *cli, struct exec_opts *o, char **argv) {
        int argc = 0;
        while (argv[argc])
                argc++;
        optind = 0;
        opterr = 0;
        return exec_parse_args(cli, argc, argv, o);
}

static const struct cli_command exec_cmd = {.name = "exec", .synopsis = "", .summary = ""};

static void test_exec_args(void **state) {
        struct cli cli = {.cmd = &exec_cmd};
        _cleanup_(exec_opts_done) struct exec_opts o = {};
        char *argv[] = {"exec",      "-i", "-t",    "-e", "A=1", "--env", "B=x=y",  "-w", "/srv",
                        "--timeout", "30", "sbx-9", "--", "ls",  "-la",   "--json", NULL};

        assert_int_equal(parse_exec(&cli, &o, argv), CLI_PROCEED);
        assert_true(o.interactive);
        assert_true(o.tty);
        assert_true(o.has_timeout);
        assert_int_equal(o.timeout_s, 30);
        assert_string_equal(o.cwd, "/srv");
        assert_string_equal(o.sandbox, "sbx-9");
        assert_string_equal(json_string_value(json_object_get(o.env, "A")), "1");
        assert_string_equal(json_string_value(json_object_get(o.env, "B")), "x=y");
        /* Everything after SBX -- belongs to the command, even --json. */
        assert_int_equal(o.ncmd, 3);
        assert_string_equal(o.cmd[0], "ls");
        assert_string_equal(o.cmd[1], "-la");
        assert_string_equal(o.cmd[2], "--json");
        assert_false(cli.json);
}

static void test_exec_args_no_dashdash(void **state) {
        struct cli cli = {.cmd = &exec_cmd};
        _cleanup_(exec_opts_done) struct exec_opts o = {};
        char *argv[] = {"exec", "--json", "sbx-9", "echo", "-n", "hi", NULL};

        assert_int_equal(parse_exec(&cli, &o, argv), CLI_PROCEED);
        assert_true(cli.json);
        assert_false(o.interactive);
        assert_false(o.has_timeout);
        assert_null(o.cwd);
        assert_int_equal(json_object_size(o.env), 0);
        assert_int_equal(o.ncmd, 3);
        assert_string_equal(o.cmd[0], "echo");
        assert_string_equal(o.cmd[1], "-n");
}

static void test_exec_args_errors(void **state) {
        struct cli cli = {.cmd = &exec_cmd};
        char *no_cmd[] = {"exec", "sbx-1", "--", NULL};
        char *no_sbx[] = {"exec", "-i", NULL};
        char *bad_id[] = {"exec", "../x", "--", "ls", NULL};
        char *bad_env[] = {"exec", "-e", "NOEQ", "sbx-1", "--", "ls", NULL};
        char *bad_cwd[] = {"exec", "-w", "rel", "sbx-1", "--", "ls", NULL};
        char *bad_timeout[] = {"exec", "--timeout", "abc", "sbx-1", "--", "ls", NULL};
        char *zero_timeout[] = {"exec", "--timeout", "0", "sbx-1", "--", "ls", NULL};
        char *neg_timeout[] = {"exec", "--timeout", "-5", "sbx-1", "--", "ls", NULL};
        char *unknown[] = {"exec", "--frobnicate", "sbx-1", "--", "ls", NULL};
        char *missing_arg[] = {"exec", "--cwd", NULL};
        char *tty_json[] = {"exec", "-t", "--json", "sbx-1", "--", "ls", NULL};
        char *help[] = {"exec", "--help", NULL};
        char **cases[] = {no_cmd,       no_sbx,      bad_id,  bad_env,     bad_cwd, bad_timeout,
                          zero_timeout, neg_timeout, unknown, missing_arg, tty_json};

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct exec_opts o = {};
                cli.json = false;
                assert_int_equal(parse_exec(&cli, &o, cases[i]), CLI_EXIT_USAGE);
                assert_null(o.env); /* untouched on failure */
        }
        struct exec_opts o = {};
        assert_int_equal(parse_exec(&cli, &o, help), CLI_EXIT_OK);
        assert_null(o.env);
}

/* ---- client settings ---- */

static void test_client_init(void **state) {
        char dir[] = "/tmp/test-cli-XXXXXX";
        char path[64];
        struct cli_error err = {};
        struct cli_client c = {};

        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/admin.token", dir);
        unsetenv("AIRLOCK_URL");
        unsetenv("AIRLOCK_TOKEN");
        unsetenv("AIRLOCK_DATA_DIR");

        /* No token file: fine, with a hint for later 401s. */
        assert_int_equal(client_init(&c, NULL, NULL, dir, &err), 0);
        assert_string_equal(c.base_url, CLIENT_DEFAULT_URL);
        assert_null(c.token);
        assert_non_null(strstr(c.token_problem, "admin.token"));
        client_done(&c);

        FILE *f = fopen(path, "we");
        assert_non_null(f);
        fputs("file-token\n", f);
        fclose(f);

        assert_int_equal(client_init(&c, "http://h:1///", NULL, dir, &err), 0);
        assert_string_equal(c.base_url, "http://h:1");
        assert_string_equal(c.token, "file-token");
        assert_null(c.token_problem);
        client_done(&c);

        /* Environment beats the file, flags beat the environment. */
        setenv("AIRLOCK_DATA_DIR", dir, 1);
        setenv("AIRLOCK_TOKEN", "env-token", 1);
        setenv("AIRLOCK_URL", "https://env:2", 1);
        assert_int_equal(client_init(&c, NULL, NULL, NULL, &err), 0);
        assert_string_equal(c.token, "env-token");
        assert_string_equal(c.base_url, "https://env:2");
        client_done(&c);
        assert_int_equal(client_init(&c, "http://flag:3", "flag-token", NULL, &err), 0);
        assert_string_equal(c.token, "flag-token");
        assert_string_equal(c.base_url, "http://flag:3");
        client_done(&c);
        unsetenv("AIRLOCK_TOKEN");
        unsetenv("AIRLOCK_URL");
        unsetenv("AIRLOCK_DATA_DIR");

        /* Errors never echo the token. */
        assert_int_equal(client_init(&c, NULL, "bad token\r\nX-Evil: 1", NULL, &err), -EINVAL);
        assert_null(strstr(err.message, "bad token"));
        assert_null(c.base_url);
        assert_int_equal(client_init(&c, "ftp://x", "t", NULL, &err), -EINVAL);
        assert_int_equal(client_init(&c, "localhost:7420", "t", NULL, &err), -EINVAL);

        f = fopen(path, "we");
        assert_non_null(f);
        fputs("secret with space\n", f);
        fclose(f);
        assert_int_equal(client_init(&c, NULL, NULL, dir, &err), -EINVAL);
        assert_null(strstr(err.message, "secret"));

        unlink(path);
        rmdir(dir);
}

/* Transport failures become a message naming the server, not a crash. */
static void test_client_unreachable(void **state) {
        struct cli_error err = {};
        struct cli_client c = {};
        json_t *j = (json_t *)0x1;

        assert_int_equal(client_init(&c, "http://127.0.0.1:1", "t", NULL, &err), 0);
        assert_int_equal(client_json(&c, "GET", "/v1/health", NULL, &err, &j), -ECONNREFUSED);
        assert_ptr_equal(j, (json_t *)0x1);
        assert_int_equal(err.status, 0);
        assert_non_null(strstr(err.message, "http://127.0.0.1:1"));
        assert_null(strstr(err.message, "Bearer"));
        client_done(&c);
}

/* ---- egress flags (cli-net.h) ---- */

/* The policy a list of flags makes, as compact JSON with sorted keys. */
static char *net_policy(size_t n, const enum cli_net_flag *flags, const char *const *args) {
        struct cli_net net = { 0 };
        char err[CLI_NET_ERR_MAX];
        for (size_t i = 0; i < n; i++)
                assert_int_equal(cli_net_add(&net, flags[i], args[i], err), 0);
        json_t *p = NULL;
        assert_int_equal(cli_net_policy(&net, &p), 0);
        char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(p);
        cli_net_done(&net);
        return s;
}

static void expect_net(size_t n, const enum cli_net_flag *flags, const char *const *args, const char *want) {
        char *got = net_policy(n, flags, args);
        assert_string_equal(got, want);
        free(got);
}

static void expect_net_error(enum cli_net_flag flag, const char *arg, const char *want) {
        struct cli_net net = { 0 };
        char err[CLI_NET_ERR_MAX] = "";
        assert_int_equal(cli_net_add(&net, flag, arg, err), -EINVAL);
        assert_string_equal(err, want);
        assert_false(cli_net_given(&net));
        cli_net_done(&net);
}

static void test_net_flags(void **state) {
        struct cli_net none = { 0 };
        json_t *p = (json_t *)0x1;
        assert_false(cli_net_given(&none));
        assert_int_equal(cli_net_policy(&none, &p), -ENODATA);
        assert_ptr_equal(p, (json_t *)0x1);

        expect_net(1, (enum cli_net_flag[]){CLI_NET_MODE}, (const char *const[]){"deny-all"}, "{\"mode\":\"deny-all\"}");
        /* --allow: host rules in order, default ports left to the API, no mode (an allowlist) */
        expect_net(2, (enum cli_net_flag[]){CLI_NET_ALLOW, CLI_NET_ALLOW_CIDR},
                   (const char *const[]){"pypi.org,*.pythonhosted.org,b.org:8080", "203.0.113.0/24:5432"},
                   "{\"allow\":[{\"host\":\"pypi.org\"},{\"host\":\"*.pythonhosted.org\"},"
                   "{\"host\":\"b.org\",\"ports\":[8080]},{\"cidr\":\"203.0.113.0/24\",\"ports\":[5432]}]}");
        /* ranges: where the ports start */
        expect_net(6,
                   (enum cli_net_flag[]){CLI_NET_ALLOW_CIDR, CLI_NET_ALLOW_CIDR, CLI_NET_ALLOW_CIDR, CLI_NET_ALLOW_CIDR,
                                         CLI_NET_ALLOW_CIDR, CLI_NET_ALLOW_CIDR},
                   (const char *const[]){"198.51.100.7", "198.51.100.7:22,80", "2001:db8::/32:443", "2001:db8::1",
                                         "[2001:db8::1]:22", "2001:db8::/32"},
                   "{\"allow\":[{\"cidr\":\"198.51.100.7\"},{\"cidr\":\"198.51.100.7\",\"ports\":[22,80]},"
                   "{\"cidr\":\"2001:db8::/32\",\"ports\":[443]},{\"cidr\":\"2001:db8::1\"},"
                   "{\"cidr\":\"2001:db8::1\",\"ports\":[22]},{\"cidr\":\"2001:db8::/32\"}]}");
        expect_net(3, (enum cli_net_flag[]){CLI_NET_MODE, CLI_NET_DENY, CLI_NET_DENY_CIDR},
                   (const char *const[]){"allow-all", "gist.github.com", "198.51.100.0/24"},
                   "{\"deny\":[{\"host\":\"gist.github.com\"},{\"cidr\":\"198.51.100.0/24\"}],"
                   "\"mode\":\"allow-all\"}");
        /* what has no shape is refused here; the rest is the API's to judge */
        expect_net_error(CLI_NET_MODE, "allow_all", "--net: 'allow_all': expected allow-all, deny-all or allowlist");
        expect_net_error(CLI_NET_ALLOW, "a.org,,b.org", "--allow: 'a.org,,b.org': an empty host name");
        expect_net_error(CLI_NET_ALLOW, "", "--allow: '': an empty host name");
        expect_net_error(CLI_NET_DENY, "a.org:0", "--deny: 'a.org:0': a port is a number from 1 to 65535");
        expect_net_error(CLI_NET_ALLOW, "a.org:", "--allow: 'a.org:': a port is a number from 1 to 65535");
        expect_net_error(CLI_NET_ALLOW_CIDR, "10.0.0.0/8:65536",
                         "--allow-cidr: '10.0.0.0/8:65536': a port is a number from 1 to 65535");
        expect_net_error(CLI_NET_ALLOW_CIDR, "10.0.0.0/8:22,", "--allow-cidr: '10.0.0.0/8:22,': a port is a number from 1 "
                                                               "to 65535");
        expect_net_error(CLI_NET_DENY_CIDR, "[::1", "--deny-cidr: '[::1': expected [ADDRESS] or [ADDRESS]:PORT");
        expect_net_error(CLI_NET_DENY_CIDR, ":22", "--deny-cidr: ':22': an empty range");

        /* over the API's limit: refused whole, what came before kept */
        struct cli_net many = { 0 };
        char err[CLI_NET_ERR_MAX];
        assert_int_equal(cli_net_add(&many, CLI_NET_ALLOW, "a.org", err), 0);
        char *big = malloc(CLI_NET_RULES_MAX * 6 + 1);
        big[0] = 0;
        for (int i = 0; i < CLI_NET_RULES_MAX; i++)
                strcat(big, i ? ",b.org" : "b.org");
        assert_int_equal(cli_net_add(&many, CLI_NET_DENY, big, err), 0); /* another list */
        assert_int_equal(cli_net_add(&many, CLI_NET_ALLOW, big, err), -EINVAL);
        assert_string_equal(err, "--allow: more than 256 rules");
        assert_int_equal(json_array_size(many.allow), 1);
        free(big);
        cli_net_done(&many);

        struct cli_net twice = { 0 };
        assert_int_equal(cli_net_add(&twice, CLI_NET_MODE, "deny-all", err), 0);
        assert_int_equal(cli_net_add(&twice, CLI_NET_MODE, "allow-all", err), -EINVAL);
        assert_string_equal(err, "--net: given twice");
        cli_net_done(&twice);
}

/* Runs fn(j, f) into a string. */
static char *net_render(int (*fn)(const json_t *, FILE *), const char *json, int want_r) {
        json_t *j = json_loads(json, 0, NULL);
        assert_non_null(j);
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        assert_non_null(f);
        assert_int_equal(fn(j, f), want_r);
        fclose(f);
        json_decref(j);
        return out;
}

static void test_net_print(void **state) {
        char *s = net_render(cli_net_print,
                             "{\"mode\":\"allowlist\",\"allow\":[{\"host\":\"pypi.org\",\"ports\":[80,443]},"
                             "{\"cidr\":\"203.0.113.0/24\"}],\"deny\":[{\"host\":\"gist.github.com\"}]}",
                             0);
        assert_string_equal(s, "mode: allowlist\n"
                               "allow  host  pypi.org                        ports 80,443\n"
                               "allow  cidr  203.0.113.0/24                  all ports\n"
                               "deny   host  gist.github.com                 all ports\n");
        free(s);
        s = net_render(cli_net_print, "{\"mode\":\"deny-all\"}", 0);
        assert_string_equal(s, "mode: deny-all\n");
        free(s);
        s = net_render(cli_net_print, "{\"error\":{}}", -EBADMSG);
        free(s);

        s = net_render(cli_net_log_print,
                       "{\"entries\":[{\"ts_ms\":1700000000123,\"kind\":\"dns\",\"name\":\"e.test\",\"action\":"
                       "\"deny\",\"reason\":\"no allow rule matches\"},{\"ts_ms\":1700000001000,\"kind\":\"tcp\","
                       "\"addr\":\"2001:db8::1\",\"port\":22,\"action\":\"deny\",\"reason\":\"no allow rule "
                       "matches\"},{\"ts_ms\":1700000002000,\"kind\":\"tcp\",\"name\":\"a.test\",\"port\":443,"
                       "\"action\":\"allow\",\"reason\":\"allowed by rule allow[0]\"}]}",
                       0);
        assert_string_equal(s, "TIME                      KIND  DESTINATION       ACTION  REASON\n"
                               "2023-11-14T22:13:20.123Z  dns   e.test            deny    no allow rule matches\n"
                               "2023-11-14T22:13:21.000Z  tcp   [2001:db8::1]:22  deny    no allow rule matches\n"
                               "2023-11-14T22:13:22.000Z  tcp   a.test:443        allow   allowed by rule allow[0]\n");
        free(s);
        s = net_render(cli_net_log_print, "{\"entries\":[]}", 0);
        assert_string_equal(s, "TIME  KIND  DESTINATION  ACTION  REASON\n");
        free(s);
        s = net_render(cli_net_log_print, "{}", -EBADMSG);
        free(s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_net_flags),
                cmocka_unit_test(test_net_print),
                cmocka_unit_test(test_sse_whole),
                cmocka_unit_test(test_sse_every_chunk_size),
                cmocka_unit_test(test_sse_every_split_point),
                cmocka_unit_test(test_sse_line_endings),
                cmocka_unit_test(test_sse_cr_lf_across_chunks),
                cmocka_unit_test(test_sse_comments_and_fields),
                cmocka_unit_test(test_sse_bom_only_at_start),
                cmocka_unit_test(test_sse_unfinished_event_dropped),
                cmocka_unit_test(test_sse_max_event),
                cmocka_unit_test(test_sse_default_limit),
                cmocka_unit_test(test_sse_callback_error),
                cmocka_unit_test(test_sse_bad_args),
                cmocka_unit_test(test_kv),
                cmocka_unit_test(test_id_valid),
                cmocka_unit_test(test_endpoint),
                cmocka_unit_test(test_url_escape),
                cmocka_unit_test(test_b64_vectors),
                cmocka_unit_test(test_b64_roundtrip_binary),
                cmocka_unit_test(test_b64_invalid),
                cmocka_unit_test(test_exit_status),
                cmocka_unit_test(test_exec_args),
                cmocka_unit_test(test_exec_args_no_dashdash),
                cmocka_unit_test(test_exec_args_errors),
                cmocka_unit_test(test_client_init),
                cmocka_unit_test(test_client_unreachable),
        };
        curl_global_init(CURL_GLOBAL_DEFAULT);
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        curl_global_cleanup();
        return r;
}
