/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Templates built from specs (lib/tplspec, docs/templates.md): the daemon
 * names each one by its content, "c-" and 32 hex digits, and asks the node
 * to build it (template.build, docs/node-protocol.md). A build boots a VM
 * from its base's disk -- another template's, or a root file system made
 * from a Debian suite or an OCI image -- runs the steps inside it, starts
 * the start command, waits for its readiness and saves the snapshot into
 * TEMPLATES_DIR/<name>/, like a built-in template. Its log is kept in
 * TEMPLATES_DIR/<name>.log until the template is deleted.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "template.h"

/* What a build starts from and runs in; every field is checked by the
 * caller. spec: the canonical JSON spec (tplspec_to_json()); base: the
 * node's name of the base template (spec base "template"), else NULL;
 * context: a tar file of the build context the build takes over (renamed
 * into its directory), or NULL; network: the build VM's egress policy
 * (canonical JSON text, NULL: allow-all). */
struct template_build_request {
        const char *name;
        json_t *spec;
        const char *base;
        const char *context;
        const char *network;
};

/* Starts the build on a thread of its own. 0: started, 1: built already,
 * -EBUSY: it is building, -EINVAL with *ret_error: the request cannot
 * build (an unknown base, a COPY source not in the context...). */
int template_custom_build(const struct template_build_request *q, char **ret_error);

/* {"name","state":"building"|"ready"|"failed","step","steps","step_text",
 * "elapsed_ms","error"?,"log_bytes"}; -ENOENT: no such template or build. */
int template_custom_status(const char *name, json_t **ret);

/* Up to max bytes of the build log from offset: *ret_data (malloc'd, may
 * hold anything the build printed), *ret_len, *ret_done (the build ended
 * and nothing follows). -ENOENT: no log. */
int template_custom_log(const char *name, uint64_t offset, size_t max, char **ret_data, size_t *ret_len,
                        bool *ret_done);

/* Cancels its build if one runs and removes the template and its log.
 * -ENOENT: nothing of that name. */
int template_custom_delete(const char *name);

/* Where a build of this process is: -EAGAIN building, -EIO failed
 * (*ret_error, if given, its message), 0 otherwise. main.c hands it to
 * template_set_build_state(): template.c's lookup asks it, and nothing
 * else below calls the builder. */
int template_custom_state(const char *name, char **ret_error);

/* Cancels every build (the node is stopping); after template_shutdown(). */
void template_custom_shutdown(void);
/* Then waits (ms at most) until the builds have ended, their VMs' run
 * dirs removed. */
void template_custom_shutdown_wait(int ms);
