/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Calls into a guest that more than one part of the node makes: installing
 * a sandbox's identity (create, fork, wake, warm pools), running one
 * command to its end (a template's start) and rehearsing a sandbox's
 * start (template builds, warm VMs).
 */

#include <jansson.h>
#include <stddef.h>

struct guestconn;

/* IDENTITY: sandbox_id as id and hostname, env, the wall clock and a fresh
 * RNG seed, so clones of one snapshot never share random state. Waits up
 * to timeout_ms for the agent's answer; on ERROR *ret_message (if given)
 * says why. */
int guestops_identity(struct guestconn *g, const char *sandbox_id, json_t *env, int timeout_ms, char **ret_message);

/* A command for the guest: argv (a JSON array of strings), env (an object
 * of strings; NULL: none), cwd (NULL: "/"), user (NULL: root). Its output
 * is appended to out_fd when > 0, and its start kept in out (out_size
 * bytes, NUL-terminated once released or waited for). timeout_ms bounds
 * the start (the agent's answer to EXEC), 10 s when 0. */
struct guestops_exec {
        json_t *argv;
        json_t *env;
        const char *cwd;
        const char *user;
        int out_fd;
        char *out;
        size_t out_size;
        int timeout_ms;
};

/* A command started in the guest (guestops_spawn), followed until
 * released: releasing it stops following, the process runs on in the
 * guest (a template's start command runs into its snapshot). */
struct guestops_proc;
int guestops_spawn(struct guestconn *g, const struct guestops_exec *e, struct guestops_proc **ret, char **ret_message);
/* Waits up to timeout_ms for its exit: 0 with *ret_exit_code, -ETIMEDOUT
 * while it runs (0 ms: a look), -ECONNRESET when the channel died. */
int guestops_proc_wait(struct guestops_proc *p, int timeout_ms, int *ret_exit_code);
void guestops_proc_release(struct guestops_proc *p);

/* guestops_spawn(), then waits up to timeout_ms for its exit (as
 * guestops_proc_wait()). -ENOENT when argv[0] does not exist. */
int guestops_exec(struct guestconn *g, const struct guestops_exec *e, int timeout_ms, int *ret_exit_code,
                  char **ret_message);

/* Runs argv in the guest as root, env empty, in "/", and waits up to
 * timeout_ms for it to exit: 0 with *ret_exit_code, -ENOENT when argv[0]
 * does not exist, -ETIMEDOUT, -ECONNRESET when the channel died. out (may
 * be NULL) gets the start of its output, NUL-terminated; *ret_message the
 * agent's words when it refused to start it. */
int guestops_run(struct guestconn *g, json_t *argv, int timeout_ms, int *ret_exit_code, char *out, size_t out_size,
                 char **ret_message);

/* Writes len bytes of data to path in the guest (FILE_WRITE, mode as
 * given, root's) and waits up to timeout_ms for the agent to have it in
 * place. On ERROR the guest's -errno and *ret_message (if given). */
int guestops_file_put(struct guestconn *g, const char *path, unsigned mode, const void *data, size_t len,
                      int timeout_ms, char **ret_message);

/*
 * Runs, once, what a sandbox's start and its first command will run: an
 * IDENTITY of no sandbox (the sandbox's own replaces every part of it) and
 * `true`. A template's build does it before its snapshot, so that every
 * restore finds the files those paths read in the guest's page cache; a
 * warm VM does it after its restore, because under TCG a new QEMU has no
 * translated code, and a first pass through the agent's identity and exec
 * paths, the guest kernel's and the dynamic loader's costs tens of
 * milliseconds each. ctx names the VM in the log.
 */
int guestops_rehearse(struct guestconn *g, const char *ctx);
