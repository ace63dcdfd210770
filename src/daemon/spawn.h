/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * airlockd runs airlock-node as its child on a single machine: one command
 * starts both. The child gets PR_SET_PDEATHSIG so it never outlives
 * airlockd; if the node exits, airlockd exits too and a supervisor restarts
 * both.
 */

#include <sys/types.h>

#include "config.h"

/* Forks and execs config->node_binary --data-dir D --socket S with the
 * inherited environment. *ret_pid gets the child. */
int node_spawn(const struct daemon_config *config, pid_t *ret_pid);

/* Waits until something accepts connections on socket_path. -ECHILD when
 * pid (if > 0) exits first, -ETIMEDOUT after timeout_s. */
int node_wait_socket(const char *socket_path, pid_t pid, unsigned timeout_s);

/* Sends SIGTERM, waits up to grace_s for the child, then SIGKILLs it.
 * Returns the child's wait status (>= 0) or a negative errno. */
int node_stop(pid_t pid, unsigned grace_s);
