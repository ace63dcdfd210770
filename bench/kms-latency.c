/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What wrapping and unwrapping a data key costs (lib/kms): the median of N
 * kms_wrap() calls, of N kms_unwrap() calls and of N wrap+unwrap pairs, in
 * microseconds, one thread, for the local kind (a key directory in DIR)
 * and, when AIRLOCK_TEST_PKCS11_MODULE, _TOKEN and _PIN_FILE are set, for
 * PKCS#11 (tests/unit/with-softhsm.sh sets them for a SoftHSM2 token):
 *
 *   tests/unit/with-softhsm.sh build/bench/kms-latency [N [DIR]]   (1000 /tmp)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "kms.h"
#include "macros.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, (size_t) n, sizeof *v, cmp_double);
        return v[n / 2];
}

static double us_since(uint64_t t0) {
        return (double) (now_monotonic_ns() - t0) / 1e3;
}

static int measure(struct kms *k, const char *ref, int n) {
        double *wrap = calloc((size_t) n, sizeof *wrap), *unwrap = calloc((size_t) n, sizeof *unwrap),
               *pair = calloc((size_t) n, sizeof *pair);
        if (!wrap || !unwrap || !pair)
                return -ENOMEM;
        uint8_t dek[KMS_DEK_SIZE], back[KMS_DEK_SIZE];
        char out[KMS_WRAPPED_MAX + 1];
        int r = 0;
        /* a few rounds first: sessions opened, caches warm */
        for (int i = -10; i < n && r == 0; i++) {
                randombytes_buf(dek, sizeof dek);
                uint64_t t0 = now_monotonic_ns();
                r = kms_wrap(k, "ten-bench", ref, dek, out);
                double w = us_since(t0);
                uint64_t t1 = now_monotonic_ns();
                if (r == 0)
                        r = kms_unwrap(k, "ten-bench", out, back);
                double u = us_since(t1);
                if (r == 0 && memcmp(dek, back, sizeof dek) != 0)
                        r = -EIO;
                if (i >= 0) {
                        wrap[i] = w;
                        unwrap[i] = u;
                        pair[i] = w + u;
                }
        }
        if (r == 0)
                printf("%-7s wrap %8.1f us  unwrap %8.1f us  wrap+unwrap %8.1f us  (median of %d)\n",
                       kms_kind(k), median(wrap, n), median(unwrap, n), median(pair, n), n);
        free(wrap);
        free(unwrap);
        free(pair);
        return r;
}

int main(int argc, char **argv) {
        int n = argc > 1 ? atoi(argv[1]) : 1000;
        const char *base = argc > 2 ? argv[2] : "/tmp";
        if (n < 1 || sodium_init() < 0)
                return 2;
        _cleanup_free_ char *dir = strdup_printf("%s/kms-latency-XXXXXX", base);
        if (!dir || !mkdtemp(dir))
                return 1;
        struct kms *k = NULL;
        int r = kms_open_local(dir, &k);
        if (r == 0)
                r = kms_local_rotate(k, "ten-bench", NULL);
        if (r == 0)
                r = measure(k, NULL, n);
        kms_free(k);
        rm_rf(dir);
        if (r < 0) {
                fprintf(stderr, "local: %s\n", strerror(-r));
                return 1;
        }

        const char *module = getenv("AIRLOCK_TEST_PKCS11_MODULE"),
                   *token = getenv("AIRLOCK_TEST_PKCS11_TOKEN"),
                   *pin = getenv("AIRLOCK_TEST_PKCS11_PIN_FILE");
        if (!module || !token || !pin) {
                printf("pkcs11  not measured: AIRLOCK_TEST_PKCS11_* are not set "
                       "(tests/unit/with-softhsm.sh)\n");
                return 0;
        }
        k = NULL;
        r = kms_open_pkcs11(module, token, pin, &k);
        if (r == 0 && (r = kms_pkcs11_generate(k, "kms-latency")) == -EEXIST)
                r = 0;
        if (r == 0)
                r = measure(k, "kms-latency", n);
        if (k)
                kms_pkcs11_destroy(k, "kms-latency");
        kms_free(k);
        if (r < 0) {
                fprintf(stderr, "pkcs11: %s\n", strerror(-r));
                return 1;
        }
        return 0;
}
