/* SPDX-License-Identifier: Apache-2.0 */
#include "apierror.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "macros.h"

struct api_error_entry {
        int r;
        const char *code;
        unsigned status;
        const char *message;
};

/* The first entry for a code is what api_error_from_code() returns; later
 * entries alias more errnos onto the same code. */
static const struct api_error_entry api_errors[] = {
        { -EINVAL, "invalid", 400, "invalid request" },
        { -EBADMSG, "invalid", 400, "malformed request" },
        { -ENAMETOOLONG, "invalid", 400, "path too long" },
        { -EACCES, "unauthorized", 401, "missing or invalid bearer token" },
        { -EPERM, "forbidden", 403, "this key may not do that" },
        { -ENOENT, "not_found", 404, "not found" },
        { -EOPNOTSUPP, "method_not_allowed", 405, "method not allowed on this resource" },
        { -EEXIST, "conflict", 409, "conflict" },
        { -EKEYREVOKED, "key_revoked", 409, "the tenant's key was revoked: its sealed images cannot be opened" },
        { -EBUSY, "conflict", 409, "resource busy" },
        { -EDQUOT, "conflict", 409, "limit reached" },
        { -EXDEV, "cpu_mismatch", 409, "the saved VM state needs a node with another CPU" },
        { -EFBIG, "too_large", 413, "request body too large" },
        { -E2BIG, "too_large", 413, "too large" },
        { -EMSGSIZE, "too_large", 413, "too large" },
        { -EIO, "internal", 500, "internal error" },
        { -ENOMEM, "internal", 500, "out of memory" },
        { -EREMOTEIO, "guest", 502, "the guest agent failed" },
        { -ENETUNREACH, "bad_gateway", 502, "the server in the sandbox failed" },
        { -ESTALE, "refresh_route", 503, "the sandbox runs another execution now; retry" },
        { -EHOSTDOWN, "unavailable", 503, "the node agent is unavailable" },
        { -EINPROGRESS, "template_building", 503, "the template is still being built: try again in a minute" },
        { -ECONNREFUSED, "unavailable", 503, "the node agent is unavailable" },
        { -ECONNRESET, "unavailable", 503, "the node agent closed the connection" },
        { -EPIPE, "unavailable", 503, "the node agent closed the connection" },
        { -ETIMEDOUT, "timeout", 504, "the node agent did not answer in time" },
};

static const struct api_error_entry *lookup(int r) {
        for (size_t i = 0; i < ARRAY_SIZE(api_errors); i++)
                if (api_errors[i].r == r)
                        return &api_errors[i];
        return NULL;
}

unsigned api_error_status(int r) {
        const struct api_error_entry *e = lookup(r);
        return e ? e->status : 500;
}

const char *api_error_code(int r) {
        const struct api_error_entry *e = lookup(r);
        return e ? e->code : "internal";
}

const char *api_error_default_message(int r) {
        const struct api_error_entry *e = lookup(r);
        return e ? e->message : "internal error";
}

int api_error_from_code(const char *code) {
        if (code)
                for (size_t i = 0; i < ARRAY_SIZE(api_errors); i++)
                        if (strcmp(api_errors[i].code, code) == 0)
                                return api_errors[i].r;
        return -EIO;
}

int api_error_invalid(char *err, const char *fmt, ...) {
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, API_ERRMSG_MAX, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}
