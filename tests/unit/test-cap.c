/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include <sodium.h>

#include "cap-keydir.h"
#include "cap.h"
#include "macros.h"
#include "util.h"

#define NOW INT64_C(1700000000)

/* An issuer keyring with k1 and k2 (secret keys) and a node keyring with
 * only their public keys. */
struct fixture {
        uint8_t pk1[CAP_PUBLIC_KEY_SIZE], sk1[CAP_SECRET_KEY_SIZE];
        uint8_t pk2[CAP_PUBLIC_KEY_SIZE], sk2[CAP_SECRET_KEY_SIZE];
        struct cap_keyring *issuer, *node;
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        if (!f || cap_keygen(f->pk1, f->sk1) < 0 || cap_keygen(f->pk2, f->sk2) < 0)
                return -1;
        if (cap_keyring_new(&f->issuer) < 0 || cap_keyring_new(&f->node) < 0)
                return -1;
        if (cap_keyring_add_secret(f->issuer, "k1", f->sk1) < 0 || cap_keyring_add_secret(f->issuer, "k2", f->sk2) < 0 ||
            cap_keyring_add_public(f->node, "k1", f->pk1) < 0 || cap_keyring_add_public(f->node, "k2", f->pk2) < 0)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        cap_keyring_free(f->issuer);
        cap_keyring_free(f->node);
        free(f);
        return 0;
}

static struct cap_claims claims_base(void) {
        struct cap_claims c = {
                .execution = 8,
                .access = CAP_ACCESS_EXEC | CAP_ACCESS_FILES_READ,
                .issued_at = NOW,
        };
        strcpy(c.tenant, "t-1");
        strcpy(c.sandbox, "sbx-1");
        strcpy(c.node, "node-b");
        return c;
}

static struct cap_record record_base(void) {
        struct cap_record l = { .execution = 8 };
        strcpy(l.tenant, "t-1");
        strcpy(l.sandbox, "sbx-1");
        strcpy(l.node, "node-b");
        return l;
}

static char *issue(struct fixture *f, const char *kid, const struct cap_claims *c) {
        char *t = NULL;
        assert_int_equal(cap_issue(f->issuer, kid, c, &t), 0);
        assert_non_null(t);
        return t;
}

static int verify(const struct cap_keyring *kr, const char *t, int64_t now, struct cap_claims *ret) {
        return cap_parse_verify(kr, t, strlen(t), now, ret);
}

static char *b64(const void *data, size_t n) {
        size_t m = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
        char *s = malloc(m);
        assert_non_null(s);
        sodium_bin2base64(s, m, data, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
        return s;
}

/* A token whose payload is exactly `payload`, correctly signed with sk: what
 * the parser refuses then it refuses for the payload, not the signature. */
static char *sign_raw(const uint8_t *sk, const char *payload) {
        uint8_t sig[CAP_SIGNATURE_SIZE];
        crypto_sign_detached(sig, NULL, (const uint8_t *) payload, strlen(payload), sk);
        _cleanup_free_ char *p = b64(payload, strlen(payload));
        _cleanup_free_ char *s = b64(sig, sizeof sig);
        char *t = strdup_printf("%s.%s", p, s);
        assert_non_null(t);
        return t;
}

/* The payload JSON of a token. */
static char *payload_of(const char *t) {
        const char *dot = strchr(t, '.');
        assert_non_null(dot);
        char *out = calloc(1, CAP_TOKEN_MAX);
        size_t n = 0;
        assert_int_equal(sodium_base642bin((uint8_t *) out, CAP_TOKEN_MAX - 1, t, (size_t) (dot - t), NULL, &n, NULL,
                                           sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                         0);
        return out;
}

#define GOOD_PAYLOAD                                                                                                   \
        "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"    \
        "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}"

static void test_round_trip(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base();
        _cleanup_free_ char *t = issue(f, "k1", &c);
        assert_true(strlen(t) <= CAP_TOKEN_MAX);
        assert_null(strchr(t, '='));
        assert_null(strchr(t, '+'));
        assert_null(strchr(t, '/'));

        /* the documented canonical payload, default lifetime 120 s */
        _cleanup_free_ char *p = payload_of(t);
        assert_string_equal(p, GOOD_PAYLOAD);

        struct cap_claims got;
        memset(&got, 0xaa, sizeof got);
        assert_int_equal(verify(f->node, t, NOW, &got), 0);
        assert_string_equal(got.tenant, "t-1");
        assert_string_equal(got.sandbox, "sbx-1");
        assert_string_equal(got.node, "node-b");
        assert_string_equal(got.kid, "k1");
        assert_int_equal(got.execution, 8);
        assert_int_equal(got.access, CAP_ACCESS_EXEC | CAP_ACCESS_FILES_READ);
        assert_int_equal(got.issued_at, NOW);
        assert_int_equal(got.expires_at, NOW + CAP_LIFETIME_DEFAULT_S);

        /* the issuer's keyring verifies too; Ed25519 is deterministic and
         * the encoding canonical, so re-issuing gives the same bytes */
        assert_int_equal(verify(f->issuer, t, NOW, &got), 0);
        _cleanup_free_ char *again = issue(f, "k1", &got);
        assert_string_equal(again, t);

        /* a token need not be NUL-terminated: len bounds it */
        size_t n = strlen(t);
        _cleanup_free_ char *nonul = malloc(n + 5);
        memcpy(nonul, t, n);
        memcpy(nonul + n, "XXXXX", 5);
        assert_int_equal(cap_parse_verify(f->node, nonul, n, NOW, &got), 0);

        /* every access bit, the largest numbers, the longest ids */
        c.access = CAP_ACCESS_ALL;
        c.execution = CAP_NUMBER_MAX;
        memset(c.tenant, 'a', CAP_ID_MAX);
        memset(c.sandbox, 'b', CAP_ID_MAX);
        memset(c.node, 'c', CAP_ID_MAX);
        c.expires_at = NOW + CAP_LIFETIME_MAX_S;
        c.port = UINT16_MAX; /* "ports" names its port */
        strcpy(c.protocol, "http");
        _cleanup_free_ char *big = issue(f, "k2", &c);
        assert_int_equal(verify(f->node, big, NOW, &got), 0);
        assert_int_equal(got.access, CAP_ACCESS_ALL);
        assert_int_equal(got.port, UINT16_MAX);
        assert_int_equal(got.execution, CAP_NUMBER_MAX);
        assert_int_equal(strlen(got.sandbox), CAP_ID_MAX);
        assert_string_equal(got.kid, "k2");
}

static void test_issue_rejects(void **state) {
        struct fixture *f = *state;
        char *t = NULL;
        struct cap_claims c = claims_base();

        assert_int_equal(cap_issue(f->issuer, "nope", &c, &t), -ENOKEY);
        assert_int_equal(cap_issue(f->node, "k1", &c, &t), -ENOKEY); /* public keys only */
        assert_int_equal(cap_issue(f->issuer, "bad kid", &c, &t), -EINVAL);
        assert_int_equal(cap_issue(f->issuer, "k1", NULL, &t), -EINVAL);

        c = claims_base();
        c.access = 0;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c.access = 1u << 5;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        c.expires_at = NOW + CAP_LIFETIME_MAX_S + 1;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c.expires_at = NOW;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        c.issued_at = -1;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        c.execution = CAP_NUMBER_MAX + 1;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        strcpy(c.sandbox, "../x/y");
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        c.tenant[0] = 0;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        c = claims_base();
        memset(c.node, 'n', sizeof c.node); /* not NUL-terminated */
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -EINVAL);
        assert_null(t);
}

/* Same kid, another key: a node holding the real k1 refuses it. */
static void test_forged(void **state) {
        struct fixture *f = *state;
        uint8_t pk[CAP_PUBLIC_KEY_SIZE], sk[CAP_SECRET_KEY_SIZE];
        assert_int_equal(cap_keygen(pk, sk), 0);
        _cleanup_(cap_keyring_freep) struct cap_keyring *evil = NULL;
        assert_int_equal(cap_keyring_new(&evil), 0);
        assert_int_equal(cap_keyring_add_secret(evil, "k1", sk), 0);
        struct cap_claims c = claims_base();
        _cleanup_free_ char *t = NULL;
        assert_int_equal(cap_issue(evil, "k1", &c, &t), 0);
        struct cap_claims got;
        assert_int_equal(verify(f->node, t, NOW, &got), -EBADMSG);

        /* and a signature with every bit zero */
        _cleanup_free_ char *good = issue(f, "k1", &c);
        char *dot = strchr(good, '.');
        memset(dot + 1, 'A', strlen(dot + 1));
        assert_int_equal(verify(f->node, good, NOW, &got), -EBADMSG);
}

/* One field changed to another valid value, the signature of the original
 * kept: every field is covered by the signature. */
static void test_tampered(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base();
        _cleanup_free_ char *orig = issue(f, "k1", &c);
        const char *sig = strchr(orig, '.');

        for (int field = 0; field < 8; field++) {
                struct cap_claims m = claims_base();
                const char *kid = "k1";
                switch (field) {
                case 0: strcpy(m.tenant, "t-2"); break;
                case 1: strcpy(m.sandbox, "sbx-2"); break;
                case 2: m.execution = 9; break;
                case 3: strcpy(m.node, "node-a"); break;
                case 4: m.access |= CAP_ACCESS_FILES_WRITE; break;
                case 5: m.issued_at = NOW - 1; break;
                case 6: m.expires_at = NOW + CAP_LIFETIME_MAX_S; break;
                case 7: kid = "k2"; break; /* another key the node holds */
                }
                _cleanup_free_ char *other = issue(f, kid, &m);
                char *dot = strchr(other, '.');
                *dot = 0;
                _cleanup_free_ char *spliced = strdup_printf("%s%s", other, sig);
                struct cap_claims got;
                assert_int_equal(verify(f->node, spliced, NOW, &got), -EBADMSG);
        }

        /* a bit flipped anywhere in the payload part: never accepted */
        size_t plen = (size_t) (sig - orig);
        for (size_t i = 0; i < plen; i++) {
                _cleanup_free_ char *t = strdup(orig);
                t[i] = t[i] == 'A' ? 'B' : 'A';
                struct cap_claims got;
                int r = verify(f->node, t, NOW, &got);
                assert_true(r == -EINVAL || r == -EBADMSG || r == -EKEYREJECTED);
        }
}

static void test_malformed(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base(), got;
        _cleanup_free_ char *t = issue(f, "k1", &c);
        size_t n = strlen(t);
        const char *dot = strchr(t, '.');
        size_t p = (size_t) (dot - t);

        /* truncated at every length */
        for (size_t i = 0; i < n; i++)
                assert_int_equal(cap_parse_verify(f->node, t, i, NOW, &got), -EINVAL);

        _cleanup_free_ char *two_dots = strdup_printf("%s.", t);
        assert_int_equal(verify(f->node, two_dots, NOW, &got), -EINVAL);
        _cleanup_free_ char *lead_dot = strdup_printf(".%s", t);
        assert_int_equal(verify(f->node, lead_dot, NOW, &got), -EINVAL);
        _cleanup_free_ char *sig_only = strdup(dot);
        assert_int_equal(verify(f->node, sig_only, NOW, &got), -EINVAL);
        _cleanup_free_ char *no_dot = strdup(t);
        no_dot[p] = 'A';
        assert_int_equal(verify(f->node, no_dot, NOW, &got), -EINVAL);
        _cleanup_free_ char *padded = strdup_printf("%.*s=.%s", (int) p, t, dot + 1);
        assert_int_equal(verify(f->node, padded, NOW, &got), -EINVAL);
        _cleanup_free_ char *std_b64 = strdup(t);
        std_b64[3] = '+';
        assert_int_equal(verify(f->node, std_b64, NOW, &got), -EINVAL);
        _cleanup_free_ char *space = strdup_printf(" %s", t);
        assert_int_equal(verify(f->node, space, NOW, &got), -EINVAL);
        _cleanup_free_ char *nul = strdup(t);
        nul[5] = 0;
        assert_int_equal(cap_parse_verify(f->node, nul, n, NOW, &got), -EINVAL);

        /* the signature's last character carries 4 padding bits: a
         * non-canonical encoding of the same bytes is refused */
        _cleanup_free_ char *bits = strdup(t);
        char *last = &bits[n - 1];
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        *last = alphabet[(strchr(alphabet, *last) - alphabet) ^ 1];
        assert_int_equal(verify(f->node, bits, NOW, &got), -EINVAL);

        assert_int_equal(verify(f->node, "", NOW, &got), -EINVAL);
        assert_int_equal(verify(f->node, ".", NOW, &got), -EINVAL);
        assert_int_equal(verify(f->node, "garbage", NOW, &got), -EINVAL);
        assert_int_equal(verify(f->node, "!!!!.????", NOW, &got), -EINVAL);
        assert_int_equal(cap_parse_verify(f->node, NULL, 0, NOW, &got), -EINVAL);
        assert_int_equal(cap_parse_verify(f->node, t, n, -1, &got), -EINVAL);
        assert_int_equal(cap_parse_verify(f->node, t, n, NOW, NULL), -EINVAL);
}

static void test_wrong_kid(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base(), got;
        _cleanup_free_ char *t = issue(f, "k1", &c);
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr = NULL;
        assert_int_equal(cap_keyring_new(&kr), 0);
        assert_int_equal(verify(kr, t, NOW, &got), -EKEYREJECTED); /* empty keyring */
        assert_int_equal(cap_keyring_add_public(kr, "k9", f->pk1), 0);
        assert_int_equal(verify(kr, t, NOW, &got), -EKEYREJECTED); /* the right key under another kid */
        /* k1's name on k2's key: the kid is found, the signature fails */
        assert_int_equal(cap_keyring_add_public(kr, "k1", f->pk2), 0);
        assert_int_equal(verify(kr, t, NOW, &got), -EBADMSG);
}

static void test_time(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base(), got;
        _cleanup_free_ char *t = issue(f, "k1", &c);
        int64_t exp = NOW + CAP_LIFETIME_DEFAULT_S;

        assert_int_equal(verify(f->node, t, exp, &got), 0);
        assert_int_equal(verify(f->node, t, exp + CAP_SKEW_S, &got), 0); /* the last valid second */
        assert_int_equal(verify(f->node, t, exp + CAP_SKEW_S + 1, &got), -ETIME);
        assert_int_equal(verify(f->node, t, INT64_MAX, &got), -ETIME);
        assert_int_equal(verify(f->node, t, NOW - CAP_SKEW_S, &got), 0); /* the earliest valid second */
        assert_int_equal(verify(f->node, t, NOW - CAP_SKEW_S - 1, &got), -ETIME);
        assert_int_equal(verify(f->node, t, 0, &got), -ETIME);

        /* the signature is checked before the time: an expired forgery is a forgery */
        _cleanup_free_ char *bad = strdup(t);
        bad[strlen(bad) - 2] = bad[strlen(bad) - 2] == 'A' ? 'B' : 'A';
        assert_int_equal(verify(f->node, bad, exp + 1000, &got), -EBADMSG);

        /* a signed payload claiming a longer lifetime than issuers may give */
        _cleanup_free_ char *long_life = sign_raw(
                f->sk1, "{\"access\":[\"exec\"],\"execution\":8,\"expires_at\":1700000301,\"issued_at\":1700000000,"
                        "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}");
        assert_int_equal(verify(f->node, long_life, NOW, &got), -EINVAL);
        _cleanup_free_ char *backwards = sign_raw(
                f->sk1, "{\"access\":[\"exec\"],\"execution\":8,\"expires_at\":1700000000,\"issued_at\":1700000000,"
                        "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}");
        assert_int_equal(verify(f->node, backwards, NOW, &got), -EINVAL);
}

static void test_too_long(void **state) {
        struct fixture *f = *state;
        struct cap_claims got;
        _cleanup_free_ char *huge = malloc(CAP_TOKEN_MAX + 2);
        memset(huge, 'A', CAP_TOKEN_MAX + 1);
        huge[CAP_TOKEN_MAX + 1] = 0;
        assert_int_equal(verify(f->node, huge, NOW, &got), -E2BIG);
        assert_int_equal(cap_parse_verify(f->node, huge, SIZE_MAX, NOW, &got), -E2BIG);
        huge[CAP_TOKEN_MAX] = 0;
        assert_int_equal(verify(f->node, huge, NOW, &got), -EINVAL); /* at the limit: just malformed */

        /* a validly signed payload padded to just past the limit */
        char pad[1600];
        memset(pad, ' ', sizeof pad - 1);
        pad[sizeof pad - 1] = 0;
        _cleanup_free_ char *payload = strdup_printf("%s%s", GOOD_PAYLOAD, pad);
        _cleanup_free_ char *t = sign_raw(f->sk1, payload);
        assert_true(strlen(t) > CAP_TOKEN_MAX);
        assert_int_equal(verify(f->node, t, NOW, &got), -E2BIG);
}

/* Payloads signed correctly with k1 but not in the one accepted form. */
static void test_schema(void **state) {
        struct fixture *f = *state;
        static const char *const bad[] = {
                /* unknown field (and one replacing a known one) */
                "{\"access\":[\"exec\",\"files_read\"],\"admin\":true,\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"admin\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                /* missing field */
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"tenant\":\"t-1\",\"v\":1}",
                /* duplicate field (the second sandbox would win in a lax parser) */
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"sandbox\":\"sbx-2\","
                "\"tenant\":\"t-1\",\"v\":1}",
                /* wrong types */
                "{\"access\":\"exec\",\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":\"8\",\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8.0,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":7,\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":null,\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":true,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":\"1\"}",
                "{\"access\":[1],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                "[\"access\",\"execution\",\"expires_at\",\"issued_at\",\"kid\",\"node\",\"sandbox\",\"tenant\",\"v\"]",
                "null",
                /* another version */
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":2}",
                /* access: unknown, repeated, empty */
                "{\"access\":[\"exec\",\"root\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"exec\",\"exec\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                /* numbers: negative, over 2^53 - 1, over int64, "-0" */
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":-8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":9007199254740992,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":99999999999999999999,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":-0,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                /* ids: oversized (65 chars), empty, bad characters, escaped */
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\","
                "\"sandbox\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node/b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx\\u00001\","
                "\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx\\u002d1\","
                "\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\",\"node\":\"node-b\","
                "\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                /* not canonical: a space, keys out of order, access out of order, trailing bytes */
                "{\"access\": [\"exec\",\"files_read\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"execution\":8,\"access\":[\"exec\",\"files_read\"],\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                "{\"access\":[\"files_read\",\"exec\"],\"execution\":8,\"expires_at\":1700000120,"
                "\"issued_at\":1700000000,\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\","
                "\"v\":1}",
                GOOD_PAYLOAD "\n",
                GOOD_PAYLOAD "{}",
        };
        struct cap_claims got;
        _cleanup_free_ char *good = sign_raw(f->sk1, GOOD_PAYLOAD);
        assert_int_equal(verify(f->node, good, NOW, &got), 0);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_free_ char *t = sign_raw(f->sk1, bad[i]);
                memset(&got, 0x5a, sizeof got);
                struct cap_claims before = got;
                if (verify(f->node, t, NOW, &got) != -EINVAL)
                        fail_msg("accepted or misclassified payload %zu: %s", i, bad[i]);
                assert_memory_equal(&got, &before, sizeof got); /* untouched */
        }
}

/* A rollover: the node holds old and new public keys, then drops the old. */
static void test_rotation(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base(), got;
        _cleanup_free_ char *old_tok = issue(f, "k1", &c);
        _cleanup_free_ char *new_tok = issue(f, "k2", &c);

        assert_int_equal(verify(f->node, old_tok, NOW, &got), 0);
        assert_int_equal(verify(f->node, new_tok, NOW, &got), 0);
        assert_string_equal(got.kid, "k2");

        assert_int_equal(cap_keyring_remove(f->node, "k1"), 0);
        assert_int_equal(cap_keyring_remove(f->node, "k1"), -ENOENT);
        assert_int_equal(verify(f->node, old_tok, NOW, &got), -EKEYREJECTED);
        assert_int_equal(verify(f->node, new_tok, NOW, &got), 0);

        /* the issuer retires k1 too; a third key joins */
        assert_int_equal(cap_keyring_remove(f->issuer, "k1"), 0);
        char *t = NULL;
        assert_int_equal(cap_issue(f->issuer, "k1", &c, &t), -ENOKEY);
        uint8_t pk3[CAP_PUBLIC_KEY_SIZE], sk3[CAP_SECRET_KEY_SIZE];
        assert_int_equal(cap_keygen(pk3, sk3), 0);
        assert_int_equal(cap_keyring_add_secret(f->issuer, "k3", sk3), 0);
        assert_int_equal(cap_keyring_add_public(f->node, "k3", pk3), 0);
        _cleanup_free_ char *t3 = issue(f, "k3", &c);
        assert_int_equal(verify(f->node, t3, NOW, &got), 0);
        assert_int_equal(verify(f->node, new_tok, NOW, &got), 0); /* k2 still there after the swap-remove */
}

static void test_keyring(void **state) {
        struct fixture *f = *state;
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr = NULL;
        assert_int_equal(cap_keyring_new(&kr), 0);
        assert_int_equal(cap_keyring_add_public(kr, "", f->pk1), -EINVAL);
        assert_int_equal(cap_keyring_add_public(kr, "a b", f->pk1), -EINVAL);
        assert_int_equal(cap_keyring_add_public(kr, NULL, f->pk1), -EINVAL);
        assert_int_equal(cap_keyring_add_public(kr, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", f->pk1), -EINVAL);
        assert_int_equal(cap_keyring_add_public(kr, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", f->pk1), 0);
        assert_int_equal(cap_keyring_add_public(kr, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", f->pk2), -EEXIST);
        for (int i = 1; i < CAP_KEYRING_MAX; i++) {
                char kid[8];
                snprintf(kid, sizeof kid, "k%d", i);
                assert_int_equal(cap_keyring_add_public(kr, kid, f->pk1), 0);
        }
        assert_int_equal(cap_keyring_add_public(kr, "k99", f->pk1), -ENOSPC);
        assert_int_equal(cap_keyring_remove(kr, "k3"), 0);
        assert_int_equal(cap_keyring_add_public(kr, "k99", f->pk1), 0);

        /* a secret key whose public half is not its seed's */
        uint8_t sk[CAP_SECRET_KEY_SIZE];
        memcpy(sk, f->sk1, sizeof sk);
        sk[40] ^= 1;
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr2 = NULL;
        assert_int_equal(cap_keyring_new(&kr2), 0);
        assert_int_equal(cap_keyring_add_secret(kr2, "k1", sk), -EINVAL);
        assert_int_equal(cap_keyring_add_secret(kr2, "k1", f->sk1), 0);
        cap_keyring_free(NULL);
}

static void test_hex(void **state) {
        struct fixture *f = *state;
        char hex[CAP_SECRET_KEY_HEX];
        uint8_t back[CAP_SECRET_KEY_SIZE];
        assert_int_equal(cap_key_to_hex(f->sk1, CAP_SECRET_KEY_SIZE, hex, sizeof hex), 0);
        assert_int_equal(strlen(hex), 2 * CAP_SECRET_KEY_SIZE);
        assert_int_equal(cap_key_from_hex(hex, back, CAP_SECRET_KEY_SIZE), 0);
        assert_memory_equal(back, f->sk1, sizeof back);

        char phex[CAP_PUBLIC_KEY_HEX];
        uint8_t pk[CAP_PUBLIC_KEY_SIZE];
        assert_int_equal(cap_key_to_hex(f->pk1, CAP_PUBLIC_KEY_SIZE, phex, sizeof phex - 1), -EINVAL);
        assert_int_equal(cap_key_to_hex(f->pk1, CAP_PUBLIC_KEY_SIZE, phex, sizeof phex), 0);
        _cleanup_free_ char *file = strdup_printf("%s\n", phex);
        assert_int_equal(cap_key_from_hex(file, pk, sizeof pk), 0); /* a key file's newline */
        assert_memory_equal(pk, f->pk1, sizeof pk);

        uint8_t untouched[CAP_PUBLIC_KEY_SIZE] = {};
        memcpy(pk, untouched, sizeof pk);
        _cleanup_free_ char *shorter = strndup(phex, 2 * CAP_PUBLIC_KEY_SIZE - 1);
        assert_int_equal(cap_key_from_hex(shorter, pk, sizeof pk), -EINVAL);
        _cleanup_free_ char *longer = strdup_printf("%s00", phex);
        assert_int_equal(cap_key_from_hex(longer, pk, sizeof pk), -EINVAL);
        _cleanup_free_ char *junk = strdup(phex);
        junk[10] = 'g';
        assert_int_equal(cap_key_from_hex(junk, pk, sizeof pk), -EINVAL);
        _cleanup_free_ char *trailing = strdup_printf("%s\nx", phex);
        assert_int_equal(cap_key_from_hex(trailing, pk, sizeof pk), -EINVAL);
        assert_memory_equal(pk, untouched, sizeof pk);

        /* a node keyring built from key files verifies the issuer's token */
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr = NULL;
        assert_int_equal(cap_keyring_new(&kr), 0);
        assert_int_equal(cap_key_from_hex(phex, pk, sizeof pk), 0);
        assert_int_equal(cap_keyring_add_public(kr, "k1", pk), 0);
        struct cap_claims c = claims_base(), got;
        _cleanup_free_ char *t = issue(f, "k1", &c);
        assert_int_equal(verify(kr, t, NOW, &got), 0);
}

static void test_decide(void **state) {
        struct cap_claims c = claims_base();
        struct cap_record l = record_base();
        const uint32_t exec = CAP_ACCESS_EXEC;

        assert_int_equal(cap_decide(&c, &l, exec), CAP_ALLOW);
        assert_int_equal(cap_decide(&c, &l, CAP_ACCESS_EXEC | CAP_ACCESS_FILES_READ), CAP_ALLOW);

        /* another sandbox on this node */
        l = record_base();
        strcpy(l.sandbox, "sbx-2");
        assert_int_equal(cap_decide(&c, &l, exec), CAP_DENY);
        /* another tenant's sandbox of the same id */
        l = record_base();
        strcpy(l.tenant, "t-2");
        assert_int_equal(cap_decide(&c, &l, exec), CAP_DENY);
        /* the node moved on to execution 9: a capability for 8 is stale */
        l = record_base();
        l.execution = 9;
        assert_int_equal(cap_decide(&c, &l, exec), CAP_REFRESH_ROUTE);
        /* ...and one for 9 reaching a node still at 8 */
        l = record_base();
        c.execution = 9;
        assert_int_equal(cap_decide(&c, &l, exec), CAP_REFRESH_ROUTE);
        c = claims_base();
        /* the sandbox runs on another node */
        strcpy(l.node, "node-a");
        assert_int_equal(cap_decide(&c, &l, exec), CAP_REFRESH_ROUTE);
        /* access not granted: deny, even where the route is also stale */
        l = record_base();
        assert_int_equal(cap_decide(&c, &l, CAP_ACCESS_FILES_WRITE), CAP_DENY);
        assert_int_equal(cap_decide(&c, &l, CAP_ACCESS_EXEC | CAP_ACCESS_PORTS), CAP_DENY);
        l.execution = 9;
        assert_int_equal(cap_decide(&c, &l, CAP_ACCESS_SESSION_ATTACH), CAP_DENY);
        /* other sandbox and stale route: deny, never a refresh */
        strcpy(l.sandbox, "sbx-2");
        assert_int_equal(cap_decide(&c, &l, exec), CAP_DENY);
        /* nothing or unknown bits asked, NULLs */
        l = record_base();
        assert_int_equal(cap_decide(&c, &l, 0), CAP_DENY);
        assert_int_equal(cap_decide(&c, &l, exec | (1u << 7)), CAP_DENY);
        assert_int_equal(cap_decide(NULL, &l, exec), CAP_DENY);
        assert_int_equal(cap_decide(&c, NULL, exec), CAP_DENY);

        assert_string_equal(cap_decision_to_string(CAP_ALLOW), "allow");
        assert_string_equal(cap_decision_to_string(CAP_REFRESH_ROUTE), "refresh_route");
        assert_string_equal(cap_decision_to_string(CAP_DENY), "deny");
}

/* The whole path a node takes: verify, then compare with its record. */
#define PORT_PAYLOAD                                                                                                   \
        "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"              \
        "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":8000,\"protocol\":\"http\",\"sandbox\":\"sbx-1\","             \
        "\"tenant\":\"t-1\",\"v\":1}"

/* A service-port capability names one port and its protocol, exactly
 * when it grants "ports"; it opens that port and nothing else. */
static void test_ports(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base();
        c.access = CAP_ACCESS_PORTS;
        c.port = 8000;
        strcpy(c.protocol, "http");
        _cleanup_free_ char *t = issue(f, "k1", &c);
        _cleanup_free_ char *p = payload_of(t);
        assert_string_equal(p, PORT_PAYLOAD);
        struct cap_claims got;
        assert_int_equal(verify(f->node, t, NOW, &got), 0);
        assert_int_equal(got.port, 8000);
        assert_string_equal(got.protocol, "http");

        struct cap_record l = record_base();
        assert_int_equal(cap_decide_port(&got, &l, 8000, "http"), CAP_ALLOW);
        assert_int_equal(cap_decide_port(&got, &l, 8001, "http"), CAP_DENY);
        assert_int_equal(cap_decide_port(&got, &l, 8000, "tcp"), CAP_DENY);
        assert_int_equal(cap_decide(&got, &l, CAP_ACCESS_EXEC), CAP_DENY);
        /* the port is checked before the route: no refresh for another port */
        l.execution = 9;
        assert_int_equal(cap_decide_port(&got, &l, 8001, "http"), CAP_DENY);
        assert_int_equal(cap_decide_port(&got, &l, 8000, "http"), CAP_REFRESH_ROUTE);
        /* an exec capability opens no port */
        struct cap_claims e = claims_base();
        l = record_base();
        assert_int_equal(cap_decide_port(&e, &l, 8000, "http"), CAP_DENY);

        /* issuing: "ports" without a port or with another protocol, a port
         * without "ports" */
        char *bad = NULL;
        struct cap_claims x = c;
        x.port = 0;
        assert_int_equal(cap_issue(f->issuer, "k1", &x, &bad), -EINVAL);
        x = c;
        strcpy(x.protocol, "tcp");
        assert_int_equal(cap_issue(f->issuer, "k1", &x, &bad), -EINVAL);
        x = c;
        x.protocol[0] = '\0';
        assert_int_equal(cap_issue(f->issuer, "k1", &x, &bad), -EINVAL);
        x = claims_base();
        x.port = 8000;
        assert_int_equal(cap_issue(f->issuer, "k1", &x, &bad), -EINVAL);
        assert_null(bad);

        /* parsing: the same rules on signed payloads */
        static const char *const refused[] = {
                /* a port without "ports" */
                "{\"access\":[\"exec\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":8000,\"protocol\":\"http\",\"sandbox\":\"sbx-1\","
                "\"tenant\":\"t-1\",\"v\":1}",
                /* "ports" without a port */
                "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"sandbox\":\"sbx-1\",\"tenant\":\"t-1\",\"v\":1}",
                /* port 0, 65536, a string; another protocol */
                "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":0,\"protocol\":\"http\",\"sandbox\":\"sbx-1\","
                "\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":65536,\"protocol\":\"http\",\"sandbox\":\"sbx-1\","
                "\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":\"8000\",\"protocol\":\"http\",\"sandbox\":\"sbx-1\","
                "\"tenant\":\"t-1\",\"v\":1}",
                "{\"access\":[\"ports\"],\"execution\":8,\"expires_at\":1700000120,\"issued_at\":1700000000,"
                "\"kid\":\"k1\",\"node\":\"node-b\",\"port\":8000,\"protocol\":\"tcp\",\"sandbox\":\"sbx-1\","
                "\"tenant\":\"t-1\",\"v\":1}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
                _cleanup_free_ char *r = sign_raw(f->sk1, refused[i]);
                assert_int_equal(verify(f->node, r, NOW, &got), -EINVAL);
        }
        _cleanup_free_ char *ok = sign_raw(f->sk1, PORT_PAYLOAD);
        assert_int_equal(verify(f->node, ok, NOW, &got), 0);
}

static void test_verify_then_decide(void **state) {
        struct fixture *f = *state;
        struct cap_claims c = claims_base(), got;
        struct cap_record l = record_base();
        _cleanup_free_ char *t8 = issue(f, "k1", &c);
        assert_int_equal(verify(f->node, t8, NOW + 10, &got), 0);
        assert_int_equal(cap_decide(&got, &l, CAP_ACCESS_EXEC), CAP_ALLOW);
        /* the node installs execution 9 (a restore): 8's valid token is refused */
        l.execution = 9;
        assert_int_equal(verify(f->node, t8, NOW + 10, &got), 0);
        assert_int_equal(cap_decide(&got, &l, CAP_ACCESS_EXEC), CAP_REFRESH_ROUTE);
        c.execution = 9;
        _cleanup_free_ char *t9 = issue(f, "k1", &c);
        assert_int_equal(verify(f->node, t9, NOW + 10, &got), 0);
        assert_int_equal(cap_decide(&got, &l, CAP_ACCESS_EXEC), CAP_ALLOW);
}

/* The key directory: the first signer is created on demand; a rotation
 * signs with a new key while the previous public key still verifies; the
 * one before that is retired, and no old secret stays on disk. */
static void test_keydir(void **state) {
        char dir[] = "/tmp/test-cap-keydir-XXXXXX";
        assert_non_null(mkdtemp(dir));
        struct cap_keyring *signer = NULL, *pub = NULL;
        char k1[CAP_KID_MAX + 1], k2[CAP_KID_MAX + 1], k3[CAP_KID_MAX + 1], prev[CAP_KID_MAX + 1];
        struct cap_claims c = claims_base(), out;
        char *t1 = NULL, *t2 = NULL, *t3 = NULL;
        int64_t now = c.issued_at + 1;

        assert_int_equal(cap_keydir_load_signer(dir, &signer, k1), 0);
        assert_int_equal(cap_issue(signer, k1, &c, &t1), 0);
        cap_keyring_free(signer);
        /* loading again gives the same key, not a new one */
        assert_int_equal(cap_keydir_load_signer(dir, &signer, k2), 0);
        assert_string_equal(k1, k2);
        cap_keyring_free(signer);

        assert_int_equal(cap_keydir_rotate(dir, k2, prev), 0);
        assert_string_equal(prev, k1);
        assert_string_not_equal(k1, k2);
        assert_int_equal(cap_keydir_load_signer(dir, &signer, k3), 0);
        assert_string_equal(k3, k2);
        assert_int_equal(cap_issue(signer, k2, &c, &t2), 0);
        cap_keyring_free(signer);
        assert_int_equal(cap_keydir_load_public(dir, &pub, NULL), 0);
        assert_int_equal(cap_parse_verify(pub, t1, strlen(t1), now, &out), 0); /* previous still verifies */
        assert_int_equal(cap_parse_verify(pub, t2, strlen(t2), now, &out), 0);
        cap_keyring_free(pub);

        assert_int_equal(cap_keydir_rotate(dir, k3, prev), 0);
        assert_string_equal(prev, k2);
        assert_int_equal(cap_keydir_load_signer(dir, &signer, prev), 0);
        assert_int_equal(cap_issue(signer, k3, &c, &t3), 0);
        cap_keyring_free(signer);
        unsigned skipped = 99;
        assert_int_equal(cap_keydir_load_public(dir, &pub, &skipped), 0);
        assert_int_equal(skipped, 0);
        assert_int_equal(cap_parse_verify(pub, t1, strlen(t1), now, &out), -EKEYREJECTED); /* retired */
        assert_int_equal(cap_parse_verify(pub, t2, strlen(t2), now, &out), 0);
        assert_int_equal(cap_parse_verify(pub, t3, strlen(t3), now, &out), 0);
        cap_keyring_free(pub);

        /* only the current secret is on disk, and only its owner reads it */
        char path[256];
        struct stat st;
        snprintf(path, sizeof path, "%s/signing/%s.key", dir, k1);
        assert_int_equal(stat(path, &st), -1);
        snprintf(path, sizeof path, "%s/signing/%s.key", dir, k2);
        assert_int_equal(stat(path, &st), -1);
        snprintf(path, sizeof path, "%s/signing/%s.key", dir, k3);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);

        /* a stray file in public/ is skipped, not fatal */
        snprintf(path, sizeof path, "%s/public/junk.pub", dir);
        assert_int_equal(file_write_atomic(path, "zz\n", 3, 0644), 0);
        assert_int_equal(cap_keydir_load_public(dir, &pub, &skipped), 0);
        assert_int_equal(skipped, 1);
        assert_int_equal(cap_parse_verify(pub, t3, strlen(t3), now, &out), 0);
        cap_keyring_free(pub);

        free(t1);
        free(t2);
        free(t3);
        assert_int_equal(rm_rf(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_issue_rejects, setup, teardown),
                cmocka_unit_test_setup_teardown(test_forged, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tampered, setup, teardown),
                cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_wrong_kid, setup, teardown),
                cmocka_unit_test_setup_teardown(test_time, setup, teardown),
                cmocka_unit_test_setup_teardown(test_too_long, setup, teardown),
                cmocka_unit_test_setup_teardown(test_schema, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rotation, setup, teardown),
                cmocka_unit_test_setup_teardown(test_keyring, setup, teardown),
                cmocka_unit_test_setup_teardown(test_hex, setup, teardown),
                cmocka_unit_test(test_decide),
                cmocka_unit_test_setup_teardown(test_ports, setup, teardown),
                cmocka_unit_test(test_keydir),
                cmocka_unit_test_setup_teardown(test_verify_then_decide, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
