/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Execution capabilities: the keyring, the canonical encoding of claims,
 * issuing, parsing and verifying tokens, and the comparison with a node's
 * record. Every token a node reads is untrusted bytes: the parser bounds
 * everything before it allocates and fuzz-cap feeds it garbage.
 */
#include "cap.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "util.h"

/* base64url of a 64-byte signature, without padding */
#define SIG_B64_LEN 86
/* the payload's share of a token: the rest is "." and the signature */
#define PAYLOAD_B64_MAX (CAP_TOKEN_MAX - 1 - SIG_B64_LEN)
#define PAYLOAD_MAX (PAYLOAD_B64_MAX / 4 * 3 + 2)
#define B64 sodium_base64_VARIANT_URLSAFE_NO_PADDING

struct cap_key {
        char kid[CAP_KID_MAX + 1];
        bool has_secret;
        uint8_t pk[CAP_PUBLIC_KEY_SIZE];
        uint8_t sk[CAP_SECRET_KEY_SIZE];
};

struct cap_keyring {
        struct cap_key keys[CAP_KEYRING_MAX];
        size_t n;
};

/* Bit order is the order names appear in a token. */
static const char *const access_names[] = {
        "exec", "files_read", "files_write", "session_attach", "ports",
};

static bool id_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
}

/* 1..max chars of [A-Za-z0-9._-], NUL-terminated within max + 1 bytes. */
static bool id_valid(const char *s, size_t max) {
        if (!s)
                return false;
        size_t n = strnlen(s, max + 1);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!id_char(s[i]))
                        return false;
        return true;
}

int cap_keyring_new(struct cap_keyring **ret) {
        if (!ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct cap_keyring *kr = calloc(1, sizeof *kr);
        if (!kr)
                return -ENOMEM;
        *ret = kr;
        return 0;
}

void cap_keyring_free(struct cap_keyring *kr) {
        if (!kr)
                return;
        sodium_memzero(kr, sizeof *kr);
        free(kr);
}

static struct cap_key *key_find(const struct cap_keyring *kr, const char *kid) {
        for (size_t i = 0; i < kr->n; i++)
                if (strcmp(kr->keys[i].kid, kid) == 0)
                        return (struct cap_key *) &kr->keys[i];
        return NULL;
}

static int key_add(struct cap_keyring *kr, const char *kid, const uint8_t *pk, const uint8_t *sk) {
        if (!kr || !pk || !id_valid(kid, CAP_KID_MAX))
                return -EINVAL;
        if (key_find(kr, kid))
                return -EEXIST;
        if (kr->n >= CAP_KEYRING_MAX)
                return -ENOSPC;
        struct cap_key *k = &kr->keys[kr->n++];
        (void) str_copy(k->kid, sizeof k->kid, kid); /* fits: id_valid() checked its length */
        memcpy(k->pk, pk, sizeof k->pk);
        if (sk) {
                memcpy(k->sk, sk, sizeof k->sk);
                k->has_secret = true;
        }
        return 0;
}

int cap_keyring_add_secret(struct cap_keyring *kr, const char *kid, const uint8_t sk[CAP_SECRET_KEY_SIZE]) {
        if (!sk)
                return -EINVAL;
        /* libsodium signs with the public half stored in sk: one that does not
         * belong to the seed would give tokens no node accepts */
        uint8_t pk[CAP_PUBLIC_KEY_SIZE];
        if (crypto_sign_ed25519_sk_to_pk(pk, sk) != 0)
                return -EINVAL;
        uint8_t derived[CAP_PUBLIC_KEY_SIZE], scratch[CAP_SECRET_KEY_SIZE];
        int r = crypto_sign_seed_keypair(derived, scratch, sk) == 0 ? 0 : -EIO;
        sodium_memzero(scratch, sizeof scratch);
        if (r < 0)
                return r;
        if (sodium_memcmp(derived, pk, sizeof pk) != 0)
                return -EINVAL;
        return key_add(kr, kid, pk, sk);
}

int cap_keyring_add_public(struct cap_keyring *kr, const char *kid, const uint8_t pk[CAP_PUBLIC_KEY_SIZE]) {
        return key_add(kr, kid, pk, NULL);
}

int cap_keyring_remove(struct cap_keyring *kr, const char *kid) {
        if (!kr || !kid)
                return -EINVAL;
        struct cap_key *k = key_find(kr, kid);
        if (!k)
                return -ENOENT;
        struct cap_key *last = &kr->keys[kr->n - 1];
        if (k != last)
                *k = *last;
        sodium_memzero(last, sizeof *last);
        kr->n--;
        return 0;
}

int cap_keygen(uint8_t pk[CAP_PUBLIC_KEY_SIZE], uint8_t sk[CAP_SECRET_KEY_SIZE]) {
        if (!pk || !sk)
                return -EINVAL;
        if (sodium_init() < 0 || crypto_sign_keypair(pk, sk) != 0)
                return -EIO;
        return 0;
}

int cap_key_to_hex(const uint8_t *key, size_t n, char *out, size_t out_size) {
        if (!key || !out || n == 0 || out_size < 2 * n + 1)
                return -EINVAL;
        sodium_bin2hex(out, out_size, key, n);
        return 0;
}

int cap_key_from_hex(const char *hex, uint8_t *out, size_t n) {
        if (!hex || !out || n == 0 || n > CAP_SECRET_KEY_SIZE)
                return -EINVAL;
        size_t len = strnlen(hex, 2 * n + 64);
        if (len < 2 * n)
                return -EINVAL;
        for (size_t i = 2 * n; i < len; i++)
                if (!strchr(" \t\r\n", hex[i]))
                        return -EINVAL;
        uint8_t buf[CAP_SECRET_KEY_SIZE];
        size_t got = 0;
        const char *end = NULL;
        if (sodium_hex2bin(buf, sizeof buf, hex, 2 * n, NULL, &got, &end) != 0 || got != n || end != hex + 2 * n) {
                sodium_memzero(buf, sizeof buf);
                return -EINVAL;
        }
        memcpy(out, buf, n);
        sodium_memzero(buf, sizeof buf);
        return 0;
}

/* The protocols a service port speaks through Airlock. */
static bool protocol_valid(const char *p) {
        return strcmp(p, "http") == 0;
}

/* The rules both issuing and parsing enforce, so that nothing the issuer
 * signs is refused and nothing else is accepted. */
static int claims_check(const struct cap_claims *c) {
        if (!id_valid(c->tenant, CAP_ID_MAX) || !id_valid(c->sandbox, CAP_ID_MAX) || !id_valid(c->node, CAP_ID_MAX))
                return -EINVAL;
        if (c->execution > CAP_NUMBER_MAX)
                return -EINVAL;
        if (c->access == 0 || (c->access & ~(uint32_t) CAP_ACCESS_ALL))
                return -EINVAL;
        if (c->issued_at < 0 || (uint64_t) c->issued_at > CAP_NUMBER_MAX || c->expires_at < 0 ||
            (uint64_t) c->expires_at > CAP_NUMBER_MAX)
                return -EINVAL;
        if (c->expires_at <= c->issued_at || c->expires_at - c->issued_at > CAP_LIFETIME_MAX_S)
                return -EINVAL;
        if (c->access & CAP_ACCESS_PORTS)
                return c->port > 0 && protocol_valid(c->protocol) ? 0 : -EINVAL;
        return c->port == 0 && c->protocol[0] == '\0' ? 0 : -EINVAL;
}

/* The canonical payload of checked claims signed by kid. */
static char *payload_encode(const struct cap_claims *c, const char *kid) {
        json_auto_t *access = json_array();
        if (!access)
                return NULL;
        for (size_t i = 0; i < ARRAY_SIZE(access_names); i++)
                if ((c->access & (1u << i)) && json_array_append_new(access, json_string(access_names[i])) < 0)
                        return NULL;
        json_auto_t *o = json_pack("{s:O,s:I,s:I,s:I,s:s,s:s,s:s,s:s,s:i}", "access", access, "execution",
                                   (json_int_t) c->execution, "expires_at", (json_int_t) c->expires_at,
                                   "issued_at", (json_int_t) c->issued_at, "kid", kid, "node", c->node,
                                   "sandbox", c->sandbox, "tenant", c->tenant, "v", CAP_VERSION);
        if (!o)
                return NULL;
        if ((c->access & CAP_ACCESS_PORTS) &&
            (json_object_set_new(o, "port", json_integer(c->port)) < 0 ||
             json_object_set_new(o, "protocol", json_string(c->protocol)) < 0))
                return NULL;
        return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

int cap_issue(const struct cap_keyring *kr, const char *kid, const struct cap_claims *c, char **ret_token) {
        if (!kr || !kid || !c || !ret_token)
                return -EINVAL;
        struct cap_claims claims = *c;
        if (claims.expires_at == 0 && claims.issued_at >= 0)
                claims.expires_at = claims.issued_at + CAP_LIFETIME_DEFAULT_S;
        int r = claims_check(&claims);
        if (r < 0)
                return r;
        if (!id_valid(kid, CAP_KID_MAX))
                return -EINVAL;
        const struct cap_key *k = key_find(kr, kid);
        if (!k || !k->has_secret)
                return -ENOKEY;

        _cleanup_free_ char *payload = payload_encode(&claims, kid);
        if (!payload)
                return -ENOMEM;
        size_t plen = strlen(payload);
        uint8_t sig[CAP_SIGNATURE_SIZE];
        if (crypto_sign_detached(sig, NULL, (const uint8_t *) payload, plen, k->sk) != 0)
                return -EIO;

        size_t p64 = sodium_base64_ENCODED_LEN(plen, B64), s64 = sodium_base64_ENCODED_LEN(sizeof sig, B64);
        _cleanup_free_ char *token = malloc(p64 + s64); /* both NULs: one becomes the '.' */
        if (!token)
                return -ENOMEM;
        sodium_bin2base64(token, p64, (const uint8_t *) payload, plen, B64);
        size_t dot = strlen(token);
        token[dot] = '.';
        sodium_bin2base64(token + dot + 1, s64, sig, sizeof sig, B64);
        /* cannot happen with ids and numbers bounded as they are; the
         * verifier would refuse it, so never hand it out */
        if (strlen(token) > CAP_TOKEN_MAX)
                return -E2BIG;
        *ret_token = TAKE_PTR(token);
        return 0;
}

/* Decodes one base64url segment into out (at most max bytes), refusing
 * every encoding but the canonical one (libsodium tolerates nothing else
 * either; re-encoding makes it certain). */
static int b64_decode(const char *s, size_t len, uint8_t *out, size_t max, size_t *ret_len) {
        size_t n = 0;
        const char *end = NULL;
        if (len == 0 || sodium_base642bin(out, max, s, len, NULL, &n, &end, B64) != 0 || end != s + len)
                return -EINVAL;
        char again[CAP_TOKEN_MAX + 1];
        if (sodium_base64_ENCODED_LEN(n, B64) > sizeof again)
                return -EINVAL;
        sodium_bin2base64(again, sizeof again, out, n, B64);
        if (strlen(again) != len || memcmp(again, s, len) != 0)
                return -EINVAL;
        *ret_len = n;
        return 0;
}

/* Copies a string field into a fixed buffer after checking it as an id. */
static int id_field(json_t *v, size_t max, char *out) {
        const char *s = json_string_value(v);
        if (!s || json_string_length(v) > max || !id_valid(s, max))
                return -EINVAL;
        memcpy(out, s, json_string_length(v) + 1);
        return 0;
}

static int number_field(json_t *v, json_int_t *ret) {
        if (!json_is_integer(v))
                return -EINVAL;
        json_int_t x = json_integer_value(v);
        if (x < 0 || (uint64_t) x > CAP_NUMBER_MAX)
                return -EINVAL;
        *ret = x;
        return 0;
}

static int access_field(json_t *v, uint32_t *ret) {
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ARRAY_SIZE(access_names))
                return -EINVAL;
        uint32_t bits = 0;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                const char *s = json_string_value(e);
                if (!s)
                        return -EINVAL;
                size_t b = 0;
                while (b < ARRAY_SIZE(access_names) && strcmp(s, access_names[b]) != 0)
                        b++;
                if (b == ARRAY_SIZE(access_names) || (bits & (1u << b)))
                        return -EINVAL; /* unknown or repeated */
                bits |= 1u << b;
        }
        *ret = bits;
        return 0;
}

/* Strict schema: exactly the nine fields (eleven with "ports"), each of
 * its type; claims_check() then applies the same rules cap_issue() does. */
static int payload_parse(const uint8_t *payload, size_t len, struct cap_claims *ret) {
        /* duplicate keys are an error; strings with NUL are refused by default */
        json_auto_t *o = json_loadb((const char *) payload, len, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(o) || (json_object_size(o) != 9 && json_object_size(o) != 11))
                return -EINVAL;
        struct cap_claims c = {};
        json_int_t v = 0, execution = 0, iat = 0, exp = 0;
        if (number_field(json_object_get(o, "v"), &v) < 0 || v != CAP_VERSION)
                return -EINVAL;
        if (id_field(json_object_get(o, "tenant"), CAP_ID_MAX, c.tenant) < 0 ||
            id_field(json_object_get(o, "sandbox"), CAP_ID_MAX, c.sandbox) < 0 ||
            id_field(json_object_get(o, "node"), CAP_ID_MAX, c.node) < 0 ||
            id_field(json_object_get(o, "kid"), CAP_KID_MAX, c.kid) < 0 ||
            number_field(json_object_get(o, "execution"), &execution) < 0 ||
            number_field(json_object_get(o, "issued_at"), &iat) < 0 ||
            number_field(json_object_get(o, "expires_at"), &exp) < 0 ||
            access_field(json_object_get(o, "access"), &c.access) < 0)
                return -EINVAL; /* a missing field reads as NULL: the wrong type */
        c.execution = (uint64_t) execution;
        c.issued_at = iat;
        c.expires_at = exp;
        if (json_object_size(o) == 11) {
                json_int_t port = 0;
                json_t *proto = json_object_get(o, "protocol");
                if (number_field(json_object_get(o, "port"), &port) < 0 || port < 1 || port > UINT16_MAX ||
                    !json_is_string(proto) || json_string_length(proto) > CAP_PROTOCOL_MAX)
                        return -EINVAL;
                c.port = (uint16_t) port;
                memcpy(c.protocol, json_string_value(proto), json_string_length(proto) + 1);
        }
        if (claims_check(&c) < 0)
                return -EINVAL;
        *ret = c;
        return 0;
}

int cap_parse_verify(const struct cap_keyring *kr, const char *token, size_t len, int64_t now,
                     struct cap_claims *ret) {
        if (!kr || !token || !ret || now < 0)
                return -EINVAL;
        if (len > CAP_TOKEN_MAX)
                return -E2BIG;

        const char *dot = memchr(token, '.', len);
        if (!dot || memchr(dot + 1, '.', len - (size_t) (dot - token) - 1))
                return -EINVAL;
        size_t p64 = (size_t) (dot - token), s64 = len - p64 - 1;
        if (p64 > PAYLOAD_B64_MAX || s64 != SIG_B64_LEN)
                return -EINVAL;
        uint8_t sig[CAP_SIGNATURE_SIZE], payload[PAYLOAD_MAX];
        size_t slen = 0, plen = 0;
        if (b64_decode(dot + 1, s64, sig, sizeof sig, &slen) < 0 || slen != sizeof sig ||
            b64_decode(token, p64, payload, sizeof payload, &plen) < 0)
                return -EINVAL;

        struct cap_claims c;
        if (payload_parse(payload, plen, &c) < 0)
                return -EINVAL;
        /* one encoding per claims set: what was signed must be exactly what
         * the issuer would produce for these claims */
        _cleanup_free_ char *canonical = payload_encode(&c, c.kid);
        if (!canonical)
                return -ENOMEM;
        if (strlen(canonical) != plen || memcmp(canonical, payload, plen) != 0)
                return -EINVAL;

        const struct cap_key *k = key_find(kr, c.kid);
        if (!k)
                return -EKEYREJECTED;
        if (crypto_sign_verify_detached(sig, payload, plen, k->pk) != 0)
                return -EBADMSG;

        /* both bounds themselves are still valid; now >= 0 and the claims
         * below 2^53, so none of this overflows */
        if (now - CAP_SKEW_S > c.expires_at || c.issued_at - CAP_SKEW_S > now)
                return -ETIME;
        *ret = c;
        return 0;
}

enum cap_decision cap_decide(const struct cap_claims *c, const struct cap_record *local, uint32_t needed_access) {
        if (!c || !local)
                return CAP_DENY;
        /* another tenant's or another sandbox's token: never a route problem */
        if (strcmp(c->tenant, local->tenant) != 0 || strcmp(c->sandbox, local->sandbox) != 0)
                return CAP_DENY;
        if (needed_access == 0 || (needed_access & ~(uint32_t) CAP_ACCESS_ALL) ||
            (c->access & needed_access) != needed_access)
                return CAP_DENY;
        /* the right sandbox, another incarnation or placement: the caller's
         * route is stale (moved, restored, or this node is behind) */
        if (c->execution != local->execution || strcmp(c->node, local->node) != 0)
                return CAP_REFRESH_ROUTE;
        return CAP_ALLOW;
}

enum cap_decision cap_decide_port(const struct cap_claims *c, const struct cap_record *local, uint16_t port,
                                  const char *protocol) {
        if (!c || !protocol || port == 0 || c->port != port || strcmp(c->protocol, protocol) != 0)
                return CAP_DENY;
        return cap_decide(c, local, CAP_ACCESS_PORTS);
}

const char *cap_decision_to_string(enum cap_decision d) {
        switch (d) {
        case CAP_ALLOW:
                return "allow";
        case CAP_REFRESH_ROUTE:
                return "refresh_route";
        case CAP_DENY:
                return "deny";
        }
        return NULL;
}
