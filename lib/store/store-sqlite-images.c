/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: images (full snapshots published to the object store,
 * see store.h). Each call prepares its own statement, as the secrets do.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-sqlite-internal.h"

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

int sqlite_image_insert(struct store *s, const struct store_image *img) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "INSERT INTO images (" STORE_IMAGE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                            &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, img->id);
        sqlite_bind_str(st, 2, img->tenant_id);
        sqlite_bind_str(st, 3, img->name);
        sqlite_bind_str(st, 4, img->sandbox_id);
        sqlite_bind_str(st, 5, img->template_name);
        sqlite3_bind_int64(st, 6, img->size);
        sqlite3_bind_int64(st, 7, img->created_at ? img->created_at : store_now_ms());
        sqlite_bind_str(st, 8, img->kind ? img->kind : "full");
        sqlite_bind_str(st, 9, img->snapshot_id);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}

/* Runs a prepared SELECT that yields at most one image. */
static int select_image(struct store_sqlite_conn *c, sqlite3_stmt *st, struct store_image *ret) {
        int r = sqlite_one(c, st, store_read_image, ret);
        sqlite_done(c, st);
        return r;
}

int sqlite_image_get(struct store *s, const char *id, struct store_image *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE id = ?1", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, id);
        return select_image(c, st, ret);
}

int sqlite_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE " SCOPE_IS(1) " AND name = ?2", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id ?: "");
        sqlite_bind_str(st, 2, name);
        return select_image(c, st, ret);
}

int sqlite_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                      struct store_image **ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                            "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE (?1 OR " SCOPE_IS(2) ") "
                            "AND (?3 IS NULL OR sandbox_id = ?3) ORDER BY created_at DESC, id DESC",
                            &st);
        if (r < 0)
                return r;
        sqlite3_bind_int(st, 1, all ? 1 : 0);
        sqlite_bind_str(st, 2, tenant_id ?: "");
        sqlite_bind_str(st, 3, sandbox_id);
        r = sqlite_list(c, st, &store_list_image, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_image_delete(struct store *s, const char *id) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "DELETE FROM images WHERE id = ?1", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, id);
        r = sqlite_step_write(c, st, true);
        sqlite_done(c, st);
        return r;
}
