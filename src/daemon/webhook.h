/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Webhooks (docs/webhooks.md): sandboxes' lifecycle events POSTed to an
 * owner's URL, signed, retried, in order. The events are the store's
 * (GET /v1/events: store_event_*); each webhook keeps a cursor in the
 * store, the id of the last event it handled. One dispatcher thread lists
 * the webhooks and reads the newest event's id each tick (two queries,
 * whatever their number) and hands each that has something to do to the
 * one of WEBHOOK_SENDERS threads its id hashes to (so one webhook's
 * events go out one at a time, in order); on a shared store, only those
 * this replica owns (replica_owns()). A sender reads the webhook again
 * before it runs it, so it never starts from a cursor it moved on itself.
 * A delivery that fails is tried again after 1, 2, 4 ...
 * WEBHOOK_BACKOFF_MAX_S seconds; the event waits in the store meanwhile
 * (up to STORE_EVENTS_WEBHOOK_KEEP_MS). No request handler waits on a
 * delivery.
 *
 * The signature is Standard Webhooks' (standardwebhooks.com): headers
 * webhook-id, webhook-timestamp (Unix seconds) and webhook-signature
 * "v1,BASE64", HMAC-SHA256 with the secret's key over "ID.TIMESTAMP.BODY".
 * A secret is "whsec_" and the base64 of its 24..64 key bytes.
 *
 * A target must pass the platform deny set, as sandboxes' egress must
 * (lib/netpolicy), with the ranges the operator opened for webhooks
 * (AIRLOCK_WEBHOOK_OPEN): checked when a webhook is made and again at
 * every delivery, which connects to the address it checked (no second
 * lookup to rebind) and follows no redirect.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config.h"
#include "credstore.h"
#include "macros.h"
#include "store.h"

#define WEBHOOK_URL_MAX 2048
#define WEBHOOK_SECRET_PREFIX "whsec_"
#define WEBHOOK_SECRET_KEY_MIN 24
#define WEBHOOK_SECRET_KEY_MAX 64
/* "whsec_" + base64 of WEBHOOK_SECRET_KEY_MAX bytes + NUL */
#define WEBHOOK_SECRET_MAX (6 + 4 * ((WEBHOOK_SECRET_KEY_MAX + 2) / 3) + 1)
#define WEBHOOK_SIGNATURE_MAX 64 /* "v1," + base64 of 32 bytes + NUL */
#define WEBHOOK_ERR_MAX 512
#define WEBHOOK_BACKOFF_MAX_S 300

/* Whether type is an event a webhook may ask for ("sandbox.paused", ...). */
bool webhook_event_type_is_valid(const char *type);
/* Whether a webhook's events ("*" or TYPE,TYPE...) take type. */
bool webhook_events_match(const char *events, const char *type);
/* The "events" of a request (absent: every event) as the store keeps it
 * ("*" or TYPE,TYPE,...) in *ret (malloc'd); -EINVAL with err naming what
 * was wrong. */
int webhook_events_parse(const json_t *v, char **ret, char *err, size_t errlen);

/* Checks a secret's form; makes one when given is NULL (*ret malloc'd). */
int webhook_secret_take(const char *given, char **ret, char *err, size_t errlen);
/*
 * A secret at rest: the store keeps it sealed (lib/credstore,
 * CREDSTORE_FOR_WEBHOOK, bound to the webhook's owner and id) under the
 * credential store's key (DATA_DIR/control/secrets.key, which every
 * replica shares), as WEBHOOK_SEALED_PREFIX and the base64 of the sealed
 * bytes: a reader of the store cannot sign as Airlock.
 */
#define WEBHOOK_SEALED_PREFIX "sealed1:"
/* Reads (or makes) that key. */
int webhook_key_load(const struct daemon_config *config, uint8_t key[static CREDSTORE_KEY_SIZE]);
/* The stored form of secret for webhook id of tenant_id (NULL: the admin
 * scope's) in *ret (malloc'd). */
int webhook_secret_seal(const uint8_t key[static CREDSTORE_KEY_SIZE], const char *tenant_id, const char *id,
                        const char *secret, char **ret);
/* w's secret as it signs, opened from its stored form, or taken as it is
 * when the store kept it plain (made by 0.2.0): *ret for
 * webhook_secret_free(); -EBADMSG when it does not open (another key,
 * another webhook's, changed). */
int webhook_secret_open(const uint8_t key[static CREDSTORE_KEY_SIZE], const struct store_webhook *w,
                        char **ret);
/* Wipes and frees a secret from webhook_secret_open(); NULL is fine. */
void webhook_secret_free(char *secret);
DEFINE_TRIVIAL_CLEANUP_FUNC(char *, webhook_secret_free)
/* The webhook-signature header's value for a message into out. */
int webhook_sign(const char *secret, const char *msg_id, int64_t ts_s, const char *body, size_t len,
                 char out[static WEBHOOK_SIGNATURE_MAX]);

/* Where a delivery goes: the URL's host, port, scheme, and the address
 * checked against the deny set, which the delivery connects to. */
struct webhook_target {
        char host[256]; /* as the URL has it, an IPv6 literal without brackets */
        unsigned port;
        bool https;
        char addr[64]; /* numeric */
};

/* Parses url (http or https, a host, no user info, WEBHOOK_URL_MAX at
 * most), resolves its host and checks every address against the platform
 * deny set as pl opens it: 0 and *ret, or -EINVAL (the URL),
 * -EADDRNOTAVAIL (no address), -EACCES (an address in the deny set) with
 * err saying which and why. */
int webhook_target_check(const struct netpolicy_platform *pl, const char *url, struct webhook_target *ret,
                         char *err, size_t errlen);

/* The JSON body of an event's delivery: {"type","timestamp","data"}. */
json_t *webhook_event_json(const struct store_event *e);

struct webhook_worker;
int webhook_worker_start(const struct daemon_config *config, struct store *store,
                         struct webhook_worker **ret);
/* Stops the senders; a delivery in flight ends within its timeout. NULL is fine. */
void webhook_worker_stop(struct webhook_worker *w);
