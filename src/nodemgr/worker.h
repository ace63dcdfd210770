/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * airlock-nodemgr --worker: a node of a cluster on a machine without
 * airlockd, with the privilege separation of one machine (docs/
 * architecture.md, "A worker of a cluster"). airlock-node started as root
 * with --join execs `airlock-nodemgr --worker ARGS...` with its own
 * arguments, its resolved settings in the environment (node_config_export)
 * and its binary in AIRLOCK_NODE_BINARY; this
 *
 *   1. creates the users airlock-node and airlock-gw (not airlock: no
 *      airlockd, no DATA_DIR/control), keeps DATA_DIR root's (0711), sets
 *      up the node's storage and hands it DATA_DIR/cluster (0700), where it
 *      keeps its key, its certificates and the capability keys;
 *   2. reads the join token file as root (it may be root's, mode 0600) at
 *      each start of the node and gives the token to that child alone, in
 *      its environment (AIRLOCK_JOIN_TOKEN; never an argument: argv is
 *      world-readable in /proc); a joined node ignores it;
 *   3. starts airlock-gw, then airlock-node as airlock-node with the same
 *      arguments, serves its privileged requests on DATA_DIR/run/nodemgr.sock
 *      and restarts both when they die. A node that has not joined yet (no
 *      DATA_DIR/cluster/node.crt: no replica answered, say) exits and is
 *      started again after 2 s, then 4, 8, ... up to a minute, until it
 *      joins; a joined one as on one machine (SPAWN_RESTARTS_MAX exits
 *      within a minute: we give up and exit 1);
 *   4. on SIGTERM/SIGINT stops the node (which stops its VMs), then the
 *      gateway, and exits.
 */

/* argv: airlock-node's arguments (NULL-terminated). The exit status. */
int worker_main(int argc, char **argv);
