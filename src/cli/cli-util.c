/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli-util.h"

bool cli_id_is_valid(const char *s) {
        if (!s || !*s || s[0] == '.')
                return false;
        size_t n = 0;
        for (; s[n]; n++) {
                char c = s[n];
                if (n >= CLI_ID_MAX)
                        return false;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

int cli_kv_add(json_t *obj, const char *arg) {
        if (!obj || !arg)
                return -EINVAL;
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg)
                return -EINVAL;
        _cleanup_free_ char *key = strndup(arg, (size_t)(eq - arg));
        if (!key)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *value = json_string(eq + 1);
        if (!value)
                return -EILSEQ; /* jansson rejects only invalid UTF-8 here */
        if (json_object_set(obj, key, value) < 0)
                return -EILSEQ;
        return 0;
}

int cli_endpoint_parse(const char *s, struct cli_endpoint *ret) {
        if (!s || !*s || !ret)
                return -EINVAL;

        const char *colon = strchr(s, ':');
        if (colon && colon > s && (size_t)(colon - s) <= CLI_ID_MAX) {
                char id[CLI_ID_MAX + 1];
                memcpy(id, s, (size_t)(colon - s));
                id[colon - s] = '\0';
                if (cli_id_is_valid(id)) {
                        if (colon[1] != '/')
                                return -EINVAL;
                        _cleanup_free_ char *sandbox = strdup(id), *path = strdup(colon + 1);
                        if (!sandbox || !path)
                                return -ENOMEM;
                        *ret = (struct cli_endpoint){.sandbox = TAKE_PTR(sandbox), .path = TAKE_PTR(path)};
                        return 0;
                }
        }

        char *path = strdup(s);
        if (!path)
                return -ENOMEM;
        *ret = (struct cli_endpoint){.path = path};
        return 0;
}

void cli_endpoint_done(struct cli_endpoint *e) {
        if (!e)
                return;
        free(e->sandbox);
        free(e->path);
        *e = (struct cli_endpoint){};
}

static bool is_unreserved(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
               c == '.' || c == '_' || c == '~';
}

int cli_url_escape(const char *s, bool keep_slash, char **ret) {
        static const char hex[] = "0123456789ABCDEF";
        if (!s || !ret)
                return -EINVAL;
        size_t n = strlen(s);
        if (n > (SIZE_MAX - 1) / 3)
                return -ENOMEM;
        char *out = malloc(n * 3 + 1), *o = out;
        if (!out)
                return -ENOMEM;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (is_unreserved(*p) || (keep_slash && *p == '/'))
                        *o++ = (char)*p;
                else {
                        *o++ = '%';
                        *o++ = hex[*p >> 4];
                        *o++ = hex[*p & 0xF];
                }
        }
        *o = '\0';
        *ret = out;
        return 0;
}

int cli_b64_encode(const void *data, size_t len, char **ret) {
        if ((!data && len > 0) || !ret)
                return -EINVAL;
        if (len > (SIZE_MAX / 4) * 3 - 3)
                return -ENOMEM;
        size_t n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
        char *out = malloc(n);
        if (!out)
                return -ENOMEM;
        sodium_bin2base64(out, n, data, len, sodium_base64_VARIANT_ORIGINAL);
        *ret = out;
        return 0;
}

int cli_b64_decode(const char *s, size_t len, char **ret, size_t *ret_len) {
        if ((!s && len > 0) || !ret)
                return -EINVAL;
        size_t cap = len / 4 * 3 + 3;
        _cleanup_free_ char *out = malloc(cap + 1);
        if (!out)
                return -ENOMEM;
        size_t n = 0;
        /* b64_end == NULL: libsodium fails unless the whole input parses. */
        if (len > 0 && sodium_base642bin((unsigned char *)out, cap, s, len, NULL, &n, NULL,
                                         sodium_base64_VARIANT_ORIGINAL) != 0)
                return -EINVAL;
        out[n] = '\0';
        *ret = TAKE_PTR(out);
        if (ret_len)
                *ret_len = n;
        return 0;
}

int cli_exit_status(const json_t *result) {
        if (!json_is_object(result))
                return 255;
        if (json_is_true(json_object_get(result, "timed_out")))
                return 124;

        json_t *sig = json_object_get(result, "signal");
        if (json_is_integer(sig) && json_integer_value(sig) > 0)
                return (int)MIN(128 + json_integer_value(sig), (json_int_t)255);

        json_t *code = json_object_get(result, "exit_code");
        if (!json_is_integer(code))
                return 255;
        json_int_t v = json_integer_value(code);
        if (v >= 0 && v <= 255)
                return (int)v;
        if (v < 0 && v >= -127)
                return (int)(128 - v);
        return 255;
}

int cli_buf_reserve(char **buf, size_t *cap, size_t need, size_t min_cap) {
        if (need <= *cap)
                return 0;
        size_t n = MAX(*cap * 2, min_cap);
        while (n < need)
                n *= 2;
        char *p = realloc(*buf, n);
        if (!p)
                return -ENOMEM;
        *buf = p;
        *cap = n;
        return 0;
}
