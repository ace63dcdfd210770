/* SPDX-License-Identifier: Apache-2.0 */
#include "basestep.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buildctx.h"
#include "macros.h"
#include "tplspec.h"
#include "util.h"

#define ENV_MAX 8

void base_step_env_free(char **env) {
        for (size_t i = 0; env && env[i]; i++)
                free(env[i]);
        free(env);
}

/* A disk size in MiB: 0 (the script's own) .. 1 TiB. */
static bool disk_ok(const char *s) {
        uint64_t v;
        return parse_u64(s, 1u << 20, &v) >= 0;
}

static int add(char **env, size_t *n, const char *name, const char *value) {
        if (*n >= ENV_MAX)
                return -E2BIG;
        char *e = strdup_printf("%s=%s", name, value);
        if (!e)
                return -ENOMEM;
        env[(*n)++] = e;
        return 0;
}

int base_step_prepare(char *const *argv, const char *images, bool have_dir, char **ret_script, char ***ret_env,
                      char *msg, size_t n) {
        size_t argc = 0;
        while (argv[argc])
                argc++;
        if (argc < 3 || !disk_ok(argv[1])) {
                snprintf(msg, n, "base parameters: kind, disk size, then the base");
                return -EINVAL;
        }
        bool debian = strcmp(argv[0], "debian") == 0, oci = strcmp(argv[0], "oci") == 0;
        _cleanup_free_ char *packages = NULL;
        char ref[TPLSPEC_PATH_MAX + 64] = "";
        if (debian) {
                if (!tplspec_suite_ok(argv[2]) || have_dir) {
                        snprintf(msg, n, "base: no Debian suite");
                        return -EINVAL;
                }
                /* every package, each by Debian's rule, joined by commas */
                size_t total = 0;
                for (size_t i = 3; i < argc; i++)
                        total += strlen(argv[i]) + 1;
                packages = calloc(total + 1, 1);
                if (!packages)
                        return -ENOMEM;
                size_t len = 0;
                for (size_t i = 3; i < argc; i++) {
                        _cleanup_free_ char *list = strdup(argv[i]);
                        if (!list)
                                return -ENOMEM;
                        char *save = NULL;
                        for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                                if (!tplspec_package_ok(p)) {
                                        snprintf(msg, n, "base: '%.64s' is no package name", p);
                                        return -EINVAL;
                                }
                                /* fits: no token is longer than its argument */
                                size_t k = strlen(p);
                                if (len)
                                        packages[len++] = ',';
                                memcpy(packages + len, p, k + 1);
                                len += k;
                        }
                }
        } else if (oci) {
                char path[TPLSPEC_PATH_MAX + 1];
                const char *in_context = tplspec_oci_context_path(argv[2], path, sizeof path);
                if (argc != 3 || !tplspec_oci_ok(argv[2]) || !!in_context != have_dir) {
                        snprintf(msg, n, "base: no OCI reference");
                        return -EINVAL;
                }
                /* a path in the build context: under the directory the
                 * script gets as fd 4 */
                if (!in_context)
                        snprintf(ref, sizeof ref, "%s", argv[2]);
                else if (strncmp(argv[2], "oci:", 4) == 0)
                        snprintf(ref, sizeof ref, "oci:/proc/self/fd/4/%s", argv[2] + 4);
                else
                        snprintf(ref, sizeof ref, "docker-archive:/proc/self/fd/4/%s", path);
        } else {
                snprintf(msg, n, "base: '%.16s' is no kind of base", argv[0]);
                return -EINVAL;
        }
        char **env = calloc(ENV_MAX + 1, sizeof *env);
        size_t k = 0;
        int r = env ? 0 : -ENOMEM;
        if (r >= 0 && strcmp(argv[1], "0") != 0)
                r = add(env, &k, "MIN_IMAGE_MB", argv[1]);
        if (r >= 0 && debian)
                r = add(env, &k, "SUITE", argv[2]);
        if (r >= 0 && debian)
                r = add(env, &k, "PACKAGES", packages);
        if (r >= 0 && oci)
                r = add(env, &k, "OCI_REF", ref);
        if (r >= 0 && oci) {
                /* what checks the image's layers: this very binary (by its
                 * pid: a binary replaced on disk since still runs) */
                char self[32];
                snprintf(self, sizeof self, "/proc/%d/exe", (int) getpid());
                r = add(env, &k, "OCI_CHECK", self);
        }
        char *script = r >= 0 ? strdup_printf("%s/%s", images, debian ? "debian.sh" : "oci.sh") : NULL;
        if (!script) {
                base_step_env_free(env);
                return r < 0 ? r : -ENOMEM;
        }
        *ret_script = script;
        *ret_env = env;
        return 0;
}

/* ---- the image's layers, before anything unpacks them ---- */

#define LAYOUT_INDEX_MAX (1u << 20)
#define LAYOUT_MANIFEST_MAX (4u << 20)

/* dirfd/blobs/sha256/HEX of a digest "sha256:HEX", opened (no link
 * followed); -EBADMSG for another digest. */
static int open_blob(int dirfd, const char *digest, char *msg, size_t n) {
        const char *hex = digest && strncmp(digest, "sha256:", 7) == 0 ? digest + 7 : NULL;
        if (!hex || strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64) {
                snprintf(msg, n, "the image names a blob by '%.80s', no sha256 digest", digest ? digest : "");
                return -EBADMSG;
        }
        _cleanup_close_ int blobs = openat(dirfd, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int sha = blobs < 0 ? -1 : openat(blobs, "sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int fd = sha < 0 ? -1 : openat(sha, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                int r = fd < 0 ? negative_errno() : -EBADMSG;
                safe_close(fd);
                snprintf(msg, n, "the image has no blob %s", digest);
                return r;
        }
        return fd;
}

/* The JSON of a blob or file (at most max bytes), as an object. */
static json_t *read_json(int fd, size_t max, const char *what, char *msg, size_t n) {
        _cleanup_free_ char *buf = malloc(max + 1);
        size_t len = 0;
        for (ssize_t k; buf && len <= max && (k = read(fd, buf + len, max + 1 - len)) != 0;) {
                if (k < 0) {
                        snprintf(msg, n, "cannot read the image's %s: %s", what, strerror(errno));
                        return NULL;
                }
                len += (size_t) k;
        }
        if (!buf || len > max) {
                snprintf(msg, n, "the image's %s is larger than %zu bytes", what, max);
                return NULL;
        }
        json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(j)) {
                json_decref(j);
                snprintf(msg, n, "the image's %s is no JSON object", what);
                return NULL;
        }
        return j;
}

static bool layer_type_ok(const char *t) {
        static const char *const ok[] = {
                "application/vnd.oci.image.layer.v1.tar",
                "application/vnd.oci.image.layer.v1.tar+gzip",
                "application/vnd.oci.image.layer.v1.tar+zstd",
                "application/vnd.docker.image.rootfs.diff.tar",
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
        };
        for (size_t i = 0; t && i < ARRAY_SIZE(ok); i++)
                if (strcmp(t, ok[i]) == 0)
                        return true;
        return false;
}

int base_step_check_layout(int dirfd, char *msg, size_t n) {
        _cleanup_close_ int ifd = openat(dirfd, "index.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (ifd < 0) {
                snprintf(msg, n, "the image has no index.json: %s", strerror(errno));
                return -EBADMSG;
        }
        _cleanup_(json_decrefp) json_t *index = read_json(ifd, LAYOUT_INDEX_MAX, "index.json", msg, n);
        if (!index)
                return -EBADMSG;
        json_t *manifests = json_object_get(index, "manifests");
        if (json_array_size(manifests) != 1) {
                snprintf(msg, n, "the image's index.json lists %zu manifests, not one", json_array_size(manifests));
                return -EBADMSG;
        }
        json_t *desc = json_array_get(manifests, 0);
        const char *mtype = json_string_value(json_object_get(desc, "mediaType"));
        if (mtype && strcmp(mtype, "application/vnd.oci.image.manifest.v1+json") != 0) {
                snprintf(msg, n, "the image's manifest is a '%.80s', not an image manifest", mtype);
                return -EBADMSG;
        }
        _cleanup_close_ int mfd = open_blob(dirfd, json_string_value(json_object_get(desc, "digest")), msg, n);
        if (mfd < 0)
                return mfd;
        _cleanup_(json_decrefp) json_t *manifest = read_json(mfd, LAYOUT_MANIFEST_MAX, "manifest", msg, n);
        if (!manifest)
                return -EBADMSG;
        json_t *layers = json_object_get(manifest, "layers");
        size_t count = json_array_size(layers);
        if (!json_is_array(layers) || count > BASE_STEP_LAYERS_MAX) {
                snprintf(msg, n, "the image has %zu layers: at most %d (limits: docs/templates.md)", count,
                         BASE_STEP_LAYERS_MAX);
                return -EFBIG;
        }
        /* the sizes the manifest gives, each checked against its blob */
        uint64_t total = 0;
        for (size_t i = 0; i < count; i++) {
                json_t *l = json_array_get(layers, i);
                json_int_t size = json_integer_value(json_object_get(l, "size"));
                const char *t = json_string_value(json_object_get(l, "mediaType"));
                if (!layer_type_ok(t)) {
                        snprintf(msg, n, "image layer %zu is a '%.80s', not a tar layer", i + 1, t ? t : "");
                        return -EBADMSG;
                }
                if (size < 0 || (uint64_t) size > BASE_STEP_LAYERS_BYTES_MAX - total) {
                        snprintf(msg, n, "the image's layers add up to more than %llu GiB compressed (limits: "
                                 "docs/templates.md)", (unsigned long long) (BASE_STEP_LAYERS_BYTES_MAX >> 30));
                        return -EFBIG;
                }
                total += (uint64_t) size;
        }
        _cleanup_(buildctx_freep) struct buildctx *c = NULL;
        int r = buildctx_new(BUILDCTX_LAYERS, NULL, &c);
        if (r < 0)
                return r;
        for (size_t i = 0; i < count; i++) {
                json_t *l = json_array_get(layers, i);
                _cleanup_close_ int fd = open_blob(dirfd, json_string_value(json_object_get(l, "digest")), msg, n);
                if (fd < 0)
                        return fd;
                struct stat st;
                if (fstat(fd, &st) < 0 || (uint64_t) st.st_size != (uint64_t) json_integer_value(json_object_get(l, "size"))) {
                        snprintf(msg, n, "image layer %zu is not the size its manifest says", i + 1);
                        return -EBADMSG;
                }
                char err[BUILDCTX_ERR_MAX];
                if ((r = buildctx_feed_fd(c, fd, err)) < 0) {
                        snprintf(msg, n, "%s", err);
                        return r;
                }
        }
        snprintf(msg, n, "%zu layers, %" PRIu64 " entries, %" PRIu64 " bytes of files: checked", count,
                 buildctx_entries(c), buildctx_total_bytes(c));
        return 0;
}

int base_step_check_layout_main(int argc, char **argv) {
        char msg[512] = "";
        if (argc != 1) {
                fprintf(stderr, "usage: airlock-nodemgr --check-oci-layout DIR\n");
                return 2;
        }
        _cleanup_close_ int dirfd = open(argv[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int r = dirfd < 0 ? (snprintf(msg, sizeof msg, "cannot open %s: %s", argv[0], strerror(errno)), -EBADMSG)
                          : base_step_check_layout(dirfd, msg, sizeof msg);
        fprintf(r < 0 ? stderr : stdout, "%s\n", msg);
        return r < 0 ? 1 : 0;
}
