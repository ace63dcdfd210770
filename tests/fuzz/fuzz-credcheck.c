/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the node's check of a credential set (sandbox.secrets.set): the
 * bytes as the set's JSON text. An accepted set has at most 16 objects with
 * a valid name and placeholder each, and its names list has one entry per
 * object; a refused one has a message that never quotes a value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "credcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_t *a = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
        if (!a)
                return 0;
        char err[256] = "";
        if (credcheck_set(a, err, sizeof err) < 0) {
                if (!err[0])
                        abort();
                size_t i;
                json_t *o;
                json_array_foreach(a, i, o) {
                        const char *v = json_string_value(json_object_get(o, "value"));
                        if (v && strlen(v) >= 8 && strstr(err, v))
                                abort();
                }
        } else {
                json_t *names = credcheck_names(a);
                if (!names || json_array_size(names) != json_array_size(a) || json_array_size(a) > CREDCHECK_SET_MAX)
                        abort();
                json_decref(names);
        }
        json_decref(a);
        return 0;
}
