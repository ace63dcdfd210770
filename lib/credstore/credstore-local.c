/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local backend: values sealed under the key file, rows in lib/store.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "credstore.h"
#include "macros.h"
#include "store.h"

struct credstore_local {
        struct credstore base; /* must be first */
        struct store *store;
        uint8_t *key; /* sodium_malloc'd: locked, guarded, wiped on free */
};

static struct credstore_local *to_local(struct credstore *cs) {
        return (struct credstore_local *) cs;
}

static void local_free(struct credstore *cs) {
        struct credstore_local *l = to_local(cs);
        if (l->key)
                sodium_free(l->key);
        free(l);
}

/* Moves a store row's metadata into ret (the row keeps the sealed bytes). */
static void meta_from_row(struct store_secret *row, struct credstore_meta *ret) {
        *ret = (struct credstore_meta){
                .tenant_id = TAKE_PTR(row->tenant_id),
                .name = TAKE_PTR(row->name),
                .sandbox_id = TAKE_PTR(row->sandbox_id),
                .spec = TAKE_PTR(row->spec),
                .expires_at = row->expires_at,
                .created_at = row->created_at,
                .created_by = TAKE_PTR(row->created_by),
        };
}

static int local_put(struct credstore *cs, const struct credstore_meta *m, const char *value, size_t len) {
        struct credstore_local *l = to_local(cs);
        _cleanup_free_ uint8_t *sealed = NULL;
        size_t sealed_len;
        int r = credstore_seal(l->key, CREDSTORE_FOR_SECRET, m->tenant_id, m->name, value, len, &sealed,
                               &sealed_len);
        if (r < 0)
                return r;
        struct store_secret row = {
                .tenant_id = m->tenant_id,
                .name = m->name,
                .sandbox_id = m->sandbox_id,
                .spec = m->spec,
                .expires_at = m->expires_at,
                .created_at = m->created_at,
                .created_by = m->created_by,
                .sealed = sealed,
                .sealed_len = sealed_len,
        };
        return store_secret_insert(l->store, &row);
}

static int local_get(struct credstore *cs, const char *tenant_id, const char *name, struct credstore_meta *ret,
                     char **ret_value, size_t *ret_len) {
        struct credstore_local *l = to_local(cs);
        _cleanup_(store_secret_release) struct store_secret row = { 0 };
        int r = store_secret_get(l->store, tenant_id, name, &row);
        if (r < 0)
                return r;
        char *v = NULL;
        size_t vlen = 0;
        /* opened with the scope and name asked for: a row moved to
         * another scope or name does not open */
        if (ret_value && (r = credstore_unseal(l->key, CREDSTORE_FOR_SECRET, tenant_id, name, row.sealed,
                                               row.sealed_len, &v, &vlen)) < 0)
                return r;
        meta_from_row(&row, ret);
        if (ret_value) {
                *ret_value = v;
                *ret_len = vlen;
        }
        return 0;
}

static int local_list(struct credstore *cs, const char *tenant_id, size_t max, struct credstore_meta **ret,
                      size_t *ret_n) {
        struct credstore_local *l = to_local(cs);
        struct store_secret *rows = NULL;
        size_t n = 0;
        int r = store_secret_list(l->store, tenant_id, max, &rows, &n);
        if (r < 0)
                return r;
        struct credstore_meta *a = calloc(n ? n : 1, sizeof *a);
        if (!a) {
                store_secret_array_free(rows, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                meta_from_row(&rows[i], &a[i]);
        store_secret_array_free(rows, n);
        *ret = a;
        *ret_n = n;
        return 0;
}

static int local_delete(struct credstore *cs, const char *tenant_id, const char *name) {
        return store_secret_delete(to_local(cs)->store, tenant_id, name);
}

static const struct credstore_ops local_ops = {
        .name = "local",
        .free = local_free,
        .put = local_put,
        .get = local_get,
        .list = local_list,
        .delete = local_delete,
};

int credstore_local_new(struct store *st, const char *key_path, struct credstore **ret) {
        if (!st || !key_path || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct credstore_local *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->base.ops = &local_ops;
        l->store = st;
        l->key = sodium_malloc(CREDSTORE_KEY_SIZE);
        int r = l->key ? credstore_key_load(key_path, l->key) : -ENOMEM;
        if (r < 0) {
                local_free(&l->base);
                return r;
        }
        *ret = &l->base;
        return 0;
}
