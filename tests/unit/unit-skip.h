/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A unit test that cannot run here (not root, no reflink filesystem) is
 * skipped visibly: unit_skip() prints "SKIP: <test>: <reason>" to stderr,
 * cmocka lists the test as skipped, and main() returns unit_exit(), which
 * is 77 when anything was skipped, so that meson reports the binary as
 * SKIP rather than OK. With AIRLOCK_TEST_NO_SKIP=1 (./test.sh sets it for
 * its unit tests) a skip fails the test instead: the suite's own command
 * must run every test. Include after <cmocka.h>.
 */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned unit_skipped;

static inline bool unit_no_skip(void) {
        const char *e = getenv("AIRLOCK_TEST_NO_SKIP");
        return e && *e && strcmp(e, "0") != 0;
}

#define unit_skip(...)                                                                                     \
        do {                                                                                               \
                char unit_reason_[512];                                                                    \
                snprintf(unit_reason_, sizeof unit_reason_, __VA_ARGS__);                                  \
                if (unit_no_skip())                                                                        \
                        fail_msg("%s: cannot run: %s (AIRLOCK_TEST_NO_SKIP is set: every test must run)", \
                                 __func__, unit_reason_);                                                  \
                fprintf(stderr, "SKIP: %s: %s\n", __func__, unit_reason_);                                 \
                unit_skipped++;                                                                            \
                skip();                                                                                    \
        } while (0)

/* main()'s exit status from cmocka's count of failed tests: 1 when any
 * failed, else 77 (meson's SKIP) when any was skipped, else 0. */
static inline int unit_exit(int failed) {
        return failed ? 1 : unit_skipped ? 77 : 0;
}
