/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the build context and OCI layer checker (lib/buildctx), which
 * reads what API clients upload and what images hold: the input is read
 * as a build context with the real limits, as one with tiny limits (so
 * every limit is reached), and cut in two as two layers of an image.
 * Whatever it says must be one line of printable ASCII (it goes into an
 * API error and a build log), a refusal must say something and stick (a
 * layer after a refused one is refused), and nothing is accepted past the
 * tiny limits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buildctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_message(int r, const char *err) {
        if (r < 0 && !err[0])
                abort(); /* a refusal without a reason */
        for (const char *p = err; *p; p++)
                if ((uint8_t) *p < 0x20 || (uint8_t) *p > 0x7e)
                        abort(); /* a control or non-ASCII byte in a message */
        if (strlen(err) >= 256)
                abort(); /* past what an API error holds (API_ERRMSG_MAX) */
}

static const struct buildctx_limits tiny = {
        .entries = 8,
        .total_bytes = 4096,
        .file_bytes = 1024,
        .names_bytes = 256,
        .ratio = 4,
        .ratio_from = 1024,
        .path_bytes = 48,
        .depth = 4,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[BUILDCTX_ERR_MAX];
        for (int pass = 0; pass < 2; pass++) {
                struct buildctx *c = NULL;
                if (buildctx_new(BUILDCTX_CONTEXT, pass ? &tiny : NULL, &c) < 0)
                        abort();
                int r = buildctx_feed_mem(c, data, size, err);
                check_message(r, err);
                if (r == 0 && buildctx_entries(c) > 0 && !buildctx_has(c, "."))
                        abort();
                if (r == 0 && pass == 1 && (buildctx_entries(c) > tiny.entries || buildctx_total_bytes(c) > tiny.total_bytes))
                        abort(); /* accepted past a limit */
                buildctx_free(c);
        }
        /* two layers: the first byte says where to cut */
        size_t cut = size ? (size_t) data[0] * size / 256 : 0;
        struct buildctx *c = NULL;
        if (buildctx_new(BUILDCTX_LAYERS, NULL, &c) < 0)
                abort();
        int r = buildctx_feed_mem(c, data, cut, err);
        check_message(r, err);
        int k = buildctx_feed_mem(c, data + cut, size - cut, err);
        check_message(k, err);
        if (r < 0 && k == 0)
                abort(); /* a refusal that did not stick */
        buildctx_free(c);
        return 0;
}
