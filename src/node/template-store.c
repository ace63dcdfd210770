/* SPDX-License-Identifier: Apache-2.0 */
/* Templates shared through the object store: see template-store.h. */
#include "template-store.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "util.h"
#include "vmm.h"

/* A builder renews its claim this often; one not renewed for
 * CLAIM_STALE_MS is a dead builder's. */
#define CLAIM_RENEW_MS (30 * 1000)
#define CLAIM_STALE_MS (150 * 1000)
/* How long a claim's writer waits before it reads the claim back. */
#define CLAIM_SETTLE_MS 3000
/* How often a node waiting for another's build looks for the template. */
#define WAIT_POLL_MS 2000
/* How long a build waits for the first key (the first heartbeat). */
#define KEY_WAIT_MS (30 * 1000)
/* A key is asked for again this long before it expires. */
#define KEY_RENEW_S (TEMPLATE_STORE_KEY_TTL_S / 2)
#define CLAIM_MAX 512

static struct objstore *store;
static bool enabled;
static char node[128];
static atomic_bool stopping;

static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t key_cond;
/* the key, in memory that is never swapped out (template_store_init) */
static struct {
        uint8_t key[OBJSTORE_DATA_KEY_SIZE];
        char wrapped[OBJSTORE_WRAPPED_KEY_MAX + 1];
} *key;
static uint64_t key_set_ns; /* 0: none */

struct template_claim {
        char id[65];            /* the snapshot id, t-HASH-NAME */
        char object[96];        /* claims/ID */
        char name[65];
        char hash[40];
        int stop_fd;            /* eventfd: stops the renewer */
        pthread_t renewer;
        bool renewing;
};

void template_store_init(struct objstore *o, bool on, const char *node_name) {
        store = o;
        node_cond_init(&key_cond);
        snprintf(node, sizeof node, "%s", node_name ? node_name : "");
        if (!on)
                return;
        key = mmap(NULL, sizeof *key, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (key == MAP_FAILED) {
                key = NULL;
                log_warn("templates are not shared: no memory for the key");
                return;
        }
        (void) mlock(key, sizeof *key);
        (void) madvise(key, sizeof *key, MADV_DONTDUMP);
        enabled = true;
        log_info("templates are shared through the object store: built once in the cluster, fetched elsewhere");
}

bool template_store_enabled(void) {
        return enabled;
}

void template_store_shutdown(void) {
        atomic_store(&stopping, true);
        pthread_mutex_lock(&key_lock);
        pthread_cond_broadcast(&key_cond);
        pthread_mutex_unlock(&key_lock);
}

/* Whether a key is held and unexpired (key_lock held); wipes an expired one. */
static bool key_valid_locked(void) {
        if (!key_set_ns)
                return false;
        if (now_monotonic_ns() - key_set_ns < (uint64_t) TEMPLATE_STORE_KEY_TTL_S * 1000000000ULL)
                return true;
        sodium_memzero(key, sizeof *key);
        key_set_ns = 0;
        log_info("the templates key expired (no heartbeat renewed it): templates are built here until one does");
        return false;
}

bool template_store_wants_key(void) {
        if (!enabled)
                return false;
        pthread_mutex_lock(&key_lock);
        bool want = !key_valid_locked() ||
                    now_monotonic_ns() - key_set_ns >= (uint64_t) KEY_RENEW_S * 1000000000ULL;
        pthread_mutex_unlock(&key_lock);
        return want;
}

void template_store_set_key(const uint8_t k[OBJSTORE_DATA_KEY_SIZE], const char *wrapped) {
        if (!enabled || strlen(wrapped) > OBJSTORE_WRAPPED_KEY_MAX)
                return;
        pthread_mutex_lock(&key_lock);
        bool first = !key_set_ns, changed = !first && strcmp(key->wrapped, wrapped) != 0;
        memcpy(key->key, k, sizeof key->key);
        snprintf(key->wrapped, sizeof key->wrapped, "%s", wrapped);
        key_set_ns = now_monotonic_ns();
        pthread_cond_broadcast(&key_cond);
        pthread_mutex_unlock(&key_lock);
        if (first || changed)
                log_info("templates key %s from the control plane", first ? "received" : "replaced");
}

/* A copy of the key, waiting up to KEY_WAIT_MS for the first heartbeat's. */
static int key_get(struct objstore_data_key *ret, char wrapped[OBJSTORE_WRAPPED_KEY_MAX + 1]) {
        struct timespec deadline;
        node_deadline_after_ms(&deadline, KEY_WAIT_MS);
        pthread_mutex_lock(&key_lock);
        while (!key_valid_locked() && !atomic_load(&stopping))
                if (pthread_cond_timedwait(&key_cond, &key_lock, &deadline) == ETIMEDOUT)
                        break;
        bool have = key_valid_locked();
        if (have) {
                memcpy(ret->key, key->key, sizeof ret->key);
                memcpy(wrapped, key->wrapped, OBJSTORE_WRAPPED_KEY_MAX + 1);
                ret->wrapped = wrapped;
        }
        pthread_mutex_unlock(&key_lock);
        return have ? 0 : atomic_load(&stopping) ? -ECANCELED : -ENOKEY;
}

/* Sleeps ms unless the node stops: false when it does. */
static bool nap_ms(int ms) {
        for (int slept = 0; slept < ms && !atomic_load(&stopping); slept += 100) {
                struct timespec ts = { 0, 100 * 1000000L };
                nanosleep(&ts, NULL);
        }
        return !atomic_load(&stopping);
}

/* ---- claims ---- */

static int claim_write(const struct template_claim *c) {
        _cleanup_free_ char *text = strdup_printf("{\"node\":\"%s\",\"at\":%lld}\n", node,
                                                  (long long) (now_realtime_ns() / 1000000ULL));
        if (!text)
                return -ENOMEM;
        _cleanup_close_ int fd = memfd_create("claim", MFD_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (write(fd, text, strlen(text)) != (ssize_t) strlen(text))
                return -EIO;
        return objstore_put(store, c->object, fd);
}

/* Reads the claim on c's template: 0 and who holds it and how long ago it
 * was renewed, -ENOENT when there is none. A malformed one counts as
 * stale. */
static int claim_read(const struct template_claim *c, const char *scratch_dir, char holder[128], int64_t *ret_age_ms) {
        _cleanup_free_ char *path = strdup_printf("%s/.claim", scratch_dir), *text = NULL;
        if (!path)
                return -ENOMEM;
        int r = objstore_get(store, c->object, path);
        if (r < 0)
                return r;
        r = file_read_all(path, CLAIM_MAX, &text, NULL);
        (void) unlink(path);
        holder[0] = 0;
        *ret_age_ms = INT64_MAX;
        if (r < 0)
                return 0;
        _cleanup_(json_decrefp) json_t *o = json_loads(text, 0, NULL);
        const char *who = json_string_value(json_object_get(o, "node"));
        json_t *at = json_object_get(o, "at");
        if (who && json_is_integer(at)) {
                snprintf(holder, 128, "%s", who);
                *ret_age_ms = (int64_t) (now_realtime_ns() / 1000000ULL) - (int64_t) json_integer_value(at);
        }
        return 0;
}

static void *renewer_main(void *arg) {
        struct template_claim *c = arg;
        for (;;) {
                struct pollfd p = { .fd = c->stop_fd, .events = POLLIN };
                if (poll(&p, 1, CLAIM_RENEW_MS) != 0)
                        return NULL;
                int r = claim_write(c);
                if (r < 0)
                        log_warn("template=%s cannot renew its claim %s: %s", c->name, c->object, strerror(-r));
        }
}

static void claim_free(struct template_claim *c) {
        if (!c)
                return;
        if (c->renewing) {
                uint64_t one = 1;
                (void) !write(c->stop_fd, &one, sizeof one);
                pthread_join(c->renewer, NULL);
        }
        if (c->stop_fd >= 0)
                close(c->stop_fd);
        free(c);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct template_claim *, claim_free);

void template_store_release(struct template_claim *c) {
        if (!c)
                return;
        int r = objstore_remove(store, c->object);
        if (r < 0 && r != -ENOENT)
                log_warn("template=%s cannot remove its claim %s: %s", c->name, c->object, strerror(-r));
        claim_free(c);
}

/* ---- fetch ---- */

/* Moves the fetched vmlinux into kernel_dir unless it has one already. */
static int kernel_install(const char *dst_dir, const char *kernel_dir) {
        _cleanup_free_ char *from = strdup_printf("%s/vmlinux", dst_dir),
                            *to = strdup_printf("%s/vmlinux", kernel_dir);
        if (!from || !to)
                return -ENOMEM;
        int r = mkdir_p(kernel_dir, 0755);
        if (r < 0)
                return r;
        if (access(to, F_OK) == 0) /* the same kernel: its hash named the directory */
                return unlink(from) < 0 ? negative_errno() : 0;
        (void) chmod(from, 0644);
        return rename(from, to) < 0 ? negative_errno() : 0;
}

/* Downloads snapshot c->id (sealed with k) into dst_dir. 1 when fetched,
 * 0 when the store has none that this key opens. */
static int fetch(const struct template_claim *c, const struct objstore_data_key *k, const char *kernel_dir,
                 const char *dst_dir, const char *ctx) {
        _cleanup_(json_decrefp) json_t *m = NULL;
        int r = objstore_snapshot_manifest(store, c->id, &m);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        const char *wrapped = objstore_manifest_wrapped_key(m);
        if (!wrapped || strcmp(wrapped, k->wrapped) != 0) {
                /* sealed with a key the cluster replaced (a revoked KEK):
                 * nobody opens it; build anew and publish over it */
                log_emit(LOG_LEVEL_WARN, ctx, "the object store's %s is sealed with an older templates key: removing it",
                         c->id);
                r = objstore_snapshot_delete(store, c->id);
                return r < 0 && r != -ENOENT ? r : 0;
        }
        _cleanup_(json_decrefp) json_t *meta = NULL;
        if ((r = objstore_manifest_meta(m, k->key, &meta)) < 0)
                return r;
        const char *mname = json_string_value(json_object_get(meta, "template"));
        const char *mhash = json_string_value(json_object_get(meta, "hash"));
        if (!mname || !mhash || strcmp(mname, c->name) != 0 || strcmp(mhash, c->hash) != 0)
                return -EBADMSG; /* sealed by us, but another template's: never use it */
        uint64_t t0 = now_monotonic_ns();
        if ((r = objstore_snapshot_download(store, c->id, dst_dir,
                                            &(struct objstore_download_opts){.data_key = k->key})) < 0)
                return r;
        /* the modes a build leaves: VMs read the kernel and initramfs;
         * the RAM and device state are the node's (restores get copies) */
        static const char *const readable[] = { "initramfs.cpio", "rootfs.img", "manifest.json" };
        for (size_t i = 0; i < ARRAY_SIZE(readable); i++) {
                _cleanup_free_ char *p = strdup_printf("%s/%s", dst_dir, readable[i]);
                if (!p || chmod(p, 0644) < 0)
                        return p ? negative_errno() : -ENOMEM;
        }
        if ((r = kernel_install(dst_dir, kernel_dir)) < 0)
                return r;
        /* the CPU its state needs, as the builder's manifest says (the
         * object store keeps no xattr): a restore elsewhere is refused */
        _cleanup_free_ char *mpath = strdup_printf("%s/manifest.json", dst_dir);
        _cleanup_free_ char *spath = strdup_printf("%s/state", dst_dir);
        _cleanup_(json_decrefp) json_t *built = mpath ? json_load_file(mpath, 0, NULL) : NULL;
        const char *cpu = json_string_value(json_object_get(built, "cpu"));
        if (cpu && spath && (r = vmm_state_cpu_set(spath, cpu)) < 0 && r != -ENOTSUP)
                return r;
        log_emit(LOG_LEVEL_INFO, ctx, "template %s-%s fetched from the object store in %llu ms (built by %s)", c->name,
                 c->hash, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 json_string_value(json_object_get(meta, "built_by")) ?: "another node");
        return 1;
}

int template_store_fetch_or_claim(const char *name, const char *hash, const char *kernel_dir, const char *dst_dir,
                                  const char *ctx, struct template_claim **ret_claim) {
        *ret_claim = NULL;
        if (!enabled)
                return 0;
        _cleanup_(claim_freep) struct template_claim *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->stop_fd = -1;
        snprintf(c->name, sizeof c->name, "%s", name);
        snprintf(c->hash, sizeof c->hash, "%s", hash);
        snprintf(c->id, sizeof c->id, "t-%s-%.29s", hash, name);
        snprintf(c->object, sizeof c->object, "claims/%s", c->id);

        struct objstore_data_key k;
        char wrapped[OBJSTORE_WRAPPED_KEY_MAX + 1];
        int r = key_get(&k, wrapped);
        if (r < 0) {
                if (r == -ENOKEY)
                        log_emit(LOG_LEVEL_WARN, ctx, "no templates key from the control plane: building here");
                return r;
        }
        bool said_waiting = false;
        for (;;) {
                r = fetch(c, &k, kernel_dir, dst_dir, ctx);
                if (r != 0)
                        break;
                char holder[128];
                int64_t age = 0;
                r = claim_read(c, dst_dir, holder, &age);
                if (r < 0 && r != -ENOENT)
                        break;
                bool others = r >= 0 && strcmp(holder, node) != 0 && age < CLAIM_STALE_MS;
                if (!others) {
                        if (r >= 0 && holder[0] && strcmp(holder, node) != 0)
                                log_emit(LOG_LEVEL_INFO, ctx, "taking over the claim of %s on %s (not renewed for %lld s)",
                                         holder, c->id, (long long) (age / 1000));
                        if ((r = claim_write(c)) < 0)
                                break;
                        /* two nodes that found no claim at once both wrote
                         * one; the store keeps the last: read it back once
                         * both have landed, and the one not named waits */
                        if (!nap_ms(CLAIM_SETTLE_MS)) {
                                r = -ECANCELED;
                                break;
                        }
                        if ((r = claim_read(c, dst_dir, holder, &age)) < 0 && r != -ENOENT)
                                break;
                        if (r >= 0 && strcmp(holder, node) != 0 && age < CLAIM_STALE_MS)
                                continue;
                        c->stop_fd = eventfd(0, EFD_CLOEXEC);
                        if (c->stop_fd >= 0 && pthread_create(&c->renewer, NULL, renewer_main, c) == 0)
                                c->renewing = true;
                        log_emit(LOG_LEVEL_INFO, ctx, "template %s-%s is in no object store: building it for the cluster",
                                 name, hash);
                        *ret_claim = TAKE_PTR(c);
                        r = 0;
                        break;
                }
                if (!said_waiting)
                        log_emit(LOG_LEVEL_INFO, ctx, "node %s builds template %s-%s: waiting for it", holder, name, hash);
                said_waiting = true;
                if (!nap_ms(WAIT_POLL_MS)) {
                        r = -ECANCELED;
                        break;
                }
        }
        sodium_memzero(k.key, sizeof k.key);
        return r;
}

/* ---- publish ---- */

void template_store_publish(struct template_claim *c, const char *dir, const char *kernel_dir, const char *ctx) {
        if (!c)
                return;
        struct objstore_data_key k;
        char wrapped[OBJSTORE_WRAPPED_KEY_MAX + 1];
        int r = key_get(&k, wrapped);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, ctx, "template %s not published: no templates key", c->id);
                template_store_release(c);
                return;
        }
        static const char *const files[] = { "initramfs.cpio", "rootfs.img", "mem", "state", "manifest.json" };
        char *paths[ARRAY_SIZE(files) + 1] = { 0 };
        struct objstore_artifact a[ARRAY_SIZE(files) + 1];
        size_t n = 0;
        for (; n < ARRAY_SIZE(files); n++) {
                paths[n] = strdup_printf("%s/%s", dir, files[n]);
                a[n] = (struct objstore_artifact){ .name = files[n], .path = paths[n] };
        }
        paths[n] = strdup_printf("%s/vmlinux", kernel_dir);
        a[n] = (struct objstore_artifact){ .name = "vmlinux", .path = paths[n] };
        n++;
        bool oom = false;
        for (size_t i = 0; i < n; i++)
                oom = oom || !paths[i];
        json_t *meta = json_pack("{s:s, s:s, s:s}", "template", c->name, "hash", c->hash, "built_by", node);
        uint64_t t0 = now_monotonic_ns();
        r = oom || !meta ? -ENOMEM
                         : objstore_snapshot_upload(store, c->id, a, n,
                                                    &(struct objstore_upload_opts){.meta = meta, .key = &k});
        if (r >= 0 || r == -EEXIST)
                log_emit(LOG_LEVEL_INFO, ctx, "template %s-%s published to the object store in %llu ms", c->name,
                         c->hash, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        else
                log_emit(LOG_LEVEL_WARN, ctx, "template %s-%s not published to the object store: %s", c->name, c->hash,
                         strerror(-r));
        json_decref(meta);
        for (size_t i = 0; i < n; i++)
                free(paths[i]);
        sodium_memzero(k.key, sizeof k.key);
        template_store_release(c);
}
