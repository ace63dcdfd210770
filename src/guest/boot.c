/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PID 1 duties before the agent loop.
 *
 * Stage 1 runs as /init of the initramfs (marked by /airlock-initramfs):
 * kernel file systems, the virtio modules of /lib/modules/load.list, the
 * root device (airlock.root= on the kernel command line, /dev/vda by
 * default) mounted ext4 at /newroot, then the classic switch_root: move
 * /dev, /proc and /sys over, move the new root onto / and chroot into it.
 * The initramfs files stay (a few MB of RAM).
 *
 * Stage 2 runs in the real root: devpts, tmpfs on /dev/shm, /tmp and /run,
 * /run/airlock, the default hostname and PATH.
 */
#include "boot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE 4
#endif

#define MODULES_DIR "/lib/modules"
#define MODULES_LIST MODULES_DIR "/load.list"
#define ROOT_WAIT_NS (10ull * 1000 * 1000 * 1000)
#define NEWROOT "/newroot"

/* True when path is already a mount point (another device than its
 * parent directory). */
static bool is_mount_point(const char *path) {
        struct stat st, parent;
        char up[PATH_MAX];
        if (stat(path, &st) < 0)
                return false;
        if ((size_t) snprintf(up, sizeof up, "%s/..", path) >= sizeof up || stat(up, &parent) < 0)
                return false;
        return st.st_dev != parent.st_dev || st.st_ino == parent.st_ino;
}

/* mkdir + mount, skipped when something is mounted there already. */
static int mount_fs(const char *src, const char *target, const char *type, unsigned long flags,
                    const char *data) {
        if (mkdir(target, 0755) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Failed to create %s: %m", target);
        if (is_mount_point(target))
                return 0;
        if (mount(src, target, type, flags, data) < 0)
                return log_error_errno(negative_errno(), "Failed to mount %s on %s: %m", type, target);
        return 0;
}

void boot_console_setup(bool pid1) {
        int fd = -1;
        for (int i = 0; i < 3; i++) {
                if (fcntl(i, F_GETFD) >= 0)
                        continue;
                if (fd < 0 && pid1)
                        fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (fd < 0)
                        fd = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        return;
                if (fd != i) {
                        dup2(fd, i);
                } else {
                        (void) fcntl(i, F_SETFD, 0);
                        fd = -1;
                }
        }
        if (fd > 2)
                close(fd);
}

/* Loads the modules listed in load.list, in order. A module that is
 * already there (or built in) is fine; others are logged and skipped, the
 * root device wait reports what is really missing. */
static void modules_load(void) {
        _cleanup_free_ char *list = NULL;
        size_t len;
        int r = file_read_all(MODULES_LIST, 1 << 20, &list, &len);
        if (r < 0) {
                if (r != -ENOENT)
                        log_warn("Cannot read " MODULES_LIST ": %s", strerror(-r));
                return;
        }
        for (char *line = list, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                line[strcspn(line, "\r")] = 0;
                if (!*line || *line == '#')
                        continue;
                char path[PATH_MAX];
                if ((size_t) snprintf(path, sizeof path, MODULES_DIR "/%s", line) >= sizeof path)
                        continue;
                _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        log_warn("Cannot open module %s: %m", path);
                        continue;
                }
                size_t n = strlen(line);
                bool compressed =
                        (n > 3 && (strcmp(line + n - 3, ".xz") == 0 || strcmp(line + n - 3, ".gz") == 0)) ||
                        (n > 4 && strcmp(line + n - 4, ".zst") == 0);
                if (syscall(SYS_finit_module, fd, "", compressed ? MODULE_INIT_COMPRESSED_FILE : 0) < 0 &&
                    errno != EEXIST)
                        log_warn("Cannot load module %s: %m", path);
        }
}

/* The root device: airlock.root= from the kernel command line ("vda" means
 * /dev/vda), else /dev/vda. */
static void root_device(char *buf, size_t n) {
        _cleanup_free_ char *cmdline = NULL;
        size_t len;
        snprintf(buf, n, "/dev/vda");
        if (file_read_all("/proc/cmdline", 64 << 10, &cmdline, &len) < 0)
                return;
        for (char *p = cmdline; *p;) {
                p += strspn(p, " \t\n");
                size_t k = strcspn(p, " \t\n");
                if (k > 12 && strncmp(p, "airlock.root=", 13) == 0) {
                        const char *v = p + 13;
                        int vl = (int) (k - 13);
                        if (vl > 0)
                                snprintf(buf, n, "%s%.*s", v[0] == '/' ? "" : "/dev/", vl, v);
                }
                p += k;
        }
}

/* Waits (up to 10 s) for dev to show up as a block device. */
static int root_wait(const char *dev) {
        uint64_t end = now_monotonic_ns() + ROOT_WAIT_NS;
        for (;;) {
                struct stat st;
                if (stat(dev, &st) >= 0 && S_ISBLK(st.st_mode))
                        return 0;
                if (now_monotonic_ns() > end)
                        return -ENODEV;
                usleep(10 * 1000);
        }
}

int boot_initramfs(void) {
        char dev[256];
        int r;

        r = mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
        if (r < 0)
                return r;
        boot_console_setup(true);
        if ((r = mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0 ||
            (r = mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0)
                return r;
        modules_load();
        root_device(dev, sizeof dev);
        r = root_wait(dev);
        if (r < 0)
                return log_error_errno(r, "Root device %s did not appear within 10 s", dev);
        if (mkdir(NEWROOT, 0755) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Failed to create " NEWROOT ": %m");
        if (mount(dev, NEWROOT, "ext4", 0, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to mount %s (ext4) on " NEWROOT ": %m",
                                       dev);

        static const char *const moved[] = { "/dev", "/proc", "/sys" };
        for (size_t i = 0; i < ARRAY_SIZE(moved); i++) {
                char target[64];
                snprintf(target, sizeof target, NEWROOT "%s", moved[i]);
                if (mkdir(target, 0755) < 0 && errno != EEXIST)
                        return log_error_errno(negative_errno(), "Failed to create %s: %m", target);
                if (mount(moved[i], target, NULL, MS_MOVE, NULL) < 0)
                        return log_error_errno(negative_errno(), "Failed to move %s: %m", moved[i]);
        }
        if (chdir(NEWROOT) < 0)
                return log_error_errno(negative_errno(), "Failed to enter " NEWROOT ": %m");
        if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to move the root: %m");
        if (chroot(".") < 0 || chdir("/") < 0)
                return log_error_errno(negative_errno(), "Failed to chroot into the root: %m");
        log_info("Switched to root %s", dev);
        return 0;
}

int boot_setup_root(void) {
        int r;

        /* also the path when the kernel started us from the root directly */
        if ((r = mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755")) < 0 ||
            (r = mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0 ||
            (r = mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) < 0)
                return r;
        boot_console_setup(true);

        /* the rest is what processes expect, not what the agent needs */
        (void) mount_fs("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                        "ptmxmode=0666,mode=0620,gid=5");
        (void) mount_fs("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
        (void) mount_fs("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
        (void) mount_fs("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
        static const char *const links[][2] = {
                { "/proc/self/fd", "/dev/fd" },
                { "/proc/self/fd/0", "/dev/stdin" },
                { "/proc/self/fd/1", "/dev/stdout" },
                { "/proc/self/fd/2", "/dev/stderr" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(links); i++)
                (void) symlink(links[i][0], links[i][1]);
        r = mkdir_p(BOOT_RUN_DIR, 0755);
        if (r < 0)
                log_warn("Failed to create " BOOT_RUN_DIR ": %s", strerror(-r));
        (void) boot_net_setup();
        if (sethostname("airlock", strlen("airlock")) < 0)
                log_warn("Failed to set the hostname: %m");
        setenv("PATH", GUEST_DEFAULT_PATH, 1);
        umask(022);
        return 0;
}

_noreturn_ void boot_halt(const char *why) {
        for (;;) {
                log_error("airlock-guest cannot continue: %s. Halted (PID 1 must not exit).", why);
                /* still reap whatever might have been started */
                while (waitpid(-1, NULL, WNOHANG) > 0)
                        ;
                sleep(30);
        }
}
