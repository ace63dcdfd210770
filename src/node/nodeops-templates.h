/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Template build ops of the node protocol (nodeops-templates.c,
 * docs/node-protocol.md). */

#include <jansson.h>

struct node_conn;

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
