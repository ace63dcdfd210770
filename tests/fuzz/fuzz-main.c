/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replay driver for fuzz targets when not built with libFuzzer: runs
 * LLVMFuzzerTestOneInput on every file under the given directories/files,
 * plus a fixed set of pseudo-random inputs so an empty corpus still
 * exercises the parser. Crashes and sanitizer reports fail the test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_path(const char *path) {
        struct stat st;
        if (stat(path, &st) < 0)
                return 0; /* a missing corpus dir is fine */
        if (S_ISDIR(st.st_mode)) {
                DIR *d = opendir(path);
                if (!d)
                        return -1;
                struct dirent *de;
                int n = 0;
                while ((de = readdir(d))) {
                        if (de->d_name[0] == '.')
                                continue;
                        char sub[4096];
                        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
                        n += run_path(sub);
                }
                closedir(d);
                return n;
        }
        char *buf = NULL;
        size_t len = 0;
        if (file_read_all(path, 16u << 20, &buf, &len) < 0)
                return 0;
        LLVMFuzzerTestOneInput((const uint8_t *) buf, len);
        free(buf);
        return 1;
}

int main(int argc, char **argv) {
        int n = 0;
        for (int i = 1; i < argc; i++)
                n += run_path(argv[i]);
        /* deterministic pseudo-random inputs */
        uint64_t x = 0x9e3779b97f4a7c15ull;
        uint8_t buf[4096];
        for (int round = 0; round < 2000; round++) {
                size_t len = (size_t) (x % sizeof buf);
                for (size_t i = 0; i < len; i++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        buf[i] = (uint8_t) x;
                }
                LLVMFuzzerTestOneInput(buf, len);
        }
        printf("replayed %d corpus inputs and 2000 random inputs\n", n);
        return 0;
}
