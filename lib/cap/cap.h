/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Signed execution capabilities: after authorising a caller, the control
 * plane issues a short-lived token that names one execution of one sandbox
 * (tenant, sandbox, execution generation, node) and what it may do there.
 * The node verifies the signature with public keys only, then compares the
 * claims with its own record of what it runs (cap_decide()), so a request
 * that a stale route delivers to another sandbox, or to an older execution
 * of the right one, is refused (docs/security.md, "Execution capabilities").
 *
 * Token: base64url(payload) "." base64url(signature), no padding, where
 * payload is canonical JSON (sorted keys, no spaces, exactly these fields):
 *
 *   {"access":["exec","files_read"],"execution":8,"expires_at":1700000120,
 *    "issued_at":1700000000,"kid":"k1","node":"node-b","sandbox":"sbx-1",
 *    "tenant":"t-1","v":1}
 *
 * plus "port" (1..65535) and "protocol" ("http") exactly when access holds
 * "ports": a service-port capability names the one port it opens.
 *
 * and signature is Ed25519 over the exact payload bytes. Every claims set
 * has exactly one token encoding: the verifier re-encodes what it parsed and
 * rejects anything that differs (spaces, key order, escapes, "-0", padding
 * bits of base64).
 *
 * Rules: functions return 0 or a negative errno; ret_ out-parameters are
 * written only on success. The library never logs (a token is a secret: it
 * must not reach a log line either). A keyring is not locked: share it
 * read-only between threads, and exclude them while adding or removing keys.
 */

#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define CAP_TOKEN_MAX 2048          /* bytes of a whole token */
#define CAP_ID_MAX 64               /* chars of tenant, sandbox and node ids */
#define CAP_KID_MAX 32              /* chars of a key id */
#define CAP_PROTOCOL_MAX 8          /* chars of a service port's protocol */
#define CAP_KEYRING_MAX 8           /* keys one keyring holds */
#define CAP_LIFETIME_DEFAULT_S 120  /* expires_at - issued_at when not given */
#define CAP_LIFETIME_MAX_S 300      /* the longest lifetime issued or accepted */
#define CAP_SKEW_S 15               /* clock skew tolerated on both ends */
#define CAP_VERSION 1
/* Numbers in the payload stay within what every JSON reader holds exactly
 * (2^53 - 1): generations and Unix seconds never get near it. */
#define CAP_NUMBER_MAX ((UINT64_C(1) << 53) - 1)

#define CAP_PUBLIC_KEY_SIZE 32
#define CAP_SECRET_KEY_SIZE 64 /* libsodium's form: seed || public key */
#define CAP_SIGNATURE_SIZE 64
#define CAP_PUBLIC_KEY_HEX (2 * CAP_PUBLIC_KEY_SIZE + 1) /* with the NUL */
#define CAP_SECRET_KEY_HEX (2 * CAP_SECRET_KEY_SIZE + 1)

/* What a capability allows; "exec", "files_read", ... in the encoding. */
enum cap_access {
        CAP_ACCESS_EXEC = 1u << 0,
        CAP_ACCESS_FILES_READ = 1u << 1,
        CAP_ACCESS_FILES_WRITE = 1u << 2,
        CAP_ACCESS_SESSION_ATTACH = 1u << 3,
        CAP_ACCESS_PORTS = 1u << 4,
        CAP_ACCESS_ALL = (1u << 5) - 1,
};

/* The claims of one capability. Ids are 1..CAP_ID_MAX of [A-Za-z0-9._-]. */
struct cap_claims {
        char tenant[CAP_ID_MAX + 1];
        char sandbox[CAP_ID_MAX + 1];
        uint64_t execution; /* generation: every restore, wake or move adds one */
        char node[CAP_ID_MAX + 1];
        uint32_t access;    /* enum cap_access bits, at least one */
        int64_t issued_at;  /* Unix seconds */
        int64_t expires_at; /* Unix seconds, issued_at < expires_at <= issued_at + 300 */
        /* with CAP_ACCESS_PORTS (and only then): the one guest port and the
         * protocol spoken to it, "port" and "protocol" in the encoding */
        uint16_t port;
        char protocol[CAP_PROTOCOL_MAX + 1]; /* "http" */
        char kid[CAP_KID_MAX + 1]; /* the signing key; set by cap_parse_verify() */
};

/* What a node runs, from its own runtime record (never from the request). */
struct cap_record {
        char tenant[CAP_ID_MAX + 1];
        char sandbox[CAP_ID_MAX + 1];
        uint64_t execution;
        char node[CAP_ID_MAX + 1];
};

/* Up to CAP_KEYRING_MAX keys by kid (1..CAP_KID_MAX of [A-Za-z0-9._-]): the
 * issuer holds secret keys, nodes only public ones. During a rollover a node
 * holds the old and the new public key, then the old one is removed. */
struct cap_keyring;

int cap_keyring_new(struct cap_keyring **ret);
/* Wipes the keys and frees the keyring; NULL is fine. */
void cap_keyring_free(struct cap_keyring *kr);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct cap_keyring *, cap_keyring_free);
/* Adds a signing key (it verifies too). -EINVAL when kid is invalid or the
 * public half of sk does not belong to its seed, -EEXIST when kid is taken,
 * -ENOSPC when the keyring is full. */
int cap_keyring_add_secret(struct cap_keyring *kr, const char *kid, const uint8_t sk[CAP_SECRET_KEY_SIZE]);
/* Adds a verifying key; errors as for cap_keyring_add_secret(). */
int cap_keyring_add_public(struct cap_keyring *kr, const char *kid, const uint8_t pk[CAP_PUBLIC_KEY_SIZE]);
/* Removes (and wipes) kid's key. -ENOENT when there is none. */
int cap_keyring_remove(struct cap_keyring *kr, const char *kid);

/* A fresh Ed25519 key pair. */
int cap_keygen(uint8_t pk[CAP_PUBLIC_KEY_SIZE], uint8_t sk[CAP_SECRET_KEY_SIZE]);
/* Key files hold keys as hex. to_hex writes 2n lowercase digits and a NUL
 * into out (out_size >= 2n + 1). from_hex reads exactly 2n digits (either
 * case), optionally followed by whitespace (a file's trailing newline);
 * -EINVAL for anything else, out untouched. */
int cap_key_to_hex(const uint8_t *key, size_t n, char *out, size_t out_size);
int cap_key_from_hex(const char *hex, uint8_t *out, size_t n);

/*
 * Signs c with kid's secret key into a new token (*ret_token, free()).
 * c->kid is ignored: the token names kid. expires_at 0 means issued_at +
 * CAP_LIFETIME_DEFAULT_S. -EINVAL when the claims are invalid (bad ids, no
 * or unknown access bits, issued_at < 0, lifetime not in 1..300 s, numbers
 * over CAP_NUMBER_MAX), -ENOKEY when kr holds no secret key for kid.
 */
int cap_issue(const struct cap_keyring *kr, const char *kid, const struct cap_claims *c, char **ret_token);

/*
 * Parses and verifies the len bytes of token (no NUL needed) at time now
 * (Unix seconds). In order: -E2BIG when len > CAP_TOKEN_MAX; -EINVAL when it
 * is not exactly one canonical token with valid claims (see above); the
 * signature: -EKEYREJECTED when kr holds no key for its kid, -EBADMSG when it
 * does not verify; then time: -ETIME when now > expires_at + CAP_SKEW_S
 * (expired) or issued_at > now + CAP_SKEW_S (not yet valid). Either bound
 * itself is still valid. Signature checks are libsodium's (constant time).
 * This proves who issued the claims, not that they fit this node: follow
 * with cap_decide().
 */
int cap_parse_verify(const struct cap_keyring *kr, const char *token, size_t len, int64_t now,
                     struct cap_claims *ret);

enum cap_decision {
        CAP_ALLOW,         /* the execution this node runs, with the access asked */
        CAP_REFRESH_ROUTE, /* the right sandbox, another execution or node: re-resolve */
        CAP_DENY,          /* another tenant or sandbox, or access not granted */
};

/*
 * Compares verified claims with the node's own record, for an operation
 * needing every bit of needed_access (at least one bit, all known):
 *   tenant or sandbox differ                    -> CAP_DENY
 *   a needed access bit not granted             -> CAP_DENY
 *   execution or node differ                    -> CAP_REFRESH_ROUTE
 *   everything matches                          -> CAP_ALLOW
 * Access is checked before the route so that a refresh never leads to an
 * operation the caller was not allowed. Execution is compared for equality:
 * once a node installs execution N+1 its record says N+1 and every
 * capability for N falls out of the comparison (REFRESH_ROUTE), before it
 * expires. NULL arguments give CAP_DENY.
 */
enum cap_decision cap_decide(const struct cap_claims *c, const struct cap_record *local, uint32_t needed_access);

/* cap_decide() for a request to a service port: the claims must name
 * this port and protocol as well (CAP_DENY otherwise, before the route is
 * looked at), and grant CAP_ACCESS_PORTS. */
enum cap_decision cap_decide_port(const struct cap_claims *c, const struct cap_record *local, uint16_t port,
                                  const char *protocol);

/* "allow", "refresh_route", "deny". */
const char *cap_decision_to_string(enum cap_decision d);
