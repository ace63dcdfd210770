/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What airlock-nodemgr does for the node before the node runs as its own
 * unprivileged user (docs/security.md, "Privileges"): sets up the storage
 * (mounting the btrfs loop volume where the data dir cannot reflink), hands
 * the node's directories to the node user, opens the node's listening
 * socket, and starts the node with setresuid, no supplementary groups and
 * no_new_privs; for a node of a cluster also its DATA_DIR/cluster.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"
#include "mgrserver.h"
#include "storage.h"

/* Opens the storage of DATA_DIR as the node would (AIRLOCK_STORAGE,
 * AIRLOCK_VOLUME_GIB), tells the node where it is (AIRLOCK_STORAGE_ROOT,
 * AIRLOCK_STORAGE_REFLINK) and hands to uid:gid what the node writes: the
 * storage root's templates/ sandboxes/ pool/ objstore/ (or the volume's
 * root), DATA_DIR/run/vm, DATA_DIR/node.lock, AIRLOCK_TEMPLATES_DIR and
 * AIRLOCK_OBJSTORE_DIR. Only what root owns is handed over (what an
 * earlier root node made; never through a symlink, never a file with more
 * than one link), and VM files get the node's group. storage_close() at
 * the end unmounts a volume it mounted. */
int nodeprep_storage(const struct daemon_config *c, uid_t uid, gid_t gid, struct storage **ret);

/* The node's listening socket DATA_DIR/run/node.sock (0660, root:group), made
 * here because the node cannot write DATA_DIR/run. */
int nodeprep_listen(const struct daemon_config *c, gid_t group, int *ret_fd);
/* A listening Unix socket at path (0660, root:group), non-blocking. */
int nodeprep_listen_at(const char *path, gid_t group, int *ret_fd);

/* A node of a cluster (airlock-nodemgr --worker): DATA_DIR/cluster (0700)
 * handed to uid:gid with what is in it (the node writes its key, its
 * certificates and the capability keys there), and CAP_KEYS_DIR too when
 * it lies elsewhere. */
int nodeprep_cluster(const struct daemon_config *c, uid_t uid, gid_t gid);

/* Starts the node as uid:gid with the listening socket as fd 3 and the
 * write end of a pipe as fd 4, on which it says it is ready: NODE_BINARY
 * --data-dir D --socket S --cap-keys-dir K, then args (NULL-terminated, or
 * NULL), with our environment plus env ("NAME=VALUE" for this child only,
 * or NULL). Returns the pid and the read end. */
int nodeprep_spawn(const struct daemon_config *c, uid_t uid, gid_t gid, int listen_fd, char *const *args,
                   const char *env, pid_t *ret_pid, int *ret_ready_fd);

/* nodeprep_spawn(), then waits up to c->node_start_timeout_s until the node
 * says it is ready, serving its requests on mgr meanwhile (a starting node
 * adopts or kills the VMs of the one before through us). -ECHILD when it
 * exited first (reaped), -ETIMEDOUT. *ret_pid is set also on failure, so
 * the caller can stop what started. */
int nodeprep_start(const struct daemon_config *c, uid_t uid, gid_t gid, int listen_fd, char *const *args,
                   const char *env, struct mgr_server *mgr, pid_t *ret_pid);
