/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Credential ops of the node protocol (nodeops-secrets.c). */

#include <jansson.h>

struct node_conn;

/* sandbox.secrets.set {id, secrets}: -> {"names"}. */
int nodeops_secrets_set(struct node_conn *c, json_t *req);
/* sandbox.secrets.get {id}: -> {"names"} of the set held in memory. */
int nodeops_secrets_get(struct node_conn *c, json_t *req);
/* audit.read {after, limit}: the gateway's reply {"boot_id","events","next"}
 * (no gateway: {"events":[],"gateway_error"}) plus "node_boot_id". */
int nodeops_audit_read(struct node_conn *c, json_t *req);
/* Random per node process: a new one means the node restarted. */
const char *nodeops_boot_id(void);
