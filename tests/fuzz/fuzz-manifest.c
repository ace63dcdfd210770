/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the snapshot manifest parser with what a tampered or corrupted
 * object store could hold: whatever objstore_manifest_parse() accepts must
 * have every field it promises, and must survive a dump and parse again.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(json_t *m) {
        json_t *arts = json_object_get(m, "artifacts");
        size_t n = json_array_size(arts);
        json_int_t version = json_integer_value(json_object_get(m, "version"));
        bool sealed = version == 3;
        if (version < 1 || version > 3 || n == 0 || n > OBJSTORE_ARTIFACTS_MAX ||
            !json_string_value(json_object_get(m, "snapshot")) || sealed != objstore_manifest_is_sealed(m))
                abort();
        /* in the clear: a meta; sealed: a wrapped key and a sealed part, and
         * no meta opens without a data key */
        json_t *meta = NULL;
        if (!sealed && (!json_is_object(json_object_get(m, "meta")) || objstore_manifest_meta(m, NULL, &meta) < 0))
                abort();
        if (sealed && (!objstore_manifest_wrapped_key(m) || !json_string_value(json_object_get(m, "sealed")) ||
                       objstore_manifest_meta(m, NULL, &meta) != -ENOKEY))
                abort();
        json_decref(meta);
        if (sealed) { /* an arbitrary key opens nothing it did not seal */
                static const uint8_t key[OBJSTORE_DATA_KEY_SIZE] = { 7 };
                if (objstore_manifest_meta(m, key, &meta) >= 0)
                        json_decref(meta);
        }
        for (size_t i = 0; i < n; i++) {
                json_t *a = json_array_get(arts, i);
                const char *name = json_string_value(json_object_get(a, "name"));
                /* version 1 names blobs by "sha256", 2 by "sparse_sha256", 3 by "blob" */
                const char *sha = json_string_value(
                        json_object_get(a, version == 1 ? "sha256" : version == 2 ? "sparse_sha256" : "blob"));
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
