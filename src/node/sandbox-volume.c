/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Volumes on the node (layer 2, below sandbox-vm.c; docs/volumes.md).
 *
 * The store, STORAGE_ROOT/volumes/ID.img, holds each volume at rest: a
 * sparse file with an ext4 file system, made by mkfs.ext4 (e2fsprogs) as
 * the node's user. A sandbox that holds a volume works on a reflink clone
 * of it, SANDBOXES/ID/volumes/SLOT.img: the sandbox's disks are its own
 * directory, whatever its verbs do with them. A read-write holder's copy
 * is the volume while it holds it (a snapshot of the volume is cloned from
 * it) and goes back into the store, replacing the image there, when the
 * sandbox is deleted; a read-only holder's copy is dropped (the guest
 * mounts it read-only; what the kernel writes there, a journal replay,
 * stays in the copy). A volume is held read-write by one sandbox, or
 * read-only by any number, never both.
 *
 * QEMU opens a copy in the machine's volume slot (vmm.h) through the run
 * dir's volN.img link; once the guest agent is up, the slot is resized to
 * the image's size (a guest restored from the template saw it empty) and
 * the agent mounts it (VOLUME_MOUNT).
 */
#include "sandbox-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "proto.h"
#include "util.h"

_Static_assert(SANDBOX_VOLUMES_MAX == VMM_VOLUMES_MAX, "a sandbox's volumes and the machine's slots");

#define MKFS_TIMEOUT_S 120
#define VOLUME_MOUNT_MS 15000

static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER; /* holders' checks and store changes */

/* STORAGE_ROOT/volumes (airlock-nodemgr makes it beside SANDBOXES) */
static char *store_path(const char *name) {
        return strdup_printf("%s/../volumes/%s", sandbox_mgr()->dir, name);
}

static char *store_image(const char *id) {
        return strdup_printf("%s/../volumes/%s.img", sandbox_mgr()->dir, id);
}

static char *copy_image(const struct sandbox *s, unsigned slot) {
        return strdup_printf("%s/volumes/%u.img", s->dir, slot);
}

/* How the sandboxes of this node hold id: *ret_rw the read-write holder
 * (a reference, or NULL), the number of read-only holders. `except` is not
 * counted (the sandbox asking). */
static int holders(const char *id, const struct sandbox *except, struct sandbox **ret_rw, unsigned *ret_ro) {
        struct sandbox **list = NULL;
        size_t n = 0;
        int r = sandbox_reg_all(true, &list, &n);
        if (r < 0)
                return r;
        *ret_rw = NULL;
        *ret_ro = 0;
        for (size_t i = 0; i < n; i++) {
                struct sandbox *s = list[i];
                for (size_t k = 0; s != except && k < SANDBOX_VOLUMES_MAX; k++) {
                        if (strcmp(s->volumes[k].id, id) != 0)
                                continue;
                        if (s->volumes[k].read_only)
                                (*ret_ro)++;
                        else if (!*ret_rw)
                                *ret_rw = sandbox_ref(s);
                }
                sandbox_unref(s);
        }
        free(list);
        return 0;
}

/* Moves tmp to dst unless dst exists (then -EEXIST), removing tmp on failure. */
static int publish(const char *tmp, const char *dst) {
        int r = renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE) < 0 ? negative_errno() : 0;
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

static const char *mkfs_binary(void) {
        static const char *const paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"};
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
                if (access(paths[i], X_OK) == 0)
                        return paths[i];
        return NULL;
}

/* mkfs.ext4 on the fresh sparse file path: no reserved blocks (a volume
 * is all the user's), its root the guest's root's, and no zeroing of what
 * a new sparse file reads as zeros already. */
static int make_fs(const char *path, char **ret_error) {
        const char *mkfs = mkfs_binary();
        if (!mkfs) {
                *ret_error = strdup("mkfs.ext4 is not installed (Debian: e2fsprogs)");
                return -ENOENT;
        }
        char *argv[] = {(char *) mkfs,
                        "-q",
                        "-F",
                        "-m",
                        "0",
                        "-E",
                        "root_owner=0:0,assume_storage_prezeroed=1,nodiscard",
                        (char *) path,
                        NULL};
        _cleanup_close_ int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
        pid_t pid;
        int r = out < 0 ? negative_errno() : node_spawn(argv, out, &pid), status = 0;
        if (r >= 0)
                r = node_wait_child(pid, MKFS_TIMEOUT_S, &status);
        if (r >= 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                r = -EIO;
        if (r < 0)
                *ret_error = strdup_printf("mkfs.ext4 failed: %s", strerror(-r));
        return r;
}

int sandbox_volume_create(const char *id, uint64_t size, char **ret_error) {
        if (!name_is_valid(id) || size < SANDBOX_VOLUME_SIZE_MIN || size > SANDBOX_VOLUME_SIZE_MAX ||
            size % 4096) {
                *ret_error = strdup_printf(
                        "a volume is a valid id and %llu MiB .. %llu TiB in whole 4 KiB blocks",
                        SANDBOX_VOLUME_SIZE_MIN >> 20, SANDBOX_VOLUME_SIZE_MAX >> 40);
                return -EINVAL;
        }
        _cleanup_free_ char *dst = store_image(id), *name = strdup_printf(".tmp-%s.img", id);
        _cleanup_free_ char *tmp = name ? store_path(name) : NULL;
        if (!dst || !tmp)
                return -ENOMEM;
        if (access(dst, F_OK) == 0) {
                *ret_error = strdup_printf("volume %s exists on this node", id);
                return -EEXIST;
        }
        (void) unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        int r = fd < 0 || ftruncate(fd, (off_t) size) < 0 ? negative_errno() : 0;
        if (r < 0) {
                *ret_error = strdup_printf("cannot make %s: %s", tmp, strerror(-r));
                (void) unlink(tmp);
                return r;
        }
        fd = safe_close(fd);
        if ((r = make_fs(tmp, ret_error)) < 0) {
                (void) unlink(tmp);
                return r;
        }
        pthread_mutex_lock(&store_lock);
        r = publish(tmp, dst);
        pthread_mutex_unlock(&store_lock);
        if (r < 0)
                *ret_error = strdup_printf(
                        r == -EEXIST ? "volume %s exists on this node" : "cannot store volume %s", id);
        return r;
}

int sandbox_volume_clone(const char *id, const char *from, char **ret_error) {
        if (!name_is_valid(id) || !name_is_valid(from)) {
                *ret_error = strdup("volume ids must be valid names");
                return -EINVAL;
        }
        _cleanup_free_ char *dst = store_image(id), *name = strdup_printf(".tmp-%s.img", id);
        _cleanup_free_ char *tmp = name ? store_path(name) : NULL, *src = NULL;
        if (!dst || !tmp)
                return -ENOMEM;
        /* what a read-write holder's guest wrote reaches its copy first (a
         * crash-consistent copy beyond that) */
        struct sandbox *rw = NULL;
        unsigned ro = 0;
        if (holders(from, NULL, &rw, &ro) >= 0 && rw) {
                (void) sandbox_guest_sync(rw, VOLUME_MOUNT_MS, "a copy of its volume");
                sandbox_unref(rw);
        }
        pthread_mutex_lock(&store_lock);
        int r = holders(from, NULL, &rw, &ro);
        if (r >= 0 && rw) {
                for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && !src; k++)
                        if (strcmp(rw->volumes[k].id, from) == 0)
                                src = copy_image(rw, k);
                sandbox_unref(rw);
        } else if (r >= 0)
                src = store_image(from);
        if (r >= 0 && !src)
                r = -ENOMEM;
        if (r >= 0 && access(src, F_OK) < 0) {
                r = -ENOENT;
                *ret_error = strdup_printf("no volume %s on this node", from);
        } else if (r >= 0) {
                (void) unlink(tmp);
                r = file_clone_or_copy(src, tmp, NULL);
                if (r < 0) {
                        *ret_error = strdup_printf("cannot copy volume %s: %s", from, strerror(-r));
                        (void) unlink(tmp);
                } else if ((r = publish(tmp, dst)) < 0)
                        *ret_error = strdup_printf(r == -EEXIST ? "volume %s exists on this node"
                                                                : "cannot store volume %s",
                                                   id);
        }
        pthread_mutex_unlock(&store_lock);
        return r;
}

int sandbox_volume_delete(const char *id, char **ret_error) {
        if (!name_is_valid(id)) {
                *ret_error = strdup("a volume id must be a valid name");
                return -EINVAL;
        }
        _cleanup_free_ char *path = store_image(id);
        if (!path)
                return -ENOMEM;
        pthread_mutex_lock(&store_lock);
        struct sandbox *rw = NULL;
        unsigned ro = 0;
        int r = holders(id, NULL, &rw, &ro);
        if (r >= 0 && (rw || ro)) {
                *ret_error =
                        strdup_printf("volume %s is held by %s%s", id, rw ? rw->id : "read-only sandboxes",
                                      rw && ro ? " and others" : "");
                r = -EBUSY;
        } else if (r >= 0 && unlink(path) < 0) {
                r = negative_errno();
                *ret_error = strdup_printf(
                        r == -ENOENT ? "no volume %s on this node" : "cannot remove volume %s", id);
        }
        pthread_mutex_unlock(&store_lock);
        if (rw)
                sandbox_unref(rw);
        return r;
}

bool sandbox_has_volumes(const struct sandbox *s) {
        return s->volumes[0].id[0] != 0;
}

const char *const sandbox_volume_artifacts[SANDBOX_VOLUMES_MAX + 1] = {"volume0", "volume1", "volume2",
                                                                       "volume3", NULL};

int sandbox_volumes_attach(struct sandbox *s, const char *from, char **ret_error) {
        if (!sandbox_has_volumes(s))
                return 0;
        _cleanup_free_ char *dir = strdup_printf("%s/volumes", s->dir);
        if (!dir)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                int r = negative_errno();
                *ret_error = strdup_printf("cannot create %s: %s", dir, strerror(-r));
                return r;
        }
        pthread_mutex_lock(&store_lock);
        int r = 0;
        for (unsigned k = 0; r >= 0 && k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                const struct sandbox_volume *v = &s->volumes[k];
                struct sandbox *rw = NULL;
                unsigned ro = 0;
                if ((r = holders(v->id, s, &rw, &ro)) < 0)
                        break;
                if (rw || (!v->read_only && ro)) {
                        *ret_error = strdup_printf("volume %s is in use by %s%s", v->id,
                                                   rw ? rw->id : "read-only sandboxes",
                                                   rw ? " (read-write: one sandbox at a time)"
                                                      : " (read-write only while no sandbox holds it)");
                        r = -EBUSY;
                }
                if (rw)
                        sandbox_unref(rw);
                /* the image's copy of it (a wake from the object store), else the store's */
                _cleanup_free_ char *got =
                        r >= 0 && from ? strdup_printf("%s/%s", from, sandbox_volume_artifacts[k]) : NULL;
                bool image = got && access(got, F_OK) == 0;
                _cleanup_free_ char *src = r >= 0 ? image ? TAKE_PTR(got) : store_image(v->id) : NULL,
                                    *dst = r >= 0 ? copy_image(s, k) : NULL;
                if (r >= 0 && (!src || !dst))
                        r = -ENOMEM;
                if (r >= 0 && !image && access(src, F_OK) < 0) {
                        *ret_error = strdup_printf("no volume %s on this node", v->id);
                        r = -ENOENT;
                }
                if (r >= 0 && (r = image ? (rename(src, dst) < 0 ? negative_errno() : 0)
                                         : file_clone_or_copy(src, dst, NULL)) < 0)
                        *ret_error = strdup_printf("cannot copy volume %s: %s", v->id, strerror(-r));
        }
        pthread_mutex_unlock(&store_lock);
        return r;
}

void sandbox_volumes_release(struct sandbox *s) {
        pthread_mutex_lock(&store_lock);
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                if (s->volumes[k].read_only)
                        continue;
                _cleanup_free_ char *src = copy_image(s, k), *dst = store_image(s->volumes[k].id);
                if (!src || !dst)
                        continue;
                if (rename(src, dst) < 0 && errno != ENOENT)
                        log_errno(LOG_LEVEL_ERROR, negative_errno(), s->ctx,
                                  "cannot put volume %s back into the store (its content stays in %s): %m",
                                  s->volumes[k].id, src);
                else
                        log_emit(LOG_LEVEL_INFO, s->ctx, "volume %s back in the store", s->volumes[k].id);
        }
        pthread_mutex_unlock(&store_lock);
}

int sandbox_volumes_config(struct sandbox *s, struct vmm_config *vc, char *links[VMM_VOLUMES_MAX],
                           char **ret_error) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                char name[16];
                snprintf(name, sizeof name, "vol%u.img", k);
                _cleanup_free_ char *img = copy_image(s, k), *src = store_image(s->volumes[k].id);
                if (!img || !src)
                        return -ENOMEM;
                /* a node stopped between a suspend's return of the volumes
                 * to the store and its end resumes the snapshot, whose
                 * volumes the store has */
                if (access(img, F_OK) < 0 && errno == ENOENT && access(src, F_OK) == 0) {
                        log_emit(LOG_LEVEL_WARN, s->ctx,
                                 "volume %s: no copy of it here; taken from the store again",
                                 s->volumes[k].id);
                        pthread_mutex_lock(&store_lock);
                        int r = file_clone_or_copy(src, img, NULL);
                        pthread_mutex_unlock(&store_lock);
                        if (r < 0) {
                                *ret_error = strdup_printf("cannot copy volume %s: %s", s->volumes[k].id,
                                                           strerror(-r));
                                return r;
                        }
                }
                int r = node_run_link(s->run_dir, name, img, &links[k]);
                if (r < 0) {
                        *ret_error = strdup_printf("cannot link volume %s into %s: %s", s->volumes[k].id,
                                                   s->run_dir, strerror(-r));
                        return r;
                }
                vc->volumes[k] = links[k];
        }
        return 0;
}

int sandbox_volumes_mount(struct sandbox *s, struct vmm *v, struct guestconn *g, char **ret_error) {
        if (!sandbox_has_volumes(s))
                return 0;
        if (!guestconn_has(g, GUESTCONN_FEATURE_VOLUMES)) {
                char agent[GUESTCONN_AGENT_MAX];
                guestconn_agent(g, agent);
                *ret_error = strdup_printf("the guest agent (%s) cannot mount volumes; upgrade the template",
                                           agent[0] ? agent : "an old one");
                return -EOPNOTSUPP;
        }
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                const struct sandbox_volume *vol = &s->volumes[k];
                _cleanup_free_ char *img = copy_image(s, k);
                struct stat st;
                if (!img)
                        return -ENOMEM;
                int r = stat(img, &st) < 0 ? negative_errno()
                                           : vmm_volume_resized(v, k, (uint64_t) st.st_size);
                if (r < 0) {
                        *ret_error = strdup_printf("volume %s: cannot size slot %u: %s", vol->id, k,
                                                   strerror(-r));
                        return r;
                }
                _cleanup_(json_decrefp) json_t *req =
                        json_pack("{s:i,s:s,s:b,s:i}", "slot", (int) k, "path", vol->path, "read_only",
                                  vol->read_only, "wait_ms", VOLUME_MOUNT_MS / 2);
                _cleanup_free_ char *msg = NULL;
                r = req ? guestconn_call(g, PROTO_VOLUME_MOUNT, req, VOLUME_MOUNT_MS, NULL, &msg) : -ENOMEM;
                if (r < 0) {
                        *ret_error = strdup_printf("volume %s: mounting it at %s failed: %s", vol->id,
                                                   vol->path, msg ?: strerror(-r));
                        return r;
                }
        }
        return 0;
}

size_t sandbox_volumes_upload(const json_t *meta, struct objstore_artifact art[SANDBOX_VOLUMES_MAX],
                              char *paths[SANDBOX_VOLUMES_MAX]) {
        struct sandbox_volume vols[SANDBOX_VOLUMES_MAX];
        _cleanup_free_ char *err = NULL;
        size_t n = 0;
        if (sandbox_volumes_from_json(meta, vols, &err) < 0)
                return 0;
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && vols[k].id[0]; k++) {
                if (!(paths[n] = store_image(vols[k].id)))
                        break;
                art[n] = (struct objstore_artifact){.name = sandbox_volume_artifacts[k], .path = paths[n]};
                n++;
        }
        return n;
}

const char *sandbox_volume_rw(const struct sandbox *s) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++)
                if (!s->volumes[k].read_only)
                        return s->volumes[k].id;
        return NULL;
}

const char *sandbox_volume_path(const struct sandbox *s, const char *id) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++)
                if (strcmp(s->volumes[k].id, id) == 0)
                        return s->volumes[k].path;
        return NULL;
}

int sandbox_volumes_fork(struct sandbox *parent, struct sandbox *child) {
        if (!sandbox_has_volumes(child))
                return 0;
        _cleanup_free_ char *dir = strdup_printf("%s/volumes", child->dir);
        if (!dir)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return negative_errno();
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && child->volumes[k].id[0]; k++) {
                _cleanup_free_ char *src = copy_image(parent, k), *dst = copy_image(child, k);
                int r = src && dst ? sandbox_clone_replace(child, src, dst) : -ENOMEM;
                if (r < 0)
                        return r;
        }
        return 0;
}

static char *snapshot_image(const struct sandbox *s, const char *snapshot_id, unsigned slot) {
        return strdup_printf("%s/snapshots/%s.volume%u", s->dir, snapshot_id, slot); /* not .img: not a snapshot */
}

int sandbox_volumes_snapshot(struct sandbox *s, const char *snapshot_id) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                _cleanup_free_ char *src = copy_image(s, k), *dst = snapshot_image(s, snapshot_id, k);
                int r = src && dst ? sandbox_clone_replace(s, src, dst) : -ENOMEM;
                if (r < 0) {
                        sandbox_volumes_snapshot_delete(s, snapshot_id);
                        return r;
                }
        }
        return 0;
}

int sandbox_volumes_rollback(struct sandbox *s, const char *snapshot_id) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX && s->volumes[k].id[0]; k++) {
                _cleanup_free_ char *src = snapshot_image(s, snapshot_id, k), *dst = copy_image(s, k);
                int r = src && dst ? sandbox_clone_replace(s, src, dst) : -ENOMEM;
                if (r < 0)
                        return r;
        }
        return 0;
}

void sandbox_volumes_snapshot_delete(struct sandbox *s, const char *snapshot_id) {
        for (unsigned k = 0; k < SANDBOX_VOLUMES_MAX; k++) {
                _cleanup_free_ char *p = snapshot_image(s, snapshot_id, k);
                if (p)
                        (void) unlink(p);
        }
}
