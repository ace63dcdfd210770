/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the S3 backend's reading of S3's XML replies (lib/objstore/s3-xml.c)
 * with what a hostile or broken S3 server could send: every reader must
 * refuse or give bounded, well-formed results, and a truncated page must
 * say where the next one starts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3-xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_key(void *userdata, const char *key) {
        (void) userdata;
        if (!key[0] || strlen(key) >= 1100)
                abort();
        return 0;
}

static int on_upload(void *userdata, const char *key, const char *upload_id, int64_t initiated) {
        (void) userdata;
        (void) initiated;
        if (!key[0] || !upload_id[0] || strlen(key) >= 1100 || strlen(upload_id) >= 256)
                abort();
        return 0;
}

static int on_part(void *userdata, uint32_t number, const char *etag, uint64_t size) {
        (void) userdata;
        (void) size;
        if (number < 1 || number > 10000 || strlen(etag) >= 80)
                abort();
        return 0;
}

static void check_page(int r, const struct s3_xml_page *p) {
        if (r >= 0 && p->truncated && !p->next[0])
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *d = (const char *) data;
        char out[300];
        s3_xml_error(d, size, out, sizeof out);
        if (strlen(out) >= sizeof out)
                abort();
        if (s3_xml_upload_id(d, size, out, sizeof out) >= 0 && !out[0])
                abort();
        (void) s3_xml_is_complete(d, size);
        struct s3_xml_page page;
        check_page(s3_xml_list(d, size, on_key, NULL, &page), &page);
        check_page(s3_xml_uploads(d, size, on_upload, NULL, &page), &page);
        check_page(s3_xml_parts(d, size, on_part, NULL, &page), &page);
        return 0;
}
