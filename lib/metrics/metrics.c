/* SPDX-License-Identifier: Apache-2.0 */
/* Metrics in Prometheus' text format: see metrics.h. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double metrics_latency_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5,   1,      2.5,   5,    10,    30,    60 };
const size_t metrics_latency_buckets_n = sizeof metrics_latency_buckets / sizeof metrics_latency_buckets[0];

struct series {
        char **values;   /* [n_labels] */
        double value;    /* counter, gauge */
        uint64_t *counts; /* histogram: [n_buckets + 1], the last +Inf */
        double sum;
        uint64_t count;
};

struct metrics_family {
        struct metrics_registry *reg;
        char *name, *help;
        enum metrics_type type;
        char **labels;
        size_t n_labels;
        double *buckets;
        size_t n_buckets;
        pthread_mutex_t lock;
        struct series *series;
        size_t n_series, cap_series;
};

struct metrics_registry {
        pthread_mutex_t lock;
        struct metrics_family *families[METRICS_FAMILIES_MAX];
        size_t n;
        struct metrics_family *dropped; /* airlock_metrics_series_dropped_total */
};

static bool name_ok(const char *s, bool label) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > METRICS_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
                if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
                        return false;
        }
        return !label || (strcmp(s, "le") != 0 && strncmp(s, "__", 2) != 0);
}

static void series_release(struct series *s, size_t n_labels) {
        for (size_t i = 0; s->values && i < n_labels; i++)
                free(s->values[i]);
        free(s->values);
        free(s->counts);
}

static void family_free(struct metrics_family *f) {
        if (!f)
                return;
        for (size_t i = 0; i < f->n_series; i++)
                series_release(&f->series[i], f->n_labels);
        free(f->series);
        for (size_t i = 0; i < f->n_labels; i++)
                free(f->labels[i]);
        free(f->labels);
        free(f->buckets);
        free(f->name);
        free(f->help);
        pthread_mutex_destroy(&f->lock);
        free(f);
}

int metrics_registry_new(struct metrics_registry **ret) {
        struct metrics_registry *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        pthread_mutex_init(&r->lock, NULL);
        *ret = r;
        return 0;
}

void metrics_registry_free(struct metrics_registry *r) {
        if (!r)
                return;
        for (size_t i = 0; i < r->n; i++)
                family_free(r->families[i]);
        pthread_mutex_destroy(&r->lock);
        free(r);
}

static bool same_shape(const struct metrics_family *f, enum metrics_type type, const char *const *labels, size_t n,
                       const double *buckets, size_t n_buckets) {
        if (f->type != type || f->n_labels != n || (type == METRICS_HISTOGRAM && f->n_buckets != n_buckets))
                return false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(f->labels[i], labels[i]) != 0)
                        return false;
        for (size_t i = 0; type == METRICS_HISTOGRAM && i < n_buckets; i++)
                if (f->buckets[i] != buckets[i])
                        return false;
        return true;
}

static int family_locked(struct metrics_registry *r, const char *name, enum metrics_type type, const char *help,
                         const char *const *labels, size_t n_labels, const double *buckets, size_t n_buckets,
                         struct metrics_family **ret) {
        for (size_t i = 0; i < r->n; i++)
                if (strcmp(r->families[i]->name, name) == 0) {
                        if (!same_shape(r->families[i], type, labels, n_labels, buckets, n_buckets))
                                return -EEXIST;
                        *ret = r->families[i];
                        return 0;
                }
        if (r->n >= METRICS_FAMILIES_MAX)
                return -E2BIG;
        struct metrics_family *f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        pthread_mutex_init(&f->lock, NULL);
        f->reg = r;
        f->type = type;
        f->name = strdup(name);
        f->help = strdup(help ? help : "");
        f->labels = calloc(n_labels + 1, sizeof *f->labels);
        bool ok = f->name && f->help && f->labels;
        for (size_t i = 0; ok && i < n_labels; i++)
                ok = (f->labels[f->n_labels++] = strdup(labels[i])) != NULL;
        if (ok && type == METRICS_HISTOGRAM) {
                f->buckets = calloc(n_buckets ? n_buckets : 1, sizeof *f->buckets);
                ok = f->buckets != NULL;
                for (size_t i = 0; ok && i < n_buckets; i++)
                        f->buckets[f->n_buckets++] = buckets[i];
        }
        if (!ok) {
                family_free(f);
                return -ENOMEM;
        }
        r->families[r->n++] = f;
        *ret = f;
        return 0;
}

static int check_shape(enum metrics_type type, const char *name, const char *const *labels, size_t n_labels,
                       const double *buckets, size_t n_buckets) {
        if (!name_ok(name, false) || n_labels > METRICS_LABELS_MAX || type > METRICS_HISTOGRAM)
                return -EINVAL;
        for (size_t i = 0; i < n_labels; i++) {
                if (!name_ok(labels[i], true))
                        return -EINVAL;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(labels[i], labels[j]) == 0)
                                return -EINVAL;
        }
        if (type == METRICS_HISTOGRAM) {
                if (n_buckets == 0 || n_buckets > METRICS_BUCKETS_MAX)
                        return -EINVAL;
                for (size_t i = 0; i < n_buckets; i++)
                        if (!isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1]))
                                return -EINVAL;
        }
        return 0;
}

int metrics_family(struct metrics_registry *r, const char *name, enum metrics_type type, const char *help,
                   const char *const *label_names, const double *buckets, size_t n_buckets,
                   struct metrics_family **ret) {
        size_t n_labels = 0;
        while (label_names && label_names[n_labels] && n_labels <= METRICS_LABELS_MAX)
                n_labels++;
        int e = check_shape(type, name, label_names, n_labels, buckets, n_buckets);
        if (e < 0)
                return e;
        pthread_mutex_lock(&r->lock);
        e = family_locked(r, name, type, help, label_names, n_labels, buckets, n_buckets, ret);
        pthread_mutex_unlock(&r->lock);
        return e;
}

/* The series of values in f, made when absent (f->lock held); NULL when
 * the family is full or memory is. */
static struct series *series_get(struct metrics_family *f, const char *const *values) {
        for (size_t i = 0; i < f->n_series; i++) {
                size_t k = 0;
                while (k < f->n_labels && strncmp(f->series[i].values[k], values[k] ? values[k] : "",
                                                  METRICS_VALUE_MAX) == 0)
                        k++;
                if (k == f->n_labels)
                        return &f->series[i];
        }
        if (f->n_series >= METRICS_SERIES_MAX)
                return NULL;
        if (f->n_series == f->cap_series) {
                size_t cap = f->cap_series ? f->cap_series * 2 : 4;
                struct series *n = realloc(f->series, cap * sizeof *n);
                if (!n)
                        return NULL;
                f->series = n;
                f->cap_series = cap;
        }
        struct series s = { .values = calloc(f->n_labels + 1, sizeof *s.values) };
        bool ok = s.values != NULL;
        for (size_t k = 0; ok && k < f->n_labels; k++)
                ok = (s.values[k] = strndup(values[k] ? values[k] : "", METRICS_VALUE_MAX)) != NULL;
        if (ok && f->type == METRICS_HISTOGRAM)
                ok = (s.counts = calloc(f->n_buckets + 1, sizeof *s.counts)) != NULL;
        if (!ok) {
                series_release(&s, f->n_labels);
                return NULL;
        }
        f->series[f->n_series] = s;
        return &f->series[f->n_series++];
}

static void dropped_one(struct metrics_family *f) {
        struct metrics_registry *r = f->reg;
        struct metrics_family *d = NULL;
        if (metrics_family(r, "airlock_metrics_series_dropped_total", METRICS_COUNTER,
                           "Series not recorded: their family had as many as it may hold", NULL, NULL, 0, &d) < 0 ||
            d == f)
                return;
        metrics_add(d, NULL, 1);
}

static void update(struct metrics_family *f, const char *const *values, double v, int how) {
        if (!f || !isfinite(v))
                return;
        pthread_mutex_lock(&f->lock);
        struct series *s = series_get(f, values);
        if (s) {
                if (how == 0 && (f->type != METRICS_COUNTER || v >= 0))
                        s->value += v;
                else if (how == 1 && f->type == METRICS_GAUGE)
                        s->value = v;
                else if (how == 2 && f->type == METRICS_HISTOGRAM) {
                        size_t b = 0;
                        while (b < f->n_buckets && v > f->buckets[b])
                                b++;
                        s->counts[b]++;
                        s->sum += v;
                        s->count++;
                }
        }
        pthread_mutex_unlock(&f->lock);
        if (!s)
                dropped_one(f);
}

void metrics_add(struct metrics_family *f, const char *const *values, double v) {
        update(f, values, v, 0);
}

void metrics_set(struct metrics_family *f, const char *const *values, double v) {
        update(f, values, v, 1);
}

void metrics_observe(struct metrics_family *f, const char *const *values, double v) {
        update(f, values, v, 2);
}

void metrics_clear(struct metrics_family *f) {
        if (!f)
                return;
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_series; i++)
                series_release(&f->series[i], f->n_labels);
        f->n_series = 0;
        pthread_mutex_unlock(&f->lock);
}

/* ---- text ---- */

struct buf {
        char *p;
        size_t len, cap;
        int error;
};

static void put(struct buf *b, const char *s, size_t n) {
        if (b->error)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *p = realloc(b->p, cap);
                if (!p) {
                        b->error = -ENOMEM;
                        return;
                }
                b->p = p;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void puts_(struct buf *b, const char *s) {
        put(b, s, strlen(s));
}

/* A label value or help text, escaped: backslash, newline, and (values) a
 * double quote; another control byte, which the format has no escape for
 * and a scraper might stumble on, becomes a space. */
static void put_escaped(struct buf *b, const char *s, bool quote) {
        for (; *s; s++) {
                if (*s == '\\')
                        puts_(b, "\\\\");
                else if (*s == '\n')
                        puts_(b, "\\n");
                else if (quote && *s == '"')
                        puts_(b, "\\\"");
                else if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        puts_(b, " ");
                else
                        put(b, s, 1);
        }
}

/* The shortest text that reads back as v (0.1, not 0.10000000000000001). */
static void format_number(double v, char out[64]) {
        if (isinf(v)) {
                snprintf(out, 64, "%s", v > 0 ? "+Inf" : "-Inf");
                return;
        }
        if (v == floor(v) && fabs(v) < 1e15) {
                snprintf(out, 64, "%.0f", v);
                return;
        }
        for (int p = 1; p <= 17; p++) {
                snprintf(out, 64, "%.*g", p, v);
                if (strtod(out, NULL) == v)
                        return;
        }
}

static void put_number(struct buf *b, double v) {
        char num[64];
        format_number(v, num);
        puts_(b, num);
}

/* name{labels[,le="x"]} value */
static void put_sample(struct buf *b, const struct metrics_family *f, const char *suffix, const struct series *s,
                       const char *le, double v) {
        puts_(b, f->name);
        puts_(b, suffix);
        if (f->n_labels || le) {
                puts_(b, "{");
                for (size_t i = 0; i < f->n_labels; i++) {
                        if (i)
                                puts_(b, ",");
                        puts_(b, f->labels[i]);
                        puts_(b, "=\"");
                        put_escaped(b, s->values[i], true);
                        puts_(b, "\"");
                }
                if (le) {
                        puts_(b, f->n_labels ? ",le=\"" : "le=\"");
                        puts_(b, le);
                        puts_(b, "\"");
                }
                puts_(b, "}");
        }
        puts_(b, " ");
        put_number(b, v);
        puts_(b, "\n");
}

static void put_series(struct buf *b, struct metrics_family *f) {
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_series; i++) {
                const struct series *s = &f->series[i];
                if (f->type != METRICS_HISTOGRAM) {
                        put_sample(b, f, "", s, NULL, s->value);
                        continue;
                }
                uint64_t cum = 0;
                for (size_t k = 0; k <= f->n_buckets; k++) {
                        cum += s->counts[k];
                        char le[64];
                        if (k < f->n_buckets)
                                format_number(f->buckets[k], le);
                        else
                                snprintf(le, sizeof le, "+Inf");
                        put_sample(b, f, "_bucket", s, le, (double) cum);
                }
                put_sample(b, f, "_sum", s, NULL, s->sum);
                put_sample(b, f, "_count", s, NULL, (double) s->count);
        }
        pthread_mutex_unlock(&f->lock);
}

static int cmp_family(const void *a, const void *b) {
        const struct metrics_family *x = *(struct metrics_family *const *) a, *y = *(struct metrics_family *const *) b;
        int c = strcmp(x->name, y->name);
        return c ? c : (x < y ? -1 : x > y);
}

int metrics_render(struct metrics_registry *const *regs, size_t n, char **ret, size_t *ret_len) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
                if (regs[i])
                        total += regs[i]->n;
        _cleanup_free_ struct metrics_family **all = calloc(total ? total : 1, sizeof *all);
        if (!all)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (!regs[i])
                        continue;
                pthread_mutex_lock(&regs[i]->lock);
                for (size_t j = 0; j < regs[i]->n && k < total; j++)
                        all[k++] = regs[i]->families[j];
                pthread_mutex_unlock(&regs[i]->lock);
        }
        /* by name, each registry's in its order: the first one's help */
        qsort(all, k, sizeof *all, cmp_family);
        static const char *const types[] = { "counter", "gauge", "histogram" };
        struct buf b = { 0 };
        for (size_t i = 0; i < k; i++) {
                struct metrics_family *f = all[i];
                if (i == 0 || strcmp(all[i - 1]->name, f->name) != 0) {
                        puts_(&b, "# HELP ");
                        puts_(&b, f->name);
                        puts_(&b, " ");
                        put_escaped(&b, f->help, false);
                        puts_(&b, "\n# TYPE ");
                        puts_(&b, f->name);
                        puts_(&b, " ");
                        puts_(&b, types[f->type]);
                        puts_(&b, "\n");
                } else if (all[i - 1]->type != f->type)
                        continue; /* the same name as another type: not renderable together */
                put_series(&b, f);
        }
        if (!b.error && !b.p)
                puts_(&b, "");
        if (b.error) {
                free(b.p);
                return b.error;
        }
        *ret = b.p;
        *ret_len = b.len;
        return 0;
}

/* ---- JSON ---- */

static json_t *strings_json(char *const *s, size_t n) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(s[i]));
        return a;
}

static json_t *family_json(struct metrics_family *f) {
        static const char *const types[] = { "counter", "gauge", "histogram" };
        json_t *series = json_array();
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; series && i < f->n_series; i++) {
                const struct series *s = &f->series[i];
                json_t *o;
                if (f->type == METRICS_HISTOGRAM) {
                        json_t *counts = json_array();
                        for (size_t k = 0; counts && k <= f->n_buckets; k++)
                                json_array_append_new(counts, json_integer((json_int_t) s->counts[k]));
                        o = json_pack("{s:o, s:o, s:f, s:I}", "values", strings_json(s->values, f->n_labels), "counts",
                                      counts, "sum", s->sum, "count", (json_int_t) s->count);
                } else
                        o = json_pack("{s:o, s:f}", "values", strings_json(s->values, f->n_labels), "value", s->value);
                json_array_append_new(series, o);
        }
        pthread_mutex_unlock(&f->lock);
        json_t *buckets = json_array();
        for (size_t k = 0; buckets && k < f->n_buckets; k++)
                json_array_append_new(buckets, json_real(f->buckets[k]));
        return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "name", f->name, "type", types[f->type], "help", f->help,
                         "labels", strings_json(f->labels, f->n_labels), "buckets", buckets, "series", series);
}

json_t *metrics_to_json(struct metrics_registry *r) {
        json_t *fams = json_array();
        pthread_mutex_lock(&r->lock);
        for (size_t i = 0; fams && i < r->n; i++)
                json_array_append_new(fams, family_json(r->families[i]));
        pthread_mutex_unlock(&r->lock);
        return fams ? json_pack("{s:o}", "families", fams) : NULL;
}

/* A label value a node may send: bounded, no control bytes. */
static bool value_ok(const json_t *v) {
        if (!json_is_string(v) || json_string_length(v) > METRICS_VALUE_MAX ||
            strlen(json_string_value(v)) != json_string_length(v))
                return false;
        for (const char *p = json_string_value(v); *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

static int merge_family(struct metrics_registry *into, const json_t *fj, const char *extra_name,
                        const char *extra_value) {
        const char *name = json_string_value(json_object_get(fj, "name"));
        const char *type_s = json_string_value(json_object_get(fj, "type"));
        const char *help = json_string_value(json_object_get(fj, "help"));
        const json_t *labels = json_object_get(fj, "labels"), *buckets = json_object_get(fj, "buckets"),
                     *series = json_object_get(fj, "series");
        if (!name || !type_s || !help || strlen(help) > 1024 || !json_is_array(labels) || !json_is_array(buckets) ||
            !json_is_array(series) || json_array_size(labels) + 1 > METRICS_LABELS_MAX ||
            json_array_size(buckets) > METRICS_BUCKETS_MAX || json_array_size(series) > METRICS_SERIES_MAX)
                return -EBADMSG;
        enum metrics_type type;
        if (strcmp(type_s, "counter") == 0)
                type = METRICS_COUNTER;
        else if (strcmp(type_s, "gauge") == 0)
                type = METRICS_GAUGE;
        else if (strcmp(type_s, "histogram") == 0)
                type = METRICS_HISTOGRAM;
        else
                return -EBADMSG;
        const char *lnames[METRICS_LABELS_MAX + 1] = { 0 };
        size_t nl = json_array_size(labels);
        for (size_t i = 0; i < nl; i++)
                if (!(lnames[i] = json_string_value(json_array_get(labels, i))))
                        return -EBADMSG;
        lnames[nl] = extra_name;
        double b[METRICS_BUCKETS_MAX];
        size_t nb = json_array_size(buckets);
        for (size_t i = 0; i < nb; i++) {
                if (!json_is_number(json_array_get(buckets, i)))
                        return -EBADMSG;
                b[i] = json_number_value(json_array_get(buckets, i));
        }
        struct metrics_family *f = NULL;
        int e = metrics_family(into, name, type, help, lnames, b, type == METRICS_HISTOGRAM ? nb : 0, &f);
        if (e < 0)
                return e == -ENOMEM ? e : -EBADMSG;
        size_t i;
        const json_t *s;
        json_array_foreach(series, i, s) {
                const json_t *values = json_object_get(s, "values");
                if (!json_is_array(values) || json_array_size(values) != nl)
                        return -EBADMSG;
                const char *v[METRICS_LABELS_MAX + 1] = { 0 };
                for (size_t k = 0; k < nl; k++) {
                        if (!value_ok(json_array_get(values, k)))
                                return -EBADMSG;
                        v[k] = json_string_value(json_array_get(values, k));
                }
                v[nl] = extra_value;
                if (type != METRICS_HISTOGRAM) {
                        const json_t *val = json_object_get(s, "value");
                        if (!json_is_number(val) || !isfinite(json_number_value(val)))
                                return -EBADMSG;
                        pthread_mutex_lock(&f->lock);
                        struct series *se = series_get(f, v);
                        if (se)
                                se->value += json_number_value(val);
                        pthread_mutex_unlock(&f->lock);
                        if (!se)
                                return -EBADMSG;
                        continue;
                }
                const json_t *counts = json_object_get(s, "counts"), *sum = json_object_get(s, "sum"),
                             *count = json_object_get(s, "count");
                if (!json_is_array(counts) || json_array_size(counts) != nb + 1 || !json_is_number(sum) ||
                    !isfinite(json_number_value(sum)) || !json_is_integer(count) || json_integer_value(count) < 0)
                        return -EBADMSG;
                pthread_mutex_lock(&f->lock);
                struct series *se = series_get(f, v);
                for (size_t k = 0; se && k <= nb; k++) {
                        json_int_t c = json_integer_value(json_array_get(counts, k));
                        se->counts[k] += c > 0 ? (uint64_t) c : 0;
                }
                if (se) {
                        se->sum += json_number_value(sum);
                        se->count += (uint64_t) json_integer_value(count);
                }
                pthread_mutex_unlock(&f->lock);
                if (!se)
                        return -EBADMSG;
        }
        return 0;
}

int metrics_merge_json(struct metrics_registry *into, const json_t *j, const char *extra_name,
                       const char *extra_value) {
        const json_t *fams = json_object_get(j, "families");
        if (!into || !json_is_array(fams) || json_array_size(fams) > METRICS_FAMILIES_MAX || !name_ok(extra_name, true) ||
            !extra_value || strlen(extra_value) > METRICS_VALUE_MAX)
                return -EBADMSG;
        size_t i;
        const json_t *fj;
        json_array_foreach(fams, i, fj) {
                int e = merge_family(into, fj, extra_name, extra_value);
                if (e < 0)
                        return e;
        }
        return 0;
}
