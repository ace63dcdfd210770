/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A template base's root file system (template.step "base", lib/mgr): the
 * node's parameters are checked again here, on root's side, by lib/tplspec's
 * rules, and become the environment of images/debian.sh or images/oci.sh.
 * No parameter reaches a shell as code: each is one environment variable.
 */

#include <stdbool.h>
#include <stddef.h>

/* argv: ["debian", DISK_MIB, SUITE, "PKG,PKG,..."...] or ["oci", DISK_MIB,
 * REF] (mgr.h). have_dir: the request named a directory (fd 4 of the
 * script) holding an OCI archive or layout of the build context.
 * *ret_script: images/debian.sh or images/oci.sh under images;
 * *ret_env: "K=V" strings to add to the script's environment
 * (NULL-terminated; free with base_step_env_free()). -EINVAL with msg. */
int base_step_prepare(char *const *argv, const char *images, bool have_dir, char **ret_script, char ***ret_env,
                      char *msg, size_t n);
void base_step_env_free(char **env);
static inline void base_step_env_freep(char ***env) {
        base_step_env_free(*env);
}
