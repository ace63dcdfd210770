/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The web console (docs/console.md): static files served at / and
 * /console/ without a token (the page asks for an API key and calls the
 * API with it, as any client does). Files come from the console directory
 * (config console_dir) and, under /console/vendor/term.js/, from Debian's
 * libjs-term.js; nothing else on the host is reachable.
 */

#include <microhttpd.h>
#include <stdbool.h>

#include "config.h"

/* Whether a GET of url is the console's: "/", "/index.html" or under
 * "/console/". */
bool console_is_path(const char *url);

/* The file's response (with its content type and the console's security
 * headers) and 200, or a 404 response for a name that is not one of its
 * files. NULL only when out of memory. */
struct MHD_Response *console_response(const struct daemon_config *cfg, const char *url, unsigned *ret_status);
