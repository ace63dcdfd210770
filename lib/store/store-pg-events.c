/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend: sandboxes' lifecycle events (store.h, store_event_*).
 */
#include <errno.h>
#include <stdlib.h>

#include "store-pg-internal.h"

int pg_event_insert(struct store *s, const struct store_event *ev) {
        struct store_params q = { 0 };
        store_params_event(&q, ev);
        return pg_write(s,
                        "INSERT INTO sandbox_events (ts_ms, tenant_id, sandbox_id, type, state, previous) "
                        "VALUES ($1, $2, $3, $4, $5, $6)",
                        &q, NULL);
}

int pg_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                  size_t max, struct store_event **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, after_id);
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_EVENT_COLUMNS " FROM sandbox_events WHERE id > $1 AND ($2 OR " PG_SCOPE_IS(
                                     3) ") AND ($4::text IS NULL OR sandbox_id = $4) ORDER BY id LIMIT $5",
                             &q, &store_list_event, max, ret, ret_n);
}

int pg_event_last_id(struct store *s, int64_t *ret) {
        return pg_select_one(s, "SELECT COALESCE(MAX(id), 0) FROM sandbox_events", NULL, store_read_int64, ret);
}

int pg_event_prune(struct store *s, int64_t before_ms) {
        struct store_params q = { 0 };
        store_param_int(&q, before_ms);
        return pg_write(s, "DELETE FROM sandbox_events WHERE ts_ms < $1", &q, NULL);
}
