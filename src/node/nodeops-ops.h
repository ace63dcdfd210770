/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The ops of the node protocol that live beside nodeops.c's table, one
 * file a family (docs/node-protocol.md); each takes the request and replies
 * on the connection itself (conn.h), its fields checked by nodeops-req.h.
 */

#include <jansson.h>

struct node_conn;

/* ---- File transfers, file ops and file.watch (nodeops-files.c) ---- */

int nodeops_file_write(struct node_conn *c, json_t *req);
int nodeops_file_read(struct node_conn *c, json_t *req);
int nodeops_file_list(struct node_conn *c, json_t *req);
int nodeops_file_stat(struct node_conn *c, json_t *req);
int nodeops_file_remove(struct node_conn *c, json_t *req);
int nodeops_file_mkdir(struct node_conn *c, json_t *req);
int nodeops_file_rename(struct node_conn *c, json_t *req);
int nodeops_file_setattr(struct node_conn *c, json_t *req);
int nodeops_file_watch(struct node_conn *c, json_t *req);

/* ---- The volume store (nodeops-volume.c) ---- */

/* volume.create {id,size}: a new volume (an ext4 file system) */
int nodeops_volume_create(struct node_conn *c, json_t *req);
/* volume.clone {id,from}: a new volume of from's current content */
int nodeops_volume_clone(struct node_conn *c, json_t *req);
/* volume.delete {id}: refused while a sandbox holds it */
int nodeops_volume_delete(struct node_conn *c, json_t *req);

/* ---- Lifecycle verbs, snapshots, fork, suspend and wake (nodeops-lifecycle.c) ---- */

int nodeops_sandbox_pause(struct node_conn *c, json_t *req);
/* sandbox.agent.upgrade {id}: its guest agent replaced by the node's. */
int nodeops_sandbox_agent_upgrade(struct node_conn *c, json_t *req);
int nodeops_sandbox_resume(struct node_conn *c, json_t *req);
int nodeops_sandbox_stop(struct node_conn *c, json_t *req);
int nodeops_sandbox_start(struct node_conn *c, json_t *req);
int nodeops_sandbox_snapshot(struct node_conn *c, json_t *req);
int nodeops_sandbox_fork(struct node_conn *c, json_t *req);
int nodeops_sandbox_suspend(struct node_conn *c, json_t *req);
int nodeops_sandbox_publish(struct node_conn *c, json_t *req);
int nodeops_sandbox_wake(struct node_conn *c, json_t *req);
int nodeops_suspended_delete(struct node_conn *c, json_t *req);
int nodeops_suspended_get(struct node_conn *c, json_t *req);
int nodeops_suspended_upload(struct node_conn *c, json_t *req);
int nodeops_sandbox_rollback(struct node_conn *c, json_t *req);
int nodeops_snapshot_delete(struct node_conn *c, json_t *req);

/* ---- Credentials and the gateway's audit log (nodeops-secrets.c) ---- */

/* sandbox.secrets.set {id, secrets}: -> {"names"}. */
int nodeops_secrets_set(struct node_conn *c, json_t *req);
/* sandbox.secrets.get {id}: -> {"names"} of the set held in memory. */
int nodeops_secrets_get(struct node_conn *c, json_t *req);
/* audit.read {after, limit}: the gateway's reply {"boot_id","events","next"}
 * (no gateway: {"events":[],"gateway_error"}) plus "node_boot_id". */
int nodeops_audit_read(struct node_conn *c, json_t *req);
/* Random per node process: a new one means the node restarted. */
const char *nodeops_boot_id(void);

/* ---- Template builds from specs (nodeops-templates.c) ---- */

/* template.build {name, spec, base?, network?, context?}: with "context":
 * true the build context (a tar) follows as node-data frames and a
 * node-end. -> {"name","state":"building"|"ready"}. */
int nodeops_template_build(struct node_conn *c, json_t *req);
/* template.get {name} -> the build's state (template_custom_status()). */
int nodeops_template_get(struct node_conn *c, json_t *req);
/* template.log {name, offset?, limit?} -> {"data","next","done"}. */
int nodeops_template_log(struct node_conn *c, json_t *req);
/* template.delete {name} -> {}: cancels its build, removes it. */
int nodeops_template_delete(struct node_conn *c, json_t *req);
