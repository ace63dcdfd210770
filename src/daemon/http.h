/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The HTTP front of airlockd: libmicrohttpd with one thread per connection,
 * routing of /v1, bearer authentication, bounded request bodies (413 past
 * the limit), streamed uploads, the JSON error envelope and a per-request
 * log context. Resource logic lives in api.c.
 */

#include <stdint.h>

#include "config.h"
#include "store.h"

struct http_server;

/* Starts serving on config->listen_addr. config and store must outlive the
 * server. */
int http_server_start(const struct daemon_config *config, struct store *store, struct http_server **ret);
/* The port actually bound (useful with port 0). */
uint16_t http_server_port(struct http_server *s);
/* Stops accepting new connections and tells running streams to finish;
 * requests in flight continue. */
void http_server_quiesce(struct http_server *s);
/* Stops the server, waiting for connection threads; NULL is fine. */
void http_server_stop(struct http_server *s);
