/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Local directory backend: key K is the file ROOT/K. A put writes
 * ROOT/.tmp/<random>, fsyncs it and renames it into place, so readers never
 * see a partial object; data moves with fd_clone_or_copy() (a reflink when
 * source and root share a reflink-capable file system, else a copy that
 * keeps holes). ".tmp" is therefore not usable as a key's first segment.
 * Directories are created on demand and removed again once empty, so a key
 * cannot be both an object and a "directory" of others ("a" and "a/b").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "macros.h"
#include "objstore.h"
#include "util.h"

#define LOCAL_TMP_DIR ".tmp"
#define LOCAL_RENAME_TRIES 4

struct objstore_local {
        char *root; /* no trailing '/' (except for "/" itself) */
        char *tmp;  /* ROOT/.tmp */
};

static struct objstore_local *local(struct objstore *o) {
        return objstore_backend_data(o);
}

/* Checks key again (the backend is the last line before the file system)
 * and maps it to its file. */
static int local_key_path(struct objstore_local *l, const char *key, char **ret) {
        int r = objstore_key_check(key);
        if (r < 0)
                return r;
        size_t n = strlen(LOCAL_TMP_DIR);
        if (strncmp(key, LOCAL_TMP_DIR, n) == 0 && (key[n] == 0 || key[n] == '/'))
                return -EINVAL; /* reserved for puts in progress */
        char *p = strdup_printf("%s/%s", l->root, key);
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

static void dirname_cut(char *path) {
        char *slash = strrchr(path, '/');
        if (slash && slash != path)
                *slash = 0;
}

/* Makes a rename durable: the new directory entry is in the parent. */
static int fsync_parent(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        dirname_cut(dir);
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return negative_errno();
        return 0;
}

/* Renames tmp to path, creating path's parents. A concurrent remove may
 * prune a parent between mkdir and rename, so that is retried. */
static int rename_into(const char *tmp, const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        dirname_cut(dir);
        for (int i = 0; i < LOCAL_RENAME_TRIES; i++) {
                int r = mkdir_p(dir, 0700);
                if (r < 0)
                        return r;
                if (rename(tmp, path) == 0)
                        return fsync_parent(path);
                if (errno != ENOENT)
                        return negative_errno();
        }
        return -ENOENT;
}

/* Removes the now empty directories between path and the root. */
static void prune_parents(struct objstore_local *l, const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return;
        size_t rootlen = strlen(l->root);
        for (;;) {
                dirname_cut(dir);
                if (strlen(dir) <= rootlen || rmdir(dir) < 0)
                        return;
        }
}

/* Opens a new temporary file next to the final destinations: in ROOT/.tmp
 * for puts (so gc finds leftovers), beside dst for gets (same file system,
 * so the rename works). */
static int tmp_create(const char *where, bool beside, char **ret_path) {
        char rnd[40];
        int r = random_id("", 12, rnd, sizeof rnd);
        if (r < 0)
                return r;
        _cleanup_free_ char *p = beside ? strdup_printf("%s.tmp.%s", where, rnd)
                                        : strdup_printf("%s/put-%s", where, rnd);
        if (!p)
                return -ENOMEM;
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT && !beside) {
                /* someone removed ROOT/.tmp: recreate it */
                r = mkdir_p(where, 0700);
                if (r < 0)
                        return r;
                fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        }
        if (fd < 0)
                return negative_errno();
        *ret_path = TAKE_PTR(p);
        return fd;
}

/* Copies in into the new file tmp (open as out), fsyncs and renames it to
 * dst; removes tmp on any failure. */
static int land(int in, int out, const char *tmp, const char *dst) {
        int r = fd_clone_or_copy(in, out, NULL);
        if (r >= 0 && fsync(out) < 0)
                r = negative_errno();
        if (r >= 0)
                r = rename_into(tmp, dst);
        if (r < 0)
                unlink(tmp);
        return r;
}

static int local_put(struct objstore *o, const char *key, int fd) {
        struct objstore_local *l = local(o);
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        int r = local_key_path(l, key, &path);
        if (r < 0)
                return r;
        _cleanup_close_ int out = tmp_create(l->tmp, false, &tmp);
        if (out < 0)
                return out;
        return land(fd, out, tmp, path);
}

static int local_get(struct objstore *o, const char *key, const char *dst_path) {
        struct objstore_local *l = local(o);
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        int r = local_key_path(l, key, &path);
        if (r < 0)
                return r;
        if (!dst_path || !*dst_path)
                return -EINVAL;
        _cleanup_close_ int in = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return errno == ELOOP || errno == ENOTDIR ? -ENOENT : negative_errno();
        struct stat st;
        if (fstat(in, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -ENOENT; /* a directory of other keys, not an object */
        _cleanup_close_ int out = tmp_create(dst_path, true, &tmp);
        if (out < 0)
                return out;
        return land(in, out, tmp, dst_path);
}

static int local_stat(struct objstore *o, const char *key, struct stat *st) {
        _cleanup_free_ char *path = NULL;
        int r = local_key_path(local(o), key, &path);
        if (r < 0)
                return r;
        if (lstat(path, st) < 0)
                return errno == ENOTDIR ? -ENOENT : negative_errno();
        if (!S_ISREG(st->st_mode))
                return -ENOENT;
        return 0;
}

static int local_exists(struct objstore *o, const char *key, uint64_t *ret_size) {
        struct stat st;
        int r = local_stat(o, key, &st);
        if (r < 0)
                return r;
        *ret_size = (uint64_t) st.st_size;
        return 0;
}

static int local_mtime(struct objstore *o, const char *key, uint64_t *ret_s) {
        struct stat st;
        int r = local_stat(o, key, &st);
        if (r < 0)
                return r;
        *ret_s = st.st_mtim.tv_sec > 0 ? (uint64_t) st.st_mtim.tv_sec : 0;
        return 0;
}

static int local_remove(struct objstore *o, const char *key) {
        struct objstore_local *l = local(o);
        _cleanup_free_ char *path = NULL;
        int r = local_key_path(l, key, &path);
        if (r < 0)
                return r;
        if (unlink(path) < 0)
                return errno == EISDIR || errno == ENOTDIR ? -ENOENT : negative_errno();
        prune_parents(l, path);
        return 0;
}

static int local_local_path(struct objstore *o, const char *key, char **ret_path) {
        return local_key_path(local(o), key, ret_path);
}

/* Adds the objects below the directory dfd, whose key prefix is rel ("" or
 * "a/b/"), that start with prefix. Names that are not valid key segments
 * (and ROOT/.tmp) are not objects and are skipped. */
static int list_dir(int dfd, const char *rel, const char *prefix, struct objstore_keylist *kl) {
        _cleanup_close_ int fd = dfd;
        DIR *d = fdopendir(fd);
        if (!d)
                return negative_errno();
        TAKE_FD(fd); /* owned by d now */
        int r = 0;
        struct dirent *de;
        while (r >= 0 && (de = readdir(d))) {
                if (!*rel && strcmp(de->d_name, LOCAL_TMP_DIR) == 0)
                        continue;
                char key[OBJSTORE_KEY_MAX + 2];
                int n = snprintf(key, sizeof key, "%s%s", rel, de->d_name);
                if (n < 0 || n > OBJSTORE_KEY_MAX || objstore_key_check(key) < 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                if (S_ISREG(st.st_mode)) {
                        if (strncmp(key, prefix, strlen(prefix)) == 0)
                                r = objstore_keylist_add(kl, key);
                } else if (S_ISDIR(st.st_mode) && (size_t) n < OBJSTORE_KEY_MAX) {
                        /* descend only where keys can still match prefix */
                        key[n] = '/';
                        key[n + 1] = 0;
                        if (strncmp(key, prefix, MIN(strlen(key), strlen(prefix))) != 0)
                                continue;
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                continue;
                        r = list_dir(sub, key, prefix, kl);
                }
        }
        closedir(d);
        return r;
}

static int local_list(struct objstore *o, const char *prefix, char ***ret_keys) {
        struct objstore_local *l = local(o);
        _cleanup_(objstore_keylist_release) struct objstore_keylist kl = { 0 };
        int r;

        /* Start in the deepest directory prefix names: "blobs/ab" -> blobs/ */
        const char *slash = strrchr(prefix, '/');
        _cleanup_free_ char *rel = strndup(prefix, slash ? (size_t) (slash - prefix + 1) : 0);
        _cleanup_free_ char *dir = rel ? strdup_printf("%s/%s", l->root, rel) : NULL;
        if (!dir)
                return -ENOMEM;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT && errno != ENOTDIR)
                return negative_errno();
        if (fd >= 0) {
                r = list_dir(fd, rel, prefix, &kl);
                if (r < 0)
                        return r;
        }
        return objstore_keylist_finish(&kl, ret_keys);
}

static int local_gc_tmp(struct objstore *o, unsigned min_age_s) {
        struct objstore_local *l = local(o);
        DIR *d = opendir(l->tmp);
        if (!d)
                return errno == ENOENT ? 0 : negative_errno();
        time_t now = time(NULL);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                /* a put in progress (another process) keeps writing to its file */
                if (min_age_s > 0 && now - st.st_mtim.tv_sec < (time_t) min_age_s)
                        continue;
                if (unlinkat(dirfd(d), de->d_name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) == 0)
                        n++;
        }
        closedir(d);
        return n;
}

static void local_free(struct objstore *o) {
        struct objstore_local *l = local(o);
        if (!l)
                return;
        free(l->root);
        free(l->tmp);
        free(l);
}

const struct objstore_ops objstore_local_ops = {
        .name = "local",
        .put = local_put,
        .get = local_get,
        .exists = local_exists,
        .remove = local_remove,
        .list = local_list,
        .free = local_free,
        .local_path = local_local_path,
        .mtime = local_mtime,
        .gc_tmp = local_gc_tmp,
};

int objstore_open_local(const char *root_dir, struct objstore **ret) {
        if (!root_dir || !*root_dir || !ret)
                return -EINVAL;
        /* room for ROOT/KEY and the suffixes of temporary files */
        if (strlen(root_dir) + OBJSTORE_KEY_MAX + 64 >= PATH_MAX)
                return -ENAMETOOLONG;
        _cleanup_free_ struct objstore_local *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->root = strdup(root_dir);
        if (!l->root)
                return -ENOMEM;
        for (size_t n = strlen(l->root); n > 1 && l->root[n - 1] == '/'; n--)
                l->root[n - 1] = 0;
        l->tmp = strdup_printf("%s/%s", l->root, LOCAL_TMP_DIR);
        int r = l->tmp ? 0 : -ENOMEM;
        if (r >= 0)
                r = mkdir_p(l->root, 0700);
        if (r >= 0)
                r = mkdir_p(l->tmp, 0700);
        if (r >= 0)
                r = objstore_new(&objstore_local_ops, l, ret);
        if (r < 0) {
                free(l->root);
                free(l->tmp);
                return r;
        }
        TAKE_PTR(l);
        return 0;
}
