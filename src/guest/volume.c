/* SPDX-License-Identifier: Apache-2.0 */
/*
 * VOLUME_MOUNT: mounts a volume's disk where the sandbox asked for it.
 *
 * The machine has GUEST_VOLUME_SLOTS spare virtio-blk disks after the
 * rootfs, with serials "vol0".."vol3" (src/node/vmm-qemu.c). A template
 * boots them empty (size 0); a sandbox restored with a volume in slot n
 * has QEMU open the volume's image there and resize the disk, which the
 * guest kernel learns by a config interrupt a moment later: the agent
 * waits (wait_ms at most) for the size to show, then mounts the ext4 file
 * system the node made, nosuid and nodev (read-only when asked). A second
 * mount of the same disk at the same path (a sandbox restored from a
 * snapshot of itself, which has it mounted already) is answered as done.
 *
 * The wait blocks the agent's loop; it is bounded and short (the node
 * asks right after the resize).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

/* The first line of a sysfs file, trailing whitespace and NULs cut. */
static int sysfs_read(const char *path, char *buf, size_t n) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t k = read(fd, buf, n - 1);
        if (k < 0)
                return negative_errno();
        buf[k] = 0;
        buf[strcspn(buf, "\n")] = 0;
        size_t len = strlen(buf);
        while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t'))
                buf[--len] = 0;
        return 0;
}

/* The name ("vdb") of the virtio disk whose serial is "volN". */
static int volume_disk(unsigned slot, char *name, size_t n) {
        char want[16];
        snprintf(want, sizeof want, "vol%u", slot);
        _cleanup_(closedirp) DIR *d = opendir("/sys/block");
        if (!d)
                return negative_errno();
        struct dirent *e;
        while ((e = readdir(d))) {
                if (strncmp(e->d_name, "vd", 2) != 0)
                        continue;
                char path[300], serial[64];
                snprintf(path, sizeof path, "/sys/block/%s/serial", e->d_name);
                if (sysfs_read(path, serial, sizeof serial) < 0 || strcmp(serial, want) != 0)
                        continue;
                if (strlen(e->d_name) >= n)
                        return -ENAMETOOLONG;
                snprintf(name, n, "%s", e->d_name);
                return 0;
        }
        return -ENODEV;
}

/* Waits up to wait_ms for the disk to have a size (sectors > 0). */
static int volume_wait_size(const char *disk, uint64_t wait_ms) {
        char path[300], v[32];
        snprintf(path, sizeof path, "/sys/block/%s/size", disk);
        uint64_t deadline = now_monotonic_ns() + wait_ms * 1000000ULL;
        for (;;) {
                int r = sysfs_read(path, v, sizeof v);
                if (r < 0)
                        return r;
                if (strcmp(v, "0") != 0)
                        return 0;
                if (now_monotonic_ns() >= deadline)
                        return -ETIMEDOUT;
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
        }
}

/* What is mounted at path: 1 with source dev, 2 with another, 0 nothing. */
static int mounted_at(const char *path, const char *dev) {
        _cleanup_(fclosep) FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return negative_errno();
        char line[4096];
        int found = 0;
        while (fgets(line, sizeof line, f)) {
                /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER */
                char mnt[PATH_MAX], src[PATH_MAX];
                const char *sep = strstr(line, " - ");
                if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
                    sscanf(sep + 3, "%*s %4095s", src) != 1)
                        continue;
                if (strcmp(mnt, path) == 0)
                        found = strcmp(src, dev) == 0 ? 1 : 2; /* the last mount there is what shows */
        }
        return found;
}

int volume_mount_request(struct agent *a, uint32_t stream, const uint8_t *payload, size_t len) {
        struct guest_volume_mount m = {0};
        int r = guest_volume_mount_parse(payload, len, &m);
        if (r < 0)
                return agent_send_error(a, stream, r,
                                        "VOLUME_MOUNT: a slot, an allowed path, read_only, wait_ms");
        _cleanup_free_ char *path = m.path;
        char disk[64], dev[80];
        if ((r = volume_disk(m.slot, disk, sizeof disk)) < 0)
                return agent_send_errorf(a, stream, r, "no disk for volume slot %u (serial vol%u)", m.slot,
                                         m.slot);
        snprintf(dev, sizeof dev, "/dev/%s", disk);
        if ((r = volume_wait_size(disk, m.wait_ms)) < 0)
                return agent_send_errorf(a, stream, r, "%s (volume slot %u) has no size after %llu ms", dev,
                                         m.slot, (unsigned long long) m.wait_ms);
        r = mounted_at(path, dev);
        if (r == 1)
                return agent_send_json(a, PROTO_RESULT, stream,
                                       json_pack("{s:s,s:b}", "device", dev, "already", 1));
        if (r == 2)
                return agent_send_errorf(a, stream, -EBUSY, "something else is mounted at %s", path);
        if ((r = mkdir_p(path, 0755)) < 0)
                return agent_send_errorf(a, stream, r, "cannot make %s", path);
        unsigned long flags = MS_NOSUID | MS_NODEV | (m.read_only ? MS_RDONLY : 0);
        if (mount(dev, path, "ext4", flags, NULL) < 0)
                return agent_send_errorf(a, stream, negative_errno(),
                                         "cannot mount %s (volume slot %u) at %s", dev, m.slot, path);
        log_info("Volume slot %u (%s) mounted at %s%s", m.slot, dev, path, m.read_only ? " read-only" : "");
        return agent_send_json(a, PROTO_RESULT, stream, json_pack("{s:s,s:b}", "device", dev, "already", 0));
}
