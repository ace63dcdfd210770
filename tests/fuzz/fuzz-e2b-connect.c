/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what an E2B client sends the envd front door before any node is
 * asked: a server stream's enveloped request (whatever is accepted is one
 * JSON object, and written back as an envelope it parses the same), the
 * Basic authorization's user name, Connect-Timeout-Ms, and the list's
 * percent-decoding (never longer than its input).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apierror.h"
#include "e2b-api.h"
#include "e2b-connect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[API_ERRMSG_MAX];
        json_t *o = NULL;
        if (connect_parse_stream_request(data, size, &o, err) == 0) {
                assert(json_is_object(o));
                uint8_t *b = NULL;
                size_t n = 0;
                json_t *again = NULL;
                assert(connect_envelope(0, o, &b, &n) == 0);
                assert(connect_parse_stream_request(b, n, &again, err) == 0);
                assert(json_equal(o, again));
                json_decref(again);
                free(b);
                json_decref(o);
        }
        char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;
        char user[33];
        if (connect_basic_user(s, user, sizeof user) == 0)
                assert(user[0] == 0 || connect_user_is_valid(user));
        uint64_t ms;
        if (connect_parse_timeout(s, &ms) == 0)
                assert(ms < 10000000000ULL);
        char *out = malloc(size + 1);
        size_t n = 0;
        if (out && e2b_percent_decode(s, size, size & 1, out, &n) == 0)
                assert(n <= size && strlen(out) == n);
        free(out);
        free(s);
        return 0;
}
