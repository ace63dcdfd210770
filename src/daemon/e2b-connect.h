/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The Connect protocol as E2B's envd speaks it (connectrpc.com/docs/protocol;
 * /work/shared/design/E2B-PROTOCOL.md 4.3): JSON codec only, unary calls
 * (a JSON body each way) and server streams (one enveloped request; a
 * response of enveloped messages ending with an end-stream envelope). An
 * envelope is 1 flag byte, a 4-byte big-endian length and the message.
 * Everything here is pure: parsing what a client sent, writing what goes
 * back. Fuzzed (tests/fuzz/fuzz-e2b-connect.c).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONNECT_ENVELOPE_HEADER 5
#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END_STREAM 0x02
/* the largest request message taken (E2B's are paths, commands, env) */
#define CONNECT_MESSAGE_MAX (1u << 20)
/* Connect-Timeout-Ms: at most 10 digits, per the protocol */
#define CONNECT_TIMEOUT_DIGITS_MAX 10

/* The Connect error codes (their names are what goes on the wire). */
enum connect_code {
        CONNECT_CANCELED,
        CONNECT_UNKNOWN,
        CONNECT_INVALID_ARGUMENT,
        CONNECT_DEADLINE_EXCEEDED,
        CONNECT_NOT_FOUND,
        CONNECT_ALREADY_EXISTS,
        CONNECT_PERMISSION_DENIED,
        CONNECT_RESOURCE_EXHAUSTED,
        CONNECT_FAILED_PRECONDITION,
        CONNECT_ABORTED,
        CONNECT_OUT_OF_RANGE,
        CONNECT_UNIMPLEMENTED,
        CONNECT_INTERNAL,
        CONNECT_UNAVAILABLE,
        CONNECT_DATA_LOSS,
        CONNECT_UNAUTHENTICATED,
        _CONNECT_CODE_MAX,
};

const char *connect_code_name(enum connect_code c);
/* The HTTP status a unary error goes with. */
unsigned connect_code_http_status(enum connect_code c);
/* The code for one of api_error_code()'s names ("not_found", "conflict", ...). */
enum connect_code connect_code_from_api(const char *api_code);

/*
 * Reads the single message of a server-streaming request: buf must hold
 * exactly one uncompressed message envelope whose payload is a JSON object.
 * -EINVAL (message in err, API_ERRMSG_MAX bytes) otherwise: short, trailing
 * bytes, the compressed or end-stream flag, over CONNECT_MESSAGE_MAX, not
 * JSON, not an object.
 */
int connect_parse_stream_request(const uint8_t *buf, size_t len, json_t **ret, char *err);

/* Envelope text of one message ({"event":...}) or of the end of a stream
 * ({} or {"error":{"code","message"}}); *ret malloc'd. */
int connect_envelope(uint8_t flags, const json_t *msg, uint8_t **ret, size_t *ret_len);
int connect_end_stream(enum connect_code code, const char *message, bool ok, uint8_t **ret, size_t *ret_len);

/* {"code":"not_found","message":...}: a unary call's error body. */
json_t *connect_error_json(enum connect_code code, const char *message);

/* Connect-Timeout-Ms: 1-10 digits; 0 when absent. -EINVAL otherwise. */
int connect_parse_timeout(const char *v, uint64_t *ret_ms);

/*
 * The user E2B names in "Authorization: Basic base64(user:)" (an empty
 * password; anything after the colon is ignored): written to out (at most
 * out_size - 1 bytes, a POSIX-ish user name) or "" when the header is
 * absent. -EINVAL for a header that is not Basic, not base64, or not a
 * user name.
 */
int connect_basic_user(const char *authorization, char *out, size_t out_size);

/* A user name E2B may ask for: [a-z_][a-z0-9_-]{0,31}. */
bool connect_user_is_valid(const char *s);
