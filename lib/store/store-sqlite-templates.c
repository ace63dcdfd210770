/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: templates built from specs (store.h). Each call prepares
 * its own statement, as the images do. The admin's rows and the local node
 * are NULL in the table, "" in the struct.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-sqlite-internal.h"

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

/* "" as NULL: the admin's rows, the local node */
static void bind_str_or_null(sqlite3_stmt *st, int idx, const char *v) {
        sqlite_bind_str(st, idx, v && *v ? v : NULL);
}

int sqlite_template_put(struct store *s, const struct store_template *t, size_t max) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int64_t now = store_now_ms();
        /* one statement, so the count and the write see one state; a
         * replaced row keeps its created_at */
        int r = sqlite_prep(c,
                            "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                            "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12 "
                            "WHERE EXISTS (SELECT 1 FROM templates WHERE " SCOPE_IS(13) " AND name = ?2) "
                            "OR (SELECT COUNT(*) FROM templates WHERE " SCOPE_IS(13) ") < ?14 "
                            "ON CONFLICT (COALESCE(tenant_id, ''), name) DO UPDATE SET "
                            "node_name = excluded.node_name, build_id = excluded.build_id, state = excluded.state, "
                            "error = excluded.error, node = excluded.node, spec = excluded.spec, "
                            "memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                            "updated_at = excluded.updated_at",
                            &st);
        if (r < 0)
                return r;
        bind_str_or_null(st, 1, t->tenant_id);
        sqlite_bind_str(st, 2, t->name);
        sqlite_bind_str(st, 3, t->node_name);
        sqlite_bind_str(st, 4, t->build_id);
        sqlite_bind_str(st, 5, t->state);
        sqlite_bind_str(st, 6, t->error);
        bind_str_or_null(st, 7, t->node);
        sqlite_bind_str(st, 8, t->spec);
        sqlite3_bind_int64(st, 9, t->memory_mib);
        sqlite3_bind_int64(st, 10, t->vcpus);
        sqlite3_bind_int64(st, 11, t->created_at ?: now);
        sqlite3_bind_int64(st, 12, t->updated_at ?: now);
        sqlite_bind_str(st, 13, t->tenant_id);
        sqlite3_bind_int64(st, 14, (sqlite3_int64) MIN(max, (size_t) INT64_MAX));
        r = sqlite_step_write(c, st, false); /* -ENOENT: the tenant's foreign key */
        if (r >= 0 && sqlite3_changes(c->db) == 0)
                r = -EDQUOT;
        sqlite_done(c, st);
        return r;
}

int sqlite_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE " SCOPE_IS(1) " AND name = ?2",
                            &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id);
        sqlite_bind_str(st, 2, name);
        r = sqlite_one(c, st, store_read_template, ret);
        sqlite_done(c, st);
        return r;
}

int sqlite_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                         size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                            "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE (?1 IS NULL OR " SCOPE_IS(1) ") "
                            "ORDER BY name, COALESCE(tenant_id, '') LIMIT ?2",
                            &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64) max);
        r = sqlite_list(c, st, &store_list_template, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                              const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                            "UPDATE templates SET state = ?4, error = ?5, "
                            "memory_mib = CASE WHEN ?6 > 0 THEN ?6 ELSE memory_mib END, "
                            "vcpus = CASE WHEN ?7 > 0 THEN ?7 ELSE vcpus END, updated_at = ?8 "
                            "WHERE " SCOPE_IS(1) " AND name = ?2 AND build_id = ?3",
                            &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id);
        sqlite_bind_str(st, 2, name);
        sqlite_bind_str(st, 3, build_id);
        sqlite_bind_str(st, 4, state);
        sqlite_bind_str(st, 5, error);
        sqlite3_bind_int64(st, 6, memory_mib);
        sqlite3_bind_int64(st, 7, vcpus);
        sqlite3_bind_int64(st, 8, store_now_ms());
        r = sqlite_step_write(c, st, true);
        sqlite_done(c, st);
        if (r != -ENOENT)
                return r;
        /* nothing changed: the row is gone, or another build replaced it */
        struct store_template t = { 0 };
        r = sqlite_template_get(s, tenant_id, name, &t);
        store_template_release(&t);
        return r < 0 ? r : -ESTALE;
}

int sqlite_template_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "DELETE FROM templates WHERE " SCOPE_IS(1) " AND name = ?2", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id);
        sqlite_bind_str(st, 2, name);
        r = sqlite_step_write(c, st, true);
        sqlite_done(c, st);
        return r;
}

int sqlite_template_node_refs(struct store *s, const char *node_name, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT COUNT(*) FROM templates WHERE node_name = ?1", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, node_name);
        int64_t n = 0;
        r = sqlite_one(c, st, store_read_int64, &n);
        sqlite_done(c, st);
        if (r < 0)
                return r;
        *ret_n = (size_t) n;
        return 0;
}
