/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of a warm pool's sizing and of when a create waits for a refill
 * (src/node/pooldemand.c), on a clock of the test's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pooldemand.h"

#define MS 1000000ULL
#define S (1000 * MS)

static void test_no_claims_keeps_the_size(void **state) {
        struct pool_demand d;
        memset(&d, 0, sizeof d);
        assert_int_equal(pool_demand_peak(&d, 1000), 0);
        assert_int_equal(pool_demand_target(pool_demand_peak(&d, 1000), 2, 16), 2);
        unsigned claims = 9, hits = 9;
        pool_demand_totals(&d, 1000, &claims, &hits);
        assert_int_equal(claims, 0);
        assert_int_equal(hits, 0);
}

static void test_a_burst_raises_the_target_for_the_history(void **state) {
        struct pool_demand d;
        memset(&d, 0, sizeof d);
        /* 20 creates within 3 s, 2 of them hits */
        for (unsigned i = 0; i < 20; i++)
                pool_demand_note(&d, 1000 + i / 7, i < 2);
        assert_int_equal(pool_demand_peak(&d, 1003), 20);
        assert_int_equal(pool_demand_target(20, 2, 16), 16); /* at most the max */
        assert_int_equal(pool_demand_target(20, 2, 32), 20);
        unsigned claims, hits;
        pool_demand_totals(&d, 1003, &claims, &hits);
        assert_int_equal(claims, 20);
        assert_int_equal(hits, 2);
        /* still there just before the history ends, gone after */
        assert_int_equal(pool_demand_peak(&d, 1000 + POOL_DEMAND_HISTORY_S - 1), 20);
        assert_int_equal(pool_demand_peak(&d, 1002 + POOL_DEMAND_HISTORY_S), 0);
        assert_int_equal(pool_demand_target(0, 2, 16), 2);
}

static void test_steady_creates_count_per_burst_window(void **state) {
        struct pool_demand d;
        memset(&d, 0, sizeof d);
        /* one create a second for a minute: 10 within any 10 s */
        for (uint64_t s = 5000; s < 5060; s++)
                pool_demand_note(&d, s, true);
        assert_int_equal(pool_demand_peak(&d, 5060), POOL_DEMAND_BURST_S);
        /* a gap longer than the history forgets everything at once */
        pool_demand_note(&d, 5060 + 2 * POOL_DEMAND_HISTORY_S, false);
        assert_int_equal(pool_demand_peak(&d, 5060 + 2 * POOL_DEMAND_HISTORY_S), 1);
}

static void test_size_above_max_wins(void **state) {
        /* a max below the size (refused by the config) still keeps the size */
        assert_int_equal(pool_demand_target(5, 8, 4), 8);
}

static void test_wait_only_for_a_refill_due_sooner_than_a_cold_restore(void **state) {
        uint64_t now = 100 * S;
        uint64_t none[4] = { 0 };
        /* nothing in flight, or no refill measured yet: cold */
        assert_int_equal(pool_demand_wait_until(now, none, 4, 0, 500), 0);
        uint64_t one[4] = { 0, now - 300 * MS, 0, 0 };
        assert_int_equal(pool_demand_wait_until(now, one, 4, 0, 0), 0);
        /* begun 300 ms ago, refills take 500: due in 200 ms, within half
         * a cold restore's 500; waited for until then plus half a refill */
        assert_int_equal(pool_demand_wait_until(now, one, 4, 0, 500), now + 450 * MS);
        /* a second claim has no refill of its own to wait for */
        assert_int_equal(pool_demand_wait_until(now, one, 4, 1, 500), 0);
        /* overdue: half a refill from now */
        uint64_t late[4] = { now - 2 * S, 0, 0, 0 };
        assert_int_equal(pool_demand_wait_until(now, late, 4, 0, 500), now + 250 * MS);
        /* not half done (a create right behind the claim that began it):
         * cold, beside it */
        uint64_t young[4] = { now - 40 * MS, 0, 0, 0 };
        assert_int_equal(pool_demand_wait_until(now, young, 4, 0, 500), 0);
        uint64_t half[4] = { now - 250 * MS, 0, 0, 0 };
        assert_int_equal(pool_demand_wait_until(now, half, 4, 0, 500), 0);
        uint64_t past_half[4] = { now - 251 * MS, 0, 0, 0 };
        assert_int_equal(pool_demand_wait_until(now, past_half, 4, 0, 500), now + 499 * MS);
        /* two in flight, one claim waits already: the second claim takes
         * the later one */
        uint64_t two[4] = { now - 300 * MS, 0, now - 400 * MS, 0 };
        assert_int_equal(pool_demand_wait_until(now, two, 4, 0, 500), now + 350 * MS);
        assert_int_equal(pool_demand_wait_until(now, two, 4, 1, 500), now + 450 * MS);
        assert_int_equal(pool_demand_wait_until(now, two, 4, 2, 500), 0);
}

static void test_refill_average(void **state) {
        assert_int_equal(pool_demand_refill_avg(0, 800), 800);
        assert_int_equal(pool_demand_refill_avg(800, 400), 700);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_no_claims_keeps_the_size),
                cmocka_unit_test(test_a_burst_raises_the_target_for_the_history),
                cmocka_unit_test(test_steady_creates_count_per_burst_window),
                cmocka_unit_test(test_size_above_max_wins),
                cmocka_unit_test(test_wait_only_for_a_refill_due_sooner_than_a_cold_restore),
                cmocka_unit_test(test_refill_average),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
