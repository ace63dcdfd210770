/* SPDX-License-Identifier: Apache-2.0 */
#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "util.h"

#define BTRFS_MAGIC_OFFSET 0x10040 /* superblock at 64 KiB, magic 0x40 into it */
#define BTRFS_MAGIC "_BHRfS_M"
#define PROGRAM_STDERR_MAX 4096    /* what we keep of a helper's stderr for the log */

static const char *const storage_ctx = "component=storage";

/* Opens an unnamed temporary file in dir (O_TMPFILE, or a named one that is
 * unlinked at once where the file system lacks O_TMPFILE). */
static int open_temp_in(const char *dir) {
        int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
                return fd >= 0 ? fd : negative_errno();
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/.reflink-probe.XXXXXX", dir) >= (int) sizeof path)
                return -ENAMETOOLONG;
        fd = mkostemp(path, O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        (void) unlink(path);
        return fd;
}

/* A real FICLONE between two files in dir: the only reliable answer (a
 * file system type check misses xfs without reflink=1, overlay, NFS...).
 * 1 = works, 0 = not supported, <0 = could not even try. */
static int probe_reflink(const char *dir) {
        _cleanup_close_ int src = open_temp_in(dir);
        if (src < 0)
                return src;
        _cleanup_close_ int dst = open_temp_in(dir);
        if (dst < 0)
                return dst;
        char block[4096];
        memset(block, 0xa5, sizeof block);
        int r = fd_write_all(src, block, sizeof block);
        if (r < 0)
                return r;
        if (ioctl(dst, FICLONE, src) >= 0)
                return 1;
        log_emit(LOG_LEVEL_DEBUG, storage_ctx, "FICLONE in %s failed: %m", dir);
        return 0;
}

/* Runs argv (no shell), waits, and logs its stderr when it fails. 0 on exit
 * status 0, -ENOENT if the program is missing, -EIO otherwise. */
static int run_program(char *const argv[]) {
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return negative_errno();
        _cleanup_close_ int rd = pfd[0];
        _cleanup_close_ int wr = pfd[1];
        _cleanup_close_ int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                return negative_errno();

        pid_t pid = fork();
        if (pid < 0)
                return negative_errno();
        if (pid == 0) {
                /* async-signal-safe only: the node has threads */
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                struct sigaction dfl = { .sa_handler = SIG_DFL };
                sigaction(SIGPIPE, &dfl, NULL);
                if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0 ||
                    dup2(wr, STDERR_FILENO) < 0)
                        _exit(126);
                execvp(argv[0], argv);
                _exit(127);
        }
        close(TAKE_FD(wr));

        /* Drain all of stderr (a helper blocked on a full pipe never exits),
         * keep the first PROGRAM_STDERR_MAX bytes. */
        char err[PROGRAM_STDERR_MAX + 1];
        size_t len = 0;
        for (;;) {
                char chunk[1024];
                ssize_t k = read(rd, chunk, sizeof chunk);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                size_t take = MIN((size_t) k, PROGRAM_STDERR_MAX - len);
                memcpy(err + len, chunk, take);
                len += take;
        }
        err[len] = 0;
        while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
                err[--len] = 0;

        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return negative_errno();
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
                log_emit(LOG_LEVEL_ERROR, storage_ctx, "%s: program not found", argv[0]);
                return -ENOENT;
        }
        log_emit(LOG_LEVEL_ERROR, storage_ctx, "%s failed (%s %d): %s", argv[0],
                 WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), len ? err : "(no output)");
        return -EIO;
}

/* Whether the file carries a btrfs superblock. */
static int has_btrfs_magic(int fd) {
        char magic[sizeof BTRFS_MAGIC - 1];
        ssize_t k = pread(fd, magic, sizeof magic, BTRFS_MAGIC_OFFSET);
        if (k < 0)
                return negative_errno();
        return k == (ssize_t) sizeof magic && memcmp(magic, BTRFS_MAGIC, sizeof magic) == 0;
}

/* Undoes the octal escapes (\040 etc.) of a /proc/self/mountinfo field in
 * place. */
static void unescape_mountinfo(char *s) {
        char *o = s;
        for (char *p = s; *p;) {
                if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
                    p[3] <= '7') {
                        *o++ = (char) (((p[1] - '0') << 6) | ((p[2] - '0') << 3) | (p[3] - '0'));
                        p += 4;
                } else
                        *o++ = *p++;
        }
        *o = 0;
}

/* 1 if something is mounted exactly at path (a canonical path). */
static int is_mountpoint(const char *path) {
        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/self/mountinfo", 16u << 20, &info, NULL);
        if (r < 0)
                return r;
        for (char *line = info; line && *line;) {
                char *eol = strchr(line, '\n');
                if (eol)
                        *eol = 0;
                /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..." */
                char *f = line;
                for (int i = 0; i < 4 && f; i++) {
                        f = strchr(f, ' ');
                        if (f)
                                f++;
                }
                if (f) {
                        char *end = strchr(f, ' ');
                        if (end)
                                *end = 0;
                        unescape_mountinfo(f);
                        if (strcmp(f, path) == 0)
                                return 1;
                }
                line = eol ? eol + 1 : NULL;
        }
        return 0;
}

/* Creates (sparse) or grows DATA_DIR/volume.btrfs, formats it when it has
 * no btrfs yet, and loop-mounts it at mnt unless something already is. */
static int setup_volume(const char *data_dir, unsigned size_gib, const char *mnt, bool *ret_mounted) {
        char img[PATH_MAX];
        if (snprintf(img, sizeof img, "%s/volume.btrfs", data_dir) >= (int) sizeof img)
                return -ENAMETOOLONG;
        if (mkdir(mnt, 0755) < 0 && errno != EEXIST)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), storage_ctx, "failed to create %s: %m", mnt);

        int r = is_mountpoint(mnt);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, storage_ctx, "failed to read /proc/self/mountinfo: %m");
        if (r > 0) {
                /* Mounted by an earlier node of this data dir that crashed or
                 * handed over (its VMs may still use it): ours now, and
                 * unmounted at our clean shutdown like one we mounted. */
                log_emit(LOG_LEVEL_INFO, storage_ctx, "volume %s already mounted, taking it over", mnt);
                *ret_mounted = true;
                return 0;
        }

        _cleanup_close_ int fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), storage_ctx, "failed to open %s: %m", img);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        off_t want = (off_t) size_gib << 30;
        /* Only ever grow: shrinking would cut into a file system. */
        if (st.st_size < want && ftruncate(fd, want) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), storage_ctx, "failed to size %s: %m", img);

        r = has_btrfs_magic(fd);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, storage_ctx, "failed to read %s: %m", img);
        close(TAKE_FD(fd));
        if (r == 0) {
                log_emit(LOG_LEVEL_INFO, storage_ctx, "formatting %s (%u GiB sparse) as btrfs", img, size_gib);
                r = run_program((char *const[]){ "mkfs.btrfs", "-q", img, NULL });
                if (r < 0)
                        return r;
        }

        /* -o loop: util-linux sets LO_FLAGS_AUTOCLEAR, so the loop device
         * goes away by itself once the file system is unmounted. */
        r = run_program((char *const[]){ "mount", "-o", "loop", img, (char *) mnt, NULL });
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, storage_ctx, "mounted btrfs volume %s at %s", img, mnt);
        *ret_mounted = true;
        return 0;
}

static int make_layout(const char *root) {
        char p[PATH_MAX];
        static const char *const dirs[] = { "templates", "sandboxes" };
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                if (snprintf(p, sizeof p, "%s/%s", root, dirs[i]) >= (int) sizeof p)
                        return -ENAMETOOLONG;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return log_errno(LOG_LEVEL_ERROR, negative_errno(), storage_ctx, "failed to create %s: %m", p);
        }
        return 0;
}

void storage_close(struct storage *s) {
        if (!s)
                return;
        if (s->mounted_volume && s->volume_mount) {
                /* Detach when busy (a QEMU still holding an image): it is
                 * released, and the loop device with it, when the last user goes. */
                if (umount2(s->volume_mount, 0) < 0) {
                        if (errno == EBUSY && umount2(s->volume_mount, MNT_DETACH) >= 0)
                                log_emit(LOG_LEVEL_WARN, storage_ctx, "volume %s busy, detached lazily",
                                         s->volume_mount);
                        else
                                log_emit(LOG_LEVEL_WARN, storage_ctx, "failed to unmount %s: %m", s->volume_mount);
                } else
                        log_emit(LOG_LEVEL_INFO, storage_ctx, "unmounted %s", s->volume_mount);
        }
        free(s->root);
        free(s->volume_mount);
        free(s);
}

int storage_open_given(const char *root, bool reflink, struct storage **ret) {
        if (!root || root[0] != '/')
                return -EINVAL;
        _cleanup_(storage_closep) struct storage *s = calloc(1, sizeof *s);
        if (!s || !(s->root = strdup(root)))
                return -ENOMEM;
        s->reflink = reflink;
        int r = make_layout(s->root);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int storage_open(const char *data_dir, unsigned volume_size_gib, bool allow_loop, struct storage **ret) {
        if (!data_dir || !*data_dir)
                return -EINVAL;
        int r = mkdir_p(data_dir, 0755);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, storage_ctx, "failed to create %s: %m", data_dir);
        char dir[PATH_MAX];
        if (!realpath(data_dir, dir))
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), storage_ctx, "failed to resolve %s: %m", data_dir);

        _cleanup_(storage_closep) struct storage *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;

        r = probe_reflink(dir);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, storage_ctx, "cannot create files in %s: %m", dir);
        if (r > 0) {
                s->root = strdup(dir);
                s->reflink = true;
                log_emit(LOG_LEVEL_INFO, storage_ctx, "storage %s supports reflinks", dir);
        } else if (allow_loop) {
                char mnt[PATH_MAX];
                if (snprintf(mnt, sizeof mnt, "%s/vol", dir) >= (int) sizeof mnt)
                        return -ENAMETOOLONG;
                if (volume_size_gib == 0)
                        return log_errno(LOG_LEVEL_ERROR, -EINVAL, storage_ctx, "volume size must be at least 1 GiB");
                log_emit(LOG_LEVEL_INFO, storage_ctx, "%s has no reflinks, setting up a btrfs loop volume", dir);
                bool mounted = false;
                r = setup_volume(dir, volume_size_gib, mnt, &mounted);
                if (r >= 0) {
                        s->volume_mount = strdup(mnt);
                        s->mounted_volume = mounted;
                        if (!s->volume_mount)
                                return -ENOMEM;
                        r = probe_reflink(mnt);
                        if (r < 0)
                                return log_errno(LOG_LEVEL_ERROR, r, storage_ctx, "cannot create files in %s: %m", mnt);
                        s->root = strdup(mnt);
                        s->reflink = r > 0;
                        if (!s->reflink)
                                log_emit(LOG_LEVEL_WARN, storage_ctx,
                                         "no reflinks even on volume %s: falling back to plain copies (slow)", mnt);
                } else {
                        log_errno(LOG_LEVEL_WARN, r, storage_ctx,
                                  "btrfs loop volume unavailable (%m): falling back to plain copies (slow)");
                        s->root = strdup(dir);
                }
        } else {
                log_emit(LOG_LEVEL_WARN, storage_ctx, "%s has no reflinks: using plain copies (slow)", dir);
                s->root = strdup(dir);
        }
        if (!s->root)
                return -ENOMEM;

        r = make_layout(s->root);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}
