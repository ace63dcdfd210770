/* SPDX-License-Identifier: Apache-2.0 */
#include "capcheck.h"
#include "nodemetrics.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cap-keydir.h"
#include "config.h"
#include "log.h"
#include "util.h"

/* An unknown kid makes the node look at the directory again, at most this
 * often (a flood of made-up kids must not turn into a flood of reloads). */
#define RELOAD_MIN_NS (1000ULL * 1000 * 1000)

static int (*key_refresh)(void);

void capcheck_set_key_refresh(int (*fn)(void)) {
        key_refresh = fn;
}

static pthread_rwlock_t keys_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct cap_keyring *keys; /* replaced whole on reload, under the write lock */
static uint64_t keys_stamp;      /* cap_keydir_public_stamp() of what keys holds */
static uint64_t last_reload_ns;
static const char *keys_dir;

/* Reloads when the directory changed since the last load (write lock held). */
static void reload_locked(bool force) {
        uint64_t now = now_monotonic_ns(), stamp = cap_keydir_public_stamp(keys_dir);
        if (keys && stamp == keys_stamp && !(force && now - last_reload_ns >= RELOAD_MIN_NS))
                return;
        last_reload_ns = now;
        struct cap_keyring *kr;
        unsigned skipped = 0;
        int r = cap_keydir_load_public(keys_dir, &kr, &skipped);
        if (r < 0) {
                log_warn("cannot read the capability keys of %s/public: %s", keys_dir, strerror(-r));
                return;
        }
        if (skipped)
                log_warn("%u file(s) in %s/public are not capability keys; ignored", skipped, keys_dir);
        cap_keyring_free(keys);
        keys = kr;
        __atomic_store_n(&keys_stamp, stamp, __ATOMIC_RELAXED);
}

int capcheck_init(const struct node_config *cfg) {
        keys_dir = cfg->cap_keys_dir;
        pthread_rwlock_wrlock(&keys_lock);
        reload_locked(true);
        bool ok = keys != NULL;
        pthread_rwlock_unlock(&keys_lock);
        log_info("capabilities: node %s, public keys from %s/public", cfg->node_name, keys_dir);
        return ok ? 0 : -ENOMEM;
}

void capcheck_done(void) {
        pthread_rwlock_wrlock(&keys_lock);
        cap_keyring_free(keys);
        keys = NULL;
        pthread_rwlock_unlock(&keys_lock);
}

static int verify(const char *token, size_t len, int64_t now, struct cap_claims *ret) {
        pthread_rwlock_rdlock(&keys_lock);
        int r = keys ? cap_parse_verify(keys, token, len, now, ret) : -EKEYREJECTED;
        pthread_rwlock_unlock(&keys_lock);
        return r;
}

static enum cap_decision decide(const char *token, size_t len, const struct cap_record *local, uint32_t need,
                                uint16_t port, const char **ret_why) {
        *ret_why = "";
        if (!token || len == 0) {
                *ret_why = "no capability";
                return CAP_DENY;
        }
        /* a stat per request: a rotation or retirement takes effect at once */
        if (cap_keydir_public_stamp(keys_dir) != __atomic_load_n(&keys_stamp, __ATOMIC_RELAXED)) {
                pthread_rwlock_wrlock(&keys_lock);
                reload_locked(false);
                pthread_rwlock_unlock(&keys_lock);
        }

        struct cap_claims c;
        int64_t now = (int64_t) time(NULL);
        int r = verify(token, len, now, &c);
        if (r == -EKEYREJECTED) {
                /* a key published since we last looked? In a cluster, a
                 * replica started since the last heartbeat: ask for the
                 * keys now (at most once a second) */
                if (key_refresh)
                        (void) key_refresh();
                pthread_rwlock_wrlock(&keys_lock);
                reload_locked(true);
                pthread_rwlock_unlock(&keys_lock);
                r = verify(token, len, now, &c);
        }
        switch (r) {
        case 0:
                break;
        case -E2BIG:
                *ret_why = "capability too long";
                return CAP_DENY;
        case -EKEYREJECTED:
                *ret_why = "capability signed by an unknown key";
                return CAP_DENY;
        case -EBADMSG:
                *ret_why = "capability signature does not verify";
                return CAP_DENY;
        case -ETIME:
                *ret_why = "capability expired or not yet valid";
                return CAP_DENY;
        default:
                *ret_why = "malformed capability";
                return CAP_DENY;
        }
        bool to_port = need == CAP_ACCESS_PORTS;
        enum cap_decision d = to_port ? cap_decide_port(&c, local, port, "http") : cap_decide(&c, local, need);
        if (d == CAP_DENY)
                *ret_why = strcmp(c.tenant, local->tenant) != 0 || strcmp(c.sandbox, local->sandbox) != 0
                                   ? "capability is for another sandbox"
                           : to_port && (c.access & CAP_ACCESS_PORTS) ? "capability is for another port or protocol"
                                                                      : "capability does not grant this access";
        return d;
}

enum cap_decision capcheck(const char *token, size_t len, const struct cap_record *local, uint32_t need,
                           uint16_t port, const char **ret_why) {
        enum cap_decision d = decide(token, len, local, need, port, ret_why);
        nodemetrics_capability(d, *ret_why);
        return d;
}
