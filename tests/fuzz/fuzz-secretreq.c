/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what an API client sends POST /v1/secrets (secretreq_parse(), after
 * the strict field check http.c runs first): whatever it accepts has a
 * valid name, a value without NUL/CR/LF within the limit, canonical hosts
 * (a second parse of its own spec gives the same), exactly one injection
 * method whose template holds {value} once, and an expiry in the future.
 * Also the RFC 3339 parser on the raw bytes, and the credential object.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apierror.h"
#include "apireq.h"
#include "credstore.h"
#include "secretreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW 1800000000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;
        int64_t t;
        (void) secretreq_parse_rfc3339(s, &t);

        char err[API_ERRMSG_MAX];
        json_t *o = NULL;
        if (apireq_parse_object(s, size, &o, err) < 0 || apireq_check_body(o, APIREQ_BODY_SECRET, false, err) < 0) {
                json_decref(o);
                free(s);
                return 0;
        }
        struct secretreq q = { 0 };
        err[0] = 0;
        if (secretreq_parse(o, NOW, &q, err) < 0) {
                if (!err[0] || q.name || q.spec)
                        abort(); /* a message, and nothing written */
        } else {
                if (!credstore_name_is_valid(q.name) || q.value_len == 0 || q.value_len > CREDSTORE_VALUE_MAX ||
                    strlen(q.value) != q.value_len || strpbrk(q.value, "\r\n") || (q.expires_at && q.expires_at <= NOW))
                        abort();
                json_t *inject = json_object_get(q.spec, "inject");
                const char *tpl = json_string_value(json_object_get(inject, "template"));
                if (!json_object_get(inject, "basic") == !tpl)
                        abort();
                if (tpl && (!strstr(tpl, "{value}") || strstr(strstr(tpl, "{value}") + 1, "{value}")))
                        abort();
                /* canonical: its own hosts parse to themselves */
                json_t *again = json_pack("{s:s, s:s, s:O}", "name", "x", "value", "v", "hosts",
                                          json_object_get(q.spec, "hosts"));
                struct secretreq q2 = { 0 };
                if (!again || secretreq_parse(again, NOW, &q2, err) < 0 ||
                    !json_equal(json_object_get(q.spec, "hosts"), json_object_get(q2.spec, "hosts")))
                        abort();
                secretreq_release(&q2);
                json_decref(again);
                char *spec = json_dumps(q.spec, JSON_COMPACT);
                json_t *cred = spec ? secretreq_credential(q.name, "airlock_ph_00000000000000000000000000000000",
                                                           q.value, q.value_len, spec, q.expires_at)
                                    : NULL;
                if (spec && !cred)
                        abort();
                json_decref(cred);
                free(spec);
        }
        secretreq_release(&q);
        json_decref(o);
        free(s);
        return 0;
}
