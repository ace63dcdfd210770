/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The snapshot scheduler's policy, as pure functions: when a scheduled
 * snapshot is due and which snapshots tiered retention keeps. No I/O, no
 * clock, no logging: the control plane's timer passes "now" in and acts on
 * the answers, so every rule here is tested with simulated time and fuzzed.
 *
 * Disk retention is a list of tiers {every, for}: "keep one snapshot per
 * `every`-second bucket for snapshots younger than `for` seconds". Buckets
 * are aligned to the Unix epoch (bucket = floor(created_ms / every_ms)), so
 * a snapshot's bucket never changes as it ages. A snapshot belongs to the
 * first tier whose `for` exceeds its age; within each bucket of that tier
 * only the newest is kept. Older than the last tier: deleted. Full (memory)
 * snapshots are simpler: the newest full_keep are kept. Snapshots a user
 * took on demand are "pinned" and retention never deletes them.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RETENTION_TIERS_MAX 8
#define RETENTION_FULL_KEEP_MAX 64
#define RETENTION_SECONDS_MAX (10 * 365 * 86400) /* 10 years: the largest interval or age */
#define RETENTION_POLICY_STRING_MAX 4096         /* bytes of AIRLOCK_SNAPSHOT_POLICY */

enum snapshot_kind {
        SNAPSHOT_DISK, /* the disk image alone */
        SNAPSHOT_FULL, /* disk and memory */
        _SNAPSHOT_KIND_MAX,
};

struct retention_tier {
        int64_t every_s; /* one snapshot per bucket of this many seconds, >= 1 */
        int64_t for_s;   /* ... for snapshots younger than this, >= every_s */
};

struct retention_policy {
        int64_t disk_every_s; /* scheduled disk snapshot interval; 0: none */
        int64_t full_every_s; /* scheduled full snapshot interval; 0: none */
        unsigned full_keep;   /* newest scheduled full snapshots kept, <= RETENTION_FULL_KEEP_MAX */
        size_t n_tiers;       /* 1..RETENTION_TIERS_MAX */
        struct retention_tier tiers[RETENTION_TIERS_MAX]; /* strictly increasing for_s */
};

/* One snapshot as retention sees it. */
struct retention_snapshot {
        const char *id; /* unique; breaks ties between equal created_ms */
        enum snapshot_kind kind;
        int64_t created_ms; /* Unix time, milliseconds */
        bool pinned;        /* taken on demand by a user: never deleted by retention */
};

/*
 * The built-in policy: a disk snapshot every 60 s kept per minute for
 * 10 min, per 10 min for 1 h, per hour for 1 day, per day for 7 days; a
 * full snapshot every 900 s, the last 4 kept.
 */
extern const struct retention_policy retention_policy_default;

/* The keys a policy object and each of its tiers may have, NULL-terminated
 * (the API names an unknown one in a request body from the same lists). */
extern const char *const retention_policy_keys[];
extern const char *const retention_tier_keys[];

/* "disk" / "full"; NULL for an out-of-range value. */
const char *snapshot_kind_to_string(enum snapshot_kind kind);
/* Kind by name; -EINVAL when unknown. */
int snapshot_kind_from_string(const char *s, enum snapshot_kind *ret);

/*
 * Applies a JSON policy object over base (so a per-sandbox policy overrides
 * the global one, which overrides the default). Keys, all optional:
 *   {"disk_every": s, "full_every": s, "full_keep": n,
 *    "tiers": [{"every": s, "for": s}, ...]}
 * "tiers" replaces base's tiers as a whole. Strict: unknown keys, non-integer
 * values, negatives, values over 10 years, full_keep over 64 (or 0 while full
 * snapshots are scheduled), zero or more than 8 tiers, a tier's every of 0
 * or above its for, and for not strictly increasing are all -EINVAL, with a
 * message naming the field in *ret_error (free() it; ret_error may be NULL).
 * *ret is written only on success; ret may equal base.
 */
int retention_policy_parse(json_t *j, const struct retention_policy *base, struct retention_policy *ret,
                           char **ret_error);
/* The same from JSON text (AIRLOCK_SNAPSHOT_POLICY), at most
 * RETENTION_POLICY_STRING_MAX bytes; text that is not JSON is -EINVAL. */
int retention_policy_from_string(const char *s, const struct retention_policy *base,
                                 struct retention_policy *ret, char **ret_error);
/* The policy as a JSON object with every key, which
 * retention_policy_parse() reads back to the same policy. NULL on ENOMEM. */
json_t *retention_policy_json(const struct retention_policy *p);

/*
 * Whether a scheduled snapshot of this kind is due at now_ms, the last one
 * having been taken at last_ms (0: never). Never due when the kind's
 * interval is 0; due once at least the interval has passed, and at once
 * when the clock went back behind last_ms (waiting for it to catch up could
 * leave a sandbox without snapshots for as long as the step).
 */
bool retention_due(const struct retention_policy *p, enum snapshot_kind kind, int64_t last_ms,
                   int64_t now_ms);

/*
 * Decides which of n snapshots to keep at now_ms: ret_keep[i] (n entries)
 * says for snaps[i]. Returns how many are to be deleted. Pinned snapshots,
 * the newest unpinned disk snapshot and snapshots of an unknown kind are
 * always kept; snapshots from the future count as age 0. The answer depends
 * on the set, not on its order. O(n log n); when its scratch memory cannot
 * be allocated it keeps everything and returns 0 (deleting nothing is
 * always safe; the next run catches up).
 */
size_t retention_select(const struct retention_policy *p, const struct retention_snapshot *snaps, size_t n,
                        int64_t now_ms, bool *ret_keep);
