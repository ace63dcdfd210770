/* SPDX-License-Identifier: Apache-2.0 */
/* Webhooks: their checks, their signature and their senders (webhook.h). */
#include "webhook.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "airlock-config.h"
#include "api-reply.h"
#include "credstore.h"
#include "log.h"
#include "macros.h"
#include "netpolicy.h"
#include "replica-share.h"
#include "util.h"
#include "worker.h"

#define WEBHOOK_SENDERS 4
#define WEBHOOK_TICK_MS 250 /* the dispatcher's */
#define WEBHOOK_SENDER_IDLE_MS 60000
#define WEBHOOK_RESCAN_MS 5000 /* a webhook that found nothing is read again after this at most */
#define WEBHOOK_BATCH 50 /* events one pass reads for a webhook */
#define WEBHOOK_CONNECT_TIMEOUT_S 5
#define WEBHOOK_TIMEOUT_S 10
#define WEBHOOK_RESPONSE_MAX (64u << 10) /* of a reply's body, read and dropped; more ends it */
/* On a shared store events of other replicas may commit a little after
 * those with higher ids: a sender reads only events this old, so that
 * its cursor does not pass one still to come. */
#define WEBHOOK_SETTLE_MS 2000

static const char *const event_types[] = {
        "sandbox.created",  "sandbox.paused",     "sandbox.resumed",        "sandbox.stopped",
        "sandbox.started",  "sandbox.suspended",  "sandbox.woken",          "sandbox.rolled_back",
        "sandbox.failed",   "sandbox.recovering", "sandbox.recovered",      "sandbox.lost",
        "sandbox.archived", "sandbox.deleted",    "sandbox.snapshot_taken", "sandbox.policy_denied",
};

bool webhook_event_type_is_valid(const char *type) {
        for (size_t i = 0; i < ARRAY_SIZE(event_types); i++)
                if (strcmp(event_types[i], type) == 0)
                        return true;
        return false;
}

bool webhook_events_match(const char *events, const char *type) {
        if (strcmp(events, "*") == 0)
                return true;
        size_t n = strlen(type);
        for (const char *p = events; *p;) {
                const char *e = strchrnul(p, ',');
                if ((size_t) (e - p) == n && strncmp(p, type, n) == 0)
                        return true;
                p = *e ? e + 1 : e;
        }
        return false;
}

int webhook_events_parse(const json_t *v, char **ret, char *err, size_t errlen) {
        if (!v || (json_is_array(v) && json_array_size(v) == 1 &&
                   strcmp(json_string_value(json_array_get(v, 0)) ?: "", "*") == 0)) {
                *ret = strdup("*");
                return *ret ? 0 : -ENOMEM;
        }
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ARRAY_SIZE(event_types)) {
                snprintf(err, errlen,
                         "'events' must be [\"*\"] or a list of 1-%zu event types (docs/webhooks.md)",
                         ARRAY_SIZE(event_types));
                return -EINVAL;
        }
        char buf[1024] = "";
        size_t i;
        json_t *t;
        json_array_foreach(v, i, t) {
                const char *s = json_string_value(t);
                if (!s || !webhook_event_type_is_valid(s)) {
                        snprintf(err, errlen,
                                 "'events': '%.64s' is no event type (sandbox.created, sandbox.paused, "
                                 "... docs/webhooks.md)",
                                 s ?: "(not a string)");
                        return -EINVAL;
                }
                if (!webhook_events_match(buf[0] ? buf : "-", s))
                        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", buf[0] ? "," : "", s);
        }
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

/* ---- the secret and the signature ---- */

/* The key bytes of a secret; their number, or -EINVAL. */
static int secret_key(const char *secret, uint8_t key[static WEBHOOK_SECRET_KEY_MAX]) {
        size_t plen = strlen(WEBHOOK_SECRET_PREFIX), len = 0;
        if (!secret || strncmp(secret, WEBHOOK_SECRET_PREFIX, plen) != 0 ||
            strlen(secret) >= WEBHOOK_SECRET_MAX)
                return -EINVAL;
        const char *b64 = secret + plen;
        if (sodium_base642bin(key, WEBHOOK_SECRET_KEY_MAX, b64, strlen(b64), NULL, &len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 ||
            len < WEBHOOK_SECRET_KEY_MIN)
                return -EINVAL;
        return (int) len;
}

int webhook_secret_take(const char *given, char **ret, char *err, size_t errlen) {
        uint8_t key[WEBHOOK_SECRET_KEY_MAX];
        if (given) {
                int n = secret_key(given, key);
                sodium_memzero(key, sizeof key);
                if (n < 0) {
                        snprintf(err, errlen,
                                 "'secret' must be \"" WEBHOOK_SECRET_PREFIX "\" and the base64 of "
                                 "%d-%d random bytes (or leave it out: one is made)",
                                 WEBHOOK_SECRET_KEY_MIN, WEBHOOK_SECRET_KEY_MAX);
                        return -EINVAL;
                }
                *ret = strdup(given);
                return *ret ? 0 : -ENOMEM;
        }
        randombytes_buf(key, 32);
        char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_ORIGINAL)];
        sodium_bin2base64(b64, sizeof b64, key, 32, sodium_base64_VARIANT_ORIGINAL);
        sodium_memzero(key, sizeof key);
        *ret = strdup_printf(WEBHOOK_SECRET_PREFIX "%s", b64);
        sodium_memzero(b64, sizeof b64);
        return *ret ? 0 : -ENOMEM;
}

int webhook_key_load(const struct daemon_config *config, uint8_t key[static CREDSTORE_KEY_SIZE]) {
        char path[sizeof config->control_dir + sizeof CREDSTORE_KEY_FILE + 1];
        snprintf(path, sizeof path, "%s/%s", config->control_dir, CREDSTORE_KEY_FILE);
        return credstore_key_load(path, key);
}

int webhook_secret_seal(const uint8_t key[static CREDSTORE_KEY_SIZE], const char *tenant_id, const char *id,
                        const char *secret, char **ret) {
        _cleanup_free_ uint8_t *sealed = NULL;
        size_t n = 0;
        int r = credstore_seal(key, CREDSTORE_FOR_WEBHOOK, tenant_id, id, secret, strlen(secret), &sealed,
                               &n);
        if (r < 0)
                return r;
        size_t b64len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
        char *out = malloc(strlen(WEBHOOK_SEALED_PREFIX) + b64len);
        if (!out)
                return -ENOMEM;
        memcpy(out, WEBHOOK_SEALED_PREFIX, strlen(WEBHOOK_SEALED_PREFIX));
        sodium_bin2base64(out + strlen(WEBHOOK_SEALED_PREFIX), b64len, sealed, n,
                          sodium_base64_VARIANT_ORIGINAL);
        *ret = out;
        return 0;
}

int webhook_secret_open(const uint8_t key[static CREDSTORE_KEY_SIZE], const struct store_webhook *w,
                        char **ret) {
        size_t plen = strlen(WEBHOOK_SEALED_PREFIX);
        if (!w->secret)
                return -EBADMSG;
        if (strncmp(w->secret, WEBHOOK_SECRET_PREFIX, strlen(WEBHOOK_SECRET_PREFIX)) == 0) {
                /* kept as it is by 0.2.0, which sealed nothing */
                *ret = strdup(w->secret);
                return *ret ? 0 : -ENOMEM;
        }
        if (strncmp(w->secret, WEBHOOK_SEALED_PREFIX, plen) != 0)
                return -EBADMSG;
        const char *b64 = w->secret + plen;
        uint8_t sealed[CREDSTORE_SEALED_OVERHEAD + WEBHOOK_SECRET_MAX];
        size_t n = 0, len = 0;
        if (sodium_base642bin(sealed, sizeof sealed, b64, strlen(b64), NULL, &n, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0)
                return -EBADMSG;
        return credstore_unseal(key, CREDSTORE_FOR_WEBHOOK, w->tenant_id, w->id, sealed, n, ret, &len);
}

void webhook_secret_free(char *secret) {
        if (secret)
                credstore_value_free(secret, strlen(secret));
}

int webhook_sign(const char *secret, const char *msg_id, int64_t ts_s, const char *body, size_t len,
                 char out[static WEBHOOK_SIGNATURE_MAX]) {
        uint8_t key[WEBHOOK_SECRET_KEY_MAX], mac[crypto_auth_hmacsha256_BYTES];
        int n = secret_key(secret, key);
        if (n < 0)
                return n;
        char ts[24];
        snprintf(ts, sizeof ts, "%lld", (long long) ts_s);
        crypto_auth_hmacsha256_state st;
        crypto_auth_hmacsha256_init(&st, key, (size_t) n);
        crypto_auth_hmacsha256_update(&st, (const uint8_t *) msg_id, strlen(msg_id));
        crypto_auth_hmacsha256_update(&st, (const uint8_t *) ".", 1);
        crypto_auth_hmacsha256_update(&st, (const uint8_t *) ts, strlen(ts));
        crypto_auth_hmacsha256_update(&st, (const uint8_t *) ".", 1);
        crypto_auth_hmacsha256_update(&st, (const uint8_t *) body, len);
        crypto_auth_hmacsha256_final(&st, mac);
        sodium_memzero(key, sizeof key);
        sodium_memzero(&st, sizeof st);
        memcpy(out, "v1,", 3);
        sodium_bin2base64(out + 3, WEBHOOK_SIGNATURE_MAX - 3, mac, sizeof mac,
                          sodium_base64_VARIANT_ORIGINAL);
        return 0;
}

/* ---- the target ---- */

static int url_part(CURLU *u, CURLUPart what, unsigned flags, char *out, size_t n) {
        char *p = NULL;
        if (curl_url_get(u, what, &p, flags) != CURLUE_OK)
                return -ENOENT;
        int r = strlen(p) < n ? 0 : -ENAMETOOLONG;
        if (r >= 0)
                memcpy(out, p, strlen(p) + 1);
        curl_free(p);
        return r;
}

int webhook_target_check(const struct netpolicy_platform *pl, const char *url, struct webhook_target *ret,
                         char *err, size_t errlen) {
        *ret = (struct webhook_target){0};
        if (!url || strlen(url) > WEBHOOK_URL_MAX) {
                snprintf(err, errlen, "'url' must be an http or https URL of %d characters at most",
                         WEBHOOK_URL_MAX);
                return -EINVAL;
        }
        CURLU *u = curl_url();
        if (!u)
                return -ENOMEM;
        char scheme[16], port[8], user[8];
        int r = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
                                url_part(u, CURLUPART_SCHEME, 0, scheme, sizeof scheme) >= 0 &&
                                url_part(u, CURLUPART_HOST, 0, ret->host, sizeof ret->host) >= 0 &&
                                url_part(u, CURLUPART_PORT, CURLU_DEFAULT_PORT, port, sizeof port) >= 0
                        ? 0
                        : -EINVAL;
        bool has_user = r >= 0 && url_part(u, CURLUPART_USER, 0, user, sizeof user) != -ENOENT;
        curl_url_cleanup(u);
        if (r < 0 || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) || has_user) {
                snprintf(err, errlen,
                         "'url' must be an http:// or https:// URL with a host and no user name");
                return -EINVAL;
        }
        ret->https = strcmp(scheme, "https") == 0;
        ret->port = (unsigned) strtoul(port, NULL, 10);
        size_t hl = strlen(ret->host);
        if (hl > 2 && ret->host[0] == '[' && ret->host[hl - 1] == ']') {
                memmove(ret->host, ret->host + 1, hl - 2);
                ret->host[hl - 2] = 0;
        }

        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(ret->host, NULL, &hints, &res);
        if (g != 0 || !res) {
                snprintf(err, errlen, "the webhook's host %s has no address: %s", ret->host,
                         g ? gai_strerror(g) : "none");
                return -EADDRNOTAVAIL;
        }
        r = 0;
        for (struct addrinfo *a = res; a && r >= 0; a = a->ai_next) {
                struct in6_addr a6 = {0};
                char text[INET6_ADDRSTRLEN] = "";
                if (a->ai_family == AF_INET) {
                        const struct in_addr *v4 = &((const struct sockaddr_in *) a->ai_addr)->sin_addr;
                        a6.s6_addr[10] = a6.s6_addr[11] = 0xff;
                        memcpy(&a6.s6_addr[12], v4, 4);
                        inet_ntop(AF_INET, v4, text, sizeof text);
                } else if (a->ai_family == AF_INET6) {
                        a6 = ((const struct sockaddr_in6 *) a->ai_addr)->sin6_addr;
                        inet_ntop(AF_INET6, &a6, text, sizeof text);
                } else
                        continue;
                enum netpolicy_reason why;
                if (netpolicy_platform_denied(pl, &a6, &why)) {
                        snprintf(err, errlen,
                                 "the webhook's host %s is at %s, in the platform deny set (%s): an "
                                 "operator may "
                                 "open a range for webhooks with AIRLOCK_WEBHOOK_OPEN (never loopback, "
                                 "link-local "
                                 "or metadata)",
                                 ret->host, text, netpolicy_reason_to_string(why));
                        r = -EACCES;
                } else if (!ret->addr[0])
                        snprintf(ret->addr, sizeof ret->addr, "%s", text);
        }
        freeaddrinfo(res);
        if (r >= 0 && !ret->addr[0]) {
                snprintf(err, errlen, "the webhook's host %s has no IPv4 or IPv6 address", ret->host);
                r = -EADDRNOTAVAIL;
        }
        return r;
}

/* ---- one delivery ---- */

json_t *webhook_event_json(const struct store_event *e) {
        char ts[48];
        api_format_time(e->ts_ms, ts, sizeof ts);
        json_t *data = api_event_json(e);
        return data ? json_pack("{s:s, s:s, s:o}", "type", e->type, "timestamp", ts, "data", data) : NULL;
}

struct sink {
        size_t got;
};

static size_t reply_sink(char *p, size_t size, size_t n, void *userdata) {
        struct sink *s = userdata;
        (void) p;
        s->got += size * n;
        return s->got > WEBHOOK_RESPONSE_MAX ? 0 : size * n;
}

static int abort_when_stopping(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
        (void) dt, (void) dn, (void) ut, (void) un;
        return atomic_load((const atomic_bool *) userdata) ? 1 : 0;
}

struct attempt {
        int status;                  /* HTTP status; 0: none came */
        char error[WEBHOOK_ERR_MAX]; /* "" when delivered */
        int64_t duration_ms;
};

/* POSTs one event to w's URL, signed with secret (w's, opened); what
 * came of it in *a. */
static void deliver(const struct daemon_config *config, const struct store_webhook *w, const char *secret,
                    const struct store_event *e, const atomic_bool *stopping, struct attempt *a) {
        *a = (struct attempt){0};
        uint64_t t0 = now_monotonic_ns();
        struct webhook_target t;
        char msg_id[96], sig[WEBHOOK_SIGNATURE_MAX];
        _cleanup_(json_decrefp) json_t *o = webhook_event_json(e);
        _cleanup_free_ char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        int64_t ts_s = (int64_t) (now_realtime_ns() / 1000000000ULL);
        snprintf(msg_id, sizeof msg_id, "%s-%lld", w->id, (long long) e->id);
        if (!body || webhook_sign(secret, msg_id, ts_s, body, strlen(body), sig) < 0) {
                snprintf(a->error, sizeof a->error, "cannot make the request: %s",
                         body ? "bad secret" : "no memory");
                return;
        }
        /* checked again: the name may point elsewhere now */
        if (webhook_target_check(&config->webhook_platform, w->url, &t, a->error, sizeof a->error) < 0)
                return;

        CURL *h = curl_easy_init();
        struct curl_slist *hdr = NULL, *resolve = NULL;
        char line[256], pin[384];
        bool literal = strchr(t.host, ':') || inet_pton(AF_INET, t.host, &(struct in_addr){0}) == 1;
        snprintf(pin, sizeof pin, strchr(t.addr, ':') ? "%s:%u:[%s]" : "%s:%u:%s", t.host, t.port, t.addr);
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        hdr = curl_slist_append(hdr, "User-Agent: airlock-webhook/" AIRLOCK_VERSION);
        snprintf(line, sizeof line, "webhook-id: %s", msg_id);
        hdr = curl_slist_append(hdr, line);
        snprintf(line, sizeof line, "webhook-timestamp: %lld", (long long) ts_s);
        hdr = curl_slist_append(hdr, line);
        snprintf(line, sizeof line, "webhook-signature: %s", sig);
        hdr = curl_slist_append(hdr, line);
        if (!literal)
                resolve = curl_slist_append(NULL, pin);
        struct sink sink = {0};
        char cerr[CURL_ERROR_SIZE] = "";
        CURLcode c = !h || !hdr || (!literal && !resolve) ? CURLE_OUT_OF_MEMORY : CURLE_OK;
        if (c == CURLE_OK) {
                curl_easy_setopt(h, CURLOPT_URL, w->url);
                curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
                curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
                curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
                curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
                if (resolve)
                        curl_easy_setopt(h, CURLOPT_RESOLVE, resolve);
                curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
                curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long) WEBHOOK_CONNECT_TIMEOUT_S);
                curl_easy_setopt(h, CURLOPT_TIMEOUT, (long) WEBHOOK_TIMEOUT_S);
                curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, reply_sink);
                curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
                curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
                curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_when_stopping);
                curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *) stopping);
                curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
                c = curl_easy_perform(h);
        }
        long status = 0;
        if (h)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        a->status = (int) status;
        if (c != CURLE_OK && !(c == CURLE_WRITE_ERROR && status >= 200 && status < 300))
                snprintf(a->error, sizeof a->error, "%s", cerr[0] ? cerr : curl_easy_strerror(c));
        else if (status < 200 || status > 299)
                snprintf(a->error, sizeof a->error, "the endpoint answered HTTP %ld", status);
        curl_slist_free_all(hdr);
        curl_slist_free_all(resolve);
        if (h)
                curl_easy_cleanup(h);
        a->duration_ms = (int64_t) ((now_monotonic_ns() - t0) / 1000000ULL);
}

/* ---- the dispatcher and the senders ---- */

/* A webhook handed to its sender, with the newest event's id then. */
struct due {
        char *id;
        int64_t last;
};

/* What the dispatcher knows of a webhook between its ticks. */
struct track {
        char *id;
        unsigned gen; /* the last tick that listed it */
        bool busy;    /* handed to its sender and not yet run */
        /* its last run found nothing after cursor, the newest event being
         * upto: it is not handed again before a newer event, a moved cursor
         * or WEBHOOK_RESCAN_MS (a tenant's webhook, whose cursor moves
         * only over its owner's events, is not read each tick for other
         * owners') */
        bool found_nothing;
        int64_t cursor, upto, at_ms;
};

struct webhook_worker;

struct sender {
        struct webhook_worker *ww;
        struct worker *worker;
        struct due *queue; /* under ww->lock */
        size_t n_queue;
};

struct webhook_worker {
        const struct daemon_config *config;
        struct store *store;
        atomic_bool stopping;
        uint8_t key[CREDSTORE_KEY_SIZE]; /* what the secrets are sealed with */
        struct worker *dispatcher;
        struct sender senders[WEBHOOK_SENDERS];
        pthread_mutex_t lock;
        struct track *tracks; /* under lock, by id */
        size_t n_tracks, cap_tracks;
        unsigned gen;
};

static unsigned sender_of(const char *id) {
        unsigned h = 2166136261u; /* FNV-1a */
        for (const char *p = id; *p; p++)
                h = (h ^ (uint8_t) *p) * 16777619u;
        return h % WEBHOOK_SENDERS;
}

static int64_t backoff_ms(int attempts) {
        int64_t s = attempts >= 10 ? WEBHOOK_BACKOFF_MAX_S
                                   : MIN((int64_t) 1 << (attempts - 1), WEBHOOK_BACKOFF_MAX_S);
        return s * 1000;
}

/* Delivers what w has waiting, oldest first, until one fails or the
 * batch ends; then moves its cursor in the store. With no event of its
 * owner's after the cursor, the cursor moves on to skip_to: the newest
 * event id read before the events were, of those already committed (a
 * tenant's webhook steps over other owners' events, which the store may
 * then prune). Whether it found no event after the cursor. */
static bool run_webhook(struct webhook_worker *ww, const struct store_webhook *w, int64_t skip_to) {
        struct store_event *ev = NULL;
        size_t n = 0;
        /* an admin's webhook hears every sandbox; a tenant's its own */
        int r = store_event_list(ww->store, !w->tenant_id, w->tenant_id, NULL, w->cursor, WEBHOOK_BATCH, &ev,
                                 &n);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, NULL, "webhook %s: store: failed to read events: %m", w->id);
                return false;
        }
        int64_t now = now_unix_ms();
        _cleanup_(webhook_secret_freep) char *secret = NULL;
        int sr = webhook_secret_open(ww->key, w, &secret);
        struct store_webhook next = {
                .cursor = w->cursor, .attempts = w->attempts, .next_at = 0, .last_error = w->last_error};
        bool moved = false;
        char error[WEBHOOK_ERR_MAX] = "";
        for (size_t i = 0; i < n && !atomic_load(&ww->stopping); i++) {
                if (ww->config->shared_store && ev[i].ts_ms > now - WEBHOOK_SETTLE_MS)
                        break;
                if (!webhook_events_match(w->events, ev[i].type)) {
                        next.cursor = ev[i].id;
                        moved = true;
                        continue;
                }
                struct attempt a = {0};
                if (sr < 0)
                        snprintf(a.error, sizeof a.error,
                                 "its secret does not open with this replica's key (%s): "
                                 "control/" CREDSTORE_KEY_FILE " must be the same on every replica",
                                 strerror(-sr));
                else
                        deliver(ww->config, w, secret, &ev[i], &ww->stopping, &a);
                if (atomic_load(&ww->stopping) && a.error[0])
                        break; /* cut short by the stop: tried again at the next start */
                struct store_webhook_delivery d = {.webhook_id = w->id,
                                                   .event_id = ev[i].id,
                                                   .event_type = ev[i].type,
                                                   .sandbox_id = ev[i].sandbox_id,
                                                   .attempt = next.attempts + 1,
                                                   .status = a.status,
                                                   .error = a.error[0] ? a.error : NULL,
                                                   .duration_ms = a.duration_ms};
                if ((r = store_webhook_delivery_insert(ww->store, &d)) < 0)
                        log_errno(LOG_LEVEL_WARN, r, NULL, "webhook %s: store: failed to log a delivery: %m",
                                  w->id);
                moved = true;
                if (a.error[0]) {
                        next.attempts++;
                        next.failed++;
                        next.next_at = now_unix_ms() + backoff_ms(next.attempts);
                        snprintf(error, sizeof error, "%s", a.error);
                        next.last_error = error;
                        log_emit(LOG_LEVEL_INFO, NULL,
                                 "webhook %s: event %lld (%s) not delivered (attempt %d, next in "
                                 "%lld s): %s",
                                 w->id, (long long) ev[i].id, ev[i].type, next.attempts,
                                 (long long) (backoff_ms(next.attempts) / 1000), a.error);
                        break;
                }
                next.cursor = ev[i].id;
                next.attempts = 0;
                next.delivered++;
                next.last_error = NULL;
        }
        store_event_array_free(ev, n);
        if (n == 0 && skip_to > w->cursor) {
                next.cursor = skip_to;
                moved = true;
        }
        if (!moved)
                return n == 0;
        r = store_webhook_advance(ww->store, w->id, w->cursor, &next);
        if (r < 0 && r != -ESTALE && r != -ENOENT)
                log_errno(LOG_LEVEL_WARN, r, NULL, "webhook %s: store: failed to move its cursor: %m",
                          w->id);
        return n == 0;
}

/* The id run_webhook() may move w's cursor to when it finds nothing of
 * its own: the newest event's when the dispatcher handed it (events
 * commit in the order of their ids on a store of one airlockd), or, on a
 * shared store, the newest of those WEBHOOK_SETTLE_MS old; read before
 * the run reads the events. */
static int64_t skip_bound(struct webhook_worker *ww, const struct due *d) {
        if (!ww->config->shared_store)
                return d->last;
        int64_t settled = 0;
        int r = store_event_last_id(ww->store, now_unix_ms() - WEBHOOK_SETTLE_MS, &settled);
        return r < 0 ? 0 : MIN(settled, d->last);
}

/* The track of webhook id, or where it would go (*at), in ww->tracks. */
static struct track *track_find(struct webhook_worker *ww, const char *id, size_t *at) {
        size_t lo = 0, hi = ww->n_tracks;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(ww->tracks[mid].id, id);
                if (c == 0)
                        return &ww->tracks[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (at)
                *at = lo;
        return NULL;
}

static struct track *track_add(struct webhook_worker *ww, const char *id, size_t at) {
        if (ww->n_tracks == ww->cap_tracks) {
                size_t cap = ww->cap_tracks ? 2 * ww->cap_tracks : 16;
                struct track *grown = realloc(ww->tracks, cap * sizeof *grown);
                if (!grown)
                        return NULL;
                ww->tracks = grown;
                ww->cap_tracks = cap;
        }
        char *copy = strdup(id);
        if (!copy)
                return NULL;
        memmove(&ww->tracks[at + 1], &ww->tracks[at], (ww->n_tracks - at) * sizeof *ww->tracks);
        ww->n_tracks++;
        ww->tracks[at] = (struct track){.id = copy};
        return &ww->tracks[at];
}

/* Takes the next webhook of s's queue; false when there is none. */
static bool sender_next(struct sender *s, struct due *ret) {
        struct webhook_worker *ww = s->ww;
        pthread_mutex_lock(&ww->lock);
        bool got = s->n_queue > 0 && !atomic_load(&ww->stopping);
        if (got) {
                *ret = s->queue[0];
                memmove(s->queue, s->queue + 1, --s->n_queue * sizeof *s->queue);
        }
        pthread_mutex_unlock(&ww->lock);
        return got;
}

/* A sender's run: the webhooks the dispatcher handed it, one at a time,
 * each read from the store as it is now (its cursor moved by the run
 * before). */
static int sender_pass(void *arg) {
        struct sender *s = arg;
        struct webhook_worker *ww = s->ww;
        struct due d;
        while (sender_next(s, &d)) {
                _cleanup_(store_webhook_release) struct store_webhook w = {0};
                int r = store_webhook_get(ww->store, d.id, &w);
                if (r < 0 && r != -ENOENT)
                        log_errno(LOG_LEVEL_WARN, r, NULL, "webhook %s: store: failed to read it: %m", d.id);
                bool nothing = r >= 0 && w.next_at <= now_unix_ms() && replica_owns(w.id) &&
                               run_webhook(ww, &w, skip_bound(ww, &d));
                pthread_mutex_lock(&ww->lock);
                struct track *t = track_find(ww, d.id, NULL);
                if (t) {
                        t->busy = false;
                        t->found_nothing = nothing;
                        if (nothing) {
                                t->cursor = w.cursor;
                                t->upto = d.last;
                                t->at_ms = now_unix_ms();
                        }
                }
                pthread_mutex_unlock(&ww->lock);
                free(d.id);
        }
        return 0;
}

/* Whether webhook w, tracked by t, has something to do. */
static bool is_due(const struct track *t, const struct store_webhook *w, int64_t last, int64_t now) {
        if (t->busy || w->next_at > now || w->cursor >= last || !replica_owns(w->id))
                return false;
        return !t->found_nothing || t->cursor != w->cursor || t->upto < last ||
               now - t->at_ms >= WEBHOOK_RESCAN_MS;
}

/* Hands w to its sender (under ww->lock); false when out of memory (it
 * is handed at a later tick). */
static bool hand(struct webhook_worker *ww, const struct store_webhook *w, int64_t last) {
        struct sender *s = &ww->senders[sender_of(w->id)];
        char *id = strdup(w->id);
        struct due *grown = id ? realloc(s->queue, (s->n_queue + 1) * sizeof *grown) : NULL;
        if (!grown) {
                free(id);
                return false;
        }
        s->queue = grown;
        s->queue[s->n_queue++] = (struct due){.id = id, .last = last};
        return true;
}

/* The dispatcher's tick: one listing of the webhooks and one read of the
 * newest event's id, whatever their number; each webhook with something
 * to do goes to its sender. */
static int dispatch_pass(void *arg) {
        struct webhook_worker *ww = arg;
        struct store_webhook *w = NULL;
        size_t n = 0;
        int64_t last = 0;
        int r = store_webhook_list(ww->store, true, NULL, &w, &n);
        if (r >= 0 && n > 0)
                r = store_event_last_id(ww->store, 0, &last);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, NULL, "webhooks: store: failed to list them: %m");
                store_webhook_array_free(w, n);
                return 0;
        }
        int64_t now = now_unix_ms();
        bool wake[WEBHOOK_SENDERS] = {false};
        pthread_mutex_lock(&ww->lock);
        unsigned gen = ++ww->gen;
        for (size_t i = 0; i < n; i++) {
                size_t at = 0;
                struct track *t = track_find(ww, w[i].id, &at) ?: track_add(ww, w[i].id, at);
                if (!t)
                        continue; /* out of memory: at a later tick */
                t->gen = gen;
                if (is_due(t, &w[i], last, now) && hand(ww, &w[i], last)) {
                        t->busy = true;
                        wake[sender_of(w[i].id)] = true;
                }
        }
        /* forget the deleted ones (once their sender is done with them) */
        size_t kept = 0;
        for (size_t i = 0; i < ww->n_tracks; i++) {
                if (ww->tracks[i].gen == gen || ww->tracks[i].busy)
                        ww->tracks[kept++] = ww->tracks[i];
                else
                        free(ww->tracks[i].id);
        }
        ww->n_tracks = kept;
        pthread_mutex_unlock(&ww->lock);
        store_webhook_array_free(w, n);
        for (unsigned i = 0; i < WEBHOOK_SENDERS; i++)
                if (wake[i])
                        worker_wake(ww->senders[i].worker);
        return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) {
        (void) curl_global_init(CURL_GLOBAL_DEFAULT);
}

int webhook_worker_start(const struct daemon_config *config, struct store *store,
                         struct webhook_worker **ret) {
        pthread_once(&curl_once, curl_init);
        struct webhook_worker *ww = calloc(1, sizeof *ww);
        if (!ww)
                return -ENOMEM;
        ww->config = config;
        ww->store = store;
        pthread_mutex_init(&ww->lock, NULL);
        int r = webhook_key_load(config, ww->key);
        for (unsigned i = 0; i < WEBHOOK_SENDERS && r >= 0; i++) {
                ww->senders[i] = (struct sender){.ww = ww};
                /* woken by the dispatcher; the interval is only a floor */
                r = worker_start(sender_pass, &ww->senders[i], WEBHOOK_SENDER_IDLE_MS, WORKER_WAIT_FIRST,
                                 &ww->senders[i].worker);
        }
        if (r >= 0)
                r = worker_start(dispatch_pass, ww, WEBHOOK_TICK_MS, 0, &ww->dispatcher);
        if (r < 0) {
                webhook_worker_stop(ww);
                return r;
        }
        *ret = ww;
        return 0;
}

void webhook_worker_stop(struct webhook_worker *ww) {
        if (!ww)
                return;
        atomic_store(&ww->stopping, true);
        worker_stop(ww->dispatcher);
        for (unsigned i = 0; i < WEBHOOK_SENDERS; i++) {
                struct sender *s = &ww->senders[i];
                worker_stop(s->worker);
                for (size_t j = 0; j < s->n_queue; j++)
                        free(s->queue[j].id);
                free(s->queue);
        }
        for (size_t i = 0; i < ww->n_tracks; i++)
                free(ww->tracks[i].id);
        free(ww->tracks);
        pthread_mutex_destroy(&ww->lock);
        sodium_memzero(ww->key, sizeof ww->key);
        free(ww);
}
