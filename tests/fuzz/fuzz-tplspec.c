/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes template specs (lib/tplspec), which API clients send: the input
 * is a JSON spec when it starts with '{', else a Dockerfile. Whatever is
 * accepted must print a canonical JSON that parses back to the same
 * canonical JSON.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tplspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *canonical(const struct tplspec *s) {
        json_t *j = tplspec_to_json(s);
        if (!j)
                abort();
        char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        if (!text)
                abort();
        return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[TPLSPEC_ERR_MAX];
        struct tplspec *s = NULL;
        if (size > 0 && data[0] == '{') {
                json_t *j = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
                if (!j)
                        return 0;
                int r = tplspec_parse_json(j, &s, err);
                json_decref(j);
                if (r < 0)
                        return 0;
        } else if (tplspec_parse_dockerfile((const char *) data, size, "fuzzed", &s, err) < 0)
                return 0;
        char *a = canonical(s);
        json_t *j = json_loads(a, 0, NULL);
        struct tplspec *again = NULL;
        if (!j || tplspec_parse_json(j, &again, err) < 0)
                abort(); /* the canonical form is refused */
        char *b = canonical(again);
        if (strcmp(a, b) != 0)
                abort();
        free(a);
        free(b);
        json_decref(j);
        tplspec_free(again);
        tplspec_free(s);
        return 0;
}
