/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Templates: a booted-once VM saved as a snapshot, from which sandboxes are
 * restored. A template is known by its recipe IMAGES_DIR/templates/<name>.sh
 * and built into TEMPLATES_DIR/<name>-<hash>/ (rootfs.img, initramfs.cpio,
 * mem, state, manifest.json, console.log), where hash covers every input
 * (scripts, guest agent binary, memory size, QEMU version). The kernel is
 * built once per kernel.sh into TEMPLATES_DIR/kernel-<hash>/.
 *
 * One build per template at a time: in-process waiters share the running
 * build, other processes wait on TEMPLATES_DIR/<name>-<hash>.lock and then
 * find the finished directory. A failed build is remembered with its error
 * and retried by the next request.
 */

#include <jansson.h>
#include <stdbool.h>

#include "macros.h"
#include "vmm.h"

struct node_config;

/* An immutable description of a built template (paths into its directory). */
struct template_info {
        char *name;
        char *hash;
        char *dir;
        char *kernel;  /* vmlinux */
        char *initrd;  /* initramfs.cpio */
        char *rootfs;  /* rootfs.img (never written: sandboxes clone it) */
        char *mem;     /* RAM file (sandboxes map it share=off) */
        char *state;   /* device state for migrate-incoming */
        char *cmdline; /* the kernel command line it was booted with */
        unsigned memory_mib;
        unsigned vcpus;
        /* a template built from a spec: what its sandboxes start with
         * (NULL: none) -- environment under the create's, the working
         * directory and user of commands that name none */
        json_t *env;
        char *workdir;
        char *user;
};

/* The machine every VM of template t runs on (a snapshot restores only into
 * the machine it was taken on), with rootfs, run_dir and log context filled
 * in. Callers set mem_path/mem_shared: the template's RAM copy-on-write for
 * restores, a RAM file of their own for cold boots. */
struct vmm_config template_vmm_config(const struct template_info *t, const char *rootfs, const char *run_dir,
                                      const char *log_ctx);

/* NULL-safe. */
void template_info_free(struct template_info *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct template_info *, template_info_free);

/* Sets up the module (creates templates_dir, reads the QEMU version, removes
 * temporary directories of dead builders). */
int template_init(const struct node_config *cfg, const char *templates_dir, enum vmm_accel accel);

/* Templates built from specs (template-build.c) are named "c-" and 32
 * lowercase hex digits (their content hash). */
#define TEMPLATE_CUSTOM_PREFIX "c-"
#define TEMPLATE_CUSTOM_ID_HEX 32
bool template_custom_name(const char *name);

/* Where the builder of templates from specs is with a name: -EAGAIN
 * building, -EIO failed (*ret_error its message), 0 otherwise. The lookup
 * (template_get(), template_peek(), template_list_json()) reads a custom
 * template's manifest itself and asks this only for a build in flight:
 * main.c sets template_custom_state() at start-up, the one call from the
 * template registry up into its builder. */
typedef int (*template_build_state_fn)(const char *name, char **ret_error);
void template_set_build_state(template_build_state_fn fn);

/* Returns a ready template, building it first when needed (in the calling
 * thread) or waiting up to wait_ms for a build another thread runs. -ENOENT:
 * no recipe of that name; -EAGAIN: still building after wait_ms; -EIO: the
 * build failed (*ret_error, if given, gets its message). */
int template_get(const char *name, int wait_ms, struct template_info **ret, char **ret_error);

/* Returns the template if it is ready now; never builds and never waits
 * (-EAGAIN otherwise, -ENOENT without a recipe). For the warm pools. */
int template_peek(const char *name, struct template_info **ret);

/* The directory of build hash of template name (TEMPLATES_DIR/NAME-HASH)
 * when this node has it whole: its rootfs.img and mem never change.
 * -ENOENT when it has not (never built here, or superseded and removed). */
int template_build_dir(const char *name, const char *hash, char **ret_dir);

/* How far a build of name in flight here is, in words ("step 3 of 4
 * (rootfs), 65 s so far"); "" when none is. */
void template_progress_text(const char *name, char *buf, size_t n);

/* Starts building cfg->prebuild, then cfg->prebuild_background, in a
 * background thread. */
int template_prebuild_start(void);

/* The prebuilt templates' state for health: [{name,state,step?,step_number?,
 * steps?,elapsed_ms?,log?,error?,background?}], the background ones after
 * the others and not counted in: *ret_ready once every other one is built,
 * *ret_failed when one failed (or has no recipe): nothing will make it ready
 * by itself, so health must say so rather than "still building". */
json_t *template_prebuild_status(bool *ret_ready, bool *ret_failed);

/* [{name,state,hash,memory_mib,error?}] for every known recipe. */
json_t *template_list_json(void);

/* Kills running build processes (scripts, the template VM): called at
 * shutdown so no QEMU is left behind. */
void template_shutdown(void);
/* After template_shutdown(): waits (ms at most) until the builds it
 * killed have ended and cleaned up after themselves (their VMs' run
 * dirs, their temporary files). */
void template_shutdown_wait(int ms);
