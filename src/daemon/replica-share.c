/* SPDX-License-Identifier: Apache-2.0 */
#include "replica-share.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/* Written once at start-up (before any thread reads them) and read lock
 * free: id only while present is set. */
static char self_id[32];
static atomic_bool present, shared;

/* the live replicas as the last beat read them: their count and where
 * this one sorts among them (replica_owns()) */
static atomic_uint live_count = 1, live_index = 0;

void replica_share_set_self(const char *id, bool shared_store) {
        snprintf(self_id, sizeof self_id, "%s", id);
        atomic_store(&shared, shared_store);
        atomic_store(&present, true);
}

void replica_share_forget(const char *id) {
        if (atomic_load(&present) && strcmp(self_id, id) == 0)
                atomic_store(&present, false);
}

void replica_share_set_live(unsigned index, unsigned count) {
        atomic_store(&live_index, index);
        atomic_store(&live_count, count);
}

static uint32_t id_hash(const char *s) {
        uint32_t h = 2166136261u;
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 16777619u;
        return h;
}

bool replica_owns(const char *key) {
        unsigned n = atomic_load(&live_count), i = atomic_load(&live_index);
        return !atomic_load(&present) || n <= 1 || id_hash(key) % n == i;
}

void replica_op_lease(struct store_operation *op) {
        /* alone on its store, a restart settles what it left (main.c) */
        if (!atomic_load(&present) || !atomic_load(&shared))
                return;
        op->owner = self_id;
        op->lease_until = now_unix_ms() + REPLICA_LEASE_MS;
}
