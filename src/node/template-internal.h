/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What template.c (the built-in templates) shares with template-build.c
 * (templates built from specs) and template-files.c (paths, content
 * hashes): the steps of a build, the build VM and the bookkeeping that lets
 * the node's shutdown kill what a build runs.
 */

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "template.h"

struct guestconn;
struct vmm;

/* Paths: the config bounds directories to 4095 bytes and names to 64, so
 * every path a build makes fits; template_pathf() formats into one
 * (TEMPLATE_PATH_BUF bytes) and refuses to truncate (-ENAMETOOLONG). */
#define TEMPLATE_PATH_BUF 4608
int template_pathf(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* template-files.c: a template's content hash over every input of its
 * build (recipe, scripts, guest agent, the memory it is built with), its
 * first HASH_BYTES as hex, and the kernel's (out_kernel). qemu_version:
 * the first line of the QEMU binary's --version ("": unknown). On failure
 * *ret_error says which input is missing. */
/* Extra kernel arguments of template VMs (vmm adds console, root and TSC ones). */
#define TEMPLATE_CMDLINE ""
#define TEMPLATE_VCPUS 1
#define HASH_BYTES 16
#define HASH_HEX (2 * HASH_BYTES + 1)
struct node_config;
int template_hash(const struct node_config *cfg, const char *qemu_version, const char *name,
                  unsigned memory_mib, char out[HASH_HEX], char out_kernel[HASH_HEX], char **ret_error);

/* What a build runs now, so a shutdown (or a cancel) can kill it: a
 * script's process group, a step of airlock-nodemgr's, or the build VM. Read and written under the
 * module's lock (template_track_kill() takes it). */
struct template_track {
        pid_t pgid;
        struct vmm *vmm;
        /* a step airlock-nodemgr runs: its connection, shut down to
         * cancel it (nodemgr then kills the step) */
        bool mgr_pending;
        int mgr_conn;
};

/* Kills what t runs now (a cancelled build); later steps still start:
 * the caller checks its own cancel flag between them. */
void template_track_kill(struct template_track *t);

/* Runs argv (PATH search) as the node's own user, its output appended to
 * log_path. On failure *ret_error says what failed. */
int template_run_step(struct template_track *t, const char *ctx, char *const argv[], const char *log_path,
                      char **ret_error);

/* One script step, its output appended to log_path: argv as the node's
 * user, or under airlock-nodemgr its template.step (step, name, dir/out,
 * kernel_dir, params: lib/mgr). On failure *ret_error says what failed. */
int template_build_step(struct template_track *t, const char *ctx, char *const argv[], const char *step,
                        const char *name, const char *dir, const char *out, const char *kernel_dir,
                        char *const *params, const char *log_path, char **ret_error);

/* A build VM: dir holds initramfs.cpio and rootfs.img and gets mem, state
 * and the VM's logs. After the agent answers, work() runs (it must run
 * template_run_start() itself); without one the template's own start
 * runs. Then a sandbox's start is rehearsed and the snapshot saved. */
struct template_boot {
        const char *ctx;
        const char *dir;
        const char *kernel_dir;
        unsigned memory_mib;
        unsigned vcpus; /* 0: 1 */
        struct template_track *track;
        int (*work)(struct guestconn *g, struct vmm *v, void *userdata, char **ret_error);
        void *userdata;
        /* network_id set: the gateway serves the VM under that id with
         * policy network (canonical JSON text; NULL: allow-all) while it
         * runs; else the VM has a NIC nothing serves */
        const char *network_id;
        const char *network;
};
int template_boot_and_save(const struct template_boot *b, char **ret_error);

/* Runs the image's /etc/airlock/template-start if it has one. */
int template_run_start(struct guestconn *g, const char *ctx, char **ret_error);

struct template_info *template_info_copy(const struct template_info *t);

const char *template_dir(void);
const struct node_config *template_config(void);
const char *template_qemu_version(void);
bool template_shutting_down(void);
