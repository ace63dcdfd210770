/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend: images (full snapshots published to the object
 * store, see store.h).
 */
#include <errno.h>
#include <stdlib.h>

#include "store-pg-internal.h"

int pg_image_insert(struct store *s, const struct store_image *img) {
        struct store_params q = { 0 };
        store_params_image(&q, img);
        return pg_write(s,
                        "INSERT INTO images (" STORE_IMAGE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                        &q, NULL);
}

int pg_image_get(struct store *s, const char *id, struct store_image *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        return pg_select_one(s, "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE id = $1", &q, store_read_image,
                             ret);
}

int pg_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return pg_select_one(s, "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE " PG_SCOPE_IS(1) " AND name = $2",
                             &q, store_read_image, ret);
}

int pg_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                  struct store_image **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE ($1 OR " PG_SCOPE_IS(2) ") "
                             "AND ($3 IS NULL OR sandbox_id = $3) "
                             "ORDER BY created_at DESC, id COLLATE \"C\" DESC LIMIT $4",
                             &q, &store_list_image, max, ret, ret_n);
}

int pg_image_delete(struct store *s, const char *id) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        return pg_write_one(s, "DELETE FROM images WHERE id = $1", &q);
}
