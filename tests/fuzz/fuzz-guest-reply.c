/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what airlock-node parses of the bytes a (hostile) guest agent
 * sends (src/node/guestreply.c, the UTF-8 clean-up of nodeutil.c). The
 * first byte picks the parser, the rest is what came off the channel:
 *   0  the handshake's scan for our HELLO reply among stale bytes (the
 *      second byte says how much of our reply is in the buffer yet)
 *   1  a RESULT payload, and the LIST and STAT entries, the PROCESSES
 *      list, a WATCH_EVENT and an ADOPT answer rebuilt from it
 *   2  an ERROR payload
 *   3  process output made JSON-safe UTF-8, and cut on a character boundary
 * Invariants: a reply found is a whole HELLO frame inside the buffer with
 * our nonce; no stale bytes hide our reply, also when it comes in two
 * parts and the scan dropped what it said it may; whatever entry is passed
 * on is one plain name with checked fields; an errno is one.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guestreply.h"
#include "nodeutil.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char nonce[] = "00112233445566778899aabbccddeeff";
/* what a parser must leave alone when it fails */
static char untouched[] = "untouched";

static void check_found(const uint8_t *buf, size_t len, size_t start, size_t end, json_t *msg) {
        struct proto_header h;
        assert(start + PROTO_HEADER_SIZE <= end && end <= len);
        assert(proto_header_decode(buf + start, &h) == 0);
        assert(h.type == PROTO_HELLO && h.stream == 0 && h.length == end - start - PROTO_HEADER_SIZE);
        assert(strcmp(json_string_value(json_object_get(msg, "nonce")), nonce) == 0);
        json_decref(msg);
}

static void check_hello(const uint8_t *p, size_t n) {
        if (n == 0)
                return;
        /* our reply, of which the first k bytes arrived after the stale ones */
        uint8_t reply[PROTO_HEADER_SIZE + 128];
        int jl = snprintf((char *) reply + PROTO_HEADER_SIZE, sizeof reply - PROTO_HEADER_SIZE,
                          "{\"nonce\":\"%s\",\"version\":1,\"agent\":\"fuzz\"}", nonce);
        size_t rlen = PROTO_HEADER_SIZE + (size_t) jl;
        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION, .type = PROTO_HELLO,
                                                     .length = (uint32_t) jl },
                            reply);
        size_t k = p[0] % (rlen + 1);
        p++, n--;

        size_t len = n + k, start, end, keep = SIZE_MAX;
        json_t *msg = NULL;
        uint8_t *buf = malloc(n + rlen);
        assert(buf);
        memcpy(buf, p, n);
        memcpy(buf + n, reply, k);
        if (guestreply_find_hello(buf, len, nonce, &start, &end, &msg, &keep) == 1) {
                check_found(buf, len, start, end, msg);
                free(buf);
                return;
        }
        assert(k < rlen); /* a whole reply is always found */
        assert(keep <= len);
        /* the handshake drops the bytes before keep and reads on: the rest
         * of our reply must complete a candidate it kept */
        memmove(buf, buf + keep, len - keep);
        len -= keep;
        memcpy(buf + len, reply + k, rlen - k);
        len += rlen - k;
        keep = SIZE_MAX;
        msg = NULL;
        assert(guestreply_find_hello(buf, len, nonce, &start, &end, &msg, &keep) == 1);
        check_found(buf, len, start, end, msg);
        free(buf);
}

/* An optional string field: 1..max bytes without NUL. */
static size_t check_optional_string(json_t *e, const char *key, size_t max) {
        json_t *v = json_object_get(e, key);
        if (!v)
                return 0;
        assert(json_is_string(v) && json_string_length(v) >= 1 && json_string_length(v) <= max &&
               strlen(json_string_value(v)) == json_string_length(v));
        return 1;
}

/* An entry the node passes on: exactly the checked fields. */
static void check_entry(json_t *e, bool root_ok) {
        static const char *const types[] = { "file", "dir", "symlink", "other" };
        size_t extra = 0;
        assert(json_is_object(e));
        static const char *const ids[] = { "uid", "gid" };
        for (size_t i = 0; i < 2; i++) {
                json_t *v = json_object_get(e, ids[i]);
                if (v) {
                        assert(json_is_integer(v) && json_integer_value(v) >= 0 &&
                               json_integer_value(v) <= UINT32_MAX);
                        extra++;
                }
        }
        extra += check_optional_string(e, "owner", GUESTREPLY_OWNER_MAX);
        extra += check_optional_string(e, "group", GUESTREPLY_OWNER_MAX);
        size_t target = check_optional_string(e, "symlink_target", GUESTREPLY_TARGET_MAX);
        assert(!target || strcmp(json_string_value(json_object_get(e, "type")), "symlink") == 0);
        assert(json_object_size(e) == 5 + extra + target);
        json_t *name = json_object_get(e, "name"), *type = json_object_get(e, "type");
        assert(json_is_string(name) && json_is_string(type));
        const char *nm = json_string_value(name);
        size_t len = json_string_length(name);
        assert(strlen(nm) == len);
        if (!(root_ok && strcmp(nm, "/") == 0))
                assert(len > 0 && len <= GUESTREPLY_NAME_MAX && !strchr(nm, '/') && strcmp(nm, ".") != 0 &&
                       strcmp(nm, "..") != 0);
        bool known = false;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
                known |= strcmp(json_string_value(type), types[i]) == 0;
        assert(known);
        json_t *size = json_object_get(e, "size"), *mode = json_object_get(e, "mode");
        assert(json_is_integer(size) && json_integer_value(size) >= 0);
        assert(json_is_integer(mode) && json_integer_value(mode) >= 0 && json_integer_value(mode) <= 07777);
        assert(json_is_integer(json_object_get(e, "mtime")));
        /* what the node sends on passes its own check unchanged */
        json_t *again = guestreply_entry(e, root_ok);
        assert(again && json_equal(again, e));
        json_decref(again);
}

static void check_result(const uint8_t *p, size_t n) {
        int error = 1;
        json_t *res = NULL;
        char *message = untouched;
        if (guestreply_parse(PROTO_RESULT, p, n, &error, &res, &message) < 0) {
                assert(error == 1 && !res);
                return;
        }
        assert(error == 0 && json_is_object(res) && message == untouched);
        json_int_t u = guestreply_uint(json_object_get(res, "size"), 07777, -5);
        assert(u == -5 || (u >= 0 && u <= 07777));

        json_t *stat = guestreply_entry(res, true);
        if (stat)
                check_entry(stat, true);
        json_decref(stat);

        json_t *procs = guestreply_processes(res);
        if (procs) {
                json_t *arr = json_object_get(procs, "processes");
                assert(json_is_array(arr) && json_array_size(arr) <= GUESTREPLY_PROCESSES_MAX);
                size_t i;
                json_t *pe;
                json_array_foreach(arr, i, pe) {
                        json_int_t pid = json_integer_value(json_object_get(pe, "pid"));
                        assert(pid >= 1 && pid <= GUESTREPLY_PID_MAX);
                        json_t *argv = json_object_get(pe, "argv");
                        assert(json_is_array(argv) && json_array_size(argv) >= 1 &&
                               json_array_size(argv) <= 4096);
                        const char *cwd = json_string_value(json_object_get(pe, "cwd"));
                        assert(cwd && node_path_is_valid(cwd));
                        assert(json_is_object(json_object_get(pe, "env")));
                        assert(json_is_boolean(json_object_get(pe, "pty")));
                        assert(json_is_boolean(json_object_get(pe, "attached")));
                        /* what the node passes on passes its own check unchanged */
                        json_t *again = guestreply_process(pe);
                        assert(again && json_equal(again, pe));
                        json_decref(again);
                }
                json_decref(procs);
        }

        json_t *ev = guestreply_watch_event(res);
        if (ev) {
                const char *t = json_string_value(json_object_get(ev, "type"));
                const char *nm = json_string_value(json_object_get(ev, "name"));
                assert(t);
                if (strcmp(t, "overflow") == 0)
                        assert(json_object_size(ev) == 1);
                else {
                        assert(nm && nm[0] && nm[0] != '/' && strlen(nm) <= GUESTREPLY_EVENT_NAME_MAX);
                        assert(!strstr(nm, "//") && nm[strlen(nm) - 1] != '/');
                        assert(strcmp(nm, "..") != 0 && strncmp(nm, "../", 3) != 0 && !strstr(nm, "/../"));
                }
                json_decref(ev);
        }

        /* metrics: rebuilt with exactly its seven fields, used within total */
        json_t *m = guestreply_metrics(res);
        if (m) {
                assert(json_object_size(m) == 7);
                assert(json_integer_value(json_object_get(m, "mem_used")) <=
                       json_integer_value(json_object_get(m, "mem_total")));
                assert(json_integer_value(json_object_get(m, "disk_used")) <=
                       json_integer_value(json_object_get(m, "disk_total")));
                double pct = json_number_value(json_object_get(m, "cpu_used_pct"));
                assert(pct >= 0 && pct <= 100);
                json_decref(m);
        }

        bool pty;
        uint64_t dropped;
        if (guestreply_adopt(res, 42, &pty, &dropped) == 0)
                assert(json_integer_value(json_object_get(res, "pid")) == 42 && dropped <= INT64_MAX);

        json_t *list = guestreply_list(res);
        if (list) {
                json_t *entries = json_object_get(list, "entries");
                assert(json_is_array(entries) && json_array_size(entries) <= GUESTREPLY_LIST_MAX);
                assert(json_array_size(entries) == json_array_size(json_object_get(res, "entries")) ||
                       json_is_true(json_object_get(list, "truncated")));
                size_t i;
                json_t *e;
                json_array_foreach(entries, i, e) check_entry(e, false);
                assert(json_object_size(list) == 1 + (json_object_get(list, "truncated") != NULL));
                json_decref(list);
        }
        json_decref(res);
}

static void check_error(const uint8_t *p, size_t n) {
        int error = 1;
        json_t *res = NULL;
        char *message = untouched;
        if (guestreply_parse(PROTO_ERROR, p, n, &error, &res, &message) < 0) {
                assert(error == 1 && !res && message == untouched);
                return;
        }
        assert(error <= -1 && error >= -4095 && !res);
        assert(!message || strlen(message) <= 4096);
        free(message);
}

static void check_utf8(const uint8_t *p, size_t n) {
        size_t len = SIZE_MAX;
        char *s = utf8_sanitize(p, n, &len);
        assert(s && len >= n && len <= 3 * n && s[len] == 0);
        json_t *j = json_stringn(s, len); /* jansson accepts valid UTF-8 only */
        assert(j);
        json_decref(j);
        /* valid input comes back unchanged */
        size_t len2 = 0;
        char *s2 = utf8_sanitize(s, len, &len2);
        assert(s2 && len2 == len && memcmp(s, s2, len) == 0);
        free(s2);
        size_t cut = utf8_cut(s, len, n / 2);
        assert(cut <= len && (cut <= n / 2 || len <= n / 2));
        j = json_stringn(s, cut);
        assert(j);
        json_decref(j);
        free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size == 0)
                return 0;
        const uint8_t *p = data + 1;
        size_t n = size - 1;
        switch (data[0] % 4) {
        case 0: check_hello(p, n); break;
        case 1: check_result(p, n); break;
        case 2: check_error(p, n); break;
        default: check_utf8(p, n); break;
        }
        return 0;
}
