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

#define BASE_STEP_LAYERS_MAX 128 /* an OCI image's layers */
#define BASE_STEP_LAYERS_BYTES_MAX (8ULL << 30) /* their blobs added up */

/* argv: ["debian", DISK_MIB, SUITE, "PKG,PKG,..."...] or ["oci", DISK_MIB,
 * REF] (mgr.h). have_dir: the request named a directory (fd 4 of the
 * script) holding an OCI archive or layout of the build context.
 * *ret_script: images/debian.sh or images/oci.sh under images;
 * *ret_env: "K=V" strings to add to the script's environment
 * (NULL-terminated; free with base_step_env_free()): an OCI base's also
 * OCI_CHECK, this process's binary, which images/oci.sh runs as
 * `--check-oci-layout` on the copied image. -EINVAL with msg. */
int base_step_prepare(char *const *argv, const char *images, bool have_dir, char **ret_script, char ***ret_env,
                      char *msg, size_t n);
void base_step_env_free(char **env);
static inline void base_step_env_freep(char ***env) {
        base_step_env_free(*env);
}

/* The OCI layout at dirfd (as skopeo wrote it: index.json naming one
 * image manifest) before anything unpacks it: at most
 * BASE_STEP_LAYERS_MAX layers of BASE_STEP_LAYERS_BYTES_MAX bytes in all,
 * tar layers only, each blob the size its manifest says (skopeo checked
 * the digests), every layer's entries by lib/buildctx's rules for layers
 * (no escaping or absolute path, no device, nothing under a symbolic link,
 * no whiteout outside its directory; its limits). msg (n bytes): the
 * first refusal, naming the layer and entry, or a summary. */
int base_step_check_layout(int dirfd, char *msg, size_t n);
/* `airlock-nodemgr --check-oci-layout DIR` (run by images/oci.sh inside its
 * unprivileged user namespace): 0 and a summary on stdout, 1 and why on
 * stderr. */
int base_step_check_layout_main(int argc, char **argv);
