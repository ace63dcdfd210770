/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lifecycle.h"
#include "macros.h"

/* The expected answer for every verb x state, written out independently of
 * the table: 0 allowed, B busy (a verb in progress), P illegal. */
#define B (-EBUSY)
#define P (-EPERM)
static const char *const states[] = { "creating", "running",  "pausing",  "paused", "resuming",
                                      "stopping", "stopped",  "starting", "deleting", "failed",
                                      "rolling_back", "recovering", "suspending", "suspended",
                                      "waking", "forking", "archived", "lost" };
static const int expected[_LIFECYCLE_VERB_MAX][ARRAY_SIZE(states)] = {
        /*          creating running pausing paused resuming stopping stopped starting deleting failed rolling_back recovering
         *          suspending suspended waking forking archived lost */
        [LIFECYCLE_CREATE] = { B, P, B, P, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_DELETE] = { B, 0, B, 0, B, B, 0, B, B, 0, B, B, B, 0, B, B, 0, 0 },
        [LIFECYCLE_PAUSE] = { B, 0, B, P, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_RESUME] = { B, P, B, 0, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_STOP] = { B, 0, B, 0, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_START] = { B, P, B, P, B, B, 0, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_ROLLBACK] = { B, 0, B, P, B, B, 0, B, B, P, B, B, B, P, B, B, 0, P },
        [LIFECYCLE_SUSPEND] = { B, 0, B, 0, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
        [LIFECYCLE_WAKE] = { B, P, B, P, B, B, P, B, B, P, B, B, B, 0, B, B, P, P },
        [LIFECYCLE_FORK] = { B, 0, B, 0, B, B, P, B, B, P, B, B, B, P, B, B, P, P },
};

static void test_matrix(void **state) {
        for (int v = 0; v < _LIFECYCLE_VERB_MAX; v++)
                for (size_t s = 0; s < ARRAY_SIZE(states); s++) {
                        int r = lifecycle_check((enum lifecycle_verb) v, states[s]);
                        if (r != expected[v][s])
                                fail_msg("verb %s on state %s: got %d, expected %d", lifecycle_get(v)->name,
                                         states[s], r, expected[v][s]);
                }
}

static void test_states_listed(void **state) {
        size_t n = 0;
        while (lifecycle_states[n])
                n++;
        assert_int_equal(n, ARRAY_SIZE(states)); /* the matrix covers every state */
        for (size_t i = 0; i < ARRAY_SIZE(states); i++)
                assert_true(lifecycle_state_is_valid(states[i]));
        assert_false(lifecycle_state_is_valid("bogus"));
        assert_false(lifecycle_state_is_valid(NULL));
}

static void test_table_consistent(void **state) {
        for (int v = 0; v < _LIFECYCLE_VERB_MAX; v++) {
                const struct lifecycle_transition *t = lifecycle_get((enum lifecycle_verb) v);
                assert_non_null(t);
                assert_int_equal(t->verb, v);
                assert_true(lifecycle_state_is_transitional(t->transitional));
                /* NULL: back to the state it started from (fork) */
                assert_true(!t->target || strcmp(t->target, "deleted") == 0 || lifecycle_state_is_valid(t->target));
                assert_false(t->target && lifecycle_state_is_transitional(t->target));
                enum lifecycle_verb back;
                assert_int_equal(lifecycle_verb_from_name(t->name, &back), 0);
                assert_int_equal(back, v);
        }
        assert_null(lifecycle_get(_LIFECYCLE_VERB_MAX));
        assert_int_equal(lifecycle_check(_LIFECYCLE_VERB_MAX, "running"), -EINVAL);
        enum lifecycle_verb v;
        assert_int_equal(lifecycle_verb_from_name("reboot", &v), -EINVAL);
        assert_int_equal(lifecycle_verb_from_name(NULL, &v), -EINVAL);
}

static void test_unknown_state(void **state) {
        for (int v = 0; v < _LIFECYCLE_VERB_MAX; v++) {
                assert_int_equal(lifecycle_check((enum lifecycle_verb) v, "bogus"), -EPERM);
                assert_int_equal(lifecycle_check((enum lifecycle_verb) v, NULL), -EPERM);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_matrix),
                cmocka_unit_test(test_states_listed),
                cmocka_unit_test(test_table_consistent),
                cmocka_unit_test(test_unknown_state),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
