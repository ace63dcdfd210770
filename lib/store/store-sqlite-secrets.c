/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend, second part: credentials (sealed values only), their
 * attachments to sandboxes and the audit log. These run far less often than
 * the core tables' statements, so each call prepares its own statement
 * (under the connection lock, like every use of the connection).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "store-sqlite-internal.h"

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

int sqlite_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT id FROM api_keys WHERE hash = ?1", &st);
        if (r < 0)
                return r;
        sqlite3_bind_blob(st, 1, hash, STORE_HASH_SIZE, SQLITE_STATIC);
        char *id = NULL;
        r = sqlite_one(c, st, store_read_text, &id);
        sqlite_done(c, st);
        if (r >= 0 && !id)
                r = -ENOENT;
        if (r < 0)
                return r;
        *ret_id = id;
        return 0;
}

int sqlite_secret_insert(struct store *s, const struct store_secret *sec) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "INSERT INTO secrets (tenant_id, name, sandbox_id, spec, expires_at, sealed, created_at, "
                     "created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, sec->tenant_id);
        sqlite_bind_str(st, 2, sec->name);
        sqlite_bind_str(st, 3, sec->sandbox_id);
        sqlite_bind_str(st, 4, sec->spec);
        sqlite3_bind_int64(st, 5, sec->expires_at);
        sqlite3_bind_blob(st, 6, sec->sealed, (int) sec->sealed_len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, sec->created_at ? sec->created_at : store_now_ms());
        sqlite_bind_str(st, 8, sec->created_by);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}

int sqlite_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT " STORE_SECRET_COLUMNS ", sealed FROM secrets WHERE " SCOPE_IS(1) " AND name = ?2", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id ?: "");
        sqlite_bind_str(st, 2, name);
        r = sqlite_one(c, st, store_read_secret, ret);
        sqlite_done(c, st);
        return r;
}

int sqlite_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT " STORE_SECRET_COLUMNS " FROM secrets WHERE " SCOPE_IS(1) " ORDER BY name", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id ?: "");
        r = sqlite_list(c, st, &store_list_secret, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_secret_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "DELETE FROM secrets WHERE " SCOPE_IS(1) " AND name = ?2", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id ?: "");
        sqlite_bind_str(st, 2, name);
        r = sqlite_step_write(c, st, true);
        sqlite_done(c, st);
        return r;
}

int sqlite_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                        size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "SELECT a.sandbox_id FROM sandbox_secrets a JOIN secrets s ON s.id = a.secret_id "
                     "WHERE COALESCE(s.tenant_id, '') = ?1 AND s.name = ?2 ORDER BY a.sandbox_id",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, tenant_id ?: "");
        sqlite_bind_str(st, 2, name);
        r = sqlite_list(c, st, &store_list_string, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        /* no secret row: nothing inserted, -ENOENT */
        int r = sqlite_prep(c,
                     "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) "
                     "SELECT ?1, id, name, ?4, ?5 FROM secrets WHERE " SCOPE_IS(2) " AND name = ?3",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, a->sandbox_id);
        sqlite_bind_str(st, 2, tenant_id ?: "");
        sqlite_bind_str(st, 3, a->name);
        sqlite_bind_str(st, 4, a->placeholder);
        sqlite_bind_str(st, 5, a->env_name);
        r = sqlite_step_write(c, st, true);
        sqlite_done(c, st);
        return r;
}

int sqlite_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                               size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "SELECT " STORE_ATTACHMENT_COLUMNS " FROM sandbox_secrets WHERE sandbox_id = ?1 "
                     "ORDER BY name",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, sandbox_id);
        r = sqlite_list(c, st, &store_list_attachment, STORE_LIST_MAX, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) "
                     "SELECT ?2, secret_id, name, placeholder, env_name FROM sandbox_secrets WHERE "
                     "sandbox_id = ?1",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, from_id);
        sqlite_bind_str(st, 2, to_id);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}

int sqlite_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                        int64_t seq) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        /* a gateway event already stored (same source, boot, seq) is skipped */
        int r = sqlite_prep(c,
                     "INSERT OR IGNORE INTO audit_events (ts_ms, tenant_id, actor, sandbox_id, secret, "
                     "host, port, "
                     "method, path, action, reason, source, boot_id, seq) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                     &st);
        if (r < 0)
                return r;
        sqlite3_bind_int64(st, 1, ev->ts_ms ? ev->ts_ms : store_now_ms());
        sqlite_bind_str(st, 2, ev->tenant_id);
        sqlite_bind_str(st, 3, ev->actor);
        sqlite_bind_str(st, 4, ev->sandbox_id);
        sqlite_bind_str(st, 5, ev->secret);
        sqlite_bind_str(st, 6, ev->host);
        if (ev->port > 0)
                sqlite3_bind_int(st, 7, ev->port);
        else
                sqlite3_bind_null(st, 7);
        sqlite_bind_str(st, 8, ev->method);
        sqlite_bind_str(st, 9, ev->path);
        sqlite_bind_str(st, 10, ev->action);
        sqlite_bind_str(st, 11, ev->reason);
        sqlite_bind_str(st, 12, source);
        sqlite_bind_str(st, 13, boot_id);
        if (source)
                sqlite3_bind_int64(st, 14, seq);
        else
                sqlite3_bind_null(st, 14);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}

int sqlite_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                      size_t max, struct store_audit_event **ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "SELECT " STORE_AUDIT_COLUMNS " FROM audit_events WHERE (?1 OR " SCOPE_IS(
                             2) ") AND (?3 IS NULL OR sandbox_id = ?3) "
                                "AND (?4 IS NULL OR secret = ?4) ORDER BY id DESC LIMIT ?5",
                     &st);
        if (r < 0)
                return r;
        sqlite3_bind_int(st, 1, all);
        sqlite_bind_str(st, 2, tenant_id ?: "");
        sqlite_bind_str(st, 3, sandbox_id);
        sqlite_bind_str(st, 4, secret);
        sqlite3_bind_int64(st, 5, (sqlite3_int64) max);
        r = sqlite_list(c, st, &store_list_audit_event, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT boot_id, seq FROM audit_cursors WHERE source = ?1", &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, source);
        struct store_audit_cursor cur = { 0 };
        r = sqlite_one(c, st, store_read_audit_cursor, &cur);
        sqlite_done(c, st);
        if (r < 0)
                return r;
        *ret_boot_id = cur.boot_id;
        *ret_seq = cur.seq;
        return 0;
}

int sqlite_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c,
                     "INSERT INTO audit_cursors (source, boot_id, seq) VALUES (?1, ?2, ?3) "
                     "ON CONFLICT(source) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq",
                     &st);
        if (r < 0)
                return r;
        sqlite_bind_str(st, 1, source);
        sqlite_bind_str(st, 2, boot_id);
        sqlite3_bind_int64(st, 3, seq);
        r = sqlite_step_write(c, st, false);
        sqlite_done(c, st);
        return r;
}
