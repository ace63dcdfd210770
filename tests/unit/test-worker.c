/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

#include "util.h"
#include "worker.h"

struct counter {
        atomic_uint runs;
        unsigned last; /* fn returns 1 on this run, ending the thread; 0: never */
};

static int count(void *arg) {
        struct counter *c = arg;
        unsigned n = atomic_fetch_add(&c->runs, 1) + 1;
        return c->last && n >= c->last ? 1 : 0;
}

/* Waits up to 5 s for c to reach n runs. */
static bool reaches(struct counter *c, unsigned n) {
        for (unsigned i = 0; i < 500; i++) {
                if (atomic_load(&c->runs) >= n)
                        return true;
                usleep(10000);
        }
        return false;
}

static void test_runs_every_interval(void **state) {
        (void) state;
        struct counter c = { 0 };
        struct worker *w = NULL;
        assert_int_equal(worker_start(count, &c, 5, 0, &w), 0);
        assert_non_null(w);
        assert_true(reaches(&c, 3));
        worker_stop(w);
        unsigned after = atomic_load(&c.runs);
        usleep(30000);
        assert_int_equal(atomic_load(&c.runs), after); /* nothing runs after the stop */
}

static void test_wait_first_wake_and_quick_stop(void **state) {
        (void) state;
        struct counter c = { 0 };
        struct worker *w = NULL;
        /* an hour's interval: only a wake runs it, and a stop does not wait it out */
        assert_int_equal(worker_start(count, &c, 3600 * 1000, WORKER_WAIT_FIRST, &w), 0);
        usleep(50000);
        assert_int_equal(atomic_load(&c.runs), 0);
        worker_wake(w);
        assert_true(reaches(&c, 1));
        usleep(50000);
        assert_int_equal(atomic_load(&c.runs), 1);
        worker_wake(w);
        assert_true(reaches(&c, 2));
        uint64_t t0 = now_monotonic_ns();
        worker_stop(w);
        assert_true(now_monotonic_ns() - t0 < 1000000000ULL);
        assert_int_equal(atomic_load(&c.runs), 2);
}

static void test_fn_ends_the_thread(void **state) {
        (void) state;
        struct counter c = { .last = 2 };
        struct worker *w = NULL;
        assert_int_equal(worker_start(count, &c, 1, 0, &w), 0);
        assert_true(reaches(&c, 2));
        usleep(30000);
        assert_int_equal(atomic_load(&c.runs), 2);
        worker_wake(w); /* a finished thread: nothing to wake, no harm */
        worker_stop(w);
        assert_int_equal(atomic_load(&c.runs), 2);
}

static void test_stop_before_first_run(void **state) {
        (void) state;
        struct counter c = { 0 };
        struct worker *w = NULL;
        assert_int_equal(worker_start(count, &c, 3600 * 1000, WORKER_WAIT_FIRST, &w), 0);
        worker_stop(w);
        assert_int_equal(atomic_load(&c.runs), 0);
        worker_stop(NULL);
}

static void test_invalid(void **state) {
        (void) state;
        struct worker *w = NULL;
        assert_int_equal(worker_start(NULL, NULL, 10, 0, &w), -EINVAL);
        assert_null(w);
        assert_int_equal(worker_start(count, NULL, 10, 0, NULL), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_runs_every_interval),
                cmocka_unit_test(test_wait_first_wake_and_quick_stop),
                cmocka_unit_test(test_fn_ends_the_thread),
                cmocka_unit_test(test_stop_before_first_run),
                cmocka_unit_test(test_invalid),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
