/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a capability costs per data-plane request: airlockd issues one
 * (cap_issue: canonical JSON, Ed25519 sign, base64url) and the node parses,
 * verifies and decides (cap_parse_verify + cap_decide). The raw baseline,
 * measured in the same run: libsodium's detached sign and verify of the
 * same payload bytes, with nothing around them.
 *
 *   build/bench/cap-bench [N]        (default 20000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "cap.h"
#include "util.h"

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *ns, size_t n, double base_median) {
        qsort(ns, n, sizeof *ns, cmp_u64);
        double med = (double) ns[n / 2] / 1000.0, p99 = (double) ns[n * 99 / 100] / 1000.0;
        printf("%-34s median %7.1f us  p99 %7.1f us", what, med, p99);
        if (base_median > 0)
                printf("  (%.2fx the raw baseline)", med / base_median);
        printf("\n");
}

int main(int argc, char **argv) {
        size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
        if (n < 100 || sodium_init() < 0)
                return 2;
        uint8_t pk[CAP_PUBLIC_KEY_SIZE], sk[CAP_SECRET_KEY_SIZE];
        struct cap_keyring *issuer, *node;
        if (cap_keygen(pk, sk) < 0 || cap_keyring_new(&issuer) < 0 || cap_keyring_new(&node) < 0 ||
            cap_keyring_add_secret(issuer, "k1", sk) < 0 || cap_keyring_add_public(node, "k1", pk) < 0)
                return 1;
        struct cap_claims c = { .execution = 3, .access = CAP_ACCESS_EXEC, .issued_at = (int64_t) time(NULL) };
        strcpy(c.tenant, "ten-0123456789abcdef");
        strcpy(c.sandbox, "sbx-0123456789abcdef");
        strcpy(c.node, "node-1");
        struct cap_record rec = { .execution = 3 };
        strcpy(rec.tenant, c.tenant);
        strcpy(rec.sandbox, c.sandbox);
        strcpy(rec.node, c.node);

        uint64_t *t_sign = calloc(n, 8), *t_verify = calloc(n, 8), *t_issue = calloc(n, 8), *t_check = calloc(n, 8);
        if (!t_sign || !t_verify || !t_issue || !t_check)
                return 1;
        char *token = NULL;
        if (cap_issue(issuer, "k1", &c, &token) < 0)
                return 1;
        const char *dot = strchr(token, '.');
        size_t plen = (size_t) (dot - token);
        uint8_t sig[crypto_sign_BYTES];
        for (size_t i = 0; i < n; i++) { /* interleaved: both see the same noise */
                uint64_t t0 = now_monotonic_ns();
                crypto_sign_detached(sig, NULL, (const uint8_t *) token, plen, sk);
                uint64_t t1 = now_monotonic_ns();
                if (crypto_sign_verify_detached(sig, (const uint8_t *) token, plen, pk) != 0)
                        return 1;
                uint64_t t2 = now_monotonic_ns();
                char *tok = NULL;
                if (cap_issue(issuer, "k1", &c, &tok) < 0)
                        return 1;
                uint64_t t3 = now_monotonic_ns();
                struct cap_claims out;
                if (cap_parse_verify(node, tok, strlen(tok), c.issued_at, &out) < 0 ||
                    cap_decide(&out, &rec, CAP_ACCESS_EXEC) != CAP_ALLOW)
                        return 1;
                uint64_t t4 = now_monotonic_ns();
                free(tok);
                t_sign[i] = t1 - t0;
                t_verify[i] = t2 - t1;
                t_issue[i] = t3 - t2;
                t_check[i] = t4 - t3;
        }
        printf("capability of %zu bytes, %zu rounds\n", strlen(token), n);
        uint64_t *s = malloc(n * 8), *v = malloc(n * 8);
        memcpy(s, t_sign, n * 8);
        memcpy(v, t_verify, n * 8);
        qsort(s, n, 8, cmp_u64);
        qsort(v, n, 8, cmp_u64);
        double sign_med = (double) s[n / 2] / 1000.0, verify_med = (double) v[n / 2] / 1000.0;
        report("raw Ed25519 sign (baseline)", t_sign, n, 0);
        report("cap_issue (airlockd)", t_issue, n, sign_med);
        report("raw Ed25519 verify (baseline)", t_verify, n, 0);
        report("cap_parse_verify+decide (node)", t_check, n, verify_med);
        free(token);
        return 0;
}
