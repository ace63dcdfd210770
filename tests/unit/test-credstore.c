/* SPDX-License-Identifier: Apache-2.0 */
/* lib/credstore: sealing, the key file, the local backend over a real
 * SQLite store (and the store's credential, attachment and audit rows). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "credstore.h"
#include "macros.h"
#include "store.h"
#include "util.h"

static char dir[256];
static char url[300];
static char key_path[300];

static const char VALUE[] = "ghp_0123456789abcdefSECRET";

static int setup(void **state) {
        snprintf(dir, sizeof dir, "/tmp/test-credstore-XXXXXX");
        if (!mkdtemp(dir))
                return -1;
        snprintf(url, sizeof url, "sqlite:%s/airlock.db", dir);
        snprintf(key_path, sizeof key_path, "%s/%s", dir, CREDSTORE_KEY_FILE);
        return 0;
}

static int teardown(void **state) {
        rm_rf(dir);
        return 0;
}

static void fill_key(uint8_t k[CREDSTORE_KEY_SIZE], uint8_t b) {
        memset(k, b, CREDSTORE_KEY_SIZE);
}

static void test_names(void **state) {
        assert_true(credstore_name_is_valid("gh"));
        assert_true(credstore_name_is_valid("a-b_c9"));
        assert_false(credstore_name_is_valid(""));
        assert_false(credstore_name_is_valid("GH"));
        assert_false(credstore_name_is_valid("a.b"));
        assert_false(credstore_name_is_valid("a b"));
        char longn[CREDSTORE_NAME_MAX + 2];
        memset(longn, 'a', sizeof longn - 1);
        longn[sizeof longn - 1] = 0;
        assert_false(credstore_name_is_valid(longn));
        longn[CREDSTORE_NAME_MAX] = 0;
        assert_true(credstore_name_is_valid(longn));
}

static void test_seal_round_trip(void **state) {
        uint8_t key[CREDSTORE_KEY_SIZE], other[CREDSTORE_KEY_SIZE];
        fill_key(key, 7);
        fill_key(other, 8);
        _cleanup_free_ uint8_t *sealed = NULL;
        size_t n = 0;
        assert_int_equal(
                credstore_seal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", VALUE, strlen(VALUE), &sealed, &n),
                0);
        assert_int_equal(n, strlen(VALUE) + CREDSTORE_SEALED_OVERHEAD);
        assert_null(memmem(sealed, n, VALUE, strlen(VALUE))); /* not in the clear */

        char *v = NULL;
        size_t vlen = 0;
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", sealed, n, &v, &vlen),
                         0);
        assert_int_equal(vlen, strlen(VALUE));
        assert_string_equal(v, VALUE);
        credstore_value_free(v, vlen);

        /* wrong key, other tenant, other name, admin scope: refused */
        v = NULL;
        assert_int_equal(credstore_unseal(other, CREDSTORE_FOR_SECRET, "ten-1", "gh", sealed, n, &v, &vlen),
                         -EBADMSG);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-2", "gh", sealed, n, &v, &vlen),
                         -EBADMSG);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh2", sealed, n, &v, &vlen),
                         -EBADMSG);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, NULL, "gh", sealed, n, &v, &vlen),
                         -EBADMSG);
        /* "ten-1"+"gh" must not equal "ten-1g"+"h" */
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1g", "h", sealed, n, &v, &vlen),
                         -EBADMSG);
        /* sealed as a credential, it is no webhook's secret (nor the other way) */
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_WEBHOOK, "ten-1", "gh", sealed, n, &v, &vlen),
                         -EBADMSG);
        _cleanup_free_ uint8_t *wh = NULL;
        size_t whn = 0;
        assert_int_equal(
                credstore_seal(key, CREDSTORE_FOR_WEBHOOK, "ten-1", "gh", VALUE, strlen(VALUE), &wh, &whn),
                0);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", wh, whn, &v, &vlen),
                         -EBADMSG);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_WEBHOOK, "ten-1", "gh", wh, whn, &v, &vlen), 0);
        assert_string_equal(v, VALUE);
        credstore_value_free(v, vlen);
        v = NULL;
        assert_int_equal(
                credstore_unseal(key, (enum credstore_purpose) 7, "ten-1", "gh", wh, whn, &v, &vlen),
                -EINVAL);
        assert_null(v);

        /* every single changed byte is refused, the version byte included */
        for (size_t i = 0; i < n; i++) {
                sealed[i] ^= 0x01;
                assert_int_equal(
                        credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", sealed, n, &v, &vlen),
                        -EBADMSG);
                sealed[i] ^= 0x01;
        }
        /* short or truncated */
        assert_int_equal(
                credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", sealed, n - 1, &v, &vlen),
                -EBADMSG);
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", sealed,
                                          CREDSTORE_SEALED_OVERHEAD, &v, &vlen),
                         -EBADMSG);
        assert_null(v);

        /* two seals of one value differ (random nonce) */
        _cleanup_free_ uint8_t *again = NULL;
        size_t n2 = 0;
        assert_int_equal(
                credstore_seal(key, CREDSTORE_FOR_SECRET, "ten-1", "gh", VALUE, strlen(VALUE), &again, &n2),
                0);
        assert_int_equal(n, n2);
        assert_memory_not_equal(sealed, again, n);
}

static void test_seal_limits(void **state) {
        uint8_t key[CREDSTORE_KEY_SIZE];
        fill_key(key, 1);
        uint8_t *sealed = NULL;
        size_t n = 0;
        assert_int_equal(credstore_seal(key, CREDSTORE_FOR_SECRET, NULL, "gh", "", 0, &sealed, &n), -EINVAL);
        assert_int_equal(credstore_seal(key, CREDSTORE_FOR_SECRET, NULL, "gh", "a\0b", 3, &sealed, &n),
                         -EINVAL);
        assert_int_equal(credstore_seal(key, CREDSTORE_FOR_SECRET, NULL, "Bad", "x", 1, &sealed, &n),
                         -EINVAL);
        char *big = malloc(CREDSTORE_VALUE_MAX + 1);
        assert_non_null(big);
        memset(big, 'x', CREDSTORE_VALUE_MAX + 1);
        assert_int_equal(credstore_seal(key, CREDSTORE_FOR_SECRET, NULL, "gh", big, CREDSTORE_VALUE_MAX + 1,
                                        &sealed, &n),
                         -EINVAL);
        assert_null(sealed);
        assert_int_equal(
                credstore_seal(key, CREDSTORE_FOR_SECRET, NULL, "gh", big, CREDSTORE_VALUE_MAX, &sealed, &n),
                0);
        assert_int_equal(n, CREDSTORE_SEALED_MAX);
        char *v = NULL;
        size_t vlen;
        assert_int_equal(credstore_unseal(key, CREDSTORE_FOR_SECRET, NULL, "gh", sealed, n, &v, &vlen), 0);
        assert_int_equal(vlen, CREDSTORE_VALUE_MAX);
        credstore_value_free(v, vlen);
        free(sealed);
        free(big);
}

static void test_key_file(void **state) {
        uint8_t k1[CREDSTORE_KEY_SIZE], k2[CREDSTORE_KEY_SIZE];
        assert_int_equal(credstore_key_load(key_path, k1), 0);
        struct stat st;
        assert_int_equal(stat(key_path, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(st.st_size, CREDSTORE_KEY_SIZE);
        assert_int_equal(st.st_uid, geteuid());
        /* read again: the same key */
        assert_int_equal(credstore_key_load(key_path, k2), 0);
        assert_memory_equal(k1, k2, sizeof k1);
        /* no temporary left behind */
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", key_path, (int) getpid());
        assert_int_equal(access(tmp, F_OK), -1);

        /* readable by others: refused, not used */
        assert_int_equal(chmod(key_path, 0644), 0);
        assert_int_equal(credstore_key_load(key_path, k2), -EPERM);
        assert_int_equal(chmod(key_path, 0600), 0);
        /* the wrong size */
        assert_int_equal(truncate(key_path, 16), 0);
        assert_int_equal(credstore_key_load(key_path, k2), -EBADMSG);
        /* a symlink is not followed */
        char link_path[400];
        snprintf(link_path, sizeof link_path, "%s/link.key", dir);
        assert_int_equal(symlink(key_path, link_path), 0);
        assert_int_equal(credstore_key_load(link_path, k2), -ELOOP);
}

static void test_local_backend(void **state) {
        _cleanup_(store_closep) struct store *st = NULL;
        assert_int_equal(store_open(url, &st), 0);
        struct store_tenant t = { .id = "ten-a", .name = "a" };
        assert_int_equal(store_tenant_insert(st, &t, 10), 0);
        _cleanup_(credstore_freep) struct credstore *cs = NULL;
        assert_int_equal(credstore_local_new(st, key_path, &cs), 0);

        struct credstore_meta m = { .tenant_id = "ten-a",
                                    .name = "gh",
                                    .spec = "{\"hosts\":[\"api.github.com\"]}",
                                    .expires_at = 0,
                                    .created_by = "key-1" };
        assert_int_equal(credstore_put(cs, &m, VALUE, strlen(VALUE)), 0);
        assert_int_equal(credstore_put(cs, &m, VALUE, strlen(VALUE)), -EEXIST);
        /* the same name in the admin scope is another secret */
        struct credstore_meta adm = { .name = "gh", .spec = "{}" };
        assert_int_equal(credstore_put(cs, &adm, "admin-value", 11), 0);
        assert_int_equal(credstore_put(cs, &adm, "admin-value", 11), -EEXIST);
        /* unknown tenant */
        struct credstore_meta bad = { .tenant_id = "ten-none", .name = "x", .spec = "{}" };
        assert_int_equal(credstore_put(cs, &bad, "v", 1), -ENOENT);

        struct credstore_meta got = { 0 };
        char *v = NULL;
        size_t vlen = 0;
        assert_int_equal(credstore_get(cs, "ten-a", "gh", &got, &v, &vlen), 0);
        assert_string_equal(v, VALUE);
        assert_string_equal(got.created_by, "key-1");
        assert_string_equal(got.tenant_id, "ten-a");
        assert_true(got.created_at > 0);
        credstore_value_free(v, vlen);
        credstore_meta_release(&got);
        assert_int_equal(credstore_get(cs, NULL, "gh", &got, &v, &vlen), 0);
        assert_string_equal(v, "admin-value");
        credstore_value_free(v, vlen);
        credstore_meta_release(&got);
        assert_int_equal(credstore_get(cs, "ten-b", "gh", &got, NULL, NULL), -ENOENT);

        struct credstore_meta *list = NULL;
        size_t n = 0;
        assert_int_equal(credstore_list(cs, "ten-a", 100, &list, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(list[0].name, "gh");
        credstore_meta_array_free(list, n);

        /* the value is not in the database file in the clear */
        _cleanup_free_ char *db = NULL;
        size_t dblen = 0;
        char db_path[300];
        snprintf(db_path, sizeof db_path, "%s/airlock.db", dir);
        store_close(TAKE_PTR(st));
        assert_int_equal(file_read_all(db_path, 64 << 20, &db, &dblen), 0);
        assert_null(memmem(db, dblen, VALUE, strlen(VALUE)));
        assert_int_equal(store_open(url, &st), 0);
        credstore_free(TAKE_PTR(cs));
        assert_int_equal(credstore_local_new(st, key_path, &cs), 0);

        /* a row swapped into another scope does not open */
        struct store_secret row = { 0 };
        assert_int_equal(store_secret_get(st, "ten-a", "gh", &row), 0);
        struct store_secret moved = {
                .tenant_id = NULL, .name = "moved", .spec = "{}", .sealed = row.sealed, .sealed_len = row.sealed_len
        };
        assert_int_equal(store_secret_insert(st, &moved), 0);
        store_secret_release(&row);
        assert_int_equal(credstore_get(cs, NULL, "moved", &got, &v, &vlen), -EBADMSG);
        /* metadata alone still reads */
        assert_int_equal(credstore_get(cs, NULL, "moved", &got, NULL, NULL), 0);
        credstore_meta_release(&got);

        /* another key does not open it */
        char other_key[400];
        snprintf(other_key, sizeof other_key, "%s/other.key", dir);
        _cleanup_(credstore_freep) struct credstore *cs2 = NULL;
        assert_int_equal(credstore_local_new(st, other_key, &cs2), 0);
        assert_int_equal(credstore_get(cs2, "ten-a", "gh", &got, &v, &vlen), -EBADMSG);

        assert_int_equal(credstore_delete(cs, "ten-a", "gh"), 0);
        assert_int_equal(credstore_delete(cs, "ten-a", "gh"), -ENOENT);
        assert_int_equal(credstore_get(cs, "ten-a", "gh", &got, NULL, NULL), -ENOENT);
}

static void test_store_attachments_and_audit(void **state) {
        _cleanup_(store_closep) struct store *st = NULL;
        assert_int_equal(store_open(url, &st), 0);
        _cleanup_(credstore_freep) struct credstore *cs = NULL;
        assert_int_equal(credstore_local_new(st, key_path, &cs), 0);
        struct credstore_meta m = { .name = "gh", .spec = "{}" };
        assert_int_equal(credstore_put(cs, &m, VALUE, strlen(VALUE)), 0);
        struct store_sandbox sb = { .id = "sbx-1", .template_name = "python", .state = "running" };
        assert_int_equal(store_sandbox_insert(st, &sb), 0);
        sb.id = "sbx-2";
        assert_int_equal(store_sandbox_insert(st, &sb), 0);

        struct store_sandbox_secret a = { .sandbox_id = "sbx-1",
                                          .name = "gh",
                                          .placeholder = "airlock_ph_00112233445566778899aabbccddeeff",
                                          .env_name = "GH" };
        assert_int_equal(store_sandbox_secret_insert(st, NULL, &a), 0);
        assert_int_equal(store_sandbox_secret_insert(st, NULL, &a), -EEXIST);
        struct store_sandbox_secret nope = a;
        nope.name = "none";
        assert_int_equal(store_sandbox_secret_insert(st, NULL, &nope), -ENOENT);
        assert_int_equal(store_sandbox_secret_insert(st, "ten-x", &a), -ENOENT); /* other scope */
        assert_int_equal(store_sandbox_secret_copy(st, "sbx-1", "sbx-2"), 0);

        struct store_sandbox_secret *l = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_secret_list(st, "sbx-2", &l, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(l[0].placeholder, a.placeholder);
        assert_string_equal(l[0].env_name, "GH");
        store_sandbox_secret_array_free(l, n);

        char **users = NULL;
        assert_int_equal(store_secret_users(st, NULL, "gh", 100, &users, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(users[0], "sbx-1");
        store_string_array_free(users, n);

        /* deleting the secret drops its attachments */
        assert_int_equal(store_secret_delete(st, NULL, "gh"), 0);
        assert_int_equal(store_sandbox_secret_list(st, "sbx-1", &l, &n), 0);
        assert_int_equal(n, 0);
        store_sandbox_secret_array_free(l, n);

        /* audit: the control plane's events, and a gateway's read twice */
        struct store_audit_event ev = {
                .tenant_id = NULL, .actor = "key-1", .secret = "gh", .action = "secret.create"
        };
        assert_int_equal(store_audit_insert(st, &ev, NULL, NULL, 0), 0);
        struct store_audit_event gw = { .tenant_id = "ten-a",
                                        .actor = "gateway",
                                        .sandbox_id = "sbx-9",
                                        .secret = "gh",
                                        .host = "api.github.com",
                                        .port = 443,
                                        .method = "GET",
                                        .path = "/user",
                                        .action = "injected" };
        assert_int_equal(store_audit_insert(st, &gw, "node", "boot-1", 1), 0);
        assert_int_equal(store_audit_insert(st, &gw, "node", "boot-1", 1), 0); /* skipped */
        assert_int_equal(store_audit_insert(st, &gw, "node", "boot-2", 1), 0); /* a new boot */
        struct store_audit_event *evs = NULL;
        assert_int_equal(store_audit_list(st, true, NULL, NULL, NULL, 100, &evs, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(evs[0].action, "injected"); /* newest first */
        assert_int_equal(evs[0].port, 443);
        assert_string_equal(evs[2].action, "secret.create");
        store_audit_event_array_free(evs, n);
        assert_int_equal(store_audit_list(st, false, "ten-a", NULL, NULL, 100, &evs, &n), 0);
        assert_int_equal(n, 2);
        store_audit_event_array_free(evs, n);
        assert_int_equal(store_audit_list(st, false, NULL, NULL, NULL, 100, &evs, &n), 0);
        assert_int_equal(n, 1); /* the admin scope's own */
        store_audit_event_array_free(evs, n);
        assert_int_equal(store_audit_list(st, true, NULL, "sbx-9", "gh", 1, &evs, &n), 0);
        assert_int_equal(n, 1);
        store_audit_event_array_free(evs, n);

        char *boot = NULL;
        int64_t seq = 0;
        assert_int_equal(store_audit_cursor_get(st, "node", &boot, &seq), -ENOENT);
        assert_int_equal(store_audit_cursor_set(st, "node", "boot-1", 5), 0);
        assert_int_equal(store_audit_cursor_set(st, "node", "boot-2", 7), 0);
        assert_int_equal(store_audit_cursor_get(st, "node", &boot, &seq), 0);
        assert_string_equal(boot, "boot-2");
        assert_int_equal(seq, 7);
        free(boot);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_seal_round_trip),
                cmocka_unit_test(test_seal_limits),
                cmocka_unit_test_setup_teardown(test_key_file, setup, teardown),
                cmocka_unit_test_setup_teardown(test_local_backend, setup, teardown),
                cmocka_unit_test_setup_teardown(test_store_attachments_and_audit, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
