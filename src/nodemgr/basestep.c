/* SPDX-License-Identifier: Apache-2.0 */
#include "basestep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                                if (*packages)
                                        strcat(packages, ",");
                                strcat(packages, p);
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
        char *script = r >= 0 ? strdup_printf("%s/%s", images, debian ? "debian.sh" : "oci.sh") : NULL;
        if (!script) {
                base_step_env_free(env);
                return r < 0 ? r : -ENOMEM;
        }
        *ret_script = script;
        *ret_env = env;
        return 0;
}
