/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Idle suspend. The guest agent knows when it was last used (a request
 * that did work, output of any process, a process ending; the node asks it
 * every few seconds, see sandbox.c probe_idle()); the node reports that as
 * "idle_ms". Every idle_check_ms this thread asks the node for its
 * sandboxes and suspends each running one idle for longer than its
 * idle_timeout_s (its own, else the global AIRLOCK_IDLE_TIMEOUT_S; 0 =
 * never) through the suspend verb, as a client would: an operation is
 * recorded, and the next request to the sandbox wakes it.
 *
 * Lifetimes ride along: every second the thread deletes each sandbox
 * whose expires_at has passed, or suspends it when its on_expiry says so
 * (the E2B front door's sandbox timeout, e2b-api.h); a suspended one's
 * clock stops until it is connected to again.
 */

#include "config.h"
#include "store.h"

struct idle_watch;

/* Starts the thread. With idle_timeout_s 0 and no sandbox of its own... it
 * still runs: a sandbox may ask for a timeout of its own. */
int idle_watch_start(const struct daemon_config *config, struct store *store, struct idle_watch **ret);
/* Stops and joins it (a suspend it started runs on as an operation).
 * NULL-safe. */
void idle_watch_stop(struct idle_watch *w);
