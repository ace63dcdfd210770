/* SPDX-License-Identifier: Apache-2.0 */
#include "pooldemand.h"

#include <string.h>

#include "macros.h"

/* Moves the history forward to now_s: the seconds between get empty
 * buckets, those older than the history are forgotten. */
static void advance(struct pool_demand *d, uint64_t now_s) {
        if (now_s <= d->second)
                return;
        uint64_t gap = now_s - d->second;
        if (d->second == 0 || gap >= POOL_DEMAND_HISTORY_S) {
                memset(d->claims, 0, sizeof d->claims);
                memset(d->hits, 0, sizeof d->hits);
        } else
                for (uint64_t s = d->second + 1; s <= now_s; s++) {
                        d->claims[s % POOL_DEMAND_HISTORY_S] = 0;
                        d->hits[s % POOL_DEMAND_HISTORY_S] = 0;
                }
        d->second = now_s;
}

void pool_demand_note(struct pool_demand *d, uint64_t now_s, bool hit) {
        advance(d, now_s);
        size_t i = now_s % POOL_DEMAND_HISTORY_S;
        if (d->claims[i] < UINT16_MAX)
                d->claims[i]++;
        if (hit && d->hits[i] < UINT16_MAX)
                d->hits[i]++;
}

unsigned pool_demand_peak(struct pool_demand *d, uint64_t now_s) {
        if (d->second == 0)
                return 0;
        advance(d, now_s);
        /* a sliding sum over the ring, oldest second first */
        unsigned peak = 0, sum = 0;
        for (unsigned k = 0; k < POOL_DEMAND_HISTORY_S; k++) {
                sum += d->claims[(d->second + 1 + k) % POOL_DEMAND_HISTORY_S];
                if (k >= POOL_DEMAND_BURST_S)
                        sum -= d->claims[(d->second + 1 + k - POOL_DEMAND_BURST_S) % POOL_DEMAND_HISTORY_S];
                peak = MAX(peak, sum);
        }
        return peak;
}

void pool_demand_totals(struct pool_demand *d, uint64_t now_s, unsigned *ret_claims, unsigned *ret_hits) {
        unsigned claims = 0, hits = 0;
        if (d->second != 0) {
                advance(d, now_s);
                for (unsigned k = 0; k < POOL_DEMAND_HISTORY_S; k++) {
                        claims += d->claims[k];
                        hits += d->hits[k];
                }
        }
        *ret_claims = claims;
        *ret_hits = hits;
}

unsigned pool_demand_target(unsigned peak, unsigned min, unsigned max) {
        return MIN(MAX(peak, min), MAX(min, max));
}

uint64_t pool_demand_wait_until(uint64_t now_ns, const uint64_t *starts_ns, unsigned n, unsigned waiting,
                                uint64_t refill_ms) {
        if (refill_ms == 0)
                return 0;
        /* the (waiting+1)-th earliest refill in flight: the earlier ones
         * are the waiting claims' */
        uint64_t taken = 0, start = 0;
        for (unsigned rank = 0; rank <= waiting; rank++) {
                start = 0;
                for (unsigned i = 0; i < n; i++)
                        if (starts_ns[i] && starts_ns[i] > taken && (start == 0 || starts_ns[i] < start))
                                start = starts_ns[i];
                if (start == 0)
                        return 0;
                taken = start;
        }
        uint64_t refill_ns = refill_ms * 1000000ULL;
        uint64_t due = start + refill_ns;
        if (due >= now_ns + refill_ns / 2)
                return 0; /* not half done: restoring cold beside it serves two creates sooner */
        /* overdue: it ends any moment, or is stuck; half a refill tells */
        return MAX(due, now_ns) + refill_ns / 2;
}

uint64_t pool_demand_refill_avg(uint64_t avg_ms, uint64_t ms) {
        return avg_ms == 0 ? ms : (3 * avg_ms + ms) / 4;
}
