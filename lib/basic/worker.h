/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A background thread that runs one function every interval (the daemon's
 * periodic passes: idleness, the audit poller, the snapshot scheduler, the
 * replica's beat, the start-up progress), or at once when woken. Stopping
 * wakes it and joins it, so a stop takes at most the end of the run in
 * progress, never a whole interval. The interval is measured on the
 * monotonic clock from the end of one run to the start of the next.
 */

#include <stdbool.h>
#include <stdint.h>

struct worker;

enum {
        /* wait one interval before the first run (else run at once) */
        WORKER_WAIT_FIRST = 1 << 0,
};

/* Starts a thread that calls fn(arg) (at once, or after interval_ms with
 * WORKER_WAIT_FIRST), then again interval_ms after each run returns, for
 * as long as fn returns 0: any other value ends the thread (worker_stop()
 * still joins and frees it). 0 or a negative errno; *ret only on success. */
int worker_start(int (*fn)(void *arg), void *arg, uint64_t interval_ms, unsigned flags, struct worker **ret);

/* Has the thread run fn now instead of at the end of its wait (or once
 * more right after the run in progress). */
void worker_wake(struct worker *w);

/* Stops the thread: no run starts after this, the one in progress is
 * waited for, then the worker is freed. NULL is fine. */
void worker_stop(struct worker *w);
