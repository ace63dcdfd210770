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

int sqlite_template_put(struct store *s, const struct store_template *t, size_t max) {
        struct store_params q = { 0 };
        store_params_template(&q, t, max);
        /* one statement, so the count and the write see one state; a
         * replaced row keeps its created_at */
        uint64_t n = 0;
        int r = sqlite_write(s,
                             "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                             "SELECT NULLIF(?1, ''), ?2, ?3, ?4, ?5, ?6, NULLIF(?7, ''), ?8, ?9, ?10, ?11, ?12 "
                             "WHERE EXISTS (SELECT 1 FROM templates WHERE " SCOPE_IS(1) " AND name = ?2) "
                             "OR (SELECT COUNT(*) FROM templates WHERE " SCOPE_IS(1) ") < ?13 "
                             "ON CONFLICT (COALESCE(tenant_id, ''), name) DO UPDATE SET "
                             "node_name = excluded.node_name, build_id = excluded.build_id, state = excluded.state, "
                             "error = excluded.error, node = excluded.node, spec = excluded.spec, "
                             "memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                             "updated_at = excluded.updated_at",
                             &q, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

int sqlite_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        return sqlite_select_one(s,
                                 "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE " SCOPE_IS(1) " AND name = ?2",
                                 &q, store_read_template, ret);
}

int sqlite_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                         size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s,
                                 "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE (?1 IS NULL OR " SCOPE_IS(1)
                                 ") ORDER BY name, COALESCE(tenant_id, '') LIMIT ?2",
                                 &q, &store_list_template, max, ret, ret_n);
}

int sqlite_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                              const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        store_param_text(&q, build_id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_int(&q, memory_mib);
        store_param_int(&q, vcpus);
        store_param_int(&q, store_now_ms());
        int r = sqlite_write_one(s,
                                 "UPDATE templates SET state = ?4, error = ?5, "
                                 "memory_mib = CASE WHEN ?6 > 0 THEN ?6 ELSE memory_mib END, "
                                 "vcpus = CASE WHEN ?7 > 0 THEN ?7 ELSE vcpus END, updated_at = ?8 "
                                 "WHERE " SCOPE_IS(1) " AND name = ?2 AND build_id = ?3",
                                 &q);
        if (r != -ENOENT)
                return r;
        /* nothing changed: the row is gone, or another build replaced it */
        struct store_template t = { 0 };
        r = sqlite_template_get(s, tenant_id, name, &t);
        store_template_release(&t);
        return r < 0 ? r : -ESTALE;
}

int sqlite_template_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        return sqlite_write_one(s, "DELETE FROM templates WHERE " SCOPE_IS(1) " AND name = ?2", &q);
}

int sqlite_template_node_refs(struct store *s, const char *node_name, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, node_name);
        int64_t n = 0;
        int r = sqlite_select_one(s, "SELECT COUNT(*) FROM templates WHERE node_name = ?1", &q, store_read_int64, &n);
        if (r < 0)
                return r;
        *ret_n = (size_t) n;
        return 0;
}
