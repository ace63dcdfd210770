/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replay driver for fuzz targets when not built with libFuzzer: runs
 * LLVMFuzzerTestOneInput on every file under the given directories/files,
 * then a fixed set of pseudo-random inputs. Crashes and sanitizer reports
 * fail the test, and so does a corpus that is missing, unreadable or empty
 * (a wrong path would otherwise replay nothing and pass).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs every file under path; returns how many, or -1 (said why) when path
 * or anything under it cannot be read: a replay that silently ran nothing
 * would pass without testing the parser. */
static int run_path(const char *path) {
        struct stat st;
        if (stat(path, &st) < 0) {
                fprintf(stderr, "fuzz corpus %s: %s\n", path, strerror(errno));
                return -1;
        }
        if (S_ISDIR(st.st_mode)) {
                DIR *d = opendir(path);
                if (!d) {
                        fprintf(stderr, "fuzz corpus %s: %s\n", path, strerror(errno));
                        return -1;
                }
                struct dirent *de;
                int n = 0;
                while ((de = readdir(d))) {
                        if (de->d_name[0] == '.')
                                continue;
                        char sub[4096];
                        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
                        int k = run_path(sub);
                        if (k < 0) {
                                n = -1;
                                break;
                        }
                        n += k;
                }
                closedir(d);
                return n;
        }
        char *buf = NULL;
        size_t len = 0;
        int r = file_read_all(path, 16u << 20, &buf, &len);
        if (r < 0) {
                fprintf(stderr, "fuzz corpus %s: %s\n", path, strerror(-r));
                return -1;
        }
        LLVMFuzzerTestOneInput((const uint8_t *) buf, len);
        free(buf);
        return 1;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
                return 2;
        }
        int n = 0;
        for (int i = 1; i < argc; i++) {
                int k = run_path(argv[i]);
                if (k < 0)
                        return 1;
                if (k == 0) {
                        fprintf(stderr, "fuzz corpus %s: no input in it\n", argv[i]);
                        return 1;
                }
                n += k;
        }
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
