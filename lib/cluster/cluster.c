/* SPDX-License-Identifier: Apache-2.0 */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static bool all_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

int cluster_token_parse(const char *s, struct cluster_token *ret) {
        if (!s)
                return -EINVAL;
        while (isspace((unsigned char) *s))
                s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char) s[n - 1]))
                n--;
        const size_t pre = sizeof CLUSTER_TOKEN_PREFIX - 1;
        const size_t want = pre + 1 + 64 + 1 + CLUSTER_TOKEN_ID_HEX + 1 + CLUSTER_TOKEN_SECRET_HEX;
        if (n != want || memcmp(s, CLUSTER_TOKEN_PREFIX "-", pre + 1) != 0)
                return -EINVAL;
        const char *d = s + pre + 1, *id = d + 65, *secret = id + CLUSTER_TOKEN_ID_HEX + 1;
        if (d[64] != '-' || id[CLUSTER_TOKEN_ID_HEX] != '-' || !all_hex(d, 64) || !all_hex(id, CLUSTER_TOKEN_ID_HEX) ||
            !all_hex(secret, CLUSTER_TOKEN_SECRET_HEX))
                return -EINVAL;
        struct cluster_token t;
        memcpy(t.ca_digest, d, 64);
        t.ca_digest[64] = 0;
        memcpy(t.id, id, CLUSTER_TOKEN_ID_HEX);
        t.id[CLUSTER_TOKEN_ID_HEX] = 0;
        memcpy(t.secret, secret, CLUSTER_TOKEN_SECRET_HEX);
        t.secret[CLUSTER_TOKEN_SECRET_HEX] = 0;
        *ret = t;
        return 0;
}

void cluster_token_format(const struct cluster_token *t, char *out, size_t n) {
        snprintf(out, n, CLUSTER_TOKEN_PREFIX "-%s-%s-%s", t->ca_digest, t->id, t->secret);
}

void cluster_node_info_release(struct cluster_node_info *n) {
        if (!n)
                return;
        for (size_t i = 0; i < n->n_templates; i++)
                free(n->templates[i]);
        free(n->templates);
        n->templates = NULL;
        n->n_templates = 0;
}

static bool label_part_valid(const char *s, size_t n) {
        if (n == 0 || n > CLUSTER_LABEL_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
                        return false;
        return true;
}

static int label_add(struct cluster_label *l, size_t *n, const char *k, size_t kn, const char *v, size_t vn) {
        if (!label_part_valid(k, kn) || !label_part_valid(v, vn) || *n >= CLUSTER_LABELS_MAX)
                return -EINVAL;
        for (size_t i = 0; i < *n; i++)
                if (strlen(l[i].key) == kn && memcmp(l[i].key, k, kn) == 0)
                        return -EINVAL; /* twice */
        memcpy(l[*n].key, k, kn);
        l[*n].key[kn] = 0;
        memcpy(l[*n].value, v, vn);
        l[*n].value[vn] = 0;
        (*n)++;
        return 0;
}

int cluster_labels_parse(const char *s, struct cluster_label *ret, size_t *ret_n) {
        struct cluster_label l[CLUSTER_LABELS_MAX];
        size_t n = 0;
        while (s && *s) {
                const char *end = strchr(s, ','), *eq = strchr(s, '=');
                size_t len = end ? (size_t) (end - s) : strlen(s);
                if (!eq || (size_t) (eq - s) >= len)
                        return -EINVAL;
                if (label_add(l, &n, s, (size_t) (eq - s), eq + 1, len - (size_t) (eq - s) - 1) < 0)
                        return -EINVAL;
                s = end ? end + 1 : s + len;
                if (end && !*s)
                        return -EINVAL; /* a trailing comma */
        }
        memcpy(ret, l, n * sizeof *l);
        *ret_n = n;
        return 0;
}

json_t *cluster_labels_json(const struct cluster_label *l, size_t n) {
        json_t *o = json_object();
        for (size_t i = 0; o && i < n; i++)
                if (json_object_set_new(o, l[i].key, json_string(l[i].value)) < 0) {
                        json_decref(o);
                        return NULL;
                }
        return o;
}

bool cluster_labels_match(const struct cluster_label *l, size_t n, const json_t *want) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) want, k, v) {
                bool found = false;
                for (size_t i = 0; i < n && !found; i++)
                        found = strcmp(l[i].key, k) == 0 && json_is_string(v) &&
                                strcmp(l[i].value, json_string_value(v)) == 0;
                if (!found)
                        return false;
        }
        return true;
}

bool cluster_address_valid(const char *s) {
        if (!s || !*s || strlen(s) >= CLUSTER_ADDR_MAX)
                return false;
        const char *colon;
        if (s[0] == '[') {
                const char *end = strchr(s, ']');
                if (!end || end == s + 1 || end[1] != ':')
                        return false;
                for (const char *p = s + 1; p < end; p++)
                        if (!isxdigit((unsigned char) *p) && *p != ':' && *p != '.')
                                return false;
                colon = end + 1;
        } else {
                colon = strchr(s, ':');
                if (!colon || colon == s || strchr(colon + 1, ':'))
                        return false;
                for (const char *p = s; p < colon; p++)
                        if (!isalnum((unsigned char) *p) && *p != '.' && *p != '-')
                                return false;
        }
        uint64_t port;
        return parse_u64(colon + 1, 65535, &port) >= 0 && port > 0;
}

static json_t *info_json(const struct cluster_node_info *n, bool with_templates) {
        json_t *labels = cluster_labels_json(n->labels, n->n_labels);
        json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I}}", "name", n->name,
                              "address", n->address, "boot_id", n->boot_id, "labels", labels, "capacity", "cpus",
                              (json_int_t) n->capacity.cpus, "memory_mib", (json_int_t) n->capacity.memory_mib,
                              "disk_bytes", (json_int_t) n->capacity.disk_bytes, "max_sandboxes",
                              (json_int_t) n->capacity.max_sandboxes, "usage", "sandboxes",
                              (json_int_t) n->usage.sandboxes, "memory_mib", (json_int_t) n->usage.memory_mib,
                              "disk_free_bytes", (json_int_t) n->usage.disk_free_bytes);
        if (o && n->cpu[0] && json_object_set_new(o, "cpu", json_string(n->cpu)) < 0) {
                json_decref(o);
                return NULL;
        }
        if (o && with_templates) {
                json_t *t = json_array();
                for (size_t i = 0; t && i < n->n_templates; i++)
                        json_array_append_new(t, json_string(n->templates[i]));
                json_object_set_new(o, "templates", t ? t : json_null());
                if (n->wants_templates_key)
                        json_object_set_new(o, "want_templates_key", json_true());
        }
        return o;
}

json_t *cluster_join_request(const char *token, const char *csr_pem, const struct cluster_node_info *n) {
        json_t *o = info_json(n, false);
        if (o && (json_object_set_new(o, "op", json_string("cluster.join")) < 0 ||
                  json_object_set_new(o, "token", json_string(token)) < 0 ||
                  json_object_set_new(o, "csr", json_string(csr_pem)) < 0)) {
                json_decref(o);
                return NULL;
        }
        return o;
}

json_t *cluster_heartbeat_request(const struct cluster_node_info *n) {
        json_t *o = info_json(n, true);
        if (o && json_object_set_new(o, "op", json_string("cluster.heartbeat")) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

/* ---- the parsers ---- */

#define FAIL(...)                                                                                          \
        do {                                                                                               \
                snprintf(err, 256, __VA_ARGS__);                                                           \
                return -EINVAL;                                                                            \
        } while (0)

static bool name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!islower((unsigned char) s[i]) && !isdigit((unsigned char) s[i]) && s[i] != '-')
                        return false;
        return true;
}

/* A string field of at most max bytes into out (size max + 1). */
static int get_str(const json_t *o, const char *key, char *out, size_t max, char *err) {
        json_t *v = json_object_get(o, key);
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max ||
            strlen(json_string_value(v)) != json_string_length(v))
                FAIL("field \"%s\" must be a string of 1 to %zu bytes", key, max);
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
        return 0;
}

static int get_u64(const json_t *o, const char *key, uint64_t max, uint64_t *ret, char *err) {
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t) json_integer_value(v) > max)
                FAIL("field \"%s\" must be an integer from 0 to %llu", key, (unsigned long long) max);
        *ret = (uint64_t) json_integer_value(v);
        return 0;
}

/* Every key of o is one of the allowed ones. */
static int only_keys(const json_t *o, const char *const *allowed, const char *what, char *err) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                bool ok = false;
                for (size_t i = 0; allowed[i] && !ok; i++)
                        ok = strcmp(k, allowed[i]) == 0;
                if (!ok)
                        FAIL("unknown field \"%.64s\" in %s", k, what);
        }
        return 0;
}

static int parse_info(const json_t *req, bool heartbeat, struct cluster_node_info *n, char *err) {
        static const char *const join_keys[] = { "op",      "token",  "csr",      "name",  "address",
                                                  "boot_id", "labels", "capacity", "usage", "cpu", NULL };
        static const char *const hb_keys[] = { "op",       "name",  "address",   "boot_id",            "labels",
                                               "capacity", "usage", "templates", "want_templates_key", "cpu", NULL };
        static const char *const cap_keys[] = { "cpus", "memory_mib", "disk_bytes", "max_sandboxes", NULL };
        static const char *const use_keys[] = { "sandboxes", "memory_mib", "disk_free_bytes", NULL };
        *n = (struct cluster_node_info){ 0 };
        if (!json_is_object(req))
                FAIL("the request must be a JSON object");
        int r;
        if ((r = only_keys(req, heartbeat ? hb_keys : join_keys, "the request", err)) < 0 ||
            (r = get_str(req, "name", n->name, sizeof n->name - 1, err)) < 0)
                return r;
        if (!name_ok(n->name))
                FAIL("field \"name\" must be 1-63 of [a-z0-9-], not starting or ending with '-'");
        if ((r = get_str(req, "address", n->address, sizeof n->address - 1, err)) < 0)
                return r;
        if (!cluster_address_valid(n->address))
                FAIL("field \"address\" must be HOST:PORT");
        if ((r = get_str(req, "boot_id", n->boot_id, sizeof n->boot_id - 1, err)) < 0)
                return r;

        json_t *labels = json_object_get(req, "labels");
        if (!json_is_object(labels) || json_object_size(labels) > CLUSTER_LABELS_MAX)
                FAIL("field \"labels\" must be an object of at most %d strings", CLUSTER_LABELS_MAX);
        const char *k;
        json_t *v;
        json_object_foreach(labels, k, v) {
                if (!json_is_string(v) || label_add(n->labels, &n->n_labels, k, strlen(k), json_string_value(v),
                                                    json_string_length(v)) < 0)
                        FAIL("label \"%.64s\" must be [A-Za-z0-9._-]{1,63}=[A-Za-z0-9._-]{1,63}", k);
        }

        json_t *cpu = json_object_get(req, "cpu");
        if (cpu) {
                if ((r = get_str(req, "cpu", n->cpu, CLUSTER_CPU_MAX, err)) < 0)
                        return r;
                if (strspn(n->cpu, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789:._-") !=
                    strlen(n->cpu))
                        FAIL("field \"cpu\" must be [A-Za-z0-9:._-]{1,%d}", CLUSTER_CPU_MAX);
        }

        json_t *cap = json_object_get(req, "capacity"), *use = json_object_get(req, "usage");
        if (!json_is_object(cap) || !json_is_object(use))
                FAIL("fields \"capacity\" and \"usage\" must be objects");
        uint64_t cpus, msb, sbx;
        if ((r = only_keys(cap, cap_keys, "capacity", err)) < 0 || (r = only_keys(use, use_keys, "usage", err)) < 0 ||
            (r = get_u64(cap, "cpus", 65536, &cpus, err)) < 0 ||
            (r = get_u64(cap, "memory_mib", 1ULL << 40, &n->capacity.memory_mib, err)) < 0 ||
            (r = get_u64(cap, "disk_bytes", 1ULL << 60, &n->capacity.disk_bytes, err)) < 0 ||
            (r = get_u64(cap, "max_sandboxes", 1 << 20, &msb, err)) < 0 ||
            (r = get_u64(use, "sandboxes", 1 << 20, &sbx, err)) < 0 ||
            (r = get_u64(use, "memory_mib", 1ULL << 40, &n->usage.memory_mib, err)) < 0 ||
            (r = get_u64(use, "disk_free_bytes", 1ULL << 60, &n->usage.disk_free_bytes, err)) < 0)
                return r;
        n->capacity.cpus = (uint32_t) cpus;
        n->capacity.max_sandboxes = (uint32_t) msb;
        n->usage.sandboxes = (uint32_t) sbx;

        if (!heartbeat)
                return 0;
        json_t *want = json_object_get(req, "want_templates_key");
        if (want && !json_is_boolean(want))
                FAIL("field \"want_templates_key\" must be a boolean");
        n->wants_templates_key = json_is_true(want);
        json_t *t = json_object_get(req, "templates");
        if (!json_is_array(t) || json_array_size(t) > CLUSTER_TEMPLATES_MAX)
                FAIL("field \"templates\" must be an array of at most %d names", CLUSTER_TEMPLATES_MAX);
        n->templates = calloc(json_array_size(t) + 1, sizeof *n->templates);
        if (!n->templates)
                return -ENOMEM;
        size_t i;
        json_array_foreach(t, i, v) {
                if (!json_is_string(v) || !name_ok(json_string_value(v))) {
                        cluster_node_info_release(n);
                        FAIL("template names must be 1-63 of [a-z0-9-]");
                }
                if (!(n->templates[n->n_templates] = strdup(json_string_value(v)))) {
                        cluster_node_info_release(n);
                        return -ENOMEM;
                }
                n->n_templates++;
        }
        return 0;
}

int cluster_join_parse(const json_t *req, const char **ret_token, const char **ret_csr, struct cluster_node_info *ret,
                       char *err) {
        struct cluster_node_info n;
        int r = parse_info(req, false, &n, err);
        if (r < 0)
                return r;
        json_t *token = json_object_get(req, "token"), *csr = json_object_get(req, "csr");
        if (!json_is_string(token) || json_string_length(token) > CLUSTER_TOKEN_MAX)
                FAIL("field \"token\" must be a join token");
        if (!json_is_string(csr) || json_string_length(csr) == 0 || json_string_length(csr) > (16 << 10))
                FAIL("field \"csr\" must be a PEM certificate request");
        *ret_token = json_string_value(token);
        *ret_csr = json_string_value(csr);
        *ret = n;
        return 0;
}

int cluster_heartbeat_parse(const json_t *req, struct cluster_node_info *ret, char *err) {
        return parse_info(req, true, ret, err);
}
