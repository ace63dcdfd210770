/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The one table that maps errors to the API: negative errno <-> error code
 * string ("not_found") <-> HTTP status. Handlers and the node client speak
 * negative errno; the HTTP layer turns them into
 * {"error":{"code":...,"message":...}} with the status from this table.
 */

#include "macros.h"

#define API_ERRMSG_MAX 256

/* HTTP status for a negative errno (500 for anything unknown). */
unsigned api_error_status(int r);
/* Error code string for a negative errno ("internal" for anything unknown). */
const char *api_error_code(int r);
/* A request's bad input: its message formatted into err (API_ERRMSG_MAX
 * bytes; may be NULL), -EINVAL returned. */
int api_error_invalid(char *err, const char *fmt, ...) _printf_(2, 3);
/* Default message for an error when the handler gave none. */
const char *api_error_default_message(int r);
/* Negative errno for an error code as the node sends it; unknown codes give
 * -EIO (internal). */
int api_error_from_code(const char *code);
