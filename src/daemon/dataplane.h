/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * airlockd's half of execution capabilities (docs/security.md): every
 * data-plane request to a node (exec, files, sessions) carries a token that
 * airlockd signs after it authorised the caller, naming the tenant, the
 * sandbox, and the route it believes in: the node and the execution there.
 * Routes are cached; a node that runs another execution answers
 * refresh_route, and the request is retried once on a route resolved anew.
 * The cache is replaced only if it still holds the route that was refused,
 * so a slow request cannot put back a route a faster one already renewed.
 */

#include <jansson.h>
#include <stdint.h>

#include "cap.h"

struct daemon_config;
struct node_conn;

/* Loads the signing key of the key directory (creating the first one). */
int dataplane_init(const struct daemon_config *config);
void dataplane_done(void);

/*
 * One data-plane request for sandbox (owned by tenant_id, NULL: the admin)
 * needing access: adds "cap" to req, sends it, and reads the reply into
 * *ret_reply (may be NULL). With ret_conn the connection stays open for the
 * stream after the reply (node_conn_next), else it is closed. Errors as
 * node_call(); err gets the node's message.
 */
int dataplane_call(const struct daemon_config *config, const char *tenant_id, const char *sandbox, uint32_t access,
                   json_t *req, unsigned timeout_s, struct node_conn **ret_conn, json_t **ret_reply, char *err);

/* The start of an upload: sends req with a capability for a route resolved
 * just now (an upload cannot be replayed on refresh_route; the reply comes
 * after the data). */
int dataplane_open_upload(const struct daemon_config *config, const char *tenant_id, const char *sandbox,
                          uint32_t access, json_t *req, struct node_conn **ret_conn, char *err);

/* The start of a request to guest port `port` (a service port): req goes
 * with a capability for that port and "http", for a route resolved just
 * now (like an upload, it cannot be replayed: the reply comes after the
 * body). */
int dataplane_open_port(const struct daemon_config *config, const char *tenant_id, const char *sandbox,
                        uint16_t port, json_t *req, struct node_conn **ret_conn, char *err);

/* What a node reply says about where a sandbox runs ({"execution","node"}
 * of its sandbox object): cached. */
void dataplane_route_learn(const char *sandbox, const char *node_addr, const json_t *node_sandbox);
/* A deleted sandbox has no route. */
void dataplane_route_forget(const char *sandbox);

/* A new signing key (cap-keydir.h): kid and the one it replaced. */
int dataplane_rotate_key(const struct daemon_config *config, char kid[CAP_KID_MAX + 1],
                         char previous[CAP_KID_MAX + 1]);
/*
 * The one place where dataplane.c calls up: in a cluster the replica
 * (replica.c) registers at start-up what publishes a new key to the store,
 * and a rotation calls it (under the signing lock) after the key directory
 * has the new key and before that key signs anything, since a node refuses
 * a capability whose key it cannot fetch. NULL: none (one machine, or the
 * replica stopped); a running rotation finishes before this returns.
 */
void dataplane_set_key_publisher(void (*publish)(void *userdata), void *userdata);
/* The kid that signs now. */
void dataplane_current_kid(char kid[CAP_KID_MAX + 1]);
