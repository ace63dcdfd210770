/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's side of the egress gateway, airlock-gw (src/gw/, docs/network.md):
 * the gateway serves every sandbox's network from the sockets the node hands
 * it (made in the VM's namespace with its tap, lib/vmnet) and enforces the
 * sandbox's policy (lib/netpolicy, canonical JSON text). One request per
 * connection on the gateway's socket, in lib/mgr framing (JSON + fds).
 *
 * A gateway that restarts has lost its sandboxes: gwclient_tick() (on a
 * thread of its own, every second) notices its new boot id and calls the
 * reattach function, which makes new sockets for every running sandbox
 * (vmm_net_listen) and attaches them again.
 *
 * Every function is thread-safe and returns 0 or a negative errno (-ENOENT:
 * the gateway does not know that sandbox; -ENOTCONN: no gateway configured or
 * it does not answer), logging what failed with ctx.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* AIRLOCK_GW_SOCKET: where the gateway listens; unset: no gateway (VMs get
 * their NIC, but nothing serves it). Starts the thread of gwclient_tick(). */
void gwclient_setup(const char *socket_path, int (*reattach_all)(void));
bool gwclient_enabled(void);

/* Hands the gateway the sandbox's sockets (tcp_fd, dns_fd: copies are
 * passed, the caller keeps and closes its own) and its policy; replaces an
 * attachment of the same sandbox (a new execution). */
int gwclient_attach(const char *sandbox_id, unsigned execution, const char *policy_json, int tcp_fd, int dns_fd,
                    const char *ctx);

/* A new policy for new connections and DNS queries of the sandbox. */
int gwclient_set_policy(const char *sandbox_id, const char *policy_json, const char *ctx);

/* The sandbox's VM is gone: the gateway closes its sockets and connections. */
int gwclient_detach(const char *sandbox_id, const char *ctx);

/* The sandbox is deleted: detached, and the gateway drops what it kept
 * of it across its own restarts (its bindings and log). */
int gwclient_forget(const char *sandbox_id, const char *ctx);

/* The newest limit entries of the sandbox's network log (oldest first), as
 * a JSON array to decref: {"ts_ms","kind":"dns"|"tcp","name"?,"addr"?,
 * "port"?,"action":"allow"|"deny","reason"}. */
int gwclient_log(const char *sandbox_id, unsigned limit, json_t **ret_entries, const char *ctx);

/* The sandbox's credentials (replaces what the gateway had): secrets_json
 * is a JSON array text of credential objects (docs/node-protocol.md,
 * sandbox.secrets.set); "[]" removes them all. The values travel only over
 * this socket and live only in the gateway's memory. */
int gwclient_set_secrets(const char *sandbox_id, const char *secrets_json, const char *ctx);

/* The gateway's audit events after sequence number `after` (at most limit):
 * *ret_reply (to decref) = {"boot_id", "events": [{"seq","ts_ms","sandbox",
 * "secret","host","port","method","path","action":"injected"|"refused",
 * "reason"}], "next"}; a new boot_id means the sequence started over. */
int gwclient_audit_read(uint64_t after, unsigned limit, json_t **ret_reply, const char *ctx);

/* Pings the gateway; after it restarted, reattaches all (the thread's). */
void gwclient_tick(void);
