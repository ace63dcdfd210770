/* SPDX-License-Identifier: Apache-2.0 */
#include "gwname.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

int gwname_canonical(const char *in, size_t len, unsigned flags, char *out) {
        char buf[GWNAME_MAX + 1];
        if ((flags & GWNAME_TRAILING_DOT) && len > 1 && in[len - 1] == '.')
                len--;
        if (len == 0 || len > GWNAME_MAX)
                return -EINVAL;
        size_t label = 0; /* length of the current label */
        bool all_digits = true;
        for (size_t i = 0; i <= len; i++) {
                char c = i < len ? in[i] : '.';
                if (c == '.') {
                        /* empty label, or one ending in '-' */
                        if (label == 0 || buf[i - 1] == '-')
                                return -EINVAL;
                        if (i < len) {
                                buf[i] = '.';
                                label = 0;
                                all_digits = true;
                        }
                        continue;
                }
                if (c >= 'A' && c <= 'Z')
                        c = (char) (c - 'A' + 'a');
                bool digit = c >= '0' && c <= '9';
                if (!(digit || (c >= 'a' && c <= 'z') || c == '-' || (c == '_' && (flags & GWNAME_UNDERSCORE))))
                        return -EINVAL;
                if (c == '-' && label == 0)
                        return -EINVAL;
                if (++label > 63)
                        return -EINVAL;
                all_digits &= digit;
                buf[i] = c;
        }
        if (all_digits && !(flags & GWNAME_NUMERIC_TLD))
                return -EINVAL;
        buf[len] = 0;
        memcpy(out, buf, len + 1);
        return 0;
}
