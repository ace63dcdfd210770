/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the snapshot policy parser (AIRLOCK_SNAPSHOT_POLICY and per-sandbox
 * policies): the input is the policy text. A rejected policy must come with
 * a message; an accepted one must survive retention_policy_json() and back
 * unchanged. Then retention_select() runs with that policy (or the default)
 * over snapshots derived from the input, and must keep what it promises:
 * pinned, unknown-kind and the newest disk snapshot kept, exactly full_keep
 * full ones, the same answer for the reversed list, a count that matches.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "retention.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SNAPS_MAX 64

static bool policy_equal(const struct retention_policy *a, const struct retention_policy *b) {
        if (a->disk_every_s != b->disk_every_s || a->full_every_s != b->full_every_s ||
            a->full_keep != b->full_keep || a->n_tiers != b->n_tiers)
                return false;
        for (size_t i = 0; i < a->n_tiers; i++)
                if (a->tiers[i].every_s != b->tiers[i].every_s || a->tiers[i].for_s != b->tiers[i].for_s)
                        return false;
        return true;
}

static uint64_t next(uint64_t *x) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

static void check_select(const struct retention_policy *p, const uint8_t *data, size_t size) {
        static const char *const ids[SNAPS_MAX] = {
                "00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12",
                "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25",
                "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38",
                "39", "40", "41", "42", "43", "44", "45", "46", "47", "48", "49", "50", "51",
                "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63",
        };
        struct retention_snapshot snaps[SNAPS_MAX] = { 0 }, rev[SNAPS_MAX];
        bool keep[SNAPS_MAX], keep_rev[SNAPS_MAX];
        uint64_t x = 0xcbf29ce484222325ull; /* FNV-1a of the input seeds the snapshot list */
        for (size_t i = 0; i < size; i++)
                x = (x ^ data[i]) * 0x100000001b3ull;
        x |= 1;

        const int64_t now = 1700000000000ll + (int64_t) (next(&x) % 86400000);
        size_t n = (size_t) (next(&x) % (SNAPS_MAX + 1));
        for (size_t i = 0; i < n; i++) {
                uint64_t r = next(&x);
                int64_t span = (r & 1) ? 3600000ll : 10ll * 86400000; /* dense or spread out */
                snaps[i] = (struct retention_snapshot){
                        .id = ids[i],
                        .kind = (r >> 8) % 16 == 0 ? (enum snapshot_kind) 5
                                                   : (enum snapshot_kind)((r >> 12) % 2),
                        .created_ms = now - (int64_t) ((r >> 16) % (uint64_t) span) +
                                      ((r >> 4) % 8 == 0 ? 60000 : 0),
                        .pinned = (r >> 60) == 0,
                };
                if (i > 0 && (r >> 5) % 8 == 0) /* the same millisecond as the one before */
                        snaps[i].created_ms = snaps[i - 1].created_ms;
        }

        size_t del = retention_select(p, snaps, n, now, keep);
        size_t counted = 0, full = 0, full_kept = 0;
        const struct retention_snapshot *newest = NULL;
        size_t newest_i = 0;
        for (size_t i = 0; i < n; i++) {
                const struct retention_snapshot *s = &snaps[i];
                counted += !keep[i];
                if ((s->pinned || (s->kind != SNAPSHOT_DISK && s->kind != SNAPSHOT_FULL)) && !keep[i])
                        abort();
                if (s->pinned)
                        continue;
                if (s->kind == SNAPSHOT_FULL) {
                        full++;
                        full_kept += keep[i];
                }
                if (s->kind == SNAPSHOT_DISK &&
                    (!newest || s->created_ms > newest->created_ms ||
                     (s->created_ms == newest->created_ms && strcmp(s->id, newest->id) > 0))) {
                        newest = s;
                        newest_i = i;
                }
        }
        if (counted != del || full_kept != (full < p->full_keep ? full : p->full_keep))
                abort();
        if (newest && !keep[newest_i])
                abort();

        for (size_t i = 0; i < n; i++)
                rev[i] = snaps[n - 1 - i];
        if (retention_select(p, rev, n, now, keep_rev) != del)
                abort();
        for (size_t i = 0; i < n; i++)
                if (keep_rev[n - 1 - i] != keep[i])
                        abort();

        (void) retention_due(p, SNAPSHOT_DISK, n > 0 ? snaps[0].created_ms : 0, now);
        (void) retention_due(p, SNAPSHOT_FULL, n > 1 ? snaps[1].created_ms : 0, now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > RETENTION_POLICY_STRING_MAX + 64)
                return 0;
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;

        struct retention_policy p;
        char *err = NULL;
        int r = retention_policy_from_string(text, &retention_policy_default, &p, &err);
        free(text);
        if (r == -EINVAL && !err)
                abort(); /* every rejection explains itself */
        if (r < 0) {
                free(err);
                p = retention_policy_default;
        } else {
                struct retention_policy q;
                json_t *j = retention_policy_json(&p);
                if (err || !j)
                        abort();
                if (retention_policy_parse(j, &retention_policy_default, &q, NULL) < 0 ||
                    !policy_equal(&p, &q))
                        abort();
                json_decref(j);
        }
        check_select(&p, data, size);
        return 0;
}
