/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the readers of lib/delta with what an object store can hand a
 * node as a suspended sandbox's delta. The first byte picks the reader
 * (even: disk, odd: RAM), the rest is the delta; the base is a fixed
 * 64 KiB file. Either the delta applies, and then a delta made of what it
 * gave back applies to the same bytes, or it is refused (-EBADMSG); the
 * output is never larger than the delta says (checked against a bound).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta.h"
#include "macros.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BASE_SIZE (64u << 10)
/* a disk delta's size field may say 1 PiB (holes); RAM output is written */
#define RAM_OUT_MAX (64u << 20)

static int fd_of(const char *name, int *fd) {
        if (*fd < 0)
                *fd = memfd_create(name, MFD_CLOEXEC);
        if (*fd < 0 || ftruncate(*fd, 0) < 0 || lseek(*fd, 0, SEEK_SET) < 0)
                abort();
        return *fd;
}

static int base_fd(void) {
        static int fd = -1;
        if (fd >= 0)
                return fd;
        fd = memfd_create("fuzz-delta-base", MFD_CLOEXEC);
        uint8_t page[4096];
        for (unsigned p = 0; p < BASE_SIZE / sizeof page; p++) {
                for (size_t i = 0; i < sizeof page; i++)
                        page[i] = (uint8_t) (p * 31 + i);
                if (fd < 0 || fd_write_all(fd, page, sizeof page) < 0)
                        abort();
        }
        return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int delta = -1, out = -1, again = -1, out2 = -1;
        if (size == 0)
                return 0;
        bool ram = data[0] & 1;
        int d = fd_of("fuzz-delta", &delta), o = fd_of("fuzz-delta-out", &out);
        if (size > 1 && fd_write_all(d, data + 1, size - 1) < 0)
                abort();
        int r = ram ? delta_ram_apply(base_fd(), d, o) : delta_disk_apply(base_fd(), d, o);
        if (r < 0) {
                if (r != -EBADMSG && r != -ENOMEM && r != -EFBIG && r != -ENOSPC)
                        abort();
                return 0;
        }
        struct stat st;
        if (fstat(o, &st) < 0)
                abort();
        if (ram && (uint64_t) st.st_size > RAM_OUT_MAX)
                abort();
        if (!ram || st.st_size > (off_t) (4u << 20))
                return 0; /* a round trip of a disk of 1 PiB is not for here */
        /* what it gave back, made into a delta again, gives the same back */
        int a = fd_of("fuzz-delta-again", &again), o2 = fd_of("fuzz-delta-out2", &out2);
        if (delta_ram_make(base_fd(), o, a, 1, NULL) < 0 || delta_ram_apply(base_fd(), a, o2) < 0)
                abort();
        struct stat st2;
        if (fstat(o2, &st2) < 0 || st2.st_size != st.st_size)
                abort();
        _cleanup_free_ uint8_t *x = malloc((size_t) st.st_size + 1), *y = malloc((size_t) st.st_size + 1);
        if (!x || !y || fd_pread_exact(o, x, (size_t) st.st_size, 0) < 0 ||
            fd_pread_exact(o2, y, (size_t) st.st_size, 0) < 0 || memcmp(x, y, (size_t) st.st_size) != 0)
                abort();
        return 0;
}
