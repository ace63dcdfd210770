/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A request path as the origin will read it, so that a credential's path
 * rule is decided on what the origin serves and not on how the guest spelt
 * it: "/api/%2e%2e/admin" is "/admin" to any origin that follows RFC 3986,
 * and "/api/..%2fadmin" or "/api/..;/admin" is "/admin" to many that do
 * not. The first kind is normalised, the second refused.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "credset.h"
#include "util.h"

static bool is_unreserved(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
               c == '_' || c == '~';
}

/* RFC 3986 6.2.2.1-2 on the path's n bytes into out: escapes of unreserved
 * characters decoded, the others' hex in capitals; what an origin could
 * read two ways refused. The length written, or -1 with *why. */
static long decode(const char *in, size_t n, char *out, const char **why) {
        static const char hex[] = "0123456789ABCDEF";
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) in[i];
                if (c == '%') {
                        if (i + 2 >= n || hex_digit_value(in[i + 1]) < 0 ||
                            hex_digit_value(in[i + 2]) < 0) {
                                *why = "a '%' in the path not followed by two hex digits";
                                return -1;
                        }
                        unsigned char v = (unsigned char) (hex_digit_value(in[i + 1]) * 16 +
                                                           hex_digit_value(in[i + 2]));
                        i += 2;
                        if (v == '/' || v == '\\') {
                                *why = "an escaped '/' or '\\' in the path (%2F, %5C)";
                                return -1;
                        }
                        if (v < 0x20 || v == 0x7f) {
                                *why = "an escaped control character in the path";
                                return -1;
                        }
                        if (is_unreserved(v))
                                out[o++] = (char) v;
                        else {
                                out[o++] = '%';
                                out[o++] = hex[v >> 4];
                                out[o++] = hex[v & 15];
                        }
                } else if (c == '\\') {
                        *why = "a '\\' in the path";
                        return -1;
                } else if (c == ';') {
                        *why = "a ';' (path parameters) in the path";
                        return -1;
                } else if (c <= 0x20 || c >= 0x7f || c == '#') {
                        *why = "a space, a control character, a byte outside ASCII or a '#' in the path";
                        return -1;
                } else
                        out[o++] = (char) c;
        }
        return (long) o;
}

/* RFC 3986 5.2.4 in place on p's n bytes (from '/'), refusing a ".." above
 * the root. The length left, or -1 with *why. */
static long remove_dot_segments(char *p, size_t n, const char **why) {
        size_t w = 0, r = 0;
        while (r < n) {
                size_t s = r + 1, e = s; /* p[r] is '/'; the segment is p[s, e) */
                while (e < n && p[e] != '/')
                        e++;
                bool last = e == n;
                if (e - s == 1 && p[s] == '.') {
                        if (last)
                                p[w++] = '/';
                } else if (e - s == 2 && p[s] == '.' && p[s + 1] == '.') {
                        if (w == 0) {
                                *why = "a '..' above the root in the path";
                                return -1;
                        }
                        while (p[w - 1] != '/') /* the output starts with '/' */
                                w--;
                        w--;
                        if (last)
                                p[w++] = '/';
                } else {
                        memmove(p + w, p + r, e - r);
                        w += e - r;
                }
                r = e;
        }
        return (long) w;
}

int credset_path_canonical(const char *in, size_t len, char *out, size_t outsz, const char **ret_why) {
        const char *why = NULL;
        if (outsz < len + 1)
                return -ENOBUFS;
        if (len == 0 || in[0] != '/') {
                *ret_why = "the request target is not a path from '/' (origin-form)";
                return -EINVAL;
        }
        const char *q = memchr(in, '?', len);
        size_t path_len = q ? (size_t) (q - in) : len;
        long n = decode(in, path_len, out, &why);
        if (n >= 0)
                n = remove_dot_segments(out, (size_t) n, &why);
        if (n < 0) {
                *ret_why = why;
                return -EINVAL;
        }
        /* the query is the origin's to read: kept as it came */
        memcpy(out + n, in + path_len, len - path_len);
        out[(size_t) n + len - path_len] = '\0';
        return 0;
}
