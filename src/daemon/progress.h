/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the terminal shows while airlockd starts: after the banner, a
 * thread asks the node for its health (the node op `health`, which GET
 * /v1/health wraps) about once a second and prints a line on stderr
 * whenever a default template's state changes:
 *
 *   airlock: building template python: step 3/4 rootfs (1m05s elapsed; log /path)
 *   airlock: ready after 3m12s — try: ... (lines ready to paste)
 *   airlock: error: template python failed: WHY; build log PATH (and what to do)
 *
 * One line per change, at most one "still building" line per
 * PROGRESS_STILL_S; it stops once the node is ready, or when nothing is
 * building any more and a template failed. The state machine
 * (progress_feed) is separate from the thread so the unit tests drive it.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define PROGRESS_STILL_S 30    /* between two "still building" lines */
#define PROGRESS_NODE_WAIT_S 5 /* the node not answering this long is said */
#define PROGRESS_TEMPLATES_MAX 16

struct progress {
        uint64_t start_ns;     /* airlockd's start: "ready after" counts from it */
        uint64_t last_line_ns; /* the last line written */
        bool printed;          /* any line written yet */
        struct {
                char name[65];
                char sig[80]; /* "state:step" as last seen */
        } seen[PROGRESS_TEMPLATES_MAX];
        size_t n_seen;
        uint64_t node_down_since; /* 0 while the node answers */
        bool node_down_said;
        bool ready_said; /* the ready lines are out (background builds may go on) */
        bool done;
        /* for the lines to paste */
        char url[160];        /* http://HOST:PORT */
        const char *data_dir; /* the config's, outlives us */
        const char *control_dir;
        bool default_url, default_data_dir;
        /* a replica without a node of its own: where nodes join it */
        const char *advertise;
        bool nodes_said;
};

/* Sets p up: start_ns is when airlockd started (monotonic), url the API's
 * address as a client reaches it. */
void progress_init(struct progress *p, const struct daemon_config *c, const char *url, uint64_t start_ns);

/*
 * Feeds one reply of the node's health op at now_ns (health NULL: the node
 * did not answer, err says why) and writes the lines to print into out
 * (NUL-terminated, empty when there is nothing to say). Returns true once
 * there is nothing more to watch (ready, or failed with no build left).
 */
bool progress_feed(struct progress *p, const json_t *health, const char *err, uint64_t now_ns, char *out,
                   size_t n);

/*
 * The same for a replica without a node of its own (--no-local-node):
 * ready nodes of the cluster, of joined ones. Until one is ready it says,
 * once PROGRESS_NODE_WAIT_S have passed and then every PROGRESS_STILL_S,
 * that it waits for nodes and how to add one; then the ready lines.
 */
bool progress_feed_nodes(struct progress *p, size_t ready, size_t joined, uint64_t now_ns, char *out, size_t n);

/* One template of a health report in words: "building template python:
 * step 3/4 rootfs (1m05s elapsed; log /path)", "template minimal ready",
 * "template python failed: WHY; build log PATH". */
void progress_describe(const json_t *template, char *buf, size_t n);
/* 0.4s, 45s, 1m05s, 2h03m10s into buf. */
void progress_format_duration(uint64_t ms, char *buf, size_t n);

struct progress_watch;
/* Starts the thread that watches this machine's node (on c->node_socket,
 * or joined to the cluster as c->local_node_name), or a replica's cluster
 * without one, and prints on stderr; url as for progress_init(). */
int progress_watch_start(const struct daemon_config *c, const char *url, uint64_t start_ns,
                         struct progress_watch **ret);
/* Stops and joins it (within a node call's timeout); NULL is fine. */
void progress_watch_stop(struct progress_watch *w);
