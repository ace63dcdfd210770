/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The file ops of docs/node-protocol.md (nodeops-files.c): file.write,
 * file.read, file.list, file.stat, file.remove, file.mkdir, file.rename and
 * file.watch. Each replies itself.
 */

#include <jansson.h>

struct node_conn;

int nodeops_file_write(struct node_conn *c, json_t *req);
int nodeops_file_read(struct node_conn *c, json_t *req);
int nodeops_file_list(struct node_conn *c, json_t *req);
int nodeops_file_stat(struct node_conn *c, json_t *req);
int nodeops_file_remove(struct node_conn *c, json_t *req);
int nodeops_file_mkdir(struct node_conn *c, json_t *req);
int nodeops_file_rename(struct node_conn *c, json_t *req);
int nodeops_file_watch(struct node_conn *c, json_t *req);
