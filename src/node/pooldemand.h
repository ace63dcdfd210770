/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What a warm pool should hold, from the creates its template saw: pure
 * arithmetic over a clock the caller passes (pool.c keeps the state under
 * its lock; tests/unit/test-pooldemand.c drives it with a clock of its own).
 *
 * Claims are counted per second over the last POOL_DEMAND_HISTORY_S
 * seconds. A pool's target is the most claims that came within any
 * POOL_DEMAND_BURST_S seconds of that history, between the pool's size
 * and its max: a burst of 20 creates makes the pool hold 20 VMs (if its
 * max allows) for the next POOL_DEMAND_HISTORY_S seconds, then it shrinks
 * back to its size.
 */

#include <stdbool.h>
#include <stdint.h>

#define POOL_DEMAND_HISTORY_S 300
#define POOL_DEMAND_BURST_S 10

struct pool_demand {
        uint64_t second; /* the second of the newest bucket (0: no claim yet) */
        uint16_t claims[POOL_DEMAND_HISTORY_S];
        uint16_t hits[POOL_DEMAND_HISTORY_S];
};

/* One claim at now_s (seconds of any monotonic clock): a hit or a miss. */
void pool_demand_note(struct pool_demand *d, uint64_t now_s, bool hit);

/* The most claims within any POOL_DEMAND_BURST_S seconds of the history. */
unsigned pool_demand_peak(struct pool_demand *d, uint64_t now_s);

/* Claims and hits within the history. */
void pool_demand_totals(struct pool_demand *d, uint64_t now_s, unsigned *ret_claims, unsigned *ret_hits);

/* The pool's target: peak, at least min, at most max. */
unsigned pool_demand_target(unsigned peak, unsigned min, unsigned max);

/* Whether a claim that found the pool empty should wait for a refill in
 * flight rather than restore cold, and until when: the refill begun
 * earliest among those no other claim waits for (starts_ns, n of them,
 * 0 = a free slot; waiting claims take the earliest first) is due at its
 * start plus refill_ms, the moving average of refills. A cold restore
 * takes about refill_ms from now; a refill due within half of that is
 * worth the wait. One due later is not: restoring cold beside it (on
 * another core) serves this create and, with the refill, the next one
 * sooner, where waiting would queue creates coming back to back behind
 * the refills one at a time (measured: their median went from 45 to
 * 216 ms). The claim waits until the refill is due (or from now, when it
 * is overdue) plus half a refill of slack for one slower than the average.
 * Returns the deadline (ns, the same clock as now_ns), or 0: restore cold
 * (no refill free for it, no average yet, or none due soon enough). */
uint64_t pool_demand_wait_until(uint64_t now_ns, const uint64_t *starts_ns, unsigned n, unsigned waiting,
                                uint64_t refill_ms);

/* The next moving average of refill durations after one of ms. */
uint64_t pool_demand_refill_avg(uint64_t avg_ms, uint64_t ms);
