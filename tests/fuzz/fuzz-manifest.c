/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the snapshot manifest parser with what a tampered or corrupted
 * object store could hold: whatever objstore_manifest_parse() accepts must
 * have every field it promises, and must survive a dump and parse again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(json_t *m) {
        json_t *arts = json_object_get(m, "artifacts");
        size_t n = json_array_size(arts);
        json_int_t version = json_integer_value(json_object_get(m, "version"));
        if ((version != 1 && version != 2) || n == 0 || n > OBJSTORE_ARTIFACTS_MAX ||
            !json_is_object(json_object_get(m, "meta")) || !json_string_value(json_object_get(m, "snapshot")))
                abort();
        for (size_t i = 0; i < n; i++) {
                json_t *a = json_array_get(arts, i);
                const char *name = json_string_value(json_object_get(a, "name"));
                /* version 1 names blobs by "sha256", 2 by "sparse_sha256" */
                const char *sha = json_string_value(json_object_get(a, version == 1 ? "sha256" : "sparse_sha256"));
                if (!name || strchr(name, '/') || strcmp(name, "..") == 0 || !sha || strlen(sha) != 64 ||
                    json_integer_value(json_object_get(a, "size")) < 0)
                        abort();
        }
        /* what was accepted once is accepted again (if it still fits) */
        char *s = json_dumps(m, JSON_COMPACT);
        if (!s)
                return;
        json_t *again = NULL;
        size_t len = strlen(s);
        if (len <= OBJSTORE_MANIFEST_MAX && objstore_manifest_parse(s, len, &again) < 0)
                abort();
        json_decref(again);
        free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_t *m = NULL;
        if (objstore_manifest_parse((const char *) data, size, &m) == 0) {
                if (!m)
                        abort();
                check(m);
                json_decref(m);
        } else if (m) {
                abort(); /* untouched on failure */
        }
        return 0;
}
