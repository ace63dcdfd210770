/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macros.h"
#include "retention.h"

#define SEC 1000ll
#define MIN_MS (60 * SEC)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)
/* Not aligned to a minute, so buckets and snapshot times do not line up by luck. */
#define T0 (1700000000000ll + 12345)

static bool policy_equal(const struct retention_policy *a, const struct retention_policy *b) {
        if (a->disk_every_s != b->disk_every_s || a->full_every_s != b->full_every_s ||
            a->full_keep != b->full_keep || a->n_tiers != b->n_tiers)
                return false;
        for (size_t i = 0; i < a->n_tiers; i++)
                if (a->tiers[i].every_s != b->tiers[i].every_s || a->tiers[i].for_s != b->tiers[i].for_s)
                        return false;
        return true;
}

/* Parses JSON text over base through retention_policy_from_string. */
static int parse(const char *text, const struct retention_policy *base, struct retention_policy *ret,
                 char **ret_error) {
        return retention_policy_from_string(text, base, ret, ret_error);
}

static void test_defaults(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        assert_int_equal(p->disk_every_s, 60);
        assert_int_equal(p->full_every_s, 900);
        assert_int_equal(p->full_keep, 4);
        assert_int_equal(p->n_tiers, 4);
        static const int64_t every[] = { 60, 600, 3600, 86400 }, for_s[] = { 600, 3600, 86400, 7 * 86400 };
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(p->tiers[i].every_s, every[i]);
                assert_int_equal(p->tiers[i].for_s, for_s[i]);
        }

        json_t *j = retention_policy_json(p);
        assert_non_null(j);
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        assert_string_equal(s, "{\"disk_every\":60,\"full_every\":900,\"full_keep\":4,\"tiers\":["
                               "{\"every\":60,\"for\":600},{\"every\":600,\"for\":3600},"
                               "{\"every\":3600,\"for\":86400},{\"every\":86400,\"for\":604800}]}");
        free(s);
        json_decref(j);

        /* an empty object is the base itself */
        struct retention_policy q;
        assert_int_equal(parse("{}", p, &q, NULL), 0);
        assert_true(policy_equal(&q, p));
}

static void test_kind_strings(void **state) {
        enum snapshot_kind k;
        assert_string_equal(snapshot_kind_to_string(SNAPSHOT_DISK), "disk");
        assert_string_equal(snapshot_kind_to_string(SNAPSHOT_FULL), "full");
        assert_null(snapshot_kind_to_string(_SNAPSHOT_KIND_MAX));
        assert_int_equal(snapshot_kind_from_string("full", &k), 0);
        assert_int_equal(k, SNAPSHOT_FULL);
        assert_int_equal(snapshot_kind_from_string("disk", &k), 0);
        assert_int_equal(k, SNAPSHOT_DISK);
        assert_int_equal(snapshot_kind_from_string("memory", &k), -EINVAL);
        assert_int_equal(snapshot_kind_from_string(NULL, &k), -EINVAL);
}

static void test_parse_overrides(void **state) {
        const struct retention_policy *d = &retention_policy_default;
        struct retention_policy global, sandbox;
        char *err = NULL;

        /* one key changes one field */
        assert_int_equal(parse("{\"disk_every\":30}", d, &global, &err), 0);
        assert_null(err);
        assert_int_equal(global.disk_every_s, 30);
        assert_int_equal(global.full_every_s, 900);
        assert_int_equal(global.full_keep, 4);
        assert_int_equal(global.n_tiers, 4);
        assert_int_equal(global.tiers[3].for_s, 7 * 86400);

        /* a per-sandbox policy over the global one: tiers replace the base's as a whole */
        assert_int_equal(parse("{\"full_keep\":64,\"tiers\":[{\"every\":300,\"for\":3600},"
                               "{\"every\":315360000,\"for\":315360000}]}",
                               &global, &sandbox, &err),
                         0);
        assert_int_equal(sandbox.disk_every_s, 30); /* from global */
        assert_int_equal(sandbox.full_every_s, 900);
        assert_int_equal(sandbox.full_keep, 64);
        assert_int_equal(sandbox.n_tiers, 2);
        assert_int_equal(sandbox.tiers[0].every_s, 300);
        assert_int_equal(sandbox.tiers[0].for_s, 3600);
        assert_int_equal(sandbox.tiers[1].every_s, 315360000);

        /* 0 disables a kind; full_keep 0 is fine once full snapshots are off */
        assert_int_equal(parse("{\"disk_every\":0,\"full_every\":0,\"full_keep\":0}", d, &sandbox, &err), 0);
        assert_int_equal(sandbox.disk_every_s, 0);
        assert_int_equal(sandbox.full_every_s, 0);
        assert_int_equal(sandbox.full_keep, 0);

        /* every == for is allowed; eight tiers are allowed */
        assert_int_equal(
                parse("{\"tiers\":[{\"every\":1,\"for\":1},{\"every\":1,\"for\":2},{\"every\":1,\"for\":3},"
                      "{\"every\":1,\"for\":4},{\"every\":1,\"for\":5},{\"every\":1,\"for\":6},"
                      "{\"every\":1,\"for\":7},{\"every\":8,\"for\":8}]}",
                      d, &sandbox, &err),
                0);
        assert_int_equal(sandbox.n_tiers, 8);
        assert_int_equal(sandbox.tiers[7].every_s, 8);

        /* ret may be base */
        sandbox = global;
        assert_int_equal(parse("{\"full_every\":60}", &sandbox, &sandbox, &err), 0);
        assert_int_equal(sandbox.full_every_s, 60);
        assert_int_equal(sandbox.disk_every_s, 30);

        /* the json_t entry point */
        json_t *j = json_pack("{s:i}", "full_keep", 1);
        assert_int_equal(retention_policy_parse(j, d, &sandbox, &err), 0);
        assert_int_equal(sandbox.full_keep, 1);
        json_decref(j);
        assert_null(err);
}

static void test_parse_errors(void **state) {
        static const struct {
                const char *json;
                const char *message;
        } cases[] = {
                { "[]", "snapshot policy must be a JSON object" },
                { "60", "snapshot policy must be a JSON object" },
                { "{\"disk_evry\":60}", "unknown key 'disk_evry'" },
                { "{\"disk_every\":\"60\"}", "disk_every must be an integer" },
                { "{\"disk_every\":60.0}", "disk_every must be an integer" },
                { "{\"disk_every\":null}", "disk_every must be an integer" },
                { "{\"disk_every\":true}", "disk_every must be an integer" },
                { "{\"disk_every\":-1}", "disk_every must not be negative" },
                { "{\"disk_every\":315360001}", "disk_every must be at most 315360000 (10 years)" },
                { "{\"disk_every\":9223372036854775807}",
                  "disk_every must be at most 315360000 (10 years)" },
                { "{\"full_every\":-900}", "full_every must not be negative" },
                { "{\"full_every\":[900]}", "full_every must be an integer" },
                { "{\"full_every\":315360001}", "full_every must be at most 315360000 (10 years)" },
                { "{\"full_keep\":65}", "full_keep must be at most 64" },
                { "{\"full_keep\":-1}", "full_keep must not be negative" },
                { "{\"full_keep\":\"4\"}", "full_keep must be an integer" },
                { "{\"full_keep\":0}", "full_keep must be at least 1 while full_every is set "
                                       "(set full_every to 0 to take no full snapshots)" },
                { "{\"tiers\":{}}", "tiers must be an array of {\"every\": s, \"for\": s}" },
                { "{\"tiers\":[]}", "tiers must not be empty" },
                { "{\"tiers\":[{\"every\":1,\"for\":1},{\"every\":1,\"for\":2},{\"every\":1,\"for\":3},"
                  "{\"every\":1,\"for\":4},{\"every\":1,\"for\":5},{\"every\":1,\"for\":6},"
                  "{\"every\":1,\"for\":7},{\"every\":1,\"for\":8},{\"every\":1,\"for\":9}]}",
                  "tiers must have at most 8 entries" },
                { "{\"tiers\":[60]}", "tiers[0] must be an object {\"every\": s, \"for\": s}" },
                { "{\"tiers\":[{\"every\":60,\"for\":600},null]}",
                  "tiers[1] must be an object {\"every\": s, \"for\": s}" },
                { "{\"tiers\":[{\"every\":60,\"for\":600,\"keep\":1}]}", "tiers[0]: unknown key 'keep'" },
                { "{\"tiers\":[{\"for\":600}]}", "tiers[0].every is required" },
                { "{\"tiers\":[{\"every\":60}]}", "tiers[0].for is required" },
                { "{\"tiers\":[{\"every\":0,\"for\":600}]}", "tiers[0].every must be at least 1" },
                { "{\"tiers\":[{\"every\":-60,\"for\":600}]}", "tiers[0].every must not be negative" },
                { "{\"tiers\":[{\"every\":60,\"for\":\"600\"}]}", "tiers[0].for must be an integer" },
                { "{\"tiers\":[{\"every\":60,\"for\":-600}]}", "tiers[0].for must not be negative" },
                { "{\"tiers\":[{\"every\":60,\"for\":315360001}]}",
                  "tiers[0].for must be at most 315360000 (10 years)" },
                { "{\"tiers\":[{\"every\":60,\"for\":600},{\"every\":3600,\"for\":1800}]}",
                  "tiers[1].every must be <= tiers[1].for" },
                { "{\"tiers\":[{\"every\":60,\"for\":600},{\"every\":60,\"for\":600}]}",
                  "tiers[1].for must be greater than tiers[0].for" },
                { "{\"tiers\":[{\"every\":60,\"for\":3600},{\"every\":60,\"for\":600}]}",
                  "tiers[1].for must be greater than tiers[0].for" },
                /* the first error wins, and a bad tier is not half applied */
                { "{\"tiers\":[{\"every\":60,\"for\":600},{\"every\":600,\"for\":3600},{\"every\":7200,"
                  "\"for\":3600}]}",
                  "tiers[2].every must be <= tiers[2].for" },
        };

        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                struct retention_policy ret;
                struct retention_policy before;
                memset(&ret, 0xa5, sizeof ret);
                memcpy(&before, &ret, sizeof ret);
                char *err = NULL;
                int r = parse(cases[i].json, &retention_policy_default, &ret, &err);
                if (r != -EINVAL || !err || strcmp(err, cases[i].message) != 0)
                        fail_msg("case %zu %s: r=%d err=%s, expected '%s'", i, cases[i].json, r,
                                 err ? err : "(null)", cases[i].message);
                assert_memory_equal(&ret, &before, sizeof ret); /* untouched on failure */
                free(err);
                /* a caller that does not want the message */
                assert_int_equal(parse(cases[i].json, &retention_policy_default, &ret, NULL), -EINVAL);
        }
}

static void test_from_string_errors(void **state) {
        struct retention_policy p;
        char *err = NULL;

        assert_int_equal(parse("{\"disk_every\":", &retention_policy_default, &p, &err), -EINVAL);
        assert_non_null(err);
        assert_non_null(strstr(err, "snapshot policy is not valid JSON: "));
        free(err);
        err = NULL;

        /* a duplicate key is ambiguous: rejected, not last-wins */
        assert_int_equal(parse("{\"disk_every\":1,\"disk_every\":2}", &retention_policy_default, &p, &err),
                         -EINVAL);
        assert_non_null(strstr(err, "not valid JSON"));
        free(err);
        err = NULL;

        assert_int_equal(parse("", &retention_policy_default, &p, &err), -EINVAL);
        free(err);
        err = NULL;

        char *big = malloc(RETENTION_POLICY_STRING_MAX + 2);
        assert_non_null(big);
        memset(big, ' ', RETENTION_POLICY_STRING_MAX + 1);
        big[0] = '{';
        big[RETENTION_POLICY_STRING_MAX] = '}';
        big[RETENTION_POLICY_STRING_MAX + 1] = 0;
        assert_int_equal(parse(big, &retention_policy_default, &p, &err), -EINVAL);
        assert_string_equal(err, "snapshot policy is longer than 4096 bytes");
        free(err);
        err = NULL;
        big[RETENTION_POLICY_STRING_MAX - 1] = '}'; /* exactly the limit */
        big[RETENTION_POLICY_STRING_MAX] = 0;
        assert_int_equal(parse(big, &retention_policy_default, &p, &err), 0);
        free(big);

        assert_int_equal(parse(NULL, &retention_policy_default, &p, &err), -EINVAL);
        assert_null(err);
}

static void roundtrip(const struct retention_policy *p) {
        /* parse over a base that differs everywhere, so nothing comes from it */
        struct retention_policy other = {
                .disk_every_s = 7, .full_every_s = 0, .full_keep = 9, .n_tiers = 1, .tiers = { { 1, 2 } }
        };
        struct retention_policy q;
        char *err = NULL;

        json_t *j = retention_policy_json(p);
        assert_non_null(j);
        assert_int_equal(retention_policy_parse(j, &other, &q, &err), 0);
        assert_true(policy_equal(p, &q));

        char *text = json_dumps(j, JSON_COMPACT);
        assert_non_null(text);
        assert_int_equal(retention_policy_from_string(text, &other, &q, &err), 0);
        assert_true(policy_equal(p, &q));
        assert_null(err);
        free(text);
        json_decref(j);
}

static void test_json_roundtrip(void **state) {
        struct retention_policy p;
        roundtrip(&retention_policy_default);
        assert_int_equal(parse("{\"disk_every\":0,\"full_every\":0,\"full_keep\":0,"
                               "\"tiers\":[{\"every\":315360000,\"for\":315360000}]}",
                               &retention_policy_default, &p, NULL),
                         0);
        roundtrip(&p);
        assert_int_equal(
                parse("{\"disk_every\":5,\"full_every\":3600,\"full_keep\":64,\"tiers\":["
                      "{\"every\":5,\"for\":60},{\"every\":30,\"for\":600},{\"every\":60,\"for\":3600},"
                      "{\"every\":300,\"for\":7200},{\"every\":600,\"for\":86400},"
                      "{\"every\":3600,\"for\":172800},{\"every\":86400,\"for\":2592000},"
                      "{\"every\":604800,\"for\":31536000}]}",
                      &retention_policy_default, &p, NULL),
                0);
        roundtrip(&p);
}

static void test_due(void **state) {
        const struct retention_policy *d = &retention_policy_default;
        struct retention_policy off;
        assert_int_equal(parse("{\"disk_every\":0,\"full_every\":0}", d, &off, NULL), 0);

        /* never taken */
        assert_true(retention_due(d, SNAPSHOT_DISK, 0, T0));
        assert_true(retention_due(d, SNAPSHOT_FULL, 0, T0));
        /* disabled kinds are never due, not even the first time */
        assert_false(retention_due(&off, SNAPSHOT_DISK, 0, T0));
        assert_false(retention_due(&off, SNAPSHOT_FULL, T0 - 10 * DAY_MS, T0));
        /* the interval is inclusive, to the millisecond */
        assert_false(retention_due(d, SNAPSHOT_DISK, T0, T0));
        assert_false(retention_due(d, SNAPSHOT_DISK, T0, T0 + 60 * SEC - 1));
        assert_true(retention_due(d, SNAPSHOT_DISK, T0, T0 + 60 * SEC));
        assert_true(retention_due(d, SNAPSHOT_DISK, T0, T0 + 3 * DAY_MS));
        /* each kind has its own interval */
        assert_false(retention_due(d, SNAPSHOT_FULL, T0, T0 + 60 * SEC));
        assert_false(retention_due(d, SNAPSHOT_FULL, T0, T0 + 900 * SEC - 1));
        assert_true(retention_due(d, SNAPSHOT_FULL, T0, T0 + 900 * SEC));
        /* the clock stepped back behind the last snapshot: take one now */
        assert_true(retention_due(d, SNAPSHOT_DISK, T0, T0 - 1));
        /* extremes do not overflow */
        assert_true(retention_due(d, SNAPSHOT_DISK, INT64_MIN + 1, INT64_MAX));
        assert_false(retention_due(d, SNAPSHOT_DISK, INT64_MAX, INT64_MAX));
        /* an out-of-range kind is never due */
        assert_false(retention_due(d, (enum snapshot_kind) 7, 0, T0));
}

/* A simulated sandbox's snapshot list. */
#define SIM_MAX 256
struct sim {
        size_t n;
        struct retention_snapshot snaps[SIM_MAX];
        char ids[SIM_MAX][24];
        unsigned next_id;
        size_t deleted;
};

static void sim_add(struct sim *s, enum snapshot_kind kind, int64_t created_ms, bool pinned) {
        assert_true(s->n < SIM_MAX);
        snprintf(s->ids[s->n], sizeof s->ids[0], "snap-%08u", s->next_id++);
        s->snaps[s->n] = (struct retention_snapshot){
                .id = s->ids[s->n], .kind = kind, .created_ms = created_ms, .pinned = pinned
        };
        s->n++;
}

/* Applies retention at now_ms and drops what it deleted. */
static void sim_apply(const struct retention_policy *p, struct sim *s, int64_t now_ms) {
        bool keep[SIM_MAX];
        size_t del = retention_select(p, s->snaps, s->n, now_ms, keep);
        size_t m = 0, counted = 0;
        for (size_t i = 0; i < s->n; i++) {
                if (!keep[i]) {
                        assert_false(s->snaps[i].pinned);
                        counted++;
                        continue;
                }
                if (m != i) {
                        memcpy(s->ids[m], s->ids[i], sizeof s->ids[0]);
                        s->snaps[m] = s->snaps[i];
                }
                s->snaps[m].id = s->ids[m];
                m++;
        }
        assert_int_equal(del, counted);
        s->deleted += del;
        s->n = m;
}

static size_t sim_count(const struct sim *s, enum snapshot_kind kind, bool pinned, int64_t now_ms,
                        int64_t min_age, int64_t max_age) {
        size_t c = 0;
        for (size_t i = 0; i < s->n; i++) {
                int64_t age = now_ms - s->snaps[i].created_ms;
                if (s->snaps[i].kind == kind && s->snaps[i].pinned == pinned && age >= min_age &&
                    age < max_age)
                        c++;
        }
        return c;
}

static bool sim_has(const struct sim *s, const char *id) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->snaps[i].id, id) == 0)
                        return true;
        return false;
}

/* Drives the defaults for 8 days with a 20 s timer tick, as the control plane would. */
static void test_simulation_disk(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        struct retention_policy disk_only = *p;
        disk_only.full_every_s = 0;
        struct sim *s = calloc(1, sizeof *s);
        assert_non_null(s);
        int64_t last = 0, now = T0;
        size_t taken = 0, max_n = 0;
        char pinned_id[24] = "";

        for (; now < T0 + 8 * DAY_MS; now += 20 * SEC) {
                if (!retention_due(&disk_only, SNAPSHOT_DISK, last, now))
                        continue;
                sim_add(s, SNAPSHOT_DISK, now, false);
                last = now;
                taken++;
                if (taken == 30) { /* a user's snapshot early on, never to be deleted */
                        sim_add(s, SNAPSHOT_DISK, now + 1, true);
                        memcpy(pinned_id, s->ids[s->n - 1], sizeof pinned_id);
                }
                sim_apply(&disk_only, s, now);
                max_n = MAX(max_n, s->n);
                assert_true(s->n <= 60);
                /* every minute of the last 10 has its snapshot, as far back as the run goes */
                for (int64_t m = 0; m < 10 && m * MIN_MS <= now - T0; m++)
                        assert_int_equal(
                                sim_count(s, SNAPSHOT_DISK, false, now, m * MIN_MS, (m + 1) * MIN_MS), 1);
        }
        now = last; /* when retention last ran */
        assert_int_equal(taken, 8 * 24 * 60);

        size_t scheduled = sim_count(s, SNAPSHOT_DISK, false, now, 0, INT64_MAX);
        assert_true(scheduled <= 10 + 6 + 24 + 7 + 3);
        /* per tier: one per bucket, plus at most the bucket straddling the tier's start */
        assert_int_equal(sim_count(s, SNAPSHOT_DISK, false, now, 0, 10 * MIN_MS), 10);
        assert_true(sim_count(s, SNAPSHOT_DISK, false, now, 10 * MIN_MS, HOUR_MS) <= 6);
        assert_true(sim_count(s, SNAPSHOT_DISK, false, now, HOUR_MS, DAY_MS) <= 24);
        assert_true(sim_count(s, SNAPSHOT_DISK, false, now, DAY_MS, 7 * DAY_MS) <= 7);
        assert_int_equal(sim_count(s, SNAPSHOT_DISK, false, now, 7 * DAY_MS, INT64_MAX), 0);
        /* the far end: one per day back to just under 7 days */
        int64_t oldest = INT64_MAX;
        for (size_t i = 0; i < s->n; i++)
                if (!s->snaps[i].pinned)
                        oldest = MIN(oldest, s->snaps[i].created_ms);
        assert_true(now - oldest >= 6 * DAY_MS);
        assert_true(now - oldest < 7 * DAY_MS);
        /* the pinned one is 8 days old and still there */
        assert_true(sim_has(s, pinned_id));
        assert_int_equal(s->n, scheduled + 1);
        assert_int_equal(s->deleted + scheduled, taken);
        print_message("disk simulation: %zu taken, %zu kept, at most %zu at once\n", taken, scheduled,
                      max_n);
        free(s);
}

/* Full and disk snapshots side by side for 2 days: exactly the 4 newest full ones stay. */
static void test_simulation_full(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        struct sim *s = calloc(1, sizeof *s);
        assert_non_null(s);
        int64_t last_disk = 0, last_full = 0;
        size_t full_taken = 0;

        for (int64_t now = T0; now < T0 + 2 * DAY_MS; now += 30 * SEC) {
                bool changed = false;
                if (retention_due(p, SNAPSHOT_DISK, last_disk, now)) {
                        sim_add(s, SNAPSHOT_DISK, now, false);
                        last_disk = now;
                        changed = true;
                }
                if (retention_due(p, SNAPSHOT_FULL, last_full, now)) {
                        sim_add(s, SNAPSHOT_FULL, now, false);
                        last_full = now;
                        full_taken++;
                        if (full_taken == 3) /* a user's full snapshot */
                                sim_add(s, SNAPSHOT_FULL, now + 5, true);
                        changed = true;
                }
                if (!changed)
                        continue;
                sim_apply(p, s, now);
                size_t full = sim_count(s, SNAPSHOT_FULL, false, now, 0, INT64_MAX);
                assert_int_equal(full, MIN(full_taken, (size_t) 4));
                assert_int_equal(sim_count(s, SNAPSHOT_FULL, true, now, INT64_MIN, INT64_MAX),
                                 full_taken >= 3 ? 1 : 0);
                assert_true(s->n <= 64);
        }
        assert_int_equal(full_taken, 2 * 24 * 4);
        /* the 4 kept are the newest: 0, 15, 30 and 45 minutes older than the last */
        for (int64_t k = 0; k < 4; k++)
                assert_int_equal(
                        sim_count(s, SNAPSHOT_FULL, false, last_full, k * 15 * MIN_MS, k * 15 * MIN_MS + 1),
                        1);
        /* full snapshots do not count against the disk tiers */
        assert_int_equal(sim_count(s, SNAPSHOT_DISK, false, last_disk, 0, 10 * MIN_MS), 10);
        free(s);
}

static void test_pinned_and_newest(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        int64_t now = T0 + 365 * DAY_MS;
        struct retention_snapshot snaps[] = {
                { "a", SNAPSHOT_DISK, T0, true },           /* a year old, pinned */
                { "b", SNAPSHOT_DISK, T0 + 1, false },      /* a year old */
                { "c", SNAPSHOT_DISK, T0 + 2, false },      /* a year old, but the newest disk one */
                { "d", SNAPSHOT_FULL, T0, true },           /* pinned full */
                { "e", SNAPSHOT_FULL, now - 1, true },      /* pinned full, not counted in full_keep */
                { "f", (enum snapshot_kind) 9, T0, false }, /* unknown kind: left alone */
        };
        bool keep[6];
        assert_int_equal(retention_select(p, snaps, 6, now, keep), 1);
        assert_true(keep[0]);
        assert_false(keep[1]);
        assert_true(keep[2]);
        assert_true(keep[3]);
        assert_true(keep[4]);
        assert_true(keep[5]);

        /* the newest unpinned disk snapshot stays even when a pinned one is newer */
        struct retention_snapshot two[] = {
                { "old", SNAPSHOT_DISK, T0, false },
                { "pin", SNAPSHOT_DISK, now, true },
        };
        assert_int_equal(retention_select(p, two, 2, now, keep), 0);

        /* nothing at all */
        assert_int_equal(retention_select(p, NULL, 0, now, keep), 0);

        /* full_keep 0 (full snapshots off) drops every scheduled full one, never a pinned one */
        struct retention_policy off;
        assert_int_equal(parse("{\"full_every\":0,\"full_keep\":0}", p, &off, NULL), 0);
        struct retention_snapshot fulls[] = {
                { "f1", SNAPSHOT_FULL, now - 2, false },
                { "f2", SNAPSHOT_FULL, now - 1, true },
                { "f3", SNAPSHOT_FULL, now, false },
        };
        assert_int_equal(retention_select(&off, fulls, 3, now, keep), 2);
        assert_false(keep[0]);
        assert_true(keep[1]);
        assert_false(keep[2]);
}

static void test_buckets(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        /* buckets are aligned to the epoch: 12:00:00.000 starts a minute */
        int64_t minute = (T0 / MIN_MS + 1) * MIN_MS;
        int64_t now = minute + 5 * MIN_MS;
        struct retention_snapshot snaps[] = {
                { "a", SNAPSHOT_DISK, minute - 1, false },        /* previous minute: its own bucket */
                { "b", SNAPSHOT_DISK, minute, false },            /* same minute as c, older */
                { "c", SNAPSHOT_DISK, minute + 59 * SEC, false }, /* the newest of its minute */
                { "x", SNAPSHOT_DISK, now + HOUR_MS, false }, /* from the future: age 0, same bucket as y */
                { "y", SNAPSHOT_DISK, now + HOUR_MS + 1, false }, /* the newest overall */
                { "t1", SNAPSHOT_DISK, minute + MIN_MS, false },  /* same millisecond: the larger id wins */
                { "t2", SNAPSHOT_DISK, minute + MIN_MS, false },
        };
        bool keep[7];
        assert_int_equal(retention_select(p, snaps, 7, now, keep), 3);
        assert_true(keep[0]);
        assert_false(keep[1]);
        assert_true(keep[2]);
        assert_false(keep[3]);
        assert_true(keep[4]);
        assert_false(keep[5]);
        assert_true(keep[6]);

        /* a snapshot is judged by the tier covering its age: 11 min old is in the 10-min tier */
        int64_t hour = (T0 / HOUR_MS + 1) * HOUR_MS;
        now = hour + 30 * MIN_MS;
        struct retention_snapshot tiers[] = {
                { "m9", SNAPSHOT_DISK, now - 9 * MIN_MS, false }, /* tier 0, minute bucket of its own */
                { "m11", SNAPSHOT_DISK, now - 11 * MIN_MS,
                  false }, /* tier 1, 10-min bucket [hour+10, hour+20) */
                { "m12", SNAPSHOT_DISK, now - 12 * MIN_MS, false }, /* same 10-min bucket, older */
                { "m21", SNAPSHOT_DISK, now - 21 * MIN_MS, false }, /* tier 1, bucket [hour, hour+10) */
                { "now", SNAPSHOT_DISK, now, false },
        };
        assert_int_equal(retention_select(p, tiers, 5, now, keep), 1);
        assert_true(keep[0]);
        assert_true(keep[1]);
        assert_false(keep[2]);
        assert_true(keep[3]);
        assert_true(keep[4]);
}

static uint64_t xorshift(uint64_t *x) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

static void test_order_independence(void **state) {
        const struct retention_policy *p = &retention_policy_default;
        enum { N = 300 };
        struct retention_snapshot *snaps = calloc(N, sizeof *snaps), *shuffled = calloc(N, sizeof *shuffled);
        char(*ids)[16] = calloc(N, sizeof *ids);
        bool keep[N], keep2[N], by_index[N];
        assert_non_null(snaps);
        assert_non_null(shuffled);
        assert_non_null(ids);
        uint64_t x = 0x2545f4914f6cdd1dull;
        int64_t now = T0 + 10 * DAY_MS;

        for (size_t i = 0; i < N; i++) {
                snprintf(ids[i], sizeof ids[i], "s%03zu", i);
                uint64_t r = xorshift(&x);
                /* clustered times, so buckets hold several and some milliseconds repeat */
                int64_t created = now - (int64_t) (r % (9 * DAY_MS));
                if (i % 10 == 1)
                        created = snaps[i - 1].created_ms;
                snaps[i] = (struct retention_snapshot){
                        .id = ids[i],
                        .kind = (r >> 40) % 4 == 0 ? SNAPSHOT_FULL : SNAPSHOT_DISK,
                        .created_ms = created,
                        .pinned = (r >> 45) % 16 == 0,
                };
        }
        size_t del = retention_select(p, snaps, N, now, keep);
        assert_true(del > 0 && del < N);

        for (int round = 0; round < 50; round++) {
                size_t perm[N];
                for (size_t i = 0; i < N; i++)
                        perm[i] = i;
                for (size_t i = N - 1; i > 0; i--) {
                        size_t j = (size_t) (xorshift(&x) % (i + 1)), t = perm[i];
                        perm[i] = perm[j];
                        perm[j] = t;
                }
                for (size_t i = 0; i < N; i++)
                        shuffled[i] = snaps[perm[i]];
                assert_int_equal(retention_select(p, shuffled, N, now, keep2), del);
                for (size_t i = 0; i < N; i++)
                        by_index[perm[i]] = keep2[i];
                for (size_t i = 0; i < N; i++)
                        if (by_index[i] != keep[i])
                                fail_msg("round %d: %s kept=%d, in order kept=%d", round, ids[i],
                                         by_index[i], keep[i]);
        }
        free(snaps);
        free(shuffled);
        free(ids);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_kind_strings),
                cmocka_unit_test(test_parse_overrides),
                cmocka_unit_test(test_parse_errors),
                cmocka_unit_test(test_from_string_errors),
                cmocka_unit_test(test_json_roundtrip),
                cmocka_unit_test(test_due),
                cmocka_unit_test(test_simulation_disk),
                cmocka_unit_test(test_simulation_full),
                cmocka_unit_test(test_pinned_and_newest),
                cmocka_unit_test(test_buckets),
                cmocka_unit_test(test_order_independence),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
