/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Metrics: counters, gauges and histograms with labels, rendered in
 * Prometheus' text exposition format (0.0.4), and a JSON form in which a
 * node hands its own to airlockd, which adds a `node` label and renders
 * them with its own (docs/metrics.md).
 *
 * A registry holds families (one metric name, type, help and label
 * names); a family holds series (one set of label values). Updates are
 * thread-safe (a mutex per family). Every size is bounded: names and
 * label values, labels per family, series per family (METRICS_SERIES_MAX:
 * past it, new series are dropped and counted in
 * airlock_metrics_series_dropped_total), so a label fed from outside (a
 * sandbox id) cannot grow a process without limit.
 *
 * Rules: functions return 0 or a negative errno; the library never logs.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define METRICS_NAME_MAX 96        /* bytes of a metric or label name */
#define METRICS_VALUE_MAX 128      /* bytes of a label value */
#define METRICS_LABELS_MAX 6       /* labels of a family (a merge adds one) */
#define METRICS_BUCKETS_MAX 24     /* a histogram's upper bounds, +Inf apart */
#define METRICS_SERIES_MAX 20000   /* series of one family */
#define METRICS_FAMILIES_MAX 256   /* families of one registry */

enum metrics_type {
        METRICS_COUNTER,
        METRICS_GAUGE,
        METRICS_HISTOGRAM,
};

struct metrics_registry;
struct metrics_family;

int metrics_registry_new(struct metrics_registry **ret);
void metrics_registry_free(struct metrics_registry *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct metrics_registry *, metrics_registry_free);

/* The family name in r, made on first use (the same name again returns
 * it; -EEXIST when its type or labels differ). label_names: NULL-
 * terminated, may be NULL; buckets: a histogram's ascending upper bounds
 * (+Inf is implied). -EINVAL for a name that is not [a-zA-Z_:][a-zA-Z0-9_:]*
 * (labels [a-zA-Z_][a-zA-Z0-9_]*, not "le" nor starting "__"). */
int metrics_family(struct metrics_registry *r, const char *name, enum metrics_type type, const char *help,
                   const char *const *label_names, const double *buckets, size_t n_buckets,
                   struct metrics_family **ret);

/* values: one per label name (NULL when the family has none). A value
 * longer than METRICS_VALUE_MAX is cut. Counters only go up (add of a
 * negative is ignored); set is for gauges; observe for histograms. */
void metrics_add(struct metrics_family *f, const char *const *values, double v);
void metrics_set(struct metrics_family *f, const char *const *values, double v);
void metrics_observe(struct metrics_family *f, const char *const *values, double v);
/* Forgets every series (gauges computed afresh at each scrape). */
void metrics_clear(struct metrics_family *f);

/* The text of the registries, each family once (the series of a name
 * found in several registries together, under the first one's help and
 * type), families sorted by name. */
int metrics_render(struct metrics_registry *const *regs, size_t n, char **ret, size_t *ret_len);

/*
 * JSON form: {"families":[{"name","type","help","labels":[...],
 * "buckets":[...], "series":[{"values":[...],"value":V} or
 * {"values","counts":[...],"sum":S,"count":N}]}]} (counts per bucket,
 * not cumulative). metrics_merge_json() adds what a node sent to into,
 * each series with one more label (extra_name=extra_value), checking
 * everything (a node is another process): -EBADMSG for anything malformed
 * or past the limits, after which into may hold part of it (merge into a
 * registry of its own and drop that one).
 */
json_t *metrics_to_json(struct metrics_registry *r);
int metrics_merge_json(struct metrics_registry *into, const json_t *j, const char *extra_name,
                       const char *extra_value);

/* Bucket bounds for latencies in seconds: 1 ms .. 60 s. */
extern const double metrics_latency_buckets[];
extern const size_t metrics_latency_buckets_n;
