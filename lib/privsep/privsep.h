/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Privilege separation on one machine (docs/security.md, "Privileges"):
 * airlockd started as root becomes airlock-nodemgr, the one root process,
 * which keeps the data directory root's, gives airlockd its own directory
 * (DATA_DIR/control) and runs it as the unprivileged user `airlock`, created
 * at the first start.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

#define PRIVSEP_USER_DEFAULT "airlock"           /* airlockd; AIRLOCK_USER overrides */
#define PRIVSEP_NODE_USER_DEFAULT "airlock-node" /* airlock-node; AIRLOCK_NODE_USER overrides */

/* Creates DATA_DIR/control (mode 0700 for a new one) and moves what an
 * earlier layout kept in DATA_DIR itself (airlock.db and its journals,
 * admin.token, keys/) into it. */
int privsep_control_dir(const struct daemon_config *c);

/* An unprivileged system user: the name in the environment variable env,
 * or def; created (useradd --system --user-group, no shell, no home) when
 * missing. Refuses a user or primary group that is root. */
int privsep_user(const char *env, const char *def, uid_t *ret_uid, gid_t *ret_gid, const char **ret_name);

/* Hands DATA_DIR/control and everything in it to uid:gid (no symlink is
 * followed), and makes DATA_DIR traversable (0711) but root's. */
int privsep_hand_over(const struct daemon_config *c, uid_t uid, gid_t gid);

/* In a forked child: drops to uid:gid with no supplementary groups and
 * no_new_privs, for good (async-signal-safe). 0 or -1. */
int privsep_drop(uid_t uid, gid_t gid);
