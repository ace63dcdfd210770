/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: sandboxes' lifecycle events (store.h, store_event_*).
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-sqlite-internal.h"

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

int sqlite_event_insert(struct store *s, const struct store_event *ev) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                            "INSERT INTO sandbox_events (ts_ms, tenant_id, sandbox_id, type, state, previous) "
                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            &st);
        if (r < 0)
                return r;
        sqlite3_bind_int64(st, 1, ev->ts_ms ? ev->ts_ms : store_now_ms());
        sqlite_bind_str(st, 2, ev->tenant_id);
        sqlite_bind_str(st, 3, ev->sandbox_id);
        sqlite_bind_str(st, 4, ev->type);
        sqlite_bind_str(st, 5, ev->state);
        sqlite_bind_str(st, 6, ev->previous);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}

int sqlite_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                      size_t max, struct store_event **ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                            "SELECT " STORE_EVENT_COLUMNS " FROM sandbox_events WHERE id > ?1 AND (?2 OR " SCOPE_IS(
                                    3) ") AND (?4 IS NULL OR sandbox_id = ?4) ORDER BY id LIMIT ?5",
                            &st);
        if (r < 0)
                return r;
        sqlite3_bind_int64(st, 1, after_id);
        sqlite3_bind_int(st, 2, all);
        sqlite_bind_str(st, 3, tenant_id ?: "");
        sqlite_bind_str(st, 4, sandbox_id);
        sqlite3_bind_int64(st, 5, (sqlite3_int64) max);
        r = sqlite_list(c, st, &store_list_event, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

static int read_id(const struct store_row *r, void *ret) {
        *(int64_t *) ret = store_row_int64(r, 0);
        return 0;
}

int sqlite_event_last_id(struct store *s, int64_t *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT COALESCE(MAX(id), 0) FROM sandbox_events", &st);
        if (r < 0)
                return r;
        r = sqlite_one(c, st, read_id, ret);
        sqlite_done(c, st);
        return r;
}

int sqlite_event_prune(struct store *s, int64_t before_ms) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "DELETE FROM sandbox_events WHERE ts_ms < ?1", &st);
        if (r < 0)
                return r;
        sqlite3_bind_int64(st, 1, before_ms);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}
