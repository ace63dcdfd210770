/* SPDX-License-Identifier: Apache-2.0 */
#include "request.h"
#include "util.h"

#include <errno.h>
#include <string.h>

#include "macros.h"
#include "proto.h"

#define GUEST_MAX_SANDBOX_ID 256u

void guest_strv_free(char **v) {
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

size_t guest_strv_length(char *const *v) {
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

int guest_path_validate(const char *path) {
        if (!path)
                return -EINVAL;
        return path_check(path, strnlen(path, GUEST_MAX_PATH + 1)) < 0 ? -EINVAL : 0;
}

int guest_json_parse(const void *payload, size_t len, json_t **ret) {
        if (!payload && len > 0)
                return -EINVAL;
        json_t *j = json_loadb(payload ? payload : "", len, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
                return -EINVAL;
        if (!json_is_object(j)) {
                json_decref(j);
                return -EINVAL;
        }
        *ret = j;
        return 0;
}

int guest_json_check(const void *payload, size_t len) {
        json_t *j = NULL;
        int r = guest_json_parse(payload, len, &j);
        json_decref(j);
        return r;
}

/* Validates a JSON string: at most max bytes and no embedded NUL (jansson
 * allows "\u0000", C strings do not). Returns its C string or NULL. */
static const char *json_string_checked(const json_t *v, size_t max) {
        if (!json_is_string(v))
                return NULL;
        size_t n = json_string_length(v);
        const char *s = json_string_value(v);
        if (n > max || strlen(s) != n)
                return NULL;
        return s;
}

/* Reads an optional string member into a fresh copy (*ret untouched when the
 * key is absent). -EINVAL when present but not a valid string. */
static int get_string(json_t *obj, const char *key, size_t max, char **ret) {
        json_t *v = json_object_get(obj, key);
        if (!v || json_is_null(v))
                return 0;
        const char *s = json_string_checked(v, max);
        if (!s)
                return -EINVAL;
        char *c = strdup(s);
        if (!c)
                return -ENOMEM;
        free(*ret);
        *ret = c;
        return 1;
}

/* Reads an optional unsigned integer member bounded by max. Returns 1 when
 * present, 0 when absent, -EINVAL when wrong. */
static int get_uint(json_t *obj, const char *key, uint64_t max, uint64_t *ret) {
        json_t *v = json_object_get(obj, key);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_integer(v))
                return -EINVAL;
        json_int_t i = json_integer_value(v);
        if (i < 0 || (uint64_t) i > max)
                return -EINVAL;
        *ret = (uint64_t) i;
        return 1;
}

/* Reads an optional boolean member; absent keeps *ret. */
static int get_bool(json_t *obj, const char *key, bool *ret) {
        json_t *v = json_object_get(obj, key);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return -EINVAL;
        *ret = json_is_true(v);
        return 1;
}

int guest_hello_parse(const void *payload, size_t len, char **ret_nonce) {
        _cleanup_json_ json_t *j = NULL;
        _cleanup_free_ char *nonce = NULL;
        uint64_t version = PROTO_VERSION;
        int r;

        r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_string(j, "nonce", GUEST_MAX_NONCE, &nonce);
        if (r < 0)
                return r;
        if (r == 0 && !(nonce = strdup("")))
                return -ENOMEM;
        json_t *v = json_object_get(j, "version");
        if (v && !json_is_integer(v))
                return -EINVAL;
        r = get_uint(j, "version", UINT32_MAX, &version);
        if (r < 0)
                return -EPROTONOSUPPORT;
        if (version != PROTO_VERSION)
                return -EPROTONOSUPPORT;
        *ret_nonce = TAKE_PTR(nonce);
        return 0;
}

json_t *guest_features_json(void) {
        /* an older agent ignores an EXEC (or file request's) "user" it does
         * not know and would run it as root, so the host must be able to tell */
        return json_pack("[s,s,s,s,s,s,s,s]", "user", "processes", "watch", "metrics", "files_user",
                         "upgrade", "volumes", "files_root");
}

int guest_volume_mount_parse(const void *payload, size_t len, struct guest_volume_mount *ret) {
        _cleanup_json_ json_t *j = NULL;
        _cleanup_free_ char *path = NULL;
        uint64_t slot = UINT64_MAX, wait_ms = GUEST_VOLUME_WAIT_MS_DEFAULT;
        bool read_only = false;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        if (get_uint(j, "slot", GUEST_VOLUME_SLOTS - 1, &slot) <= 0)
                return -EINVAL;
        r = get_string(j, "path", GUEST_MAX_PATH, &path);
        if (r <= 0 || guest_path_validate(path) < 0 || !proto_volume_path_is_allowed(path))
                return -EINVAL;
        if ((r = get_bool(j, "read_only", &read_only)) < 0)
                return r;
        if ((r = get_uint(j, "wait_ms", GUEST_VOLUME_WAIT_MS_MAX, &wait_ms)) < 0)
                return r;
        ret->slot = (unsigned) slot;
        ret->path = TAKE_PTR(path);
        ret->read_only = read_only;
        ret->wait_ms = wait_ms;
        return 0;
}

int guest_upgrade_parse(const void *payload, size_t len, char **ret_path, int64_t *ret_idle_ms) {
        _cleanup_json_ json_t *j = NULL;
        _cleanup_free_ char *path = NULL;
        uint64_t idle = UINT64_MAX;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_string(j, "path", GUEST_MAX_PATH, &path);
        if (r <= 0 || guest_path_validate(path) < 0)
                return -EINVAL;
        /* a year at most: an idle time, not a date */
        r = get_uint(j, "idle_ms", 366ULL * 86400 * 1000, &idle);
        if (r < 0)
                return r;
        *ret_path = TAKE_PTR(path);
        *ret_idle_ms = r == 0 ? -1 : (int64_t) idle;
        return 0;
}

json_t *guest_blob_add(struct guest_blob *b, const void *data, size_t n) {
        if (b->len + n > b->cap) {
                size_t cap = MAX(b->cap * 2, b->len + n);
                uint8_t *d = realloc(b->data, MAX(cap, (size_t) 1));
                if (!d)
                        return NULL;
                b->data = d;
                b->cap = cap;
        }
        if (n)
                memcpy(b->data + b->len, data, n);
        json_t *ref = json_pack("{s:I,s:I}", "off", (json_int_t) b->len, "len", (json_int_t) n);
        b->len += n;
        return ref;
}

int guest_blob_get(const uint8_t *data, size_t size, json_t *ref, size_t max, const uint8_t **ret,
                   size_t *ret_len) {
        json_int_t off, n;
        if (json_unpack(ref, "{s:I,s:I!}", "off", &off, "len", &n) < 0 || off < 0 || n < 0 ||
            (uint64_t) n > max || (uint64_t) off > size || (uint64_t) n > size - (uint64_t) off)
                return -EINVAL;
        *ret = data + off;
        *ret_len = (size_t) n;
        return 0;
}

void guest_blob_release(struct guest_blob *b) {
        free(b->data);
        *b = (struct guest_blob){0};
}

/* A key of an environment entry: non-empty, no '=' (NUL is excluded by the
 * caller's length check). */
static bool env_key_is_valid(const char *k) {
        return k[0] != 0 && !strchr(k, '=') && strlen(k) <= GUEST_MAX_STRING;
}

int guest_env_from_json(json_t *obj, char ***ret) {
        if (!json_is_object(obj))
                return -EINVAL;
        size_t n = json_object_size(obj);
        if (n > GUEST_MAX_ENV)
                return -E2BIG;
        _cleanup_(guest_strv_freep) char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        size_t i = 0;
        const char *key;
        json_t *val;
        json_object_foreach(obj, key, val) {
                const char *s = json_string_checked(val, GUEST_MAX_STRING);
                if (!s || !env_key_is_valid(key))
                        return -EINVAL;
                size_t kl = strlen(key), vl = strlen(s);
                char *e = malloc(kl + 1 + vl + 1);
                if (!e)
                        return -ENOMEM;
                memcpy(e, key, kl);
                e[kl] = '=';
                memcpy(e + kl + 1, s, vl + 1);
                v[i++] = e;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

void guest_identity_free(struct guest_identity *id) {
        if (!id)
                return;
        free(id->sandbox_id);
        free(id->hostname);
        guest_strv_free(id->env);
        free(id);
}

/* A hostname the kernel and resolvers accept: 1..64 bytes of letters,
 * digits, '-' and '.'. */
static bool hostname_is_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > GUEST_MAX_HOSTNAME)
                return false;
        for (const char *p = s; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '-' || *p == '.'))
                        return false;
        return true;
}

/* A sandbox id is written into a file: printable ASCII without spaces. */
static bool sandbox_id_is_valid(const char *s) {
        if (!s[0])
                return false;
        for (const char *p = s; *p; p++)
                if (*p <= ' ' || *p > '~' || *p == '/')
                        return false;
        return true;
}

static int hex_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int guest_identity_parse(const void *payload, size_t len, struct guest_identity **ret) {
        _cleanup_json_ json_t *j = NULL;
        _cleanup_(guest_identity_freep) struct guest_identity *id = NULL;
        _cleanup_free_ char *seed = NULL;
        int r;

        r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        id = calloc(1, sizeof *id);
        if (!id)
                return -ENOMEM;
        r = get_string(j, "sandbox_id", GUEST_MAX_SANDBOX_ID, &id->sandbox_id);
        if (r < 0)
                return r;
        if (id->sandbox_id && !sandbox_id_is_valid(id->sandbox_id))
                return -EINVAL;
        r = get_string(j, "hostname", GUEST_MAX_HOSTNAME, &id->hostname);
        if (r < 0)
                return r;
        if (id->hostname && !hostname_is_valid(id->hostname))
                return -EINVAL;
        json_t *env = json_object_get(j, "env");
        if (env && !json_is_null(env)) {
                r = guest_env_from_json(env, &id->env);
                if (r < 0)
                        return r;
        }
        r = get_uint(j, "time_ns", INT64_MAX, &id->time_ns);
        if (r < 0)
                return r;
        id->has_time = r > 0;
        r = get_string(j, "seed", 2 * GUEST_SEED_SIZE, &seed);
        if (r < 0)
                return r;
        if (seed) {
                if (strlen(seed) != 2 * GUEST_SEED_SIZE)
                        return -EINVAL;
                for (size_t i = 0; i < GUEST_SEED_SIZE; i++) {
                        int hi = hex_value(seed[2 * i]), lo = hex_value(seed[2 * i + 1]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        id->seed[i] = (uint8_t) (hi << 4 | lo);
                }
                id->has_seed = true;
        }
        *ret = TAKE_PTR(id);
        return 0;
}

void guest_exec_request_free(struct guest_exec_request *req) {
        if (!req)
                return;
        guest_strv_free(req->argv);
        guest_strv_free(req->env);
        free(req->cwd);
        free(req->user);
        free(req->tag);
        free(req);
}

bool guest_user_name_is_valid(const char *name) {
        return user_name_is_valid(name);
}

/* argv: a JSON array of 1..GUEST_MAX_ARGV strings. */
static int argv_from_json(json_t *arr, char ***ret) {
        if (!json_is_array(arr))
                return -EINVAL;
        size_t n = json_array_size(arr);
        if (n == 0)
                return -EINVAL;
        if (n > GUEST_MAX_ARGV)
                return -E2BIG;
        _cleanup_(guest_strv_freep) char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const char *s = json_string_checked(json_array_get(arr, i), GUEST_MAX_STRING);
                if (!s)
                        return -EINVAL;
                if (!(v[i] = strdup(s)))
                        return -ENOMEM;
        }
        if (v[0][0] == 0)
                return -EINVAL;
        *ret = TAKE_PTR(v);
        return 0;
}

int guest_exec_request_parse(const void *payload, size_t len, struct guest_exec_request **ret) {
        _cleanup_json_ json_t *j = NULL;
        _cleanup_(guest_exec_request_freep) struct guest_exec_request *req = NULL;
        uint64_t u;
        int r;

        r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        req = calloc(1, sizeof *req);
        if (!req)
                return -ENOMEM;
        *req = (struct guest_exec_request){ .rows = 24, .cols = 80 };

        r = argv_from_json(json_object_get(j, "argv"), &req->argv);
        if (r < 0)
                return r;
        json_t *env = json_object_get(j, "env");
        if (env && !json_is_null(env))
                r = guest_env_from_json(env, &req->env);
        else
                r = (req->env = calloc(1, sizeof(char *))) ? 0 : -ENOMEM;
        if (r < 0)
                return r;
        r = get_string(j, "cwd", GUEST_MAX_PATH, &req->cwd);
        if (r < 0)
                return r;
        req->has_cwd = r > 0;
        if (!req->cwd && !(req->cwd = strdup("/")))
                return -ENOMEM;
        if (guest_path_validate(req->cwd) < 0)
                return -EINVAL;
        /* (uid_t) -1 means "unchanged" to setuid-like calls: refuse it */
        r = get_uint(j, "uid", UINT32_MAX - 1, &u);
        if (r < 0)
                return r;
        req->has_uid = r > 0;
        req->uid = req->has_uid ? (uint32_t) u : 0;
        r = get_uint(j, "gid", UINT32_MAX - 1, &u);
        if (r < 0)
                return r;
        req->has_gid = r > 0;
        req->gid = req->has_gid ? (uint32_t) u : 0;
        /* a user brings its own uid, gid and groups: both at once is a
         * contradiction, not a choice */
        r = get_string(j, "user", GUEST_MAX_USER, &req->user);
        if (r < 0)
                return r;
        if (req->user && (!guest_user_name_is_valid(req->user) || req->has_uid || req->has_gid))
                return -EINVAL;
        r = get_string(j, "tag", GUEST_MAX_TAG, &req->tag);
        if (r < 0)
                return r;
        r = get_bool(j, "pty", &req->pty);
        if (r < 0)
                return r;
        r = get_uint(j, "rows", UINT16_MAX, &u);
        if (r < 0)
                return r;
        if (r > 0 && u > 0)
                req->rows = (uint16_t) u;
        r = get_uint(j, "cols", UINT16_MAX, &u);
        if (r < 0)
                return r;
        if (r > 0 && u > 0)
                req->cols = (uint16_t) u;
        *ret = TAKE_PTR(req);
        return 0;
}

int guest_adopt_parse(const void *payload, size_t len, int32_t *ret_pid) {
        _cleanup_json_ json_t *j = NULL;
        uint64_t pid;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_uint(j, "pid", INT32_MAX, &pid);
        if (r <= 0 || pid == 0)
                return -EINVAL;
        *ret_pid = (int32_t) pid;
        return 0;
}

/* Length of the longest prefix of s (valid UTF-8) of at most max bytes
 * that ends on a character boundary. */
static size_t utf8_prefix(const char *s, size_t max) {
        size_t n = strnlen(s, max + 1);
        if (n <= max)
                return n;
        n = max;
        while (n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80)
                n--;
        return n;
}

static json_t *string_cut(const char *s, size_t max) {
        return json_stringn(s, utf8_prefix(s, max));
}

json_t *guest_process_info(const struct guest_exec_request *req, const char *cwd) {
        _cleanup_json_ json_t *argv = json_array(), *env = json_object();
        if (!argv || !env)
                return NULL;
        for (char **a = req->argv; *a; a++)
                if (json_array_append_new(argv, json_string(*a)) < 0)
                        return NULL;
        for (char **e = req->env; *e; e++) {
                const char *eq = strchr(*e, '=');
                _cleanup_free_ char *key = eq ? strndup(*e, (size_t) (eq - *e)) : NULL;
                if (!key || json_object_set_new(env, key, json_string(eq + 1)) < 0)
                        return NULL;
        }
        json_t *info =
                json_pack("{s:O, s:s, s:O, s:b}", "argv", argv, "cwd", cwd, "env", env, "pty", req->pty);
        if (info && req->tag && json_object_set_new(info, "tag", json_string(req->tag)) < 0) {
                json_decref(info);
                return NULL;
        }
        return info;
}

static size_t json_size(json_t *j) {
        return json_dumpb(j, NULL, 0, JSON_COMPACT);
}

/* info with every argv and env string cut to limit bytes, the first
 * max_argv argv entries (env only with keep_env) and cwd cut to at most
 * cwd_max bytes at a '/' (its components are whole, so none becomes ".."). */
static json_t *info_cut(json_t *info, size_t limit, size_t max_argv, bool keep_env, size_t cwd_max) {
        json_t *argv = json_object_get(info, "argv"), *env = json_object_get(info, "env");
        const char *cwd = json_string_value(json_object_get(info, "cwd")) ?: "/";
        _cleanup_json_ json_t *o = json_object(), *na = json_array(), *ne = json_object();
        size_t i;
        json_t *v;
        const char *k;

        if (!o || !na || !ne)
                return NULL;
        json_array_foreach(argv, i, v) {
                if (i >= max_argv)
                        break;
                if (json_array_append_new(na, string_cut(json_string_value(v) ?: "", limit)) < 0)
                        return NULL;
        }
        if (keep_env) {
                json_object_foreach(env, k, v) {
                        if (json_object_set_new(ne, k, string_cut(json_string_value(v) ?: "", limit)) < 0)
                                return NULL;
                }
        }
        size_t cl = strlen(cwd);
        if (cl > cwd_max) {
                cl = cwd_max;
                while (cl > 1 && cwd[cl] != '/')
                        cl--;
        }
        if (json_object_set_new(o, "argv", TAKE_PTR(na)) < 0 ||
            json_object_set_new(o, "env", TAKE_PTR(ne)) < 0 ||
            json_object_set_new(o, "cwd", json_stringn(cwd, MAX(cl, (size_t) 1))) < 0 ||
            json_object_set(o, "pty", json_object_get(info, "pty") ?: json_false()) < 0 ||
            json_object_set_new(o, "truncated", json_true()) < 0)
                return NULL;
        json_t *tag = json_object_get(info, "tag");
        if (tag && json_object_set(o, "tag", tag) < 0)
                return NULL;
        return TAKE_PTR(o);
}

json_t *guest_process_info_fit(json_t *info, size_t max) {
        if (json_size(info) <= max)
                return json_incref(info);
        size_t n_argv = json_array_size(json_object_get(info, "argv"));
        /* shorter strings first, then fewer entries, then a shorter cwd */
        for (size_t limit = 4096;; limit /= 2) {
                json_t *o = info_cut(info, limit, n_argv, true, GUEST_MAX_PATH);
                if (!o || json_size(o) <= max)
                        return o;
                json_decref(o);
                if (limit == 0)
                        break;
        }
        for (size_t k = n_argv; k > 0; k /= 2) {
                json_t *o = info_cut(info, 0, k, false, GUEST_MAX_PATH);
                if (!o || json_size(o) <= max)
                        return o;
                json_decref(o);
        }
        return info_cut(info, 0, 1, false, 255);
}

int guest_signal_parse(const void *payload, size_t len, int *ret_signal) {
        _cleanup_json_ json_t *j = NULL;
        uint64_t sig;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_uint(j, "signal", 64, &sig);
        if (r <= 0 || sig == 0)
                return -EINVAL;
        *ret_signal = (int) sig;
        return 0;
}

int guest_resize_parse(const void *payload, size_t len, uint16_t *ret_rows, uint16_t *ret_cols) {
        _cleanup_json_ json_t *j = NULL;
        uint64_t rows, cols;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        if (get_uint(j, "rows", UINT16_MAX, &rows) <= 0 || get_uint(j, "cols", UINT16_MAX, &cols) <= 0)
                return -EINVAL;
        if (rows == 0 || cols == 0)
                return -EINVAL;
        *ret_rows = (uint16_t) rows;
        *ret_cols = (uint16_t) cols;
        return 0;
}

int guest_file_end_parse(const void *payload, size_t len, bool *ret_abort) {
        _cleanup_json_ json_t *j = NULL;
        bool abort_ = false;
        int r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_bool(j, "abort", &abort_);
        if (r < 0)
                return r;
        *ret_abort = abort_;
        return 0;
}

void guest_path_request_release(struct guest_path_request *req) {
        if (!req)
                return;
        free(req->path);
        free(req->to);
        free(req->user);
        free(req->root);
        *req = (struct guest_path_request){ 0 };
}

/* Reads a required path member and validates it. */
static int get_path(json_t *obj, const char *key, char **ret) {
        _cleanup_free_ char *p = NULL;
        int r = get_string(obj, key, GUEST_MAX_PATH, &p);
        if (r < 0)
                return r;
        if (r == 0 || guest_path_validate(p) < 0)
                return -EINVAL;
        *ret = TAKE_PTR(p);
        return 0;
}

int guest_path_request_parse(uint8_t type, const void *payload, size_t len, struct guest_path_request *ret) {
        _cleanup_json_ json_t *j = NULL;
        struct guest_path_request req = {.mode = GUEST_DEFAULT_FILE_MODE, .uid = -1, .gid = -1};
        uint64_t mode, id;
        int r;

        switch (type) {
        case PROTO_FILE_READ:
        case PROTO_FILE_WRITE:
        case PROTO_LIST:
        case PROTO_STAT:
        case PROTO_RENAME:
        case PROTO_REMOVE:
        case PROTO_MKDIR:
        case PROTO_SETATTR:
        case PROTO_WATCH: break;
        default: return -EOPNOTSUPP;
        }
        r = guest_json_parse(payload, len, &j);
        if (r < 0)
                return r;
        r = get_path(j, type == PROTO_RENAME ? "from" : "path", &req.path);
        if (r < 0)
                goto fail;
        if (type == PROTO_RENAME) {
                r = get_path(j, "to", &req.to);
                if (r < 0)
                        goto fail;
        }
        if (type == PROTO_FILE_WRITE || type == PROTO_SETATTR) {
                r = get_uint(j, "mode", 07777, &mode);
                if (r < 0)
                        goto fail;
                if (r > 0)
                        req.mode = (uint32_t) mode;
                req.has_mode = r > 0;
        }
        if (type == PROTO_SETATTR) {
                /* (uid_t) -1 means "unchanged" to chown(): not an id to ask for */
                if ((r = get_uint(j, "uid", UINT32_MAX - 1, &id)) < 0)
                        goto fail;
                req.uid = r > 0 ? (int64_t) id : -1;
                if ((r = get_uint(j, "gid", UINT32_MAX - 1, &id)) < 0)
                        goto fail;
                req.gid = r > 0 ? (int64_t) id : -1;
        }
        if (json_object_get(j, "root")) {
                r = type == PROTO_WATCH ? -EINVAL : get_path(j, "root", &req.root);
                if (r < 0)
                        goto fail;
        }
        if (type == PROTO_REMOVE || type == PROTO_MKDIR || type == PROTO_WATCH) {
                r = get_bool(j, type == PROTO_MKDIR ? "parents" : "recursive", &req.flag);
                if (r < 0)
                        goto fail;
        }
        r = get_string(j, "user", GUEST_MAX_USER, &req.user);
        if (r < 0)
                goto fail;
        if (req.user && !guest_user_name_is_valid(req.user)) {
                r = -EINVAL;
                goto fail;
        }
        *ret = req;
        return 0;
fail:
        guest_path_request_release(&req);
        return r;
}

/* Looks an environment key up in v: index of "key=..." or -1. */
static ssize_t env_find(char *const *v, size_t n, const char *entry) {
        size_t kl = strcspn(entry, "=");
        for (size_t i = 0; i < n; i++)
                if (strncmp(v[i], entry, kl) == 0 && v[i][kl] == '=')
                        return (ssize_t) i;
        return -1;
}

/* Adds (or replaces) a copy of entry ("K=V") in v, which has room. */
static int env_put(char **v, size_t *n, const char *entry, bool replace) {
        ssize_t i = env_find(v, *n, entry);
        if (i >= 0 && !replace)
                return 0;
        char *c = strdup(entry);
        if (!c)
                return -ENOMEM;
        if (i >= 0) {
                free(v[i]);
                v[i] = c;
        } else
                v[(*n)++] = c;
        return 0;
}

int guest_env_merge(char *const *base, char *const *overlay, const char *home, char ***ret) {
        size_t nb = guest_strv_length(base), no = guest_strv_length(overlay), n = 0;
        _cleanup_(guest_strv_freep) char **v = calloc(nb + no + 3, sizeof(char *));
        _cleanup_free_ char *home_entry = NULL;
        int r;

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < nb; i++)
                if (strchr(base[i], '=') && (r = env_put(v, &n, base[i], true)) < 0)
                        return r;
        for (size_t i = 0; i < no; i++)
                if (strchr(overlay[i], '=') && (r = env_put(v, &n, overlay[i], true)) < 0)
                        return r;
        r = env_put(v, &n, "PATH=" GUEST_DEFAULT_PATH, false);
        if (r < 0)
                return r;
        if (home) {
                size_t hl = strlen(home);
                home_entry = malloc(5 + hl + 1);
                if (!home_entry)
                        return -ENOMEM;
                memcpy(home_entry, "HOME=", 5);
                memcpy(home_entry + 5, home, hl + 1);
                r = env_put(v, &n, home_entry, false);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_sequence_length(const unsigned char *s, size_t n) {
        unsigned char c = s[0];
        size_t len;
        uint32_t cp;

        if (c >= 0x01 && c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4, cp = c & 0x07;
        else
                return 0;
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

int guest_utf8_sanitize(const char *s, size_t n, char **ret) {
        if (n > SIZE_MAX / 3 - 1)
                return -ENOMEM;
        char *out = malloc(3 * n + 1), *o = out;
        if (!out)
                return -ENOMEM;
        const unsigned char *p = (const unsigned char *) s;
        for (size_t i = 0; i < n;) {
                size_t k = utf8_sequence_length(p + i, n - i);
                if (k == 0) {
                        memcpy(o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                } else {
                        memcpy(o, p + i, k);
                        o += k;
                        i += k;
                }
        }
        *o = 0;
        *ret = out;
        return 0;
}

int guest_json_dump(json_t *obj, size_t max, char **ret, size_t *ret_len) {
        char *s = json_dumps(obj, JSON_COMPACT);
        if (!s)
                return -ENOMEM;
        size_t n = strlen(s);
        if (n > max) {
                free(s);
                return -EMSGSIZE;
        }
        *ret = s;
        *ret_len = n;
        return 0;
}
