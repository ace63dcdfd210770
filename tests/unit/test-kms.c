/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/kms, each test run against both kinds: the local key directory (a
 * fresh one per test) and PKCS#11 on a SoftHSM2 token (meson runs this
 * binary under tests/unit/with-softhsm.sh, which makes a throwaway token
 * and sets AIRLOCK_TEST_PKCS11_*). Round trips; refusals, each against its
 * control (the right input unwraps in the same test): another tenant's
 * wrapped key, every byte tampered, truncated, overlong and garbage
 * strings, a destroyed KEK; rotation (local); a wrong PIN and the other
 * ways to fail opening a token; key attributes on the token; 4 threads on
 * one handle.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <p11-kit/pkcs11.h>
#include <sodium.h>

#include "kms.h"
#include "macros.h"
#include "unit-skip.h"
#include "util.h"

/* One kind of KMS under test: the prestate of each test (main()). */
struct kind {
        const char *name;
        bool pkcs11;
        bool open; /* setup opens k (the wrong-PIN test opens its own) */
        /* per test */
        char dir[64]; /* scratch; local: the KMS is dir/kms */
        struct kms *k;
        const char *why; /* set when it cannot run here */
        const char *module, *token, *pin_file;
};

static struct kind local_kind = {.name = "local", .open = true};
static struct kind pkcs11_kind = {.name = "pkcs11", .pkcs11 = true, .open = true};
static struct kind pkcs11_closed = {.name = "pkcs11", .pkcs11 = true};

static int setup(void **state) {
        struct kind *t = *state;
        t->why = NULL;
        t->k = NULL;
        snprintf(t->dir, sizeof t->dir, "/tmp/test-kms-XXXXXX");
        if (!mkdtemp(t->dir) || sodium_init() < 0)
                return -1;
        if (!t->pkcs11) {
                _cleanup_free_ char *d = strdup_printf("%s/kms", t->dir);
                return d && kms_open_local(d, &t->k) == 0 ? 0 : -1;
        }
        t->module = getenv("AIRLOCK_TEST_PKCS11_MODULE");
        t->token = getenv("AIRLOCK_TEST_PKCS11_TOKEN");
        t->pin_file = getenv("AIRLOCK_TEST_PKCS11_PIN_FILE");
        if (!t->module || !*t->module || !t->token || !*t->token || !t->pin_file || !*t->pin_file) {
                t->why = "AIRLOCK_TEST_PKCS11_MODULE/_TOKEN/_PIN_FILE are not set (meson test runs "
                         "this binary under tests/unit/with-softhsm.sh, which makes a SoftHSM2 token "
                         "and sets them)";
                return 0;
        }
        if (t->open && kms_open_pkcs11(t->module, t->token, t->pin_file, &t->k) < 0)
                return -1;
        return 0;
}

static int teardown(void **state) {
        struct kind *t = *state;
        kms_free(t->k);
        t->k = NULL;
        rm_rf(t->dir);
        return 0;
}

/* The test's kind; skips the test when that cannot run here. */
#define KIND                                                                                                \
        ({                                                                                                  \
                struct kind *t_ = *state;                                                                   \
                if (t_->why)                                                                                \
                        unit_skip("%s: %s", t_->name, t_->why);                                             \
                t_;                                                                                         \
        })

/* A KEK for tenant: local, a new version (key_ref NULL); pkcs11, a new key
 * with a label of its own in label (the token lives as long as the run). */
static const char *kek_new(struct kind *t, const char *tenant, char label[KMS_LABEL_MAX + 1]) {
        if (!t->pkcs11) {
                assert_int_equal(kms_local_rotate(t->k, tenant, NULL), 0);
                return NULL;
        }
        static unsigned n;
        uint8_t r[4];
        randombytes_buf(r, sizeof r);
        snprintf(label, KMS_LABEL_MAX + 1, "%.40s-%u-%02x%02x%02x%02x", tenant, ++n, r[0], r[1], r[2], r[3]);
        assert_int_equal(kms_pkcs11_generate(t->k, label), 0);
        return label;
}

/* A DEK that is not all zeros, and a pattern that tells an untouched buffer. */
static void dek_random(uint8_t dek[KMS_DEK_SIZE]) {
        randombytes_buf(dek, KMS_DEK_SIZE);
        dek[0] |= 1;
}

static void assert_untouched(const uint8_t dek[KMS_DEK_SIZE]) {
        for (size_t i = 0; i < KMS_DEK_SIZE; i++)
                assert_int_equal(dek[i], 0xa5);
}

/* kms_unwrap() refuses s with want (0: any refusal), leaving dek alone. */
static int unwrap_refused(struct kms *k, const char *tenant, const char *s) {
        uint8_t dek[KMS_DEK_SIZE];
        memset(dek, 0xa5, sizeof dek);
        int r = kms_unwrap(k, tenant, s, dek);
        assert_true(r < 0);
        assert_untouched(dek);
        return r;
}

static void assert_unwraps(struct kms *k, const char *tenant, const char *s,
                           const uint8_t want[KMS_DEK_SIZE]) {
        uint8_t dek[KMS_DEK_SIZE];
        memset(dek, 0xa5, sizeof dek);
        assert_int_equal(kms_unwrap(k, tenant, s, dek), 0);
        assert_memory_equal(dek, want, KMS_DEK_SIZE);
}

static void test_roundtrip(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1], out2[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        assert_string_equal(kms_kind(t->k), t->name);

        /* no KEK yet: nothing to wrap with; control: once there is one */
        const char *ref = t->pkcs11 ? "never-generated" : NULL;
        memset(out, 'x', sizeof out);
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), -ENOKEY);
        assert_int_equal(out[0], 'x'); /* untouched */
        ref = kek_new(t, "ten-a", label);
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), 0);
        assert_unwraps(t->k, "ten-a", out, dek);

        /* the format */
        struct kms_wrapped w;
        assert_int_equal(kms_wrapped_parse(out, &w), 0);
        _cleanup_free_ char *prefix =
                t->pkcs11 ? strdup_printf("v1.pkcs11.%s.", label) : strdup("v1.local.1.");
        assert_int_equal(strncmp(out, prefix, strlen(prefix)), 0);
        assert_int_equal(w.header_len, strlen(prefix) - 1);
        assert_int_equal(strlen(out), strlen(prefix) + (t->pkcs11 ? 80 : 96));
        assert_int_equal(w.type, t->pkcs11 ? KMS_TYPE_PKCS11 : KMS_TYPE_LOCAL);
        for (const char *p = out + strlen(prefix); *p; p++)
                assert_non_null(
                        strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", *p));

        /* a fresh nonce each time: two strings, one DEK */
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out2), 0);
        assert_string_not_equal(out, out2);
        assert_unwraps(t->k, "ten-a", out2, dek);

        /* arguments: a key_ref where none belongs, none where one is needed,
         * bad tenants and labels; controls above */
        const char *wrong_ref = t->pkcs11 ? NULL : "label";
        assert_int_equal(kms_wrap(t->k, "ten-a", wrong_ref, dek, out2), -EINVAL);
        if (t->pkcs11) {
                assert_int_equal(kms_wrap(t->k, "ten-a", "bad.label", dek, out2), -EINVAL);
                assert_int_equal(kms_wrap(t->k, "ten-a", "", dek, out2), -EINVAL);
                char long_label[KMS_LABEL_MAX + 2];
                memset(long_label, 'l', KMS_LABEL_MAX + 1);
                long_label[KMS_LABEL_MAX + 1] = 0;
                assert_int_equal(kms_wrap(t->k, "ten-a", long_label, dek, out2), -EINVAL);
                assert_int_equal(kms_pkcs11_generate(t->k, long_label), -EINVAL);
                assert_int_equal(kms_pkcs11_generate(t->k, label), -EEXIST);
        }
        char long_tenant[66];
        memset(long_tenant, 't', 65);
        long_tenant[65] = 0;
        const char *bad_tenants[] = {"", ".hidden", "..", "a/b", "ten a", "tén", long_tenant};
        for (size_t i = 0; i < ARRAY_SIZE(bad_tenants); i++) {
                assert_int_equal(kms_wrap(t->k, bad_tenants[i], ref, dek, out2), -EINVAL);
                assert_int_equal(unwrap_refused(t->k, bad_tenants[i], out), -EINVAL);
        }
        long_tenant[64] = 0; /* 64 characters: fine */
        ref = kek_new(t, long_tenant, label);
        assert_int_equal(kms_wrap(t->k, long_tenant, ref, dek, out2), 0);
        assert_unwraps(t->k, long_tenant, out2, dek);
}

/* A wrapped key moved to another tenant does not unwrap there, even when
 * that tenant has a KEK of the same version. */
static void test_tenant_bound(void **state) {
        struct kind *t = KIND;
        char la[KMS_LABEL_MAX + 1], lb[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ra = kek_new(t, "ten-a", la);
        kek_new(t, "ten-b", lb);
        assert_int_equal(kms_wrap(t->k, "ten-a", ra, dek, out), 0);
        assert_unwraps(t->k, "ten-a", out, dek); /* control */
        assert_int_equal(unwrap_refused(t->k, "ten-b", out), -EBADMSG);
        /* pkcs11: even b wrapping with a's label gives b's own string, not a's */
        if (t->pkcs11) {
                char out_b[KMS_WRAPPED_MAX + 1];
                assert_int_equal(kms_wrap(t->k, "ten-b", ra, dek, out_b), 0);
                assert_unwraps(t->k, "ten-b", out_b, dek);
                assert_int_equal(unwrap_refused(t->k, "ten-a", out_b), -EBADMSG);
        }
        /* a tenant with no KEK at all: the KEK the string names is not there */
        if (!t->pkcs11)
                assert_int_equal(unwrap_refused(t->k, "ten-c", out), -EKEYREVOKED);
}

/* Every byte of the string changed, several ways: refused, never a DEK. */
static void test_tamper(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ref = kek_new(t, "ten-a", label);
        if (!t->pkcs11)
                kek_new(t, "ten-a", label); /* versions 1 and 2: the string names 2 */
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), 0);
        struct kms_wrapped w;
        assert_int_equal(kms_wrapped_parse(out, &w), 0);
        size_t len = strlen(out);
        unsigned tried = 0;
        for (size_t i = 0; i < len; i++) {
                static const char others[] = ".A-_01=~\x80\xdd\xff";
                char subst[2 + sizeof others - 1] = {(char) (out[i] ^ 1), (char) (out[i] ^ 0x20)};
                memcpy(subst + 2, others, sizeof others - 1);
                for (size_t j = 0; j < ARRAY_SIZE(subst); j++) {
                        if (subst[j] == out[i] || subst[j] == 0)
                                continue;
                        char s[KMS_WRAPPED_MAX + 1];
                        memcpy(s, out, len + 1);
                        s[i] = subst[j];
                        int r = unwrap_refused(t->k, "ten-a", s);
                        /* in the header a version or label may name a KEK that is not there */
                        if (i > w.header_len)
                                assert_int_equal(r, -EBADMSG);
                        else if (r != -EBADMSG && r != -EKEYREVOKED)
                                fail_msg("byte %zu '%c' -> '%c': %d", i, out[i], subst[j], r);
                        tried++;
                }
        }
        assert_true(tried >= len * 5);
        assert_unwraps(t->k, "ten-a", out, dek); /* control */
}

/* Truncated, overlong and garbage strings are -EBADMSG; a string longer
 * than KMS_WRAPPED_MAX is not read past KMS_WRAPPED_MAX + 1 bytes. */
static void test_malformed(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ref = kek_new(t, "ten-a", label);
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), 0);
        assert_unwraps(t->k, "ten-a", out, dek); /* control */
        size_t len = strlen(out);

        char s[2 * KMS_WRAPPED_MAX];
        for (size_t n = 0; n < len; n++) {
                memcpy(s, out, n);
                s[n] = 0;
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
        }
        const char *tails[] = {"A", "AAAA", "=", "==", ".", "\n", " ", "\r\n", ".AAAA"};
        for (size_t i = 0; i < ARRAY_SIZE(tails); i++) {
                snprintf(s, sizeof s, "%s%s", out, tails[i]);
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
                snprintf(s, sizeof s, "%s%s", tails[i], out);
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
        }
        memcpy(s, out, len);
        memset(s + len, 'A', sizeof s - len - 1);
        s[sizeof s - 1] = 0;
        assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
        for (size_t n = KMS_WRAPPED_MAX - 1; n <= KMS_WRAPPED_MAX + 1; n++) {
                s[n] = 0;
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
                s[n] = 'A';
        }

        /* no NUL within KMS_WRAPPED_MAX + 1 bytes, and a page no one may
         * read right after them: the parser must stop in time */
        long page = sysconf(_SC_PAGESIZE);
        uint8_t *map =
                mmap(NULL, 2 * (size_t) page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(map != MAP_FAILED);
        assert_int_equal(mprotect(map + page, (size_t) page, PROT_NONE), 0);
        char *edge = (char *) map + page - (KMS_WRAPPED_MAX + 1);
        memcpy(edge, out, len);
        memset(edge + len, 'A', KMS_WRAPPED_MAX + 1 - len);
        assert_int_equal(unwrap_refused(t->k, "ten-a", edge), -EBADMSG);
        struct kms_wrapped w;
        assert_int_equal(kms_wrapped_parse(edge, &w), -EBADMSG);
        munmap(map, 2 * (size_t) page);

        /* the two kinds' rules, and near misses of them */
        const char *garbage[] = {
                "",
                "v1",
                "v1.",
                "v1.local",
                "v1.local.",
                "v1.local.1",
                "v1.local.1.",
                "v2.local.1.AAAA",
                "V1.local.1.AAAA",
                "v1.LOCAL.1.AAAA",
                "v1.local.0.AAAA",
                "v1.local.01.AAAA",
                "v1.local.-1.AAAA",
                "v1.local.+1.AAAA",
                "v1.local.1234567890.AAAA",
                "v1.pkcs11..AAAA",
                "v1.pkcs11.a.b.AAAA",
                "v1.pkcs11.a b.AAAA",
                "v1.pkcs11",
                "v1.hsm.1.AAAA",
                "\xff\xfe",
                "v1.local.1.!!!!",
        };
        for (size_t i = 0; i < ARRAY_SIZE(garbage); i++)
                assert_int_equal(unwrap_refused(t->k, "ten-a", garbage[i]), -EBADMSG);
        /* the right header with a base64 part one blob long but not base64url */
        snprintf(s, sizeof s, "%.*s", (int) len, out);
        for (char *p = s + len - 1; *p != '.'; p--)
                if (*p == '-' || *p == '_') /* standard base64's + and / instead */
                        *p = *p == '-' ? '+' : '/';
        if (strcmp(s, out) != 0)
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
        for (size_t i = 0; i < 200; i++) {
                uint8_t r[64];
                randombytes_buf(r, sizeof r);
                for (size_t j = 0; j < sizeof r; j++)
                        s[j] = (char) (r[j] | 1);
                s[sizeof r] = 0;
                assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EBADMSG);
        }
        /* the other kind's well-formed string */
        char other[KMS_WRAPPED_MAX + 1], zeros[97];
        memset(zeros, 'A', 96);
        zeros[t->pkcs11 ? 96 : 80] = 0;
        snprintf(other, sizeof other, "%s.%s", t->pkcs11 ? "v1.local.1" : "v1.pkcs11.label", zeros);
        assert_int_equal(kms_wrapped_parse(other, &w), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", other), -EMEDIUMTYPE);
        assert_unwraps(t->k, "ten-a", out, dek); /* control, again */
}

/* Counts the entries of dir (not . and ..); -1 when it is not there. */
static int dir_entries(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return -1;
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
                n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
        closedir(d);
        return n;
}

static mode_t mode_of(const char *path) {
        struct stat st;
        assert_int_equal(lstat(path, &st), 0);
        return st.st_mode & 07777;
}

static void test_local_rotate(void **state) {
        struct kind *t = KIND;
        char out1[KMS_WRAPPED_MAX + 1], out2[KMS_WRAPPED_MAX + 1];
        uint8_t dek1[KMS_DEK_SIZE], dek2[KMS_DEK_SIZE];
        dek_random(dek1);
        dek_random(dek2);
        unsigned v = 0;
        assert_int_equal(kms_local_rotate(t->k, "ten-a", &v), 0);
        assert_int_equal(v, 1);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek1, out1), 0);
        assert_int_equal(kms_local_rotate(t->k, "ten-a", &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek2, out2), 0);
        assert_int_equal(strncmp(out1, "v1.local.1.", 11), 0);
        assert_int_equal(strncmp(out2, "v1.local.2.", 11), 0);
        assert_unwraps(t->k, "ten-a", out1, dek1); /* the old version still unwraps */
        assert_unwraps(t->k, "ten-a", out2, dek2);

        _cleanup_free_ char *kd = strdup_printf("%s/kms", t->dir), *td = strdup_printf("%s/ten-a", kd),
                            *f1 = strdup_printf("%s/1.kek", td), *f2 = strdup_printf("%s/2.kek", td);
        assert_int_equal(mode_of(kd), 0700);
        assert_int_equal(mode_of(td), 0700);
        assert_int_equal(mode_of(f1), 0600);
        assert_int_equal(mode_of(f2), 0600);
        assert_int_equal(dir_entries(td), 2); /* no temporary file left */
        struct stat st;
        assert_int_equal(stat(f2, &st), 0);
        assert_int_equal(st.st_size, 32);

        /* version 2 named by a string is read from 2.kek: the two keys differ */
        char moved[KMS_WRAPPED_MAX + 1];
        snprintf(moved, sizeof moved, "%s", out2);
        moved[9] = '1';
        assert_int_equal(unwrap_refused(t->k, "ten-a", moved), -EBADMSG);
        moved[9] = '3';
        assert_int_equal(unwrap_refused(t->k, "ten-a", moved), -EKEYREVOKED);

        /* a corrupt key file: -EIO; control: the other version still unwraps */
        assert_int_equal(truncate(f1, 31), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out1), -EIO);
        assert_unwraps(t->k, "ten-a", out2, dek2);
        /* pkcs11 calls on a local KMS */
        assert_int_equal(kms_pkcs11_generate(t->k, "x"), -EOPNOTSUPP);
        assert_int_equal(kms_pkcs11_destroy(t->k, "x"), -EOPNOTSUPP);
}

static void test_local_destroy(void **state) {
        struct kind *t = KIND;
        char out1[KMS_WRAPPED_MAX + 1], out2[KMS_WRAPPED_MAX + 1], outb[KMS_WRAPPED_MAX + 1];
        uint8_t dek1[KMS_DEK_SIZE], dek2[KMS_DEK_SIZE];
        dek_random(dek1);
        dek_random(dek2);
        assert_int_equal(kms_local_destroy(t->k, "ten-a"), -ENOKEY); /* nothing yet */
        assert_int_equal(kms_local_rotate(t->k, "ten-a", NULL), 0);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek1, out1), 0);
        assert_int_equal(kms_local_rotate(t->k, "ten-a", NULL), 0);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek2, out2), 0);
        assert_int_equal(kms_local_rotate(t->k, "ten-b", NULL), 0);
        assert_int_equal(kms_wrap(t->k, "ten-b", NULL, dek1, outb), 0);
        assert_unwraps(t->k, "ten-a", out1, dek1);
        assert_unwraps(t->k, "ten-a", out2, dek2);

        /* a rotation that crashed between writing and linking left this */
        _cleanup_free_ char *td = strdup_printf("%s/kms/ten-a", t->dir),
                            *tmp = strdup_printf("%s/.tmp-1", td);
        assert_int_equal(file_write_atomic(tmp, "0123456789abcdef0123456789abcdef", 32, 0600), 0);
        assert_int_equal(dir_entries(td), 3);

        assert_int_equal(kms_local_destroy(t->k, "ten-a"), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out1), -EKEYREVOKED);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out2), -EKEYREVOKED);
        assert_int_equal(dir_entries(td), -1);     /* the files and their directory are gone */
        assert_unwraps(t->k, "ten-b", outb, dek1); /* control: another tenant keeps its keys */
        assert_int_equal(kms_local_destroy(t->k, "ten-a"), -ENOKEY);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek1, out1), -ENOKEY);

        /* a new first KEK is another key: the old version 1's strings stay dead */
        char again[KMS_WRAPPED_MAX + 1];
        assert_int_equal(kms_local_rotate(t->k, "ten-a", NULL), 0);
        assert_int_equal(kms_wrap(t->k, "ten-a", NULL, dek2, again), 0);
        assert_int_equal(strncmp(again, "v1.local.1.", 11), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out1), -EBADMSG);
        assert_unwraps(t->k, "ten-a", again, dek2);
}

static void test_local_open(void **state) {
        struct kind *t = KIND;
        _cleanup_free_ char *open_dir = strdup_printf("%s/open", t->dir),
                            *deep = strdup_printf("%s/a/b/c", t->dir),
                            *file = strdup_printf("%s/file", t->dir);
        struct kms *k = NULL;
        assert_int_equal(mkdir(open_dir, 0755), 0);
        assert_int_equal(chmod(open_dir, 0755), 0);
        assert_int_equal(kms_open_local(open_dir, &k), -EPERM);
        assert_null(k);
        assert_int_equal(chmod(open_dir, 0700), 0); /* control */
        assert_int_equal(kms_open_local(open_dir, &k), 0);
        assert_string_equal(kms_kind(k), "local");
        kms_free(k);
        k = NULL;
        assert_int_equal(kms_open_local(deep, &k), 0); /* made, parents too */
        assert_int_equal(mode_of(deep), 0700);
        kms_free(k);
        k = NULL;
        assert_int_equal(file_write_atomic(file, "x", 1, 0600), 0);
        assert_int_equal(kms_open_local(file, &k), -ENOTDIR);
        assert_int_equal(kms_open_local("", &k), -EINVAL);
        assert_null(k);
        kms_free(NULL);
}

/* The token's key: AES-256, sensitive, never extractable, looked at with
 * the module's own functions (the handle's login serves this session). */
static void test_pkcs11_key_attributes(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1];
        kek_new(t, "ten-a", label);

        void *dl = dlopen(t->module, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(dl);
        CK_C_GetFunctionList get = (CK_C_GetFunctionList) dlsym(dl, "C_GetFunctionList");
        CK_FUNCTION_LIST_PTR f;
        assert_non_null(get);
        assert_int_equal(get(&f), CKR_OK);
        CK_C_INITIALIZE_ARGS args = {.flags = CKF_OS_LOCKING_OK};
        assert_int_equal(f->C_Initialize(&args), CKR_CRYPTOKI_ALREADY_INITIALIZED); /* the handle did */
        CK_SLOT_ID slots[16], slot = 0;
        CK_ULONG n = ARRAY_SIZE(slots);
        bool found = false;
        assert_int_equal(f->C_GetSlotList(CK_TRUE, slots, &n), CKR_OK);
        for (CK_ULONG i = 0; i < n; i++) {
                CK_TOKEN_INFO ti;
                char l[33];
                assert_int_equal(f->C_GetTokenInfo(slots[i], &ti), CKR_OK);
                memcpy(l, ti.label, 32);
                l[32] = 0;
                for (size_t j = 32; j > 0 && l[j - 1] == ' '; j--)
                        l[j - 1] = 0;
                if (strcmp(l, t->token) == 0) {
                        slot = slots[i];
                        found = true;
                }
        }
        assert_true(found);
        CK_SESSION_HANDLE s;
        assert_int_equal(f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s), CKR_OK);
        CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
        CK_ATTRIBUTE find[] = {{CKA_CLASS, &cls, sizeof cls}, {CKA_LABEL, label, strlen(label)}};
        CK_OBJECT_HANDLE h[2];
        assert_int_equal(f->C_FindObjectsInit(s, find, 2), CKR_OK);
        assert_int_equal(f->C_FindObjects(s, h, 2, &n), CKR_OK);
        assert_int_equal(f->C_FindObjectsFinal(s), CKR_OK);
        assert_int_equal(n, 1);
        CK_BBOOL token = 0, priv = 0, sensitive = 0, extractable = 1, never = 0, wrap = 1, enc = 0, dec = 0;
        CK_KEY_TYPE kt = 0;
        CK_ULONG len = 0;
        CK_ATTRIBUTE get_attrs[] = {
                {CKA_TOKEN, &token, 1},
                {CKA_PRIVATE, &priv, 1},
                {CKA_SENSITIVE, &sensitive, 1},
                {CKA_EXTRACTABLE, &extractable, 1},
                {CKA_NEVER_EXTRACTABLE, &never, 1},
                {CKA_WRAP, &wrap, 1},
                {CKA_ENCRYPT, &enc, 1},
                {CKA_DECRYPT, &dec, 1},
                {CKA_KEY_TYPE, &kt, sizeof kt},
                {CKA_VALUE_LEN, &len, sizeof len},
        };
        assert_int_equal(f->C_GetAttributeValue(s, h[0], get_attrs, ARRAY_SIZE(get_attrs)), CKR_OK);
        assert_true(token && priv && sensitive && !extractable && never && !wrap && enc && dec);
        assert_int_equal(kt, CKK_AES);
        assert_int_equal(len, 32);
        uint8_t value[32];
        CK_ATTRIBUTE v = {CKA_VALUE, value, sizeof value};
        assert_int_equal(f->C_GetAttributeValue(s, h[0], &v, 1), CKR_ATTRIBUTE_SENSITIVE);
        f->C_CloseSession(s);
        dlclose(dl); /* no C_Finalize: the handle's */
}

static void test_pkcs11_destroy(void **state) {
        struct kind *t = KIND;
        char la[KMS_LABEL_MAX + 1], lb[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1],
                outb[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ra = kek_new(t, "ten-a", la), *rb = kek_new(t, "ten-a", lb);
        assert_int_equal(kms_wrap(t->k, "ten-a", ra, dek, out), 0);
        assert_int_equal(kms_wrap(t->k, "ten-a", rb, dek, outb), 0);
        assert_unwraps(t->k, "ten-a", out, dek);

        assert_int_equal(kms_pkcs11_destroy(t->k, ra), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out), -EKEYREVOKED);
        assert_int_equal(kms_pkcs11_destroy(t->k, ra), -ENOKEY); /* the object is gone */
        assert_int_equal(kms_wrap(t->k, "ten-a", ra, dek, out), -ENOKEY);
        assert_unwraps(t->k, "ten-a", outb, dek); /* control: the other label lives */

        /* a new key under the old label is another key: old strings stay dead */
        assert_int_equal(kms_pkcs11_generate(t->k, ra), 0);
        assert_int_equal(unwrap_refused(t->k, "ten-a", out), -EBADMSG);
        /* local calls on a pkcs11 KMS */
        assert_int_equal(kms_local_rotate(t->k, "ten-a", NULL), -EOPNOTSUPP);
        assert_int_equal(kms_local_destroy(t->k, "ten-a"), -EOPNOTSUPP);
}

/* A label the token never had: -EKEYREVOKED for a string that names it
 * (indistinguishable from a deleted key), -ENOKEY for a wrap. */
static void test_pkcs11_unknown_label(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1], s[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ref = kek_new(t, "ten-a", label);
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), 0);
        assert_unwraps(t->k, "ten-a", out, dek); /* control */
        snprintf(s, sizeof s, "v1.pkcs11.no-such-label%s", out + strlen("v1.pkcs11.") + strlen(label));
        assert_int_equal(unwrap_refused(t->k, "ten-a", s), -EKEYREVOKED);
        assert_int_equal(kms_wrap(t->k, "ten-a", "no-such-label", dek, s), -ENOKEY);
        assert_int_equal(kms_pkcs11_destroy(t->k, "no-such-label"), -ENOKEY);
}

/* Runs fn with stderr going to a file; that file's text, or NULL. */
static char *stderr_of(int (*fn)(void *), void *arg, int *ret) {
        char path[] = "/tmp/test-kms-log-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        fflush(stderr);
        int saved = dup(STDERR_FILENO);
        assert_true(saved >= 0);
        assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
        close(fd);
        *ret = fn(arg);
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
        char *text = NULL;
        assert_int_equal(file_read_all(path, 1 << 20, &text, NULL), 0);
        unlink(path);
        fputs(text, stderr); /* still shown with the test's output */
        return text;
}

struct open_args {
        struct kind *t;
        const char *module, *token, *pin_file;
        struct kms *k;
};

static int open_fn(void *arg) {
        struct open_args *a = arg;
        return kms_open_pkcs11(a->module, a->token, a->pin_file, &a->k);
}

/* A wrong PIN: -EACCES and a line that says so (without the PIN); then
 * the other ways opening fails; control: the right PIN opens. No other
 * handle is open (one would have logged the token in already). */
static void test_pkcs11_wrong_pin(void **state) {
        struct kind *t = KIND;
        _cleanup_free_ char *bad = strdup_printf("%s/bad-pin", t->dir),
                            *crlf = strdup_printf("%s/crlf-pin", t->dir),
                            *empty = strdup_printf("%s/empty-pin", t->dir), *right = NULL;
        const char *wrong_pin = "wrong-pin-1234";
        assert_int_equal(file_write_atomic(bad, "wrong-pin-1234\n", 15, 0600), 0);
        assert_int_equal(file_write_atomic(empty, "\n", 1, 0600), 0);
        assert_int_equal(file_read_all(t->pin_file, 4096, &right, NULL), 0);

        struct open_args a = {.t = t, .module = t->module, .token = t->token, .pin_file = bad};
        int r;
        _cleanup_free_ char *log = stderr_of(open_fn, &a, &r);
        assert_int_equal(r, -EACCES);
        assert_null(a.k);
        assert_non_null(strstr(log, "refused the login"));
        assert_non_null(strstr(log, "CKR_PIN_INCORRECT"));
        assert_non_null(strstr(log, bad)); /* which file */
        assert_null(strstr(log, wrong_pin));
        right[strcspn(right, "\r\n")] = 0;
        assert_null(strstr(log, right));

        /* the right PIN, with a CRLF line end and a second line: opens */
        _cleanup_free_ char *crlf_text = strdup_printf("%s\r\nsecond line\n", right);
        assert_int_equal(file_write_atomic(crlf, crlf_text, strlen(crlf_text), 0600), 0);
        assert_int_equal(kms_open_pkcs11(t->module, t->token, crlf, &a.k), 0);
        assert_string_equal(kms_kind(a.k), "pkcs11");
        kms_free(a.k);
        a.k = NULL;

        _cleanup_free_ char *missing = strdup_printf("%s/none", t->dir);
        assert_int_equal(kms_open_pkcs11(t->module, t->token, empty, &a.k), -EINVAL);
        assert_int_equal(kms_open_pkcs11(t->module, t->token, missing, &a.k), -ENOENT);
        assert_int_equal(kms_open_pkcs11(t->module, "no-such-token", t->pin_file, &a.k), -ENODEV);
        assert_int_equal(kms_open_pkcs11(missing, t->token, t->pin_file, &a.k), -ENOENT);
        assert_int_equal(kms_open_pkcs11("libc.so.6", t->token, t->pin_file, &a.k), -ELIBBAD);
        assert_int_equal(kms_open_pkcs11(t->module, "a-token-label-longer-than-32-chars", t->pin_file, &a.k),
                         -EINVAL);
        assert_null(a.k);
        /* and after all that, the right PIN file itself */
        assert_int_equal(kms_open_pkcs11(t->module, t->token, t->pin_file, &a.k), 0);
        kms_free(a.k);
}

/* Two handles on one token: the module is initialized once and finalized
 * by the last; freeing one leaves the other working. */
static void test_pkcs11_two_handles(void **state) {
        struct kind *t = KIND;
        char label[KMS_LABEL_MAX + 1], out[KMS_WRAPPED_MAX + 1];
        uint8_t dek[KMS_DEK_SIZE];
        dek_random(dek);
        const char *ref = kek_new(t, "ten-a", label);
        struct kms *k2 = NULL;
        assert_int_equal(kms_open_pkcs11(t->module, t->token, t->pin_file, &k2), 0);
        assert_int_equal(kms_wrap(t->k, "ten-a", ref, dek, out), 0);
        assert_unwraps(k2, "ten-a", out, dek);
        kms_free(t->k);
        t->k = NULL;
        assert_unwraps(k2, "ten-a", out, dek);
        kms_free(k2);
        /* finalized; a new handle initializes it again */
        assert_int_equal(kms_open_pkcs11(t->module, t->token, t->pin_file, &t->k), 0);
        assert_unwraps(t->k, "ten-a", out, dek);
}

#define THREADS 4
#define ROUNDS 150

struct worker {
        struct kms *k;
        const char *refs[2];
        unsigned index;
        int failed;
};

/* Wraps and unwraps its own DEKs for two tenants, with a tampered string
 * now and then (a refusal must not disturb the others' sessions). */
static void *worker_run(void *arg) {
        struct worker *w = arg;
        const char *tenants[2] = {"ten-a", "ten-b"};
        for (unsigned i = 0; i < ROUNDS && !w->failed; i++) {
                unsigned which = (i + w->index) % 2;
                uint8_t dek[KMS_DEK_SIZE], back[KMS_DEK_SIZE];
                char out[KMS_WRAPPED_MAX + 1];
                dek_random(dek);
                if (kms_wrap(w->k, tenants[which], w->refs[which], dek, out) < 0 ||
                    kms_unwrap(w->k, tenants[which], out, back) < 0 || memcmp(dek, back, sizeof dek) != 0)
                        w->failed = 1;
                if (i % 10 == 0) {
                        out[strlen(out) - 5] ^= 1;
                        if (kms_unwrap(w->k, tenants[which], out, back) != -EBADMSG)
                                w->failed = 2;
                }
        }
        return NULL;
}

static void test_threads(void **state) {
        struct kind *t = KIND;
        char la[KMS_LABEL_MAX + 1], lb[KMS_LABEL_MAX + 1];
        const char *ra = kek_new(t, "ten-a", la), *rb = kek_new(t, "ten-b", lb);
        struct worker w[THREADS];
        pthread_t th[THREADS];
        for (unsigned i = 0; i < THREADS; i++) {
                w[i] = (struct worker){.k = t->k, .refs = {ra, rb}, .index = i};
                assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
        }
        /* all joined before any assert: a failure must not free the KMS under them */
        for (unsigned i = 0; i < THREADS; i++)
                pthread_join(th[i], NULL);
        for (unsigned i = 0; i < THREADS; i++)
                assert_int_equal(w[i].failed, 0);
}

/* kms_wrapped_parse() on its own: what it takes apart. */
static void test_parse(void **state) {
        struct kms_wrapped w;
        char s[KMS_WRAPPED_MAX + 1];
        char b64[97];
        memset(b64, 'A', 96);
        b64[96] = 0;
        snprintf(s, sizeof s, "v1.local.999999999.%s", b64);
        assert_int_equal(kms_wrapped_parse(s, &w), 0);
        assert_int_equal(w.type, KMS_TYPE_LOCAL);
        assert_int_equal(w.version, KMS_LOCAL_VERSION_MAX);
        assert_int_equal(w.header_len, strlen("v1.local.999999999"));
        assert_int_equal(w.blob_len, 72);
        assert_string_equal(w.label, "");
        /* bytes >= 0x80 are not base64: libsodium 1.0.18 alone would read
         * this one as the '_' before it (a second encoding) */
        b64[10] = '_';
        snprintf(s, sizeof s, "v1.local.1.%s", b64);
        assert_int_equal(kms_wrapped_parse(s, &w), 0);
        s[strlen("v1.local.1.") + 10] = (char) 0xdd;
        assert_int_equal(kms_wrapped_parse(s, &w), -EBADMSG);
        b64[10] = 'A';
        b64[80] = 0;
        char label[KMS_LABEL_MAX + 1];
        memset(label, 'L', KMS_LABEL_MAX);
        label[KMS_LABEL_MAX] = 0;
        snprintf(s, sizeof s, "v1.pkcs11.%s.%s", label, b64);
        assert_int_equal(kms_wrapped_parse(s, &w), 0);
        assert_int_equal(w.type, KMS_TYPE_PKCS11);
        assert_string_equal(w.label, label);
        assert_int_equal(w.blob_len, 60);
        snprintf(s, sizeof s, "v1.pkcs11.%sL.%s", label, b64); /* 65 characters */
        assert_int_equal(kms_wrapped_parse(s, &w), -EBADMSG);
        snprintf(s, sizeof s, "v1.pkcs11.a.%sA", b64); /* a local-sized blob for pkcs11 */
        assert_int_equal(kms_wrapped_parse(s, &w), -EBADMSG);
        assert_int_equal(kms_wrapped_parse(NULL, &w), -EINVAL);
}

#define KIND_TESTS(k)                                                                                       \
        cmocka_unit_test_prestate_setup_teardown(test_roundtrip, setup, teardown, k),                       \
                cmocka_unit_test_prestate_setup_teardown(test_tenant_bound, setup, teardown, k),            \
                cmocka_unit_test_prestate_setup_teardown(test_tamper, setup, teardown, k),                  \
                cmocka_unit_test_prestate_setup_teardown(test_malformed, setup, teardown, k),               \
                cmocka_unit_test_prestate_setup_teardown(test_threads, setup, teardown, k)

int main(void) {
        const struct CMUnitTest local_tests[] = {
                cmocka_unit_test(test_parse),
                KIND_TESTS(&local_kind),
                cmocka_unit_test_prestate_setup_teardown(test_local_rotate, setup, teardown, &local_kind),
                cmocka_unit_test_prestate_setup_teardown(test_local_destroy, setup, teardown, &local_kind),
                cmocka_unit_test_prestate_setup_teardown(test_local_open, setup, teardown, &local_kind),
        };
        const struct CMUnitTest pkcs11_tests[] = {
                cmocka_unit_test_prestate_setup_teardown(test_pkcs11_wrong_pin, setup, teardown,
                                                         &pkcs11_closed),
                KIND_TESTS(&pkcs11_kind),
                cmocka_unit_test_prestate_setup_teardown(test_pkcs11_key_attributes, setup, teardown,
                                                         &pkcs11_kind),
                cmocka_unit_test_prestate_setup_teardown(test_pkcs11_destroy, setup, teardown, &pkcs11_kind),
                cmocka_unit_test_prestate_setup_teardown(test_pkcs11_unknown_label, setup, teardown,
                                                         &pkcs11_kind),
                cmocka_unit_test_prestate_setup_teardown(test_pkcs11_two_handles, setup, teardown,
                                                         &pkcs11_kind),
        };
        int failed = cmocka_run_group_tests_name("local", local_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("pkcs11", pkcs11_tests, NULL, NULL);
        return unit_exit(failed);
}
