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

/* A JSON string of min..max bytes without NUL (jansson allows "\u0000"). */
static bool string_ok(json_t *v, size_t min, size_t max) {
        if (!json_is_string(v))
                return false;
        size_t n = json_string_length(v);
        return n >= min && n <= max && strlen(json_string_value(v)) == n;
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
        _cleanup_(json_decrefp) json_t *out = json_pack(
                "{s:s, s:s, s:I, s:I, s:I}", "name", n, "type", t, "size", json_integer_value(size), "mode",
                json_integer_value(mode), "mtime", json_integer_value(mtime));
        if (!out)
                return NULL;
        /* what a newer agent adds: each checked when present */
        static const struct {
                const char *key;
                uint64_t max;
        } ints[] = {{"uid", UINT32_MAX}, {"gid", UINT32_MAX}, {"atime", INT64_MAX}, {"ctime", INT64_MAX}};
        for (size_t i = 0; i < ARRAY_SIZE(ints); i++) {
                json_t *v = json_object_get(e, ints[i].key);
                if (!v)
                        continue;
                if (guestreply_uint(v, ints[i].max, -1) < 0 || json_object_set(out, ints[i].key, v) < 0)
                        return NULL;
        }
        static const struct {
                const char *key;
                size_t max;
        } strs[] = { { "owner", GUESTREPLY_OWNER_MAX },
                     { "group", GUESTREPLY_OWNER_MAX },
                     { "symlink_target", GUESTREPLY_TARGET_MAX } };
        for (size_t i = 0; i < ARRAY_SIZE(strs); i++) {
                json_t *v = json_object_get(e, strs[i].key);
                if (!v)
                        continue;
                if (!string_ok(v, 1, strs[i].max))
                        return NULL;
                /* a target on a file would be a lie the client may follow */
                if (strcmp(strs[i].key, "symlink_target") == 0 && strcmp(t, "symlink") != 0)
                        continue;
                if (json_object_set(out, strs[i].key, v) < 0)
                        return NULL;
        }
        return TAKE_PTR(out);
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

/* Limits of what a process entry may hold: those of EXEC's own fields. */
#define PROCESS_ARGV_MAX 4096
#define PROCESS_ENV_MAX 4096
#define PROCESS_STRING_MAX (128u << 10)
#define PROCESS_TAG_MAX 256

/* An optional boolean member: absent false, else it must be one. */
static int bool_field(json_t *e, const char *key, bool *ret) {
        json_t *v = json_object_get(e, key);
        if (!v) {
                *ret = false;
                return 0;
        }
        if (!json_is_boolean(v))
                return -EBADMSG;
        *ret = json_is_true(v);
        return 0;
}

json_t *guestreply_process(json_t *e) {
        json_t *pid = json_object_get(e, "pid"), *argv = json_object_get(e, "argv"),
               *env = json_object_get(e, "env");
        json_t *cwd = json_object_get(e, "cwd"), *tag = json_object_get(e, "tag");
        bool pty, attached, truncated;
        if (!json_is_object(e) || guestreply_uint(pid, GUESTREPLY_PID_MAX, 0) < 1 || !json_is_array(argv) ||
            json_array_size(argv) < 1 || json_array_size(argv) > PROCESS_ARGV_MAX || !json_is_object(env) ||
            json_object_size(env) > PROCESS_ENV_MAX || !string_ok(cwd, 1, PATH_SAFE_MAX) ||
            path_check(json_string_value(cwd), json_string_length(cwd)) < 0 ||
            (tag && !string_ok(tag, 0, PROCESS_TAG_MAX)) || bool_field(e, "pty", &pty) < 0 ||
            bool_field(e, "attached", &attached) < 0 || bool_field(e, "truncated", &truncated) < 0)
                return NULL;
        size_t i;
        json_t *v;
        json_array_foreach(argv, i, v) {
                if (!string_ok(v, 0, PROCESS_STRING_MAX))
                        return NULL;
        }
        const char *k;
        json_object_foreach(env, k, v) {
                size_t kl = strlen(k);
                if (kl == 0 || kl > PROCESS_STRING_MAX || strchr(k, '=') ||
                    !string_ok(v, 0, PROCESS_STRING_MAX))
                        return NULL;
        }
        _cleanup_(json_decrefp) json_t *out =
                json_pack("{s:I, s:O, s:O, s:O, s:b, s:b}", "pid", json_integer_value(pid), "argv", argv,
                          "cwd", cwd, "env", env, "pty", pty, "attached", attached);
        if (!out || (tag && json_object_set(out, "tag", tag) < 0) ||
            (truncated && json_object_set_new(out, "truncated", json_true()) < 0))
                return NULL;
        return TAKE_PTR(out);
}

json_t *guestreply_processes(json_t *res) {
        json_t *list = json_object_get(res, "processes");
        if (!json_is_array(list) || json_array_size(list) > GUESTREPLY_PROCESSES_MAX)
                return NULL;
        _cleanup_(json_decrefp) json_t *arr = json_array();
        if (!arr)
                return NULL;
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
                json_t *p = guestreply_process(e);
                if (!p || json_array_append_new(arr, p) < 0)
                        return NULL;
                /* a pid names one process: the node looks sessions up by it */
                json_int_t pid = json_integer_value(json_object_get(p, "pid"));
                for (size_t k = 0; k < i; k++)
                        if (json_integer_value(json_object_get(json_array_get(arr, k), "pid")) == pid)
                                return NULL;
        }
        return json_pack("{s:O}", "processes", arr);
}

/* A path below a watched directory: relative, components non-empty and
 * neither "." nor "..". */
static bool relative_path_ok(const char *p) {
        for (;;) {
                size_t n = strcspn(p, "/");
                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (!p[n])
                        return true;
                p += n + 1;
        }
}

json_t *guestreply_watch_event(json_t *ev) {
        static const char *const types[] = { "create", "write", "remove", "rename", "chmod" };
        json_t *type = json_object_get(ev, "type"), *name = json_object_get(ev, "name");
        if (!json_is_string(type))
                return NULL;
        if (strcmp(json_string_value(type), "overflow") == 0)
                return json_pack("{s:s}", "type", "overflow");
        const char *t = NULL;
        for (size_t i = 0; i < ARRAY_SIZE(types) && !t; i++)
                if (strcmp(json_string_value(type), types[i]) == 0)
                        t = types[i];
        if (!t || !string_ok(name, 1, GUESTREPLY_EVENT_NAME_MAX) ||
            !relative_path_ok(json_string_value(name)))
                return NULL;
        return json_pack("{s:O, s:s}", "name", name, "type", t);
}

json_t *guestreply_metrics(json_t *res) {
        json_t *pct = json_object_get(res, "cpu_used_pct");
        json_int_t cpus = guestreply_uint(json_object_get(res, "cpu_count"), 4096, -1);
        json_int_t mt = guestreply_uint(json_object_get(res, "mem_total"), INT64_MAX, -1);
        json_int_t mu = guestreply_uint(json_object_get(res, "mem_used"), INT64_MAX, -1);
        json_int_t mc = guestreply_uint(json_object_get(res, "mem_cache"), INT64_MAX, -1);
        json_int_t dt = guestreply_uint(json_object_get(res, "disk_total"), INT64_MAX, -1);
        json_int_t du = guestreply_uint(json_object_get(res, "disk_used"), INT64_MAX, -1);
        if (!json_is_number(pct) || json_number_value(pct) < 0 || json_number_value(pct) > 100 || cpus < 1 ||
            mt < 0 || mu < 0 || mu > mt || mc < 0 || mc > mt || dt < 0 || du < 0 || du > dt)
                return NULL;
        return json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "cpu_count", cpus, "cpu_used_pct",
                         json_number_value(pct), "mem_total", mt, "mem_used", mu, "mem_cache", mc, "disk_total", dt,
                         "disk_used", du);
}

int guestreply_adopt(json_t *res, long long pid, bool *ret_pty, uint64_t *ret_dropped) {
        json_t *dropped = json_object_get(res, "dropped");
        bool pty;
        if (guestreply_uint(json_object_get(res, "pid"), GUESTREPLY_PID_MAX, 0) != pid ||
            bool_field(res, "pty", &pty) < 0 || (dropped && guestreply_uint(dropped, INT64_MAX, -1) < 0))
                return -EBADMSG;
        *ret_pty = pty;
        *ret_dropped = dropped ? (uint64_t) json_integer_value(dropped) : 0;
        return 0;
}
