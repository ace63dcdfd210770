/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Running airlock-node on a single machine: one command starts everything.
 * Its parent (airlock-nodemgr, or airlockd when it runs without privilege
 * separation) supervises it: a node that exits is started again (its VMs
 * keep running and the new node adopts them) unless it keeps dying; when
 * the parent dies the node gets SIGUSR1 and hands its VMs over.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

/* Forks and execs config->node_binary --data-dir D --socket S with the
 * inherited environment. *ret_pid gets the child. */
int spawn_node(const struct daemon_config *config, pid_t *ret_pid);

/* -ECHILD when the starting node pid has exited (reaped, and logged), else
 * 0: what a supervisor checks while it waits for the node to come up. */
int spawn_exited_early(pid_t pid);

/* Waits until something accepts connections on socket_path. -ECHILD when
 * pid (if > 0) exits first, -ETIMEDOUT after timeout_s. */
int spawn_wait_socket(const char *socket_path, pid_t pid, unsigned timeout_s);

/* What a supervisor does instead of sleeping while it waits for its node
 * (for at most ms): airlock-nodemgr serves the node's requests meanwhile,
 * since a starting or stopping node needs them. NULL: just sleep. */
typedef void (*spawn_wait_fn)(void *userdata, int ms);

/* Sends sig (SIGTERM stops the VMs, SIGUSR1 hands them over), waits up to
 * grace_s for the child, then SIGKILLs it. Returns the child's wait status
 * (>= 0) or a negative errno. */
int spawn_stop(pid_t pid, int sig, unsigned grace_s, spawn_wait_fn wait, void *userdata);

/* How a supervisor starts its node and waits until it serves; *ret_pid is
 * set (or -1) also on failure, so the caller can stop what started. */
typedef int (*spawn_start_fn)(const struct daemon_config *c, void *userdata, pid_t *ret_pid);

/* airlockd's spawn_start_fn: spawn_node(), then spawn_wait_socket(). */
int spawn_start(const struct daemon_config *c, void *userdata, pid_t *ret_pid);

#define SPAWN_STOP_GRACE_S 30
/* More node exits than this within SPAWN_RESTART_WINDOW_NS give up. */
#define SPAWN_RESTARTS_MAX 5
#define SPAWN_RESTART_WINDOW_NS (60 * 1000000000ULL)

/* Starts the node again with start after it exited, unless it exited too
 * often lately (restarts[] holds the times of the last ones, at least
 * SPAWN_RESTARTS_MAX; -ELOOP then). A start that fails is stopped (wait as
 * for spawn_stop()). */
int spawn_restart(const struct daemon_config *c, uint64_t *restarts, size_t *n, spawn_start_fn start,
                 spawn_wait_fn wait, void *userdata, pid_t *ret_pid);
