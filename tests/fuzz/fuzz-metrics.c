/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what airlockd reads from a node's metrics (node.metrics): bytes
 * parsed as JSON go to metrics_merge_json(). Whatever merges must render,
 * and its text must hold only printable lines (escaping works); the same
 * JSON merged twice into one registry doubles, never breaks it.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_t *j = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
                return 0;
        struct metrics_registry *r = NULL;
        if (metrics_registry_new(&r) < 0)
                abort();
        int e = metrics_merge_json(r, j, "node", "w\"1\n");
        if (e >= 0 && metrics_merge_json(r, j, "node", "w\"1\n") < 0)
                abort(); /* what merged once merges again */
        char *text = NULL;
        size_t len = 0;
        if (metrics_render(&r, 1, &text, &len) < 0)
                abort();
        for (size_t i = 0; i < len; i++)
                if ((unsigned char) text[i] < 0x20 && text[i] != '\n')
                        abort(); /* a control byte would break a scraper's line */
        if (len && text[len - 1] != '\n')
                abort();
        free(text);
        metrics_registry_free(r);
        json_decref(j);
        return 0;
}
