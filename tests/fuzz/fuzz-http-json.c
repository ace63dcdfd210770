/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes airlockd's request-body parsers: the first byte picks the parser,
 * the rest is the body (or, for paths, the raw path bytes). Every body goes
 * through the strict field check first, as http.c does, and the parser runs
 * on it either way; 7 checks it as every kind of body, strict and lenient.
 * Every parser must either accept and produce owned results or reject with
 * a message, never crash or leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apireq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char err[API_ERRMSG_MAX];
        if (size < 1)
                return 0;
        uint8_t which = data[0] % 8;
        const char *body = (const char *) data + 1;
        size_t len = size - 1;

        if (which == 6) {
                (void) apireq_check_path(body, len, err);
                uint8_t *out = NULL;
                size_t n = 0;
                if (apireq_base64_decode(body, len, 4096, &out, &n) == 0)
                        free(out);
                return 0;
        }

        json_t *o = NULL;
        if (apireq_parse_object(body, len, &o, err) < 0)
                return 0;
        static const enum apireq_body kinds[] = { APIREQ_BODY_CREATE, APIREQ_BODY_EXEC, APIREQ_BODY_SESSION,
                                                  APIREQ_BODY_STDIN, APIREQ_BODY_SIGNAL };
        if (which < 5)
                (void) apireq_check_body(o, kinds[which], false, err);
        switch (which) {
        case 0: {
                struct apireq_create c;
                if (apireq_parse_create(o, &c, err) == 0)
                        apireq_create_release(&c);
                break;
        }
        case 1: {
                struct apireq_exec e;
                if (apireq_parse_exec(o, 86400, &e, err) == 0)
                        apireq_exec_release(&e);
                break;
        }
        case 2: {
                struct apireq_session s;
                if (apireq_parse_session(o, &s, err) == 0)
                        apireq_session_release(&s);
                break;
        }
        case 3: {
                struct apireq_stdin s;
                if (apireq_parse_stdin(o, &s, err) == 0)
                        apireq_stdin_release(&s);
                break;
        }
        case 4: {
                int sig;
                (void) apireq_parse_signal(o, &sig, err);
                break;
        }
        case 5:
                (void) apireq_check_env(json_object_get(o, "env"), "env", err);
                (void) apireq_check_cmd(json_object_get(o, "cmd"), err);
                break;
        case 7:
                for (int k = 0; k < _APIREQ_BODY_MAX; k++) {
                        (void) apireq_check_body(o, (enum apireq_body) k, false, err);
                        (void) apireq_check_body(o, (enum apireq_body) k, true, err);
                }
                break;
        }
        json_decref(o);
        return 0;
}
