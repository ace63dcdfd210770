/* SPDX-License-Identifier: Apache-2.0 */
#include "guestreply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "proto.h"
#include "util.h"

int guestreply_find_hello(const uint8_t *buf, size_t len, const char *nonce, size_t *ret_start, size_t *ret_end,
                          json_t **ret_msg, size_t *ret_keep_from) {
        static const uint8_t magic[4] = { 'A', 'L', 'K', '1' };
        size_t keep = len > 3 ? len - 3 : 0;
        for (size_t off = 0; off + 4 <= len;) {
                const uint8_t *p = memmem(buf + off, len - off, magic, 4);
                if (!p)
                        break;
                off = (size_t) (p - buf);
                struct proto_header h;
                if (off + PROTO_HEADER_SIZE > len) {
                        keep = MIN(keep, off);
                        break;
                }
                if (proto_header_decode(buf + off, &h) < 0 || h.type != PROTO_HELLO || h.stream != 0) {
                        off++;
                        continue;
                }
                size_t end = off + PROTO_HEADER_SIZE + h.length;
                if (end > len) {
                        keep = MIN(keep, off);
                        off++;
                        continue;
                }
                json_error_t jerr;
                json_t *m = json_loadb((const char *) buf + off + PROTO_HEADER_SIZE, h.length, 0, &jerr);
                const char *n = json_string_value(json_object_get(m, "nonce"));
                if (n && strcmp(n, nonce) == 0) {
                        *ret_start = off;
                        *ret_end = end;
                        *ret_msg = m;
                        return 1;
                }
                json_decref(m);
                off++;
        }
        *ret_keep_from = keep;
        return 0;
}

int guestreply_parse(uint8_t type, const uint8_t *payload, size_t len, int *ret_error, json_t **ret_result,
                     char **ret_message) {
        json_error_t jerr;
        json_t *m = len > 0 ? json_loadb((const char *) payload, len, JSON_REJECT_DUPLICATES, &jerr) : json_object();
        if (!m || !json_is_object(m)) {
                json_decref(m);
                return -EBADMSG;
        }
        if (type == PROTO_RESULT) {
                *ret_error = 0;
                *ret_result = m;
                return 0;
        }
        json_t *jerrno = json_object_get(m, "errno");
        json_int_t e = json_is_integer(jerrno) ? json_integer_value(jerrno) : 0;
        if (e <= 0 || e > 4095) /* not an errno we can pass on as one */
                e = EIO;
        const char *msg = json_string_value(json_object_get(m, "message"));
        *ret_message = msg ? strndup(msg, 4096) : NULL;
        *ret_error = (int) -e;
        json_decref(m);
        return 0;
}

json_int_t guestreply_uint(json_t *v, json_int_t max, json_int_t def) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
                return def;
        return json_integer_value(v);
}

json_t *guestreply_entry(json_t *e, bool root_ok) {
        static const char *const types[] = { "file", "dir", "symlink", "other" };
        json_t *name = json_object_get(e, "name"), *type = json_object_get(e, "type");
        json_t *size = json_object_get(e, "size"), *mode = json_object_get(e, "mode");
        json_t *mtime = json_object_get(e, "mtime");
        if (!json_is_string(name) || !json_is_string(type) || !json_is_integer(mtime) ||
            guestreply_uint(size, INT64_MAX, -1) < 0 || guestreply_uint(mode, 07777, -1) < 0)
                return NULL;
        const char *n = json_string_value(name);
        size_t len = json_string_length(name);
        bool root = root_ok && strcmp(n, "/") == 0;
        if (!root && (len == 0 || len > GUESTREPLY_NAME_MAX || strlen(n) != len || strchr(n, '/') ||
                      strcmp(n, ".") == 0 || strcmp(n, "..") == 0))
                return NULL;
        const char *t = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(types) && !t; i++)
                if (strcmp(json_string_value(type), types[i]) == 0)
                        t = types[i];
        if (!t)
                return NULL;
        return json_pack("{s:s, s:s, s:I, s:I, s:I}", "name", n, "type", t, "size", json_integer_value(size), "mode",
                         json_integer_value(mode), "mtime", json_integer_value(mtime));
}

json_t *guestreply_list(json_t *res) {
        json_t *entries = json_object_get(res, "entries");
        if (!json_is_array(entries))
                return NULL;
        _cleanup_(json_decrefp) json_t *out = json_object(), *arr = json_array();
        if (!out || !arr)
                return NULL;
        bool truncated = json_is_true(json_object_get(res, "truncated")) ||
                         json_array_size(entries) > GUESTREPLY_LIST_MAX;
        for (size_t i = 0; i < json_array_size(entries) && i < GUESTREPLY_LIST_MAX; i++) {
                json_t *e = guestreply_entry(json_array_get(entries, i), false);
                if (!e || json_array_append_new(arr, e) < 0)
                        return NULL;
        }
        if (json_object_set_new(out, "entries", TAKE_PTR(arr)) < 0 ||
            (truncated && json_object_set_new(out, "truncated", json_true()) < 0))
                return NULL;
        return TAKE_PTR(out);
}
