/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The lifecycle ops of docs/node-protocol.md: sandbox.pause,
 * sandbox.resume, sandbox.stop, sandbox.start, and the disk snapshot ops
 * sandbox.snapshot, sandbox.rollback, snapshot.delete. Each replies itself.
 */

#include <jansson.h>

struct node_conn;

int nodeops_sandbox_pause(struct node_conn *c, json_t *req);
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
