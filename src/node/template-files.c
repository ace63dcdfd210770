/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A template's files: the paths of its directory (template_pathf()) and
 * its content hash, taken over everything that makes it (the recipe, the
 * scripts, the guest agent, the kernel's inputs). Below template.c: it
 * reads files and calls nothing of the registry.
 */
#include "template-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodemetrics.h"
#include "nodeutil.h"
#include "proto.h"
#include "template-store.h"
#include "util.h"

/* What the build does in the VM beyond the recipe: a change here makes a
 * new template (2: a sandbox's start rehearsed before the snapshot). */
#define TEMPLATE_BUILD_REVISION "2"
#define PATH_BUF TEMPLATE_PATH_BUF
#define pathf template_pathf

int template_pathf(char *buf, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, PATH_BUF, fmt, ap);
        va_end(ap);
        return n < 0 || n >= PATH_BUF ? -ENAMETOOLONG : 0;
}

/* ---- content hashes ---- */

/* Feeds a labelled file into st: label, NUL, 8-byte size, bytes. */
static int hash_file(crypto_hash_sha256_state *st, const char *label, const char *path) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        struct stat s;
        if (fstat(fd, &s) < 0)
                return negative_errno();
        if (!S_ISREG(s.st_mode))
                return -EINVAL;
        if (s.st_size > (off_t) (1ULL << 30))
                return -EFBIG;
        uint64_t size = (uint64_t) s.st_size;
        crypto_hash_sha256_update(st, (const uint8_t *) label, strlen(label) + 1);
        crypto_hash_sha256_update(st, (const uint8_t *) &size, sizeof size);
        _cleanup_free_ uint8_t *buf = malloc(1 << 16);
        if (!buf)
                return -ENOMEM;
        uint64_t done = 0;
        while (done < size) {
                ssize_t k = read(fd, buf, 1 << 16);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EIO; /* shrank while we read it */
                size_t take = (size_t) MIN((uint64_t) k, size - done);
                crypto_hash_sha256_update(st, buf, take);
                done += take;
        }
        return 0;
}

/* Every regular file under dir (a recipe's NAME.d/), in name order, by its
 * path below dir, mode and contents: what a recipe copies into the image. */
static int hash_tree(crypto_hash_sha256_state *st, const char *label, const char *dir, unsigned depth) {
        struct dirent **names = NULL;
        int n = scandir(dir, &names, NULL, alphasort);
        if (n < 0)
                return negative_errno();
        int r = 0;
        for (int i = 0; i < n; i++) {
                const char *name = names[i]->d_name;
                char path[PATH_BUF], sub[PATH_BUF];
                struct stat s;
                if (r < 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                        continue;
                if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int) sizeof path ||
                    snprintf(sub, sizeof sub, "%s/%s", label, name) >= (int) sizeof sub)
                        r = -ENAMETOOLONG;
                else if (lstat(path, &s) < 0)
                        r = negative_errno();
                else if (S_ISDIR(s.st_mode))
                        r = depth < 16 ? hash_tree(st, sub, path, depth + 1) : -ELOOP;
                else if (S_ISREG(s.st_mode)) {
                        uint32_t mode = s.st_mode & 07777;
                        crypto_hash_sha256_update(st, (const uint8_t *) &mode, sizeof mode);
                        r = hash_file(st, sub, path);
                } else
                        r = -EINVAL; /* links and devices have no place in a recipe */
        }
        for (int i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return r;
}

static void hash_string(crypto_hash_sha256_state *st, const char *label, const char *value) {
        uint64_t size = strlen(value);
        crypto_hash_sha256_update(st, (const uint8_t *) label, strlen(label) + 1);
        crypto_hash_sha256_update(st, (const uint8_t *) &size, sizeof size);
        crypto_hash_sha256_update(st, (const uint8_t *) value, size);
}

static void hash_final(crypto_hash_sha256_state *st, char out[HASH_HEX]) {
        uint8_t h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(st, h);
        node_hex(h, HASH_BYTES, out);
}

/* The kernel directory's hash: kernel.sh and the helpers it sources. */
static int kernel_hash(const struct node_config *tcfg, char out[HASH_HEX]) {
        crypto_hash_sha256_state st;
        char path[PATH_BUF];
        crypto_hash_sha256_init(&st);
        pathf(path, "%s/kernel.sh", tcfg->images_dir);
        int r = hash_file(&st, "kernel.sh", path);
        if (r < 0)
                return r;
        pathf(path, "%s/common.sh", tcfg->images_dir);
        if (access(path, F_OK) == 0 && (r = hash_file(&st, "common.sh", path)) < 0)
                return r;
        hash_final(&st, out);
        return 0;
}

/* The template's hash over every input of its build. On failure *ret_error
 * says which input is missing. */
int template_hash(const struct node_config *tcfg, const char *qemu_version, const char *name,
                  unsigned memory_mib, char out[HASH_HEX], char out_kernel[HASH_HEX], char **ret_error) {
        crypto_hash_sha256_state st;
        char path[PATH_BUF], mem[32];
        int r;

        r = kernel_hash(tcfg, out_kernel);
        if (r < 0) {
                *ret_error = strdup_printf("cannot read %s/kernel.sh: %s", tcfg->images_dir, strerror(-r));
                return r;
        }
        crypto_hash_sha256_init(&st);
        hash_string(&st, "kernel", out_kernel);
        const struct {
                const char *label;
                const char *dir;
                const char *file;
                bool optional;
        } inputs[] = {
                {"initramfs.sh", tcfg->images_dir, "initramfs.sh", false},
                {"common.sh", tcfg->images_dir, "common.sh", true},
                {"debian.sh", tcfg->images_dir, "debian.sh", true}, /* the recipes' Debian tree */
                {"recipe", tcfg->images_dir, "templates", false},
                {"guest", tcfg->guest_binary, NULL, false},
        };
        for (size_t i = 0; i < ARRAY_SIZE(inputs); i++) {
                if (!inputs[i].file)
                        r = pathf(path, "%s", inputs[i].dir);
                else if (strcmp(inputs[i].label, "recipe") == 0)
                        r = pathf(path, "%s/templates/%s.sh", inputs[i].dir, name);
                else
                        r = pathf(path, "%s/%s", inputs[i].dir, inputs[i].file);
                if (r < 0)
                        return r;
                if (inputs[i].optional && access(path, F_OK) < 0)
                        continue;
                r = hash_file(&st, inputs[i].label, path);
                if (r < 0) {
                        *ret_error = strdup_printf("cannot read build input %s: %s", path, strerror(-r));
                        return r;
                }
        }
        /* a recipe may build on another (code-interpreter.sh runs python.sh):
         * every recipe counts, and the files of its own NAME.d/ */
        pathf(path, "%s/templates", tcfg->images_dir);
        struct dirent **names = NULL;
        int n = scandir(path, &names, NULL, alphasort);
        r = n < 0 ? negative_errno() : 0;
        for (int i = 0; i < n; i++) {
                const char *f = names[i]->d_name;
                size_t l = strlen(f);
                char recipe[PATH_BUF];
                if (r >= 0 && f[0] != '.' && l > 3 && strcmp(f + l - 3, ".sh") == 0 &&
                    (r = pathf(recipe, "%s/templates/%s", tcfg->images_dir, f)) >= 0)
                        r = hash_file(&st, f, recipe);
                free(names[i]);
        }
        free(names);
        if (r < 0) {
                *ret_error = strdup_printf("cannot read the recipes in %s: %s", path, strerror(-r));
                return r;
        }
        pathf(path, "%s/templates/%s.d", tcfg->images_dir, name);
        if (access(path, F_OK) == 0 && (r = hash_tree(&st, "tree", path, 0)) < 0) {
                *ret_error = strdup_printf("cannot read build input %s: %s", path, strerror(-r));
                return r;
        }
        /* the egress CA the recipe puts into the guest's trust store */
        const char *ca = getenv("AIRLOCK_EGRESS_CA_CERT");
        if (ca && (r = hash_file(&st, "egress-ca", ca)) < 0) {
                *ret_error = strdup_printf("cannot read the egress CA %s: %s", ca, strerror(-r));
                return r;
        }
        snprintf(mem, sizeof mem, "%u/%u", memory_mib, TEMPLATE_VCPUS);
        hash_string(&st, "memory", mem);
        hash_string(&st, "kernel-args", VMM_KERNEL_ARGS);
        hash_string(&st, "cmdline", TEMPLATE_CMDLINE);
        hash_string(&st, "machine", VMM_MACHINE_REVISION);
        hash_string(&st, "build", TEMPLATE_BUILD_REVISION);
        hash_string(&st, "qemu", qemu_version ? qemu_version : "");
        /* the accelerator and the CPU its VMs get: a snapshot resumes only
         * on the same (a KVM and a TCG node may share the templates dir) */
        hash_string(&st, "cpu", vmm_cpu_id());
        hash_final(&st, out);
        return 0;
}
