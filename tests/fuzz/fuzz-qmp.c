/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the QMP client with what a confused or hostile QEMU could send:
 * every line of the input through qmp_parse_message(), then the whole input
 * as a server's output to a real client session (greeting, capabilities
 * reply, one command), preloaded into a socketpair so no thread is needed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_lines(const uint8_t *data, size_t size) {
        const char *p = (const char *) data, *end = p + size;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t len = nl ? (size_t) (nl - p) : (size_t) (end - p);
                enum qmp_msg_kind kind;
                json_t *m = NULL;
                if (qmp_parse_message(p, len, &kind, &m) == 0) {
                        if (kind > QMP_MSG_EVENT)
                                abort();
                        json_decref(m);
                }
                p += len + 1;
        }
}

static void session(const uint8_t *data, size_t size) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return;
        /* As much as the socket buffer takes; the rest is simply not sent. */
        size_t off = 0;
        while (off < size) {
                ssize_t k = send(sv[1], data + off, size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k <= 0)
                        break;
                off += (size_t) k;
        }
        shutdown(sv[1], SHUT_WR); /* EOF after the input */

        struct qmp *q = NULL;
        if (qmp_connect_fd(sv[0], 0, &q) == 0) {
                json_t *ret = NULL;
                if (qmp_execute(q, "query-status", NULL, 0, &ret) == 0)
                        json_decref(ret);
                (void) qmp_last_error(q);
                for (size_t i = 0; i <= QMP_EVENT_RING; i++)
                        (void) qmp_event_recent(q, i);
                qmp_free(q);
        }
        close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        parse_lines(data, size);
        session(data, size);
        return 0;
}
