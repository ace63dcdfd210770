/* SPDX-License-Identifier: Apache-2.0 */
/* src/nodemgr/basestep.c's layout check (`airlock-nodemgr
 * --check-oci-layout`, run by images/oci.sh on the image skopeo copied):
 * an OCI layout of one image manifest whose tar layers pass lib/buildctx,
 * at most BASE_STEP_LAYERS_MAX of them and BASE_STEP_LAYERS_BYTES_MAX
 * bytes, each blob the size its manifest says. The layouts are written
 * here, their digests real (the check trusts skopeo for them, not for
 * anything else). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "basestep.h"
#include "util.h"

static char dir[64];

static void write_file(const char *rel, const void *data, size_t len) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, rel);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(fd_write_all(fd, data, len), 0);
        close(fd);
}

/* Writes data as a blob; its digest into out ("sha256:HEX"). */
static void blob(const void *data, size_t len, char out[80]) {
        uint8_t h[32];
        char hex[65];
        crypto_hash_sha256(h, data, len);
        sodium_bin2hex(hex, sizeof hex, h, sizeof h);
        snprintf(out, 80, "sha256:%s", hex);
        char rel[128];
        snprintf(rel, sizeof rel, "blobs/sha256/%s", hex);
        write_file(rel, data, len);
}

/* A tar of one file, name, holding "x". */
static size_t one_file_tar(const char *name, uint8_t out[2048]) {
        memset(out, 0, 2048);
        memcpy(out, name, strlen(name));
        memcpy(out + 100, "0000644", 7);
        memcpy(out + 108, "0000000", 7);
        memcpy(out + 116, "0000000", 7);
        memcpy(out + 124, "00000000001", 11);
        memcpy(out + 136, "14531263400", 11);
        out[156] = '0';
        memcpy(out + 257, "ustar\0" "00", 8);
        memset(out + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
                sum += out[i];
        snprintf((char *) out + 148, 8, "%06o", sum);
        out[512] = 'x';
        return 2048; /* header, a block of data, the end */
}

/* A layout of layers (tars named by their one file), mtype the layers'
 * media type, size_delta added to the last layer's stated size; another
 * manifest in the index when two. */
static int check(const char *const *names, size_t n, const char *mtype, long size_delta, bool two, char *msg) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf %s/blobs %s/index.json", dir, dir);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s/blobs", dir);
        assert_int_equal(mkdir(cmd, 0755), 0);
        snprintf(cmd, sizeof cmd, "%s/blobs/sha256", dir);
        assert_int_equal(mkdir(cmd, 0755), 0);
        size_t cap = 4096 + n * 256, len = 0;
        char *layers = malloc(cap);
        assert_non_null(layers);
        layers[0] = 0;
        for (size_t i = 0; i < n; i++) {
                uint8_t tar[2048];
                char digest[80];
                size_t tl = one_file_tar(names[i], tar);
                blob(tar, tl, digest);
                len += (size_t) snprintf(layers + len, cap - len, "%s{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%ld}",
                                         i ? "," : "", mtype, digest, (long) tl + (i == n - 1 ? size_delta : 0));
        }
        char config[80], manifest_digest[80];
        const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{}}";
        blob(cfg, strlen(cfg), config);
        char *manifest = malloc(cap + 512);
        assert_non_null(manifest);
        int ml = snprintf(manifest, cap + 512,
                          "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                          "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\","
                          "\"size\":%zu},\"layers\":[%s]}",
                          config, strlen(cfg), layers);
        blob(manifest, (size_t) ml, manifest_digest);
        char index[512];
        int il = snprintf(index, sizeof index, "{\"schemaVersion\":2,\"manifests\":[");
        for (int k = 0; k < (two ? 2 : 1); k++)
                il += snprintf(index + il, sizeof index - (size_t) il,
                               "%s{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\","
                               "\"size\":%d}",
                               k ? "," : "", manifest_digest, ml);
        il += snprintf(index + il, sizeof index - (size_t) il, "]}");
        write_file("index.json", index, (size_t) il);
        free(layers);
        free(manifest);
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dfd >= 0);
        int r = base_step_check_layout(dfd, msg, 512);
        close(dfd);
        return r;
}

#define TAR "application/vnd.oci.image.layer.v1.tar"

static void test_layout(void **state) {
        (void) state;
        char msg[512];
        static const char *const ok[] = { "etc/passwd", "usr/bin/env" };
        if (check(ok, 2, TAR, 0, false, msg) < 0)
                fail_msg("refused: %s", msg);
        assert_non_null(strstr(msg, "2 layers, 2 entries, 2 bytes of files: checked"));
        /* a layer's entry: refused naming the layer */
        static const char *const bad[] = { "etc/passwd", "../../etc/shadow" };
        assert_int_equal(check(bad, 2, TAR, 0, false, msg), -EBADMSG);
        assert_non_null(strstr(msg, "image layer 2: '../../etc/shadow' climbs out"));
        /* a blob that is not the size its manifest says */
        assert_int_equal(check(ok, 2, TAR, 1, false, msg), -EBADMSG);
        assert_non_null(strstr(msg, "image layer 2 is not the size its manifest says"));
        /* the layers' stated sizes add up past the limit: before any is read */
        assert_int_equal(check(ok, 2, TAR, (long) BASE_STEP_LAYERS_BYTES_MAX, false, msg), -EFBIG);
        assert_non_null(strstr(msg, "add up to more than 8 GiB compressed"));
        /* no tar layer */
        assert_int_equal(check(ok, 2, "application/vnd.oci.image.layer.v1.tar+encrypted", 0, false, msg), -EBADMSG);
        assert_non_null(strstr(msg, "image layer 1 is a 'application/vnd.oci.image.layer.v1.tar+encrypted'"));
        /* two images in one index */
        assert_int_equal(check(ok, 2, TAR, 0, true, msg), -EBADMSG);
        assert_non_null(strstr(msg, "lists 2 manifests, not one"));
        /* 128 layers pass, 129 are refused */
        const char *many[BASE_STEP_LAYERS_MAX + 1];
        char names[BASE_STEP_LAYERS_MAX + 1][16];
        for (size_t i = 0; i <= BASE_STEP_LAYERS_MAX; i++) {
                snprintf(names[i], sizeof names[i], "f%zu", i);
                many[i] = names[i];
        }
        if (check(many, BASE_STEP_LAYERS_MAX, TAR, 0, false, msg) < 0)
                fail_msg("refused: %s", msg);
        assert_int_equal(check(many, BASE_STEP_LAYERS_MAX + 1, TAR, 0, false, msg), -EFBIG);
        assert_non_null(strstr(msg, "the image has 129 layers: at most 128"));
}

int main(void) {
        snprintf(dir, sizeof dir, "/tmp/test-basestep-XXXXXX");
        assert_non_null(mkdtemp(dir));
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_layout),
        };
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
                r = 1;
        return r;
}
