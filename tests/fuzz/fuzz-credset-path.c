/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the request-path canonicaliser the gateway decides a credential's
 * path rules on (lib/credset/credset-path.c): the bytes as a request
 * target. A path it takes comes out from '/', no longer than it went in,
 * with no dot segment, no '\\', ';' or escaped '/', '\\' or unreserved
 * character, escapes in capitals, the query untouched, and canonical again
 * when given back (a second pass changes nothing).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "credset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *in, size_t len, const char *out) {
        size_t n = strlen(out);
        const char *q = memchr(in, '?', len);
        const char *oq = strchr(out, '?');
        if (out[0] != '/' || n > len || (q == NULL) != (oq == NULL))
                abort();
        if (q && strcmp(oq, q) != 0) /* the query came through as it was (no NUL in it: strlen stopped) */
                abort();
        size_t path_len = oq ? (size_t) (oq - out) : n;
        for (size_t i = 0; i < path_len; i++) {
                char c = out[i];
                if (c == '\\' || c == ';' || c == '#' || (unsigned char) c <= 0x20 || (unsigned char) c >= 0x7f)
                        abort();
                if (c == '%') {
                        if (i + 2 >= path_len || !strchr("0123456789ABCDEF", out[i + 1]) || !out[i + 1] ||
                            !strchr("0123456789ABCDEF", out[i + 2]) || !out[i + 2])
                                abort();
                        if (!strncmp(out + i, "%2F", 3) || !strncmp(out + i, "%5C", 3))
                                abort();
                }
                /* no "." or ".." segment */
                if (c == '/') {
                        size_t e = i + 1;
                        while (e < path_len && out[e] != '/')
                                e++;
                        if ((e - i - 1 == 1 && out[i + 1] == '.') ||
                            (e - i - 1 == 2 && out[i + 1] == '.' && out[i + 2] == '.'))
                                abort();
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > 4096)
                return 0;
        char *in = malloc(size + 1), *out = malloc(size + 1), *again = malloc(size + 1);
        if (!in || !out || !again)
                abort();
        memcpy(in, data, size);
        in[size] = '\0';
        const char *why = NULL;
        if (credset_path_canonical(in, size, out, size, &why) != -ENOBUFS)
                abort(); /* one byte short for the NUL */
        int r = credset_path_canonical(in, size, out, size + 1, &why);
        if (r == 0 && !memchr(in, '\0', size)) {
                check(in, size, out);
                size_t n = strlen(out);
                if (credset_path_canonical(out, n, again, size + 1, &why) != 0 || strcmp(again, out) != 0)
                        abort();
        } else if (r != 0 && (r != -EINVAL || !why))
                abort();
        free(in);
        free(out);
        free(again);
        return 0;
}
