/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes ClientHello sniffing (src/gw/tlshello.c) with the first bytes a
 * guest sends on a connection. Invariants: the result is one of the four
 * verdicts; *ret is untouched unless OK or BAD; an SNI is canonical; a BAD
 * says why; NEED_MORE only below the 16 KiB bound; and a hello that was
 * read is read the same with bytes appended after it (nothing past the
 * ClientHello is looked at).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tlshello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static bool ready;
        if (!ready) {
                assert(tlshello_init() == 0);
                ready = true;
        }
        struct tlshello h, before;
        memset(&h, 0x5a, sizeof h);
        before = h;
        int r = tlshello_sniff(data, size, &h);
        assert(r >= TLSHELLO_OK && r <= TLSHELLO_BAD);
        if (r == TLSHELLO_NEED_MORE || r == TLSHELLO_NOT_TLS) {
                assert(memcmp(&h, &before, sizeof h) == 0);
                assert(r == TLSHELLO_NOT_TLS || size < TLSHELLO_BUF_MAX);
                return 0;
        }
        if (r == TLSHELLO_BAD) {
                assert(h.reason);
                return 0;
        }
        assert(!h.reason);
        if (h.has_sni) {
                char again[GWNAME_MAX + 1];
                assert(gwname_canonical(h.sni, strlen(h.sni), 0, again) == 0 && strcmp(again, h.sni) == 0);
        } else
                assert(h.sni[0] == 0);
        assert(!(h.alpn & ~(unsigned) (TLSHELLO_ALPN_H2 | TLSHELLO_ALPN_HTTP11 | TLSHELLO_ALPN_OTHER)));
        assert(h.has_alpn || h.alpn == 0);

        if (size + 16 <= TLSHELLO_BUF_MAX) {
                uint8_t *more = malloc(size + 16);
                assert(more);
                memcpy(more, data, size);
                memset(more + size, 0x17, 16);
                struct tlshello h2;
                assert(tlshello_sniff(more, size + 16, &h2) == TLSHELLO_OK);
                assert(h2.has_sni == h.has_sni && strcmp(h2.sni, h.sni) == 0 && h2.ech == h.ech &&
                       h2.esni == h.esni && h2.early_data == h.early_data && h2.psk == h.psk && h2.alpn == h.alpn);
                free(more);
        }
        return 0;
}
