/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes capability parsing with what any caller can put in a request: bytes
 * go to cap_parse_verify() with a fixed keyring. Whatever it accepts must be
 * valid claims, and since the encoding is canonical and Ed25519 is
 * deterministic, re-issuing the claims must give back exactly the input.
 */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The corpus' valid seed was signed with this key (seed bytes 0..31) at NOW. */
#define NOW INT64_C(1700000000)
#define KID "fuzz"

static struct cap_keyring *keyring(void) {
        static struct cap_keyring *kr;
        if (kr)
                return kr;
        uint8_t seed[32], pk[CAP_PUBLIC_KEY_SIZE], sk[CAP_SECRET_KEY_SIZE];
        for (size_t i = 0; i < sizeof seed; i++)
                seed[i] = (uint8_t) i;
        if (cap_keyring_new(&kr) < 0 || crypto_sign_seed_keypair(pk, sk, seed) != 0 ||
            cap_keyring_add_secret(kr, KID, sk) < 0)
                abort();
        return kr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct cap_keyring *kr = keyring();
        struct cap_claims c;
        memset(&c, 0x5a, sizeof c);
        struct cap_claims before = c;
        int r = cap_parse_verify(kr, (const char *) data, size, NOW, &c);
        if (r < 0) {
                if (memcmp(&c, &before, sizeof c) != 0)
                        abort(); /* untouched on failure */
                return 0;
        }
        if (size > CAP_TOKEN_MAX || c.access == 0 || (c.access & ~(uint32_t) CAP_ACCESS_ALL) ||
            c.expires_at <= c.issued_at || c.expires_at - c.issued_at > CAP_LIFETIME_MAX_S ||
            strlen(c.sandbox) == 0 || strlen(c.sandbox) > CAP_ID_MAX || strcmp(c.kid, KID) != 0 ||
            NOW > c.expires_at + CAP_SKEW_S || c.issued_at > NOW + CAP_SKEW_S)
                abort();
        char *t = NULL;
        if (cap_issue(kr, c.kid, &c, &t) < 0 || strlen(t) != size || memcmp(t, data, size) != 0)
                abort();
        free(t);
        struct cap_record l = { .execution = c.execution };
        strcpy(l.tenant, c.tenant);
        strcpy(l.sandbox, c.sandbox);
        strcpy(l.node, c.node);
        if (cap_decide(&c, &l, c.access) != CAP_ALLOW)
                abort();
        return 0;
}
