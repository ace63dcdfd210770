/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A suspended sandbox's image as deltas against its template build (layer
 * 2, below sandbox-parked.c; docs/storage.md, "What a suspend stores").
 *
 * The upload makes suspend/rootfs.delta (the disk against the build's
 * rootfs.img: lib/delta's disk delta, its data cloned) and
 * suspend/state.delta (device state and RAM against the build's RAM file,
 * zstd) and names the build in the image's meta: "delta" {template, hash,
 * and the digests of the state and disk they stand for}. The build's mem
 * and rootfs.img go along as shared artifacts (lib/objstore: stored once
 * for every image of that build, sealed with a key from their content),
 * so an image never depends on a node keeping the build. A wake takes the
 * node's own copy of the build when it has it (the same bytes: their
 * digests are the image's), else the image's copy from the node's cache of
 * them, fetched once; it rebuilds the state and disk and checks both
 * against the digests before anything restores them.
 */
#include "sandbox-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "delta.h"
#include "log.h"
#include "macros.h"
#include "objstore.h"
#include "template.h"
#include "util.h"

#define DELTA_FORMAT 1

static const char *const base_artifacts[] = {"base.mem", "base.rootfs.img", NULL};
/* zstd level of the RAM delta: 3 compresses what differs about as well as
 * higher ones here, at several hundred MB/s */
#define RAM_DELTA_LEVEL 3

void sandbox_delta_release(struct sandbox_delta *d) {
        for (size_t i = 0; i < ARRAY_SIZE(d->paths); i++)
                free(d->paths[i]);
        *d = (struct sandbox_delta){ 0 };
}

/* The build the image is against: the one meta's "base" names (the one the
 * sandbox ran from) when this node still has it, else its template's
 * current one. */
static int base_build(json_t *meta, char **ret_name, char **ret_hash, char **ret_dir) {
        json_t *base = json_object_get(meta, "base");
        const char *name = json_string_value(json_object_get(base, "template"));
        const char *hash = json_string_value(json_object_get(base, "hash"));
        char *dir = NULL;
        if (name && hash && template_build_dir(name, hash, &dir) >= 0) {
                *ret_name = strdup(name);
                *ret_hash = strdup(hash);
                *ret_dir = dir;
                return *ret_name && *ret_hash ? 0 : -ENOMEM;
        }
        name = json_string_value(json_object_get(meta, "template"));
        _cleanup_(template_info_freep) struct template_info *t = NULL;
        if (!name || template_peek(name, &t) < 0)
                return -ENOENT;
        *ret_name = strdup(t->name);
        *ret_hash = strdup(t->hash);
        *ret_dir = strdup(t->dir);
        return *ret_name && *ret_hash && *ret_dir ? 0 : -ENOMEM;
}

/* Makes out (created, replaced) from target against base with make. */
static int make_one(int (*make)(int, int, int, struct delta_stats *, int), const char *base, const char *target,
                    const char *out, struct delta_stats *st) {
        _cleanup_close_ int b = open(base, O_RDONLY | O_CLOEXEC), t = open(target, O_RDONLY | O_CLOEXEC);
        if (b < 0 || t < 0)
                return negative_errno();
        (void) unlink(out);
        _cleanup_close_ int o = open(out, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (o < 0)
                return negative_errno();
        int r = make(b, t, o, st, RAM_DELTA_LEVEL);
        if (r >= 0 && fsync(o) < 0)
                r = negative_errno();
        if (r < 0)
                (void) unlink(out);
        return r;
}

/* The digests of a build's mem and rootfs.img (which never change), from
 * BUILD/base.digests.json, written the first time they are hashed. */
static int base_digests(const char *bdir, char mem_sha[OBJSTORE_SHA256_HEX], char disk_sha[OBJSTORE_SHA256_HEX]) {
        _cleanup_free_ char *path = strdup_printf("%s/base.digests.json", bdir), *mem = strdup_printf("%s/mem", bdir),
                           *disk = strdup_printf("%s/rootfs.img", bdir);
        if (!path || !mem || !disk)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *o = json_load_file(path, 0, NULL);
        const char *m = json_string_value(json_object_get(o, "mem")), *d = json_string_value(json_object_get(o, "rootfs.img"));
        if (m && d && strlen(m) == OBJSTORE_SHA256_HEX - 1 && strlen(d) == OBJSTORE_SHA256_HEX - 1) {
                memcpy(mem_sha, m, OBJSTORE_SHA256_HEX);
                memcpy(disk_sha, d, OBJSTORE_SHA256_HEX);
                return 0;
        }
        int r = objstore_file_sparse_sha256(mem, mem_sha);
        if (r >= 0)
                r = objstore_file_sparse_sha256(disk, disk_sha);
        if (r < 0)
                return r;
        json_decref(o);
        o = json_pack("{s:s, s:s}", "mem", mem_sha, "rootfs.img", disk_sha);
        _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (text)
                (void) file_write_atomic(path, text, strlen(text), 0644); /* else hashed again next time */
        return 0;
}

static int disk_make(int b, int t, int o, struct delta_stats *st, int level) {
        (void) level;
        return delta_disk_make(b, t, o, st);
}

static int ram_make(int b, int t, int o, struct delta_stats *st, int level) {
        return delta_ram_make(b, t, o, level, st);
}

/* One side of an image: its delta made and the file it stands for hashed. */
struct delta_job {
        int (*make)(int, int, int, struct delta_stats *, int);
        const char *base, *target, *out;
        struct delta_stats st;
        char sha[OBJSTORE_SHA256_HEX];
        int r;
};

static void *delta_job_run(void *arg) {
        struct delta_job *j = arg;
        j->r = make_one(j->make, j->base, j->target, j->out, &j->st);
        if (j->r >= 0)
                j->r = objstore_file_sparse_sha256(j->target, j->sha);
        return NULL;
}

int sandbox_delta_make(const char *id, json_t *meta, struct sandbox_delta *ret) {
        const char *ctx_id = id;
        _cleanup_free_ char *name = NULL, *hash = NULL, *bdir = NULL;
        int r = base_build(meta, &name, &hash, &bdir);
        if (r < 0)
                return r;
        struct sandbox_delta d = { 0 };
        _cleanup_free_ char *sdir = strdup_printf("%s/%s/suspend", sandbox_mgr()->dir, id);
        _cleanup_free_ char *state = sdir ? strdup_printf("%s/state", sdir) : NULL;
        _cleanup_free_ char *disk = sdir ? strdup_printf("%s/rootfs.img", sdir) : NULL;
        d.paths[0] = sdir ? strdup_printf("%s/state.delta", sdir) : NULL;
        d.paths[1] = sdir ? strdup_printf("%s/rootfs.delta", sdir) : NULL;
        d.paths[2] = strdup_printf("%s/mem", bdir);
        d.paths[3] = strdup_printf("%s/rootfs.img", bdir);
        if (!state || !disk || !d.paths[0] || !d.paths[1] || !d.paths[2] || !d.paths[3]) {
                sandbox_delta_release(&d);
                return -ENOMEM;
        }
        uint64_t t0 = now_monotonic_ns();
        /* the RAM's side and the disk's side at once: each reads and hashes
         * a file of its own */
        struct delta_job ram = { .make = ram_make, .base = d.paths[2], .target = state, .out = d.paths[0] };
        struct delta_job dsk = { .make = disk_make, .base = d.paths[3], .target = disk, .out = d.paths[1] };
        pthread_t t;
        bool threaded = pthread_create(&t, NULL, delta_job_run, &ram) == 0;
        if (!threaded)
                delta_job_run(&ram);
        delta_job_run(&dsk);
        if (threaded)
                pthread_join(t, NULL);
        r = ram.r < 0 ? ram.r : dsk.r < 0 ? dsk.r : base_digests(bdir, d.base_sha[0], d.base_sha[1]);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, NULL, "sandbox=%s cannot make its image's deltas against %s: %m", ctx_id,
                          bdir);
                sandbox_delta_release(&d);
                return r;
        }
        /* the build by its bytes too: two nodes' builds of one hash are not
         * the same bytes unless they share them (the RAM snapshot differs) */
        json_t *o = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}, s:{s:s, s:I}, s:{s:s, s:I}}", "format",
                              DELTA_FORMAT, "template", name, "hash", hash, "base", "mem", d.base_sha[0],
                              "rootfs.img", d.base_sha[1], "state", "sparse_sha256", ram.sha, "size",
                              (json_int_t) ram.st.size, "rootfs", "sparse_sha256", dsk.sha, "size",
                              (json_int_t) dsk.st.size);
        if (!o || json_object_set_new(meta, "delta", o) < 0) {
                sandbox_delta_release(&d);
                return -ENOMEM;
        }
        d.art[0] = (struct objstore_artifact){ .name = "state.delta", .path = d.paths[0] };
        d.art[1] = (struct objstore_artifact){ .name = "rootfs.delta", .path = d.paths[1] };
        d.art[2] = (struct objstore_artifact){ .name = "base.mem", .path = d.paths[2], .shared = true,
                                               .sparse_sha256 = d.base_sha[0] };
        d.art[3] = (struct objstore_artifact){ .name = "base.rootfs.img", .path = d.paths[3], .shared = true,
                                               .sparse_sha256 = d.base_sha[1] };
        log_info("sandbox=%s image as deltas against %s-%s in %llu ms: RAM %llu of %llu bytes, disk %llu changed of "
                 "%llu (%llu bytes)",
                 ctx_id, name, hash, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 (unsigned long long) ram.st.written, (unsigned long long) ram.st.size,
                 (unsigned long long) dsk.st.changed, (unsigned long long) dsk.st.size,
                 (unsigned long long) dsk.st.written);
        *ret = d;
        /* the digests are ret's own now */
        ret->art[2].sparse_sha256 = ret->base_sha[0];
        ret->art[3].sparse_sha256 = ret->base_sha[1];
        return 0;
}

bool sandbox_delta_of(json_t *meta) {
        return json_is_object(json_object_get(meta, "delta"));
}

/* One file of a wake: dir/out rebuilt from base and dir/delta with apply,
 * then checked against its digest; the delta goes either way. */
struct rebuild_job {
        int (*apply)(int, int, int);
        const char *base, *dir, *delta, *out, *want_sha;
        char *error;
        int r;
};

static int rebuild(struct rebuild_job *j) {
        _cleanup_free_ char *dp = strdup_printf("%s/%s", j->dir, j->delta),
                            *op = strdup_printf("%s/%s", j->dir, j->out);
        if (!dp || !op)
                return -ENOMEM;
        _cleanup_close_ int b = open(j->base, O_RDONLY | O_CLOEXEC), d = open(dp, O_RDONLY | O_CLOEXEC);
        (void) unlink(op);
        _cleanup_close_ int o = b >= 0 && d >= 0 ? open(op, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
        int r = o < 0 ? negative_errno() : j->apply(b, d, o);
        char sha[OBJSTORE_SHA256_HEX];
        if (r >= 0)
                r = objstore_file_sparse_sha256(op, sha);
        if (r >= 0 && strcmp(sha, j->want_sha) != 0)
                r = -EBADMSG;
        (void) unlink(dp);
        if (r < 0) {
                (void) unlink(op);
                j->error =
                        r == -EBADMSG
                                ? strdup_printf("its %s does not rebuild from the image's delta and its "
                                                "template: corrupt, or not the template it was made against",
                                                j->out)
                                : strdup_printf("rebuilding its %s from the image's delta: %s", j->out,
                                                strerror(-r));
        }
        return r;
}

static void *rebuild_run(void *arg) {
        struct rebuild_job *j = arg;
        j->r = rebuild(j);
        return NULL;
}

/*
 * The template builds of images a node has no copy of, fetched from the
 * object store once and kept: STORAGE_ROOT/bases/MEMSHA-DISKSHA/ holds a
 * build's base.mem and base.rootfs.img (what the image's manifest names,
 * verified as they land). Wakes that need one being fetched wait for that
 * fetch instead of making their own; the least recently used go beyond
 * BASES_KEPT.
 */
#define BASES_KEPT 4
static pthread_mutex_t bases_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bases_cond = PTHREAD_COND_INITIALIZER;
static char bases_fetching[BASES_KEPT][2 * OBJSTORE_SHA256_HEX];

static bool bases_is_fetching(const char *key) {
        for (size_t i = 0; i < BASES_KEPT; i++)
                if (strcmp(bases_fetching[i], key) == 0)
                        return true;
        return false;
}

/* Removes the least recently used entries of dir beyond BASES_KEPT - 1 (room for one more). */
static void bases_trim(const char *dir) {
        for (;;) {
                DIR *d = opendir(dir);
                if (!d)
                        return;
                size_t n = 0;
                time_t oldest = 0;
                char victim[NAME_MAX + 1] = "";
                for (struct dirent *de; (de = readdir(d));) {
                        struct stat st;
                        if (de->d_name[0] == '.' || fstatat(dirfd(d), de->d_name, &st, 0) < 0)
                                continue;
                        n++;
                        if (!victim[0] || st.st_mtime < oldest) {
                                oldest = st.st_mtime;
                                snprintf(victim, sizeof victim, "%s", de->d_name);
                        }
                }
                closedir(d);
                if (n < BASES_KEPT || !victim[0])
                        return;
                _cleanup_free_ char *path = strdup_printf("%s/%s", dir, victim);
                if (!path || rm_rf(path) < 0)
                        return;
        }
}

/* The directory of the image's template build in the cache, fetched now
 * when it is not there (or waited for, when another wake fetches it). */
static int base_cached(struct objstore *o, const char *snapshot_id, const uint8_t *data_key,
                       const char *mem_sha, const char *disk_sha, char **ret_dir, char **ret_error) {
        /* beside SANDBOXES, on the node's storage (STORAGE_ROOT/bases) */
        _cleanup_free_ char *root = strdup_printf("%s/../bases", sandbox_mgr()->dir); /* airlock-nodemgr hands it over */
        char key[2 * OBJSTORE_SHA256_HEX];
        snprintf(key, sizeof key, "%s-%s", mem_sha, disk_sha);
        _cleanup_free_ char *dir = root ? strdup_printf("%s/%s", root, key) : NULL;
        if (!dir)
                return -ENOMEM;
        int r = mkdir_p(root, 0700);
        if (r < 0)
                return r;
        pthread_mutex_lock(&bases_lock);
        size_t slot = BASES_KEPT;
        for (;;) {
                if (access(dir, F_OK) == 0)
                        break;
                if (!bases_is_fetching(key)) {
                        for (slot = 0; slot < BASES_KEPT && bases_fetching[slot][0]; slot++)
                                ;
                        if (slot < BASES_KEPT) {
                                snprintf(bases_fetching[slot], sizeof bases_fetching[slot], "%s", key);
                                break;
                        }
                }
                pthread_cond_wait(&bases_cond, &bases_lock); /* another wake fetches it, or fetches one */
        }
        pthread_mutex_unlock(&bases_lock);
        if (slot == BASES_KEPT) {
                (void) utimensat(AT_FDCWD, dir, NULL, 0); /* used: kept longest */
                log_info("snapshot=%s its template is in this node's cache", snapshot_id);
                *ret_dir = TAKE_PTR(dir);
                return 0;
        }
        log_info("snapshot=%s its template build is not on this node: fetching the image's copy",
                 snapshot_id);
        bases_trim(root);
        _cleanup_free_ char *tmp = strdup_printf("%s/.fetch-%s", root, key);
        r = tmp ? rm_rf(tmp) : -ENOMEM;
        if (r >= 0 || r == -ENOENT)
                r = objstore_snapshot_download(
                        o, snapshot_id, tmp,
                        &(struct objstore_download_opts){.data_key = data_key, .only = base_artifacts});
        if (r >= 0 && rename(tmp, dir) < 0)
                r = negative_errno();
        if (r < 0) {
                if (tmp)
                        (void) rm_rf(tmp);
                *ret_error = strdup_printf("fetching the template of image %s failed: %s", snapshot_id,
                                           strerror(-r));
        }
        pthread_mutex_lock(&bases_lock);
        bases_fetching[slot][0] = 0;
        pthread_cond_broadcast(&bases_cond);
        pthread_mutex_unlock(&bases_lock);
        if (r >= 0)
                *ret_dir = TAKE_PTR(dir);
        return r;
}

int sandbox_delta_reassemble(struct objstore *o, const char *snapshot_id, const uint8_t *data_key, json_t *meta,
                             const char *dir, char **ret_error) {
        json_t *d = json_object_get(meta, "delta");
        const char *name = json_string_value(json_object_get(d, "template"));
        const char *hash = json_string_value(json_object_get(d, "hash"));
        const char *state_sha = json_string_value(json_object_get(json_object_get(d, "state"), "sparse_sha256"));
        const char *disk_sha = json_string_value(json_object_get(json_object_get(d, "rootfs"), "sparse_sha256"));
        if (json_integer_value(json_object_get(d, "format")) != DELTA_FORMAT || !name || !hash || !state_sha ||
            !disk_sha) {
                *ret_error = strdup_printf("image %s was stored in a form this node does not read", snapshot_id);
                return -EPROTONOSUPPORT;
        }
        json_t *base = json_object_get(d, "base");
        const char *base_mem = json_string_value(json_object_get(base, "mem"));
        const char *base_disk = json_string_value(json_object_get(base, "rootfs.img"));
        if (!base_mem || !base_disk) {
                *ret_error = strdup_printf("image %s does not say which template bytes it is against",
                                           snapshot_id);
                return -EPROTONOSUPPORT;
        }
        /* this node's copy of the build when it is those bytes, else the image's own */
        _cleanup_free_ char *bdir = NULL, *mem = NULL, *rootfs = NULL;
        const char *from = "this node's copy";
        char have_mem[OBJSTORE_SHA256_HEX], have_disk[OBJSTORE_SHA256_HEX];
        int r = template_build_dir(name, hash, &bdir);
        if (r >= 0 && (base_digests(bdir, have_mem, have_disk) < 0 || strcmp(have_mem, base_mem) != 0 ||
                       strcmp(have_disk, base_disk) != 0)) {
                log_info("snapshot=%s this node's build %s-%s is other bytes than the image's template",
                         snapshot_id, name, hash);
                free(bdir);
                bdir = NULL;
        }
        if (bdir) {
                mem = strdup_printf("%s/mem", bdir);
                rootfs = strdup_printf("%s/rootfs.img", bdir);
        } else {
                r = base_cached(o, snapshot_id, data_key, base_mem, base_disk, &bdir, ret_error);
                if (r < 0)
                        return r;
                mem = strdup_printf("%s/base.mem", bdir);
                rootfs = strdup_printf("%s/base.rootfs.img", bdir);
                from = "the image's copy, cached";
        }
        if (!mem || !rootfs)
                return -ENOMEM;
        /* the state and the disk at once: each reads, writes and hashes its own */
        uint64_t t0 = now_monotonic_ns();
        struct rebuild_job ram = {.apply = delta_ram_apply,
                                  .base = mem,
                                  .dir = dir,
                                  .delta = "state.delta",
                                  .out = "state",
                                  .want_sha = state_sha};
        struct rebuild_job dsk = {.apply = delta_disk_apply,
                                  .base = rootfs,
                                  .dir = dir,
                                  .delta = "rootfs.delta",
                                  .out = "rootfs.img",
                                  .want_sha = disk_sha};
        pthread_t t;
        bool threaded = pthread_create(&t, NULL, rebuild_run, &ram) == 0;
        if (!threaded)
                rebuild_run(&ram);
        rebuild_run(&dsk);
        if (threaded)
                pthread_join(t, NULL);
        r = ram.r < 0 ? ram.r : dsk.r;
        *ret_error = ram.r < 0 ? TAKE_PTR(ram.error) : TAKE_PTR(dsk.error);
        free(ram.error);
        free(dsk.error);
        if (r >= 0)
                log_info("snapshot=%s state and disk rebuilt against %s-%s (%s) and verified in %llu ms",
                         snapshot_id, name, hash, from,
                         (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return r;
}
