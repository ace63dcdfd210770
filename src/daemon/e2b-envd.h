/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The E2B front door's data plane (docs/e2b.md): what E2B's SDKs send to a
 * sandbox's envd, recognised by its E2b-Sandbox-Id header on airlockd's
 * port. Authenticated by X-Access-Token (the sandbox's envdAccessToken,
 * e2b-api.h); GET /health needs none. envd's Connect RPCs (process.Process,
 * filesystem.Filesystem; e2b-connect.h) and its REST paths (/files,
 * /health) are translated onto node ops with capabilities, as /v1's data
 * plane is: no E2B code runs in the VM.
 *
 * http.c hands a request over in three steps, as MHD delivers it: begin
 * (headers), data (body chunks), finish; every answer, errors included,
 * comes back as a struct api_reply in the shape the SDK parses (Connect
 * errors for RPCs, {"code","message"} for REST).
 */

#include <microhttpd.h>

#include "api.h"

struct e2b_envd_request;

/*
 * Starts an envd request for sandbox_id (the E2b-Sandbox-Id header). 0 with
 * *ret to be fed the body; 1 when *reply is the whole answer already
 * (refused before the body: no token, unknown path, too large); 2 when it
 * is for another port of the sandbox (E2b-Sandbox-Port: the code
 * interpreter's 49999, a user's service), its token checked: http.c passes
 * it to *ret_port through the service-port path.
 */
int e2b_envd_begin(struct api_ctx *ctx, struct MHD_Connection *conn, const char *url, const char *method,
                   const char *sandbox_id, struct e2b_envd_request **ret, uint16_t *ret_port, struct api_reply *reply);

/* Whether a request to a port of sandbox_id carries its E2B token
 * (E2B-Traffic-Access-Token, or X-Access-Token): E2B's clients reach a
 * sandbox's services by host name (PORT-ID.DOMAIN) with it. */
bool e2b_port_token_ok(struct MHD_Connection *conn, const char *sandbox_id);

/* Headers E2B's SDK adds for the front door, which a sandbox's server is
 * not to see (the access tokens above all). */
bool e2b_header_is_front_door(const char *name);
/* A chunk of body. 1 when *reply is the answer now (over a limit, an
 * upload the node refused): the rest of the body is to be dropped. */
int e2b_envd_data(struct e2b_envd_request *r, struct api_ctx *ctx, const char *data, size_t len,
                  struct api_reply *reply);
/* The body is in: runs the call. *reply is always set. */
void e2b_envd_finish(struct e2b_envd_request *r, struct api_ctx *ctx, struct api_reply *reply);
void e2b_envd_free(struct e2b_envd_request *r);
