/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What airlock-gw reads of a guest's TLS ClientHello before it decides a
 * connection (EGRESS.md T2, T5, T7, T8): the SNI, ECH/ESNI, 0-RTT and PSK
 * offers, ALPN. The ClientHello is parsed by OpenSSL (a server SSL over a
 * memory BIO whose client_hello callback stops the handshake), never by
 * hand, so a hello split over records and segments is reassembled the way
 * a TLS server does it. Nothing is ever written: the SSL is freed after the
 * callback, no ServerHello or alert leaves.
 *
 * tlshello_init() makes the one SSL_CTX the module uses; call it once at
 * start (not thread-safe against tlshello_sniff()), tlshello_free() at exit.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gwname.h"

/* The most the caller buffers before a ClientHello must be complete. */
#define TLSHELLO_BUF_MAX (16 * 1024)

enum tlshello_result {
        TLSHELLO_OK = 0,        /* a complete ClientHello: *ret filled */
        TLSHELLO_NEED_MORE = 1, /* the start of one: call again with more bytes */
        TLSHELLO_NOT_TLS = 2,   /* does not start like a TLS handshake record */
        TLSHELLO_BAD = 3,       /* a malformed or refused ClientHello (ret->reason says why) */
};

enum {
        TLSHELLO_ALPN_H2 = 1 << 0,
        TLSHELLO_ALPN_HTTP11 = 1 << 1,
        TLSHELLO_ALPN_OTHER = 1 << 2,
};

struct tlshello {
        bool has_sni;
        /* canonical (gwname, LDH only, no trailing dot); "" without SNI */
        char sni[GWNAME_MAX + 1];
        bool ech;         /* encrypted_client_hello, 0xfe0d */
        bool esni;        /* the draft encrypted_server_name, 0xffce */
        bool early_data;  /* early_data (42): 0-RTT offered */
        bool psk;         /* pre_shared_key (41): resumption offered */
        unsigned alpn;    /* TLSHELLO_ALPN_* of the protocols offered */
        bool has_alpn;    /* an ALPN extension was present */
        /* the version of the first record, and ClientHello.legacy_version */
        uint16_t record_version;
        uint16_t legacy_version;
        /* TLSHELLO_BAD only: why (static string) */
        const char *reason;
};

/* Makes the module's SSL_CTX. 0, -ENOMEM; a second call is a no-op. */
int tlshello_init(void);
/* Frees it; tlshello_sniff() returns -EINVAL afterwards. */
void tlshello_free(void);

/*
 * Looks at the first len bytes a guest sent on a connection (all of them
 * so far, stateless: the caller keeps at most TLSHELLO_BUF_MAX and calls
 * again as more arrive). Returns a tlshello_result, or a negative errno
 * when the module cannot run (-EINVAL before tlshello_init(), -ENOMEM).
 * TLSHELLO_BAD, with ret->reason, when OpenSSL refuses the hello, when no
 * complete hello is in the first TLSHELLO_BUF_MAX bytes, or when the
 * server_name extension is not exactly one host_name that is a canonical
 * host name (two names, another type, an IP literal, a NUL, a trailing
 * dot, a malformed list) or the ALPN list is malformed. *ret is written on
 * TLSHELLO_OK (all of it) and TLSHELLO_BAD (reason only meaningful),
 * untouched otherwise. Bytes after the ClientHello are not looked at.
 */
int tlshello_sniff(const uint8_t *buf, size_t len, struct tlshello *ret);
