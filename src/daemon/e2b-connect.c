/* SPDX-License-Identifier: Apache-2.0 */
#include "e2b-connect.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "apierror.h"
#include "macros.h"

static const struct {
        const char *name;
        unsigned status;
} codes[_CONNECT_CODE_MAX] = {
        [CONNECT_CANCELED] = { "canceled", 499 },
        [CONNECT_UNKNOWN] = { "unknown", 500 },
        [CONNECT_INVALID_ARGUMENT] = { "invalid_argument", 400 },
        [CONNECT_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
        [CONNECT_NOT_FOUND] = { "not_found", 404 },
        [CONNECT_ALREADY_EXISTS] = { "already_exists", 409 },
        [CONNECT_PERMISSION_DENIED] = { "permission_denied", 403 },
        [CONNECT_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
        [CONNECT_FAILED_PRECONDITION] = { "failed_precondition", 400 },
        [CONNECT_ABORTED] = { "aborted", 409 },
        [CONNECT_OUT_OF_RANGE] = { "out_of_range", 400 },
        [CONNECT_UNIMPLEMENTED] = { "unimplemented", 501 },
        [CONNECT_INTERNAL] = { "internal", 500 },
        [CONNECT_UNAVAILABLE] = { "unavailable", 503 },
        [CONNECT_DATA_LOSS] = { "data_loss", 500 },
        [CONNECT_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

const char *connect_code_name(enum connect_code c) {
        return (unsigned) c < _CONNECT_CODE_MAX ? codes[c].name : "unknown";
}

unsigned connect_code_http_status(enum connect_code c) {
        return (unsigned) c < _CONNECT_CODE_MAX ? codes[c].status : 500;
}

enum connect_code connect_code_from_api(const char *api_code) {
        static const struct {
                const char *api;
                enum connect_code code;
        } map[] = {
                { "invalid", CONNECT_INVALID_ARGUMENT },
                { "unauthorized", CONNECT_UNAUTHENTICATED },
                { "forbidden", CONNECT_PERMISSION_DENIED },
                { "not_found", CONNECT_NOT_FOUND },
                { "conflict", CONNECT_FAILED_PRECONDITION },
                { "too_large", CONNECT_RESOURCE_EXHAUSTED },
                { "timeout", CONNECT_DEADLINE_EXCEEDED },
                { "unavailable", CONNECT_UNAVAILABLE },
                { "refresh_route", CONNECT_UNAVAILABLE },
                { "guest", CONNECT_UNAVAILABLE },
                { "bad_gateway", CONNECT_UNAVAILABLE },
        };
        for (size_t i = 0; api_code && i < ARRAY_SIZE(map); i++)
                if (strcmp(map[i].api, api_code) == 0)
                        return map[i].code;
        return CONNECT_INTERNAL;
}

static int bad(char *err, const char *msg) {
        snprintf(err, API_ERRMSG_MAX, "%s", msg);
        return -EINVAL;
}

int connect_parse_stream_request(const uint8_t *buf, size_t len, json_t **ret, char *err) {
        if (len < CONNECT_ENVELOPE_HEADER)
                return bad(err, "the request is not one Connect envelope (too short)");
        uint8_t flags = buf[0];
        uint32_t n = (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
        if (flags & CONNECT_FLAG_COMPRESSED)
                return bad(err, "compressed Connect messages are not accepted");
        if (flags != 0)
                return bad(err, "the request envelope must carry a message (flags 0)");
        if (n > CONNECT_MESSAGE_MAX)
                return bad(err, "the request message is over 1 MiB");
        if ((size_t) n != len - CONNECT_ENVELOPE_HEADER)
                return bad(err, "a server-streaming request is exactly one envelope");
        json_error_t jerr;
        json_t *o = json_loadb((const char *) buf + CONNECT_ENVELOPE_HEADER, n, JSON_REJECT_DUPLICATES, &jerr);
        if (!o || !json_is_object(o)) {
                json_decref(o);
                return bad(err, "the request message is not a JSON object");
        }
        *ret = o;
        return 0;
}

int connect_envelope(uint8_t flags, const json_t *msg, uint8_t **ret, size_t *ret_len) {
        _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        if (n > UINT32_MAX)
                return -EMSGSIZE;
        uint8_t *b = malloc(CONNECT_ENVELOPE_HEADER + n);
        if (!b)
                return -ENOMEM;
        b[0] = flags;
        b[1] = (uint8_t) (n >> 24);
        b[2] = (uint8_t) (n >> 16);
        b[3] = (uint8_t) (n >> 8);
        b[4] = (uint8_t) n;
        memcpy(b + CONNECT_ENVELOPE_HEADER, text, n);
        *ret = b;
        *ret_len = CONNECT_ENVELOPE_HEADER + n;
        return 0;
}

json_t *connect_error_json(enum connect_code code, const char *message) {
        return json_pack("{s:s, s:s}", "code", connect_code_name(code), "message", message ? message : "");
}

int connect_end_stream(enum connect_code code, const char *message, bool ok, uint8_t **ret, size_t *ret_len) {
        _cleanup_(json_decrefp) json_t *o = ok ? json_object() : json_pack("{s:o}", "error", connect_error_json(code, message));
        if (!o)
                return -ENOMEM;
        return connect_envelope(CONNECT_FLAG_END_STREAM, o, ret, ret_len);
}

int connect_parse_timeout(const char *v, uint64_t *ret_ms) {
        *ret_ms = 0;
        if (!v)
                return 0;
        size_t n = strlen(v);
        if (n == 0 || n > CONNECT_TIMEOUT_DIGITS_MAX || strspn(v, "0123456789") != n)
                return -EINVAL;
        *ret_ms = strtoull(v, NULL, 10);
        return 0;
}

bool connect_user_is_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
                        return false;
        return true;
}

int connect_basic_user(const char *authorization, char *out, size_t out_size) {
        out[0] = 0;
        if (!authorization)
                return 0;
        if (strncasecmp(authorization, "Basic ", 6) != 0)
                return -EINVAL;
        const char *b64 = authorization + 6;
        while (*b64 == ' ')
                b64++;
        uint8_t raw[128];
        size_t n = 0;
        if (strlen(b64) > 4 * sizeof raw / 3 ||
            sodium_base642bin(raw, sizeof raw - 1, b64, strlen(b64), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0)
                return -EINVAL;
        raw[n] = 0;
        char *colon = memchr(raw, ':', n);
        if (!colon)
                return -EINVAL;
        *colon = 0;
        if (!connect_user_is_valid((const char *) raw) || strlen((const char *) raw) >= out_size)
                return -EINVAL;
        memcpy(out, raw, strlen((const char *) raw) + 1);
        return 0;
}
