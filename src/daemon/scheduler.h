/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The snapshot scheduler: one thread that takes scheduled snapshots of
 * running sandboxes and applies tiered retention to them, acting on the
 * answers of the pure policy functions in retention.h.
 *
 * Every snapshot_tick_ms it lists the sandboxes and visits running ones
 * round-robin, starting after the one the previous pass visited last; a
 * pass gives node calls to at most a few sandboxes, so 64 sandboxes due at
 * once take several passes instead of one long stall. A visit takes a disk
 * snapshot when retention_due() says so (from the newest scheduled disk
 * snapshot; a sandbox that has none counts from when its row last changed
 * state, so a new sandbox gets its first one an interval after it started),
 * the same for a full snapshot, records them unpinned, then deletes what
 * retention_select() lets go (node image first, then the row). A sandbox's
 * own policy (its row's snapshot_policy) applies over the global one.
 *
 * The scheduler never waits for a sandbox: one that is not "running" (a
 * lifecycle verb runs, or it is paused, stopped, failed) is skipped, and so
 * is one whose snapshot claim (below) is held by an on-demand snapshot. A
 * node that is busy with the sandbox is tried again next pass; other
 * failures wait for the kind's interval (a minute at most; the whole
 * interval when the node lacks the kind) and are logged
 * at most once a minute per sandbox and kind, so a node without full
 * snapshots does not stop disk snapshots nor fill the log.
 */

#include <jansson.h>
#include <stdbool.h>

#include "config.h"
#include "retention.h"
#include "store.h"

/* a storage root without reflinks copies the whole image; a full snapshot
 * also writes the guest's memory */
#define SCHEDULER_SNAPSHOT_TIMEOUT_S 300

struct scheduler;

/* Starts the scheduler thread; config and store must outlive it. */
int scheduler_start(const struct daemon_config *config, struct store *store, struct scheduler **ret);
/* Stops the thread (waking it from its wait; a node call in progress ends
 * first, bounded by its timeout), joins it and frees s. NULL is fine. */
void scheduler_stop(struct scheduler *s);

/*
 * The per-sandbox snapshot claim: whoever calls the node to snapshot a
 * sandbox (or to delete its snapshots) holds it, so two snapshot calls of
 * one sandbox never run at once in this process. Waits up to wait_ms for
 * a holder to let go (0: not at all); -EBUSY when it did not.
 */
int scheduler_claim(const char *sandbox_id, unsigned wait_ms);
/* How long a lifecycle verb or a delete waits for a scheduled snapshot of
 * its sandbox (a full one under TCG takes most of a second). */
#define SCHEDULER_CLAIM_WAIT_MS 30000
/* Lets go of a claim taken with scheduler_claim(). */
void scheduler_release(const char *sandbox_id);

/*
 * Takes a snapshot of a sandbox through the node (the caller holds its
 * claim) and records it: a new "snap-" id, the node op sandbox.snapshot
 * with kind, the row (pinned: taken on demand). *ret gets the stored row
 * (release with store_snapshot_release()), *ret_info (may be NULL) the
 * node's snapshot object (freeze_ms, pause_ms...). On failure err
 * (API_ERRMSG_MAX bytes) says why; nothing stays behind: an image whose
 * row cannot be written is deleted again. A node that answers a full
 * snapshot request with a disk image (it predates full snapshots) is
 * -EPROTONOSUPPORT (that image is deleted too).
 */
int scheduler_snapshot_take(const struct daemon_config *config, struct store *store, const char *sandbox_id,
                            enum snapshot_kind kind, bool pinned, struct store_snapshot *ret, json_t **ret_info,
                            char *err);
