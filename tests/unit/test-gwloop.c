/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for airlock-gw's event loop (src/gw/loop.c): watches fire on
 * their fds, a callback may remove any watch (also one whose event is in the
 * same batch) or cancel any timer, timers fire in order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include "loop.h"

struct ctx {
        struct loop *l;
        struct loop_watch *w[2];
        int fds[2][2];
        int fired[2];
        int order[8];
        int n_order;
        struct loop_timer *t_cancel;
};

static void on_fd(int fd, uint32_t events, void *userdata) {
        struct ctx *c = userdata;
        int i = fd == c->fds[0][0] ? 0 : 1;
        c->fired[i]++;
        char b[16];
        assert_true(read(fd, b, sizeof b) > 0);
        /* whichever fires first removes both: the other's event, already in
         * this batch, must not reach a freed watch */
        loop_watch_remove(c->w[0]);
        loop_watch_remove(c->w[1]);
        loop_stop(c->l);
}

static void test_remove_during_batch(void **state) {
        struct ctx c = { 0 };
        assert_int_equal(loop_new(&c.l), 0);
        for (int i = 0; i < 2; i++) {
                assert_int_equal(pipe(c.fds[i]), 0);
                assert_int_equal(loop_watch_add(c.l, c.fds[i][0], EPOLLIN, on_fd, &c, &c.w[i]), 0);
                assert_int_equal(write(c.fds[i][1], "x", 1), 1);
        }
        assert_int_equal(loop_run(c.l), 0);
        assert_int_equal(c.fired[0] + c.fired[1], 1);
        for (int i = 0; i < 2; i++) {
                close(c.fds[i][0]);
                close(c.fds[i][1]);
        }
        loop_free(c.l);
}

static void on_timer(void *userdata) {
        struct ctx **pc = userdata;
        struct ctx *c = pc[0];
        int id = (int) (intptr_t) pc[1];
        c->order[c->n_order++] = id;
        if (id == 1)
                loop_timer_cancel(c->t_cancel); /* a later one, not fired yet */
        if (id == 3)
                loop_stop(c->l);
}

static void test_timers_in_order_and_cancel(void **state) {
        struct ctx c = { 0 };
        assert_int_equal(loop_new(&c.l), 0);
        void *args[4][2];
        for (int i = 0; i < 4; i++) {
                args[i][0] = &c;
                args[i][1] = (void *) (intptr_t) i;
        }
        uint64_t t0 = loop_now_ms();
        assert_int_equal(loop_timer_add(c.l, 30, on_timer, args[3], NULL), 0);
        assert_int_equal(loop_timer_add(c.l, 10, on_timer, args[1], NULL), 0);
        assert_int_equal(loop_timer_add(c.l, 20, on_timer, args[2], &c.t_cancel), 0);
        assert_int_equal(loop_timer_add(c.l, 0, on_timer, args[0], NULL), 0);
        assert_int_equal(loop_run(c.l), 0);
        assert_int_equal(c.n_order, 3);
        assert_int_equal(c.order[0], 0);
        assert_int_equal(c.order[1], 1);
        assert_int_equal(c.order[2], 3); /* 2 was cancelled by 1 */
        assert_true(loop_now_ms() - t0 >= 30);
        loop_free(c.l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_remove_during_batch),
                cmocka_unit_test(test_timers_in_order_and_cancel),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
