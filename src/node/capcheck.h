/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's half of execution capabilities (lib/cap): every data-plane
 * request carries a token that the control plane signed; the node verifies
 * it with the public keys of CAP_KEYS_DIR/public (reloaded when that
 * directory changes, so a key rotation needs no restart) and compares the
 * claims with its own record of the sandbox: allow, refresh the route (the
 * right sandbox, another execution or node) or deny.
 */

#include <stddef.h>
#include <stdint.h>

#include "cap.h"

struct node_config;

/* Loads the public keys. A node without keys starts, but denies every
 * data-plane request until keys appear. */
int capcheck_init(const struct node_config *cfg);
void capcheck_done(void);

/* Where keys come from when a token names a key this node has not seen:
 * fn asks for them now (membership_refresh_keys(): in a cluster, a replica
 * started or rotated its key since the last heartbeat), then the key
 * directory is read again. main.c sets it before serving; unset, nothing
 * is asked. */
void capcheck_set_key_refresh(int (*fn)(void));

/* Verifies token (len bytes) and decides for the sandbox described by
 * local, for an operation needing every bit of need; need CAP_ACCESS_PORTS
 * alone is a request to guest port `port` over HTTP, which the token must
 * name (cap_decide_port). Returns the decision; *ret_why (static text)
 * says what failed for a deny. */
enum cap_decision capcheck(const char *token, size_t len, const struct cap_record *local, uint32_t need,
                           uint16_t port, const char **ret_why);
