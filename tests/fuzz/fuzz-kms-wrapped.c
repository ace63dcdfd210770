/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the wrapped-key strings lib/kms reads back from the store: bytes
 * (cut at a NUL, as a C string would be) go to kms_wrapped_parse() and to
 * kms_unwrap() of a local KMS in a temporary directory whose tenant ten-a
 * has version 1 = the key bytes 0..31 (the corpus' valid seed was wrapped
 * with it; its DEK is 32 bytes 0xd0..0xef). Whatever parses must be the one
 * canonical encoding of what it parsed; whatever unwraps must be that seed.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kms.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void cleanup(void) {
        if (dir[0])
                rm_rf(dir);
}

static struct kms *kms(void) {
        static struct kms *k;
        if (k)
                return k;
        uint8_t kek[32];
        for (size_t i = 0; i < sizeof kek; i++)
                kek[i] = (uint8_t) i;
        snprintf(dir, sizeof dir, "/tmp/fuzz-kms-XXXXXX");
        if (!mkdtemp(dir))
                abort();
        atexit(cleanup);
        char path[128];
        snprintf(path, sizeof path, "%s/ten-a", dir);
        if (chmod(dir, 0700) < 0 || mkdir(path, 0700) < 0)
                abort();
        snprintf(path, sizeof path, "%s/ten-a/1.kek", dir);
        if (file_write_atomic(path, kek, sizeof kek, 0600) < 0 || kms_open_local(dir, &k) < 0)
                abort();
        return k;
}

/* The canonical string of w, as kms_wrap() writes it. */
static void format(const struct kms_wrapped *w, char out[KMS_WRAPPED_MAX + 1]) {
        int n = w->type == KMS_TYPE_LOCAL ? snprintf(out, KMS_WRAPPED_MAX + 1, "v1.local.%u.", w->version)
                                          : snprintf(out, KMS_WRAPPED_MAX + 1, "v1.pkcs11.%s.", w->label);
        if ((size_t) n != w->header_len + 1)
                abort();
        sodium_bin2base64(out + n, KMS_WRAPPED_MAX + 1 - (size_t) n, w->blob, w->blob_len,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct kms *k = kms();
        /* exactly size bytes and a NUL: ASan sees a read past them */
        char *s = malloc(size + 1);
        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = 0;

        struct kms_wrapped w;
        memset(&w, 0x5a, sizeof w);
        struct kms_wrapped before = w;
        int r = kms_wrapped_parse(s, &w);
        if (r < 0) {
                if (r != -EBADMSG || memcmp(&w, &before, sizeof w) != 0)
                        abort(); /* untouched on failure */
        } else {
                char again[KMS_WRAPPED_MAX + 1];
                format(&w, again);
                if (strlen(s) > KMS_WRAPPED_MAX || strcmp(again, s) != 0)
                        abort();
                if (w.type == KMS_TYPE_LOCAL
                            ? (w.version < 1 || w.version > KMS_LOCAL_VERSION_MAX || w.label[0])
                            : strlen(w.label) < 1)
                        abort();
        }

        uint8_t dek[KMS_DEK_SIZE];
        memset(dek, 0xa5, sizeof dek);
        int u = kms_unwrap(k, "ten-a", s, dek);
        if (u == 0) {
                /* only the seed: its one DEK */
                for (size_t i = 0; i < sizeof dek; i++)
                        if (dek[i] != (uint8_t) (0xd0 + i))
                                abort();
        } else {
                if (u != -EBADMSG && u != -EKEYREVOKED && u != -EMEDIUMTYPE)
                        abort();
                for (size_t i = 0; i < sizeof dek; i++)
                        if (dek[i] != 0xa5)
                                abort();
        }
        if (r < 0 && u != -EBADMSG)
                abort(); /* unwrap parses as the parser does */
        free(s);
        return 0;
}
