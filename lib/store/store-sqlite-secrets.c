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

int sqlite_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id) {
        struct store_params q = { 0 };
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        char *id = NULL;
        int r = sqlite_select_one(s, "SELECT id FROM api_keys WHERE hash = ?1", &q, store_read_text, &id);
        if (r >= 0 && !id)
                r = -ENOENT;
        if (r < 0)
                return r;
        *ret_id = id;
        return 0;
}

int sqlite_secret_insert(struct store *s, const struct store_secret *sec) {
        struct store_params q = { 0 };
        store_params_secret(&q, sec);
        return sqlite_write(s,
                            "INSERT INTO secrets (tenant_id, name, sandbox_id, spec, expires_at, sealed, created_at, "
                            "created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                            &q, NULL);
}

int sqlite_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return sqlite_select_one(s,
                                 "SELECT " STORE_SECRET_COLUMNS ", sealed FROM secrets WHERE " SCOPE_IS(1) " AND "
                                 "name = ?2",
                                 &q, store_read_secret, ret);
}

int sqlite_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        return sqlite_select_all(s, "SELECT " STORE_SECRET_COLUMNS " FROM secrets WHERE " SCOPE_IS(1) " ORDER BY name",
                                 &q, &store_list_secret, max, ret, ret_n);
}

int sqlite_secret_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return sqlite_write_one(s, "DELETE FROM secrets WHERE " SCOPE_IS(1) " AND name = ?2", &q);
}

int sqlite_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                        size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return sqlite_select_all(s,
                                 "SELECT a.sandbox_id FROM sandbox_secrets a JOIN secrets s ON s.id = a.secret_id "
                                 "WHERE COALESCE(s.tenant_id, '') = ?1 AND s.name = ?2 ORDER BY a.sandbox_id",
                                 &q, &store_list_string, max, ret, ret_n);
}

int sqlite_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a) {
        struct store_params q = { 0 };
        store_param_text(&q, a->sandbox_id);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, a->name);
        store_param_text(&q, a->placeholder);
        store_param_text(&q, a->env_name);
        /* no secret row: nothing inserted, -ENOENT */
        return sqlite_write_one(s,
                                "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) "
                                "SELECT ?1, id, name, ?4, ?5 FROM secrets WHERE " SCOPE_IS(2) " AND name = ?3",
                                &q);
}

int sqlite_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                               size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        return sqlite_select_all(s,
                                 "SELECT " STORE_ATTACHMENT_COLUMNS " FROM sandbox_secrets WHERE sandbox_id = ?1 "
                                 "ORDER BY name",
                                 &q, &store_list_attachment, STORE_LIST_MAX, ret, ret_n);
}

int sqlite_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id) {
        struct store_params q = { 0 };
        store_param_text(&q, from_id);
        store_param_text(&q, to_id);
        return sqlite_write(s,
                            "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) "
                            "SELECT ?2, secret_id, name, placeholder, env_name FROM sandbox_secrets WHERE "
                            "sandbox_id = ?1",
                            &q, NULL);
}

int sqlite_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                        int64_t seq) {
        struct store_params q = { 0 };
        store_params_audit_event(&q, ev, source, boot_id, seq);
        /* a gateway event already stored (same source, boot, seq) is skipped */
        return sqlite_write(s,
                            "INSERT OR IGNORE INTO audit_events (ts_ms, tenant_id, actor, sandbox_id, secret, "
                            "host, port, method, path, action, reason, source, boot_id, seq) "
                            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                            &q, NULL);
}

int sqlite_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                      size_t max, struct store_audit_event **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_text(&q, secret);
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s,
                                 "SELECT " STORE_AUDIT_COLUMNS " FROM audit_events WHERE (?1 OR " SCOPE_IS(2) ") "
                                 "AND (?3 IS NULL OR sandbox_id = ?3) AND (?4 IS NULL OR secret = ?4) "
                                 "ORDER BY id DESC LIMIT ?5",
                                 &q, &store_list_audit_event, max, ret, ret_n);
}

int sqlite_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq) {
        struct store_params q = { 0 };
        store_param_text(&q, source);
        struct store_audit_cursor cur = { 0 };
        int r = sqlite_select_one(s, "SELECT boot_id, seq FROM audit_cursors WHERE source = ?1", &q,
                                  store_read_audit_cursor, &cur);
        if (r < 0)
                return r;
        *ret_boot_id = cur.boot_id;
        *ret_seq = cur.seq;
        return 0;
}

int sqlite_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq) {
        struct store_params q = { 0 };
        store_param_text(&q, source);
        store_param_text(&q, boot_id);
        store_param_int(&q, seq);
        return sqlite_write(s,
                            "INSERT INTO audit_cursors (source, boot_id, seq) VALUES (?1, ?2, ?3) "
                            "ON CONFLICT(source) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq",
                            &q, NULL);
}
