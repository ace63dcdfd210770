/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * port.http (docs/node-protocol.md): one HTTP request from the API to a
 * server in the guest on a service port. The request names the port, the
 * method, the target and the end-to-end headers, and carries a capability
 * for exactly that sandbox, execution, port and protocol; its body follows
 * as NODE_DATA frames up to NODE_END. The node connects from inside the
 * VM's network namespace (airlock-nodemgr makes the socket there: nothing
 * else is reachable from it), writes the request with its own framing
 * (Content-Length or chunked, Connection: close), and replies with the
 * response's status and headers, then its body as NODE_DATA, then NODE_END
 * ({"abort":true} when the server broke off).
 */

#include <jansson.h>

struct node_conn;

int portproxy_http(struct node_conn *c, json_t *req);
