/* SPDX-License-Identifier: Apache-2.0 */
#include "retention.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "util.h"

const struct retention_policy retention_policy_default = {
        .disk_every_s = 60,
        .full_every_s = 900,
        .full_keep = 4,
        .n_tiers = 4,
        .tiers = {
                { .every_s = 60, .for_s = 600 },
                { .every_s = 600, .for_s = 3600 },
                { .every_s = 3600, .for_s = 86400 },
                { .every_s = 86400, .for_s = 7 * 86400 },
        },
};

const char *const retention_policy_keys[] = { "disk_every", "full_every", "full_keep", "tiers", NULL };
const char *const retention_tier_keys[] = { "every", "for", NULL };

static const char *const kind_names[_SNAPSHOT_KIND_MAX] = {
        [SNAPSHOT_DISK] = "disk",
        [SNAPSHOT_FULL] = "full",
};

const char *snapshot_kind_to_string(enum snapshot_kind kind) {
        if ((unsigned) kind >= _SNAPSHOT_KIND_MAX)
                return NULL;
        return kind_names[kind];
}

int snapshot_kind_from_string(const char *s, enum snapshot_kind *ret) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ARRAY_SIZE(kind_names); i++)
                if (strcmp(s, kind_names[i]) == 0) {
                        *ret = (enum snapshot_kind) i;
                        return 0;
                }
        return -EINVAL;
}

static int fail(char **ret_error, const char *fmt, ...) _printf_(2, 3);
static int fail(char **ret_error, const char *fmt, ...) {
        if (ret_error) {
                va_list ap;
                va_start(ap, fmt);
                char *m = strdup_vprintf(fmt, ap);
                va_end(ap);
                if (!m)
                        return -ENOMEM;
                *ret_error = m;
        }
        return -EINVAL;
}

/* Reads a count of seconds (or full_keep) from min to max into *ret. */
static int get_int(const json_t *v, const char *name, int64_t min, int64_t max, int64_t *ret,
                   char **ret_error) {
        if (!json_is_integer(v))
                return fail(ret_error, "%s must be an integer", name);
        json_int_t x = json_integer_value(v);
        if (x < 0)
                return fail(ret_error, "%s must not be negative", name);
        if (x < min)
                return fail(ret_error, "%s must be at least %lld", name, (long long) min);
        if (x > max) {
                if (max == RETENTION_SECONDS_MAX)
                        return fail(ret_error, "%s must be at most %lld (10 years)", name, (long long) max);
                return fail(ret_error, "%s must be at most %lld", name, (long long) max);
        }
        *ret = x;
        return 0;
}

/* Rejects any key of o not in the NULL-terminated list known. */
static int check_keys(const json_t *o, const char *const *known, const char *where, char **ret_error) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                if (!strv_contains(known, k))
                        return fail(ret_error, "%sunknown key '%.64s'", where, k);
        }
        return 0;
}

static int parse_tiers(const json_t *a, struct retention_policy *p, char **ret_error) {
        int r;

        if (!json_is_array(a))
                return fail(ret_error, "tiers must be an array of {\"every\": s, \"for\": s}");
        size_t n = json_array_size(a);
        if (n == 0)
                return fail(ret_error, "tiers must not be empty");
        if (n > RETENTION_TIERS_MAX)
                return fail(ret_error, "tiers must have at most %d entries", RETENTION_TIERS_MAX);

        for (size_t i = 0; i < n; i++) {
                const json_t *t = json_array_get(a, i);
                char where[32], name[48];
                snprintf(where, sizeof where, "tiers[%zu]", i);
                if (!json_is_object(t))
                        return fail(ret_error, "%s must be an object {\"every\": s, \"for\": s}", where);
                char prefix[40];
                snprintf(prefix, sizeof prefix, "%s: ", where);
                if ((r = check_keys(t, retention_tier_keys, prefix, ret_error)) < 0)
                        return r;

                struct retention_tier tier;
                static const char *const fields[] = { "every", "for" };
                int64_t *dst[] = { &tier.every_s, &tier.for_s };
                for (size_t f = 0; f < ARRAY_SIZE(fields); f++) {
                        const json_t *v = json_object_get(t, fields[f]);
                        snprintf(name, sizeof name, "%s.%s", where, fields[f]);
                        if (!v)
                                return fail(ret_error, "%s is required", name);
                        /* every 0 would make the bucket a division by zero */
                        if ((r = get_int(v, name, 1, RETENTION_SECONDS_MAX, dst[f], ret_error)) < 0)
                                return r;
                }
                if (tier.every_s > tier.for_s)
                        return fail(ret_error, "%s.every must be <= %s.for", where, where);
                /* increasing ages make "the first tier whose for exceeds the age" the finest one */
                if (i > 0 && tier.for_s <= p->tiers[i - 1].for_s)
                        return fail(ret_error, "%s.for must be greater than tiers[%zu].for", where, i - 1);
                p->tiers[i] = tier;
        }
        p->n_tiers = n;
        return 0;
}

int retention_policy_parse(json_t *j, const struct retention_policy *base, struct retention_policy *ret,
                           char **ret_error) {
        struct retention_policy p = *base;
        const json_t *v;
        int64_t x;
        int r;

        if (!json_is_object(j))
                return fail(ret_error, "snapshot policy must be a JSON object");
        if ((r = check_keys(j, retention_policy_keys, "", ret_error)) < 0)
                return r;

        if ((v = json_object_get(j, "disk_every"))) {
                if ((r = get_int(v, "disk_every", 0, RETENTION_SECONDS_MAX, &p.disk_every_s, ret_error)) < 0)
                        return r;
        }
        if ((v = json_object_get(j, "full_every"))) {
                if ((r = get_int(v, "full_every", 0, RETENTION_SECONDS_MAX, &p.full_every_s, ret_error)) < 0)
                        return r;
        }
        if ((v = json_object_get(j, "full_keep"))) {
                if ((r = get_int(v, "full_keep", 0, RETENTION_FULL_KEEP_MAX, &x, ret_error)) < 0)
                        return r;
                p.full_keep = (unsigned) x;
        }
        if ((v = json_object_get(j, "tiers"))) {
                if ((r = parse_tiers(v, &p, ret_error)) < 0)
                        return r;
        }
        /* checked on the merged result: a base may set full_every, the override full_keep */
        if (p.full_every_s > 0 && p.full_keep == 0)
                return fail(ret_error, "full_keep must be at least 1 while full_every is set "
                                       "(set full_every to 0 to take no full snapshots)");

        *ret = p;
        return 0;
}

int retention_policy_from_string(const char *s, const struct retention_policy *base,
                                 struct retention_policy *ret, char **ret_error) {
        json_error_t jerr;

        if (!s)
                return -EINVAL;
        size_t len = strnlen(s, RETENTION_POLICY_STRING_MAX + 1);
        if (len > RETENTION_POLICY_STRING_MAX)
                return fail(ret_error, "snapshot policy is longer than %d bytes",
                            RETENTION_POLICY_STRING_MAX);
        json_t *j = json_loadb(s, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
        if (!j)
                return fail(ret_error, "snapshot policy is not valid JSON: %s (line %d, column %d)",
                            jerr.text, jerr.line, jerr.column);
        int r = retention_policy_parse(j, base, ret, ret_error);
        json_decref(j);
        return r;
}

json_t *retention_policy_json(const struct retention_policy *p) {
        json_t *tiers = json_array();
        if (!tiers)
                return NULL;
        for (size_t i = 0; i < p->n_tiers && i < RETENTION_TIERS_MAX; i++) {
                json_t *t = json_pack("{s:I, s:I}", "every", (json_int_t) p->tiers[i].every_s, "for",
                                      (json_int_t) p->tiers[i].for_s);
                if (!t || json_array_append_new(tiers, t) < 0) {
                        json_decref(tiers);
                        return NULL;
                }
        }
        /* "o" hands tiers to the object, or frees it when packing fails */
        return json_pack("{s:I, s:I, s:I, s:o}", "disk_every", (json_int_t) p->disk_every_s, "full_every",
                         (json_int_t) p->full_every_s, "full_keep", (json_int_t) p->full_keep, "tiers",
                         tiers);
}

bool retention_due(const struct retention_policy *p, enum snapshot_kind kind, int64_t last_ms,
                   int64_t now_ms) {
        int64_t every_s, elapsed;

        switch (kind) {
        case SNAPSHOT_DISK: every_s = p->disk_every_s; break;
        case SNAPSHOT_FULL: every_s = p->full_every_s; break;
        default: return false;
        }
        if (every_s <= 0)
                return false;
        if (last_ms == 0 || now_ms < last_ms)
                return true;
        if (__builtin_sub_overflow(now_ms, last_ms, &elapsed))
                return true;
        return elapsed / 1000 >= every_s; /* divides rather than multiplies: no overflow */
}

/* One unpinned snapshot of a known kind, with its sort key. */
struct item {
        size_t index;   /* into snaps[] */
        int kind;       /* enum snapshot_kind */
        int tier;       /* disk: index of the tier covering its age, -1 when older than all */
        int64_t bucket; /* disk: floor(created_ms / tier's every_ms) */
        int64_t created_ms;
        const char *id;
};

/* Whether a is newer than b: later, or at the same millisecond the larger id,
 * so "newest" never depends on the order of the input. */
static bool newer(int64_t a_ms, const char *a_id, int64_t b_ms, const char *b_id) {
        if (a_ms != b_ms)
                return a_ms > b_ms;
        return strcmp(a_id ? a_id : "", b_id ? b_id : "") > 0;
}

/* Groups by (kind, tier, bucket), newest first within a group. */
static int item_compare(const void *x, const void *y) {
        const struct item *a = x, *b = y;
        if (a->kind != b->kind)
                return a->kind < b->kind ? -1 : 1;
        if (a->tier != b->tier)
                return a->tier < b->tier ? -1 : 1;
        if (a->bucket != b->bucket)
                return a->bucket < b->bucket ? -1 : 1;
        if (newer(a->created_ms, a->id, b->created_ms, b->id))
                return -1;
        if (newer(b->created_ms, b->id, a->created_ms, a->id))
                return 1;
        return 0;
}

/* floor(a / b) for b > 0, also for negative a (times before the epoch). */
static int64_t floor_div(int64_t a, int64_t b) {
        int64_t q = a / b;
        return (a % b != 0 && a < 0) ? q - 1 : q;
}

static void disk_place(const struct retention_policy *p, int64_t created_ms, int64_t now_ms,
                       struct item *it) {
        int64_t age = 0;
        if (created_ms < now_ms && __builtin_sub_overflow(now_ms, created_ms, &age))
                age = INT64_MAX;
        it->tier = -1;
        it->bucket = 0;
        for (size_t t = 0; t < p->n_tiers && t < RETENTION_TIERS_MAX; t++)
                if (age < p->tiers[t].for_s * 1000) {
                        it->tier = (int) t;
                        it->bucket = floor_div(created_ms, MAX(p->tiers[t].every_s, (int64_t) 1) * 1000);
                        break;
                }
}

size_t retention_select(const struct retention_policy *p, const struct retention_snapshot *snaps, size_t n,
                        int64_t now_ms, bool *ret_keep) {
        for (size_t i = 0; i < n; i++)
                ret_keep[i] = true;
        if (n == 0)
                return 0;
        _cleanup_free_ struct item *items = calloc(n, sizeof *items);
        if (!items)
                return 0;

        size_t m = 0;
        const struct retention_snapshot *newest_disk = NULL;
        for (size_t i = 0; i < n; i++) {
                const struct retention_snapshot *s = &snaps[i];
                if (s->pinned || (s->kind != SNAPSHOT_DISK && s->kind != SNAPSHOT_FULL))
                        continue;
                struct item *it = &items[m++];
                *it = (struct item){ .index = i, .kind = s->kind, .created_ms = s->created_ms, .id = s->id };
                if (s->kind == SNAPSHOT_DISK) {
                        disk_place(p, s->created_ms, now_ms, it);
                        if (!newest_disk ||
                            newer(s->created_ms, s->id, newest_disk->created_ms, newest_disk->id))
                                newest_disk = s;
                }
        }
        qsort(items, m, sizeof *items, item_compare);

        size_t deleted = 0, full_seen = 0;
        for (size_t k = 0; k < m; k++) {
                const struct item *it = &items[k];
                bool keep;
                if (it->kind == SNAPSHOT_FULL)
                        keep = full_seen++ < p->full_keep;
                else if (&snaps[it->index] == newest_disk)
                        keep = true;
                else if (it->tier < 0)
                        keep = false;
                else /* the first of its (tier, bucket) group is the newest */
                        keep = k == 0 || items[k - 1].kind != it->kind || items[k - 1].tier != it->tier ||
                               items[k - 1].bucket != it->bucket;
                ret_keep[it->index] = keep;
                if (!keep)
                        deleted++;
        }
        return deleted;
}
