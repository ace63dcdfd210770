/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names: what a name is (one function for policy rules, SNI, Host and
 * DNS questions), IP literals in every spelling a resolver takes, and the
 * public suffix list.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <libpsl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "netpolicy-internal.h"

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static bool is_hex(char c) {
        return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_ldh(char c) {
        return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

/* One part of inet_aton()'s forms: decimal, octal (leading 0) or hex (0x,
 * even with no digits: glibc reads "0x" as 0). Range is not checked: a
 * number too large for an address is not a name either. */
static bool numeric_part(const char *s, size_t len) {
        if (len == 0)
                return false;
        if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                for (size_t i = 2; i < len; i++)
                        if (!is_hex(s[i]))
                                return false;
                return true;
        }
        for (size_t i = 0; i < len; i++)
                if (!is_digit(s[i]))
                        return false;
        return true;
}

bool netpolicy_name_is_ip(const char *s, size_t len) {
        if (!s)
                return false;
        if (len > 0 && s[len - 1] == '.')
                len--;
        if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
                s++;
                len -= 2;
        }
        if (len == 0)
                return false;
        if (memchr(s, ':', len)) {
                /* IPv6, maybe with a zone ("fe80::1%eth0") */
                const char *pct = memchr(s, '%', len);
                size_t n = pct ? (size_t) (pct - s) : len;
                char buf[INET6_ADDRSTRLEN];
                struct in6_addr a;
                if (n == 0 || n >= sizeof buf || memchr(s, '\0', n))
                        return false;
                memcpy(buf, s, n);
                buf[n] = '\0';
                return inet_pton(AF_INET6, buf, &a) == 1;
        }
        /* IPv4 in inet_aton()'s forms: 1 to 4 numeric parts */
        size_t parts = 0, start = 0;
        for (size_t i = 0; i <= len; i++) {
                if (i < len && s[i] != '.')
                        continue;
                if (++parts > 4 || !numeric_part(s + start, i - start))
                        return false;
                start = i + 1;
        }
        return true;
}

int np_name_canonical(const char *in, size_t len, size_t min_labels, char *out, size_t outsz, const char **ret_why) {
        const char *why_buf;
        const char **why = ret_why ? ret_why : &why_buf;
        if (!in || !out) {
                *why = "is missing";
                return -EINVAL;
        }
        /* the byte checks first: their messages say more than "bad label" */
        for (size_t i = 0; i < len; i++) {
                if ((unsigned char) in[i] >= 0x80) {
                        *why = "is not ASCII: write an internationalised name in its punycode form (xn--...)";
                        return -EILSEQ;
                }
                if (in[i] == '\0') {
                        *why = "contains a NUL byte";
                        return -EINVAL;
                }
        }
        if (len > 0 && in[len - 1] == '.')
                len--;
        if (len == 0) {
                *why = "is empty";
                return -EINVAL;
        }
        if (netpolicy_name_is_ip(in, len)) {
                *why = "is an IP address, not a host name";
                return -EADDRNOTAVAIL;
        }
        if (len > NETPOLICY_NAME_MAX) {
                *why = "is longer than 253 characters";
                return -ENAMETOOLONG;
        }
        size_t labels = 0, start = 0;
        for (size_t i = 0; i <= len; i++) {
                if (i < len && in[i] != '.') {
                        if (!is_ldh(in[i])) {
                                *why = "has a character other than letters, digits, hyphens and dots";
                                return -EINVAL;
                        }
                        continue;
                }
                size_t n = i - start;
                if (n == 0) {
                        *why = "has an empty label";
                        return -EINVAL;
                }
                if (n > NETPOLICY_LABEL_MAX) {
                        *why = "has a label longer than 63 characters";
                        return -ENAMETOOLONG;
                }
                if (in[start] == '-' || in[i - 1] == '-') {
                        *why = "has a label that starts or ends with a hyphen";
                        return -EINVAL;
                }
                labels++;
                if (i == len) {
                        bool digits = true;
                        for (size_t k = start; k < i && digits; k++)
                                digits = is_digit(in[k]);
                        if (digits) {
                                *why = "ends in an all-numeric label: no top-level domain is, so it is "
                                       "an address or a mistake";
                                return -EADDRNOTAVAIL;
                        }
                }
                start = i + 1;
        }
        if (labels < min_labels) {
                *why = "has one label: a host name has at least two (\"example.com\")";
                return -EINVAL;
        }
        if (outsz < len + 1) {
                *why = "does not fit";
                return -ENOBUFS;
        }
        for (size_t i = 0; i < len; i++)
                out[i] = (in[i] >= 'A' && in[i] <= 'Z') ? (char) (in[i] - 'A' + 'a') : in[i];
        out[len] = '\0';
        return 0;
}

int netpolicy_name_canonical(const char *in, size_t len, char *out, size_t outsz) {
        return np_name_canonical(in, len, 2, out, outsz, NULL);
}

/* Loaded once per process, never freed: libpsl's newest of the system's
 * list (the publicsuffix package) and its built-in copy. */
static pthread_once_t psl_once = PTHREAD_ONCE_INIT;
static const psl_ctx_t *psl_ctx;

static void psl_load(void) {
        const psl_ctx_t *c = psl_latest(NULL);
        psl_ctx = c ? c : psl_builtin();
}

int np_is_public_suffix(const char *name) {
        pthread_once(&psl_once, psl_load);
        if (!psl_ctx)
                return -ENOPKG;
        /* PSL_TYPE_ANY: the ICANN and the private section (github.io,
         * s3.amazonaws.com: many owners under one name), and the "*" rule
         * that makes every unlisted top-level domain a suffix */
        return psl_is_public_suffix2(psl_ctx, name, PSL_TYPE_ANY) ? 1 : 0;
}

void np_quote(const char *s, size_t len, char *buf, size_t size) {
        if (!buf || size == 0)
                return;
        size_t n = 0;
        for (size_t i = 0; i < len && i < NP_QUOTE_MAX && n + 1 < size; i++) {
                char c = s[i];
                buf[n++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
        }
        if (len > NP_QUOTE_MAX)
                for (int k = 0; k < 3 && n + 1 < size; k++)
                        buf[n++] = '.';
        buf[n] = '\0';
}

int np_fail(char *err, size_t errsz, const char *fmt, ...) {
        if (err && errsz > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errsz, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}
