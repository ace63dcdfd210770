/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A small synchronous client for the QEMU Machine Protocol over a Unix
 * socket (https://www.qemu.org/docs/master/interop/qmp-spec.html).
 *
 * QMP is line-based JSON: the server greets with {"QMP":{...}}, the client
 * sends {"execute":"qmp_capabilities"} and then one command at a time; the
 * server answers each with {"return":...} or {"error":{"class","desc"}} and
 * interleaves asynchronous {"event":...} messages at any point.
 *
 * QEMU runs the guest and may be confused or compromised by it, so its output
 * is parsed defensively: every line is bounded (QMP_MAX_LINE), must be one
 * JSON object of a known shape, and replies are matched to commands by an
 * "id" we choose (a reply with a foreign id, left over from a command that
 * timed out, is skipped instead of being taken for the current answer).
 *
 * Events that arrive while waiting for a reply are not delivered to anyone:
 * the client counts them and keeps the names of the last QMP_EVENT_RING in a
 * ring for diagnostics (qmp_event_count(), qmp_event_recent()). Callers that
 * need to observe run state poll it (query-status, query-migrate), or poll
 * qmp_fd() between commands and read what came (qmp_read_events()).
 *
 * A struct qmp is not thread-safe: one thread drives it at a time. The
 * library does not log; it returns negative errno values.
 */

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define QMP_MAX_LINE (1u << 20)        /* longest line accepted from QEMU, in bytes */
#define QMP_EVENT_RING 8               /* event names remembered for diagnostics */
#define QMP_DEFAULT_TIMEOUT_MS 5000    /* used by calls that take no timeout */

struct qmp;

/* What one line from the server is. */
enum qmp_msg_kind {
        QMP_MSG_GREETING, /* {"QMP":{...}} */
        QMP_MSG_RETURN,   /* {"return":...} (optionally "id") */
        QMP_MSG_ERROR,    /* {"error":{"class":s,"desc":s}} (optionally "id") */
        QMP_MSG_EVENT,    /* {"event":s,...} */
};

/* Connects to the QMP Unix socket at path, reads the greeting and negotiates
 * capabilities (qmp_capabilities), all within timeout_ms. -ENAMETOOLONG if
 * path does not fit a sockaddr_un; -ETIMEDOUT; connect(2) errors as they
 * are (-ENOENT / -ECONNREFUSED while QEMU has not set the socket up yet). */
int qmp_connect(const char *path, int timeout_ms, struct qmp **ret);

/* Same as qmp_connect() on an already connected stream socket. Takes
 * ownership of fd even on failure. For tests and for callers that connect
 * themselves. */
int qmp_connect_fd(int fd, int timeout_ms, struct qmp **ret);

/* Closes the connection and frees q. NULL-safe. */
void qmp_free(struct qmp *q);

/*
 * Runs one command and waits up to timeout_ms for its reply.
 *   cmd   the command name ("query-status")
 *   args  a JSON object of arguments or NULL; not consumed
 * On {"return":v}: 0, and *ret_return (if non-NULL) gets a new reference to
 * v. On {"error":...}: the class and description are kept for
 * qmp_last_error() and the result is -EOPNOTSUPP for CommandNotFound,
 * -ENODEV for DeviceNotFound / DeviceNotActive / KVMMissingCap, -EIO for
 * everything else (GenericError: QEMU uses it for bad arguments too).
 * -ETIMEDOUT if no reply came in time (the connection stays usable: a late
 * reply is recognised by its id and skipped), -EBADMSG / -EMSGSIZE when the
 * server sent something that is not QMP (the connection is then marked
 * broken and every later call returns -ENOTCONN), -ECONNRESET on EOF.
 */
int qmp_execute(struct qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret_return);

/* Passes fd to QEMU with SCM_RIGHTS on the `getfd` command, naming it
 * `name` (at most 63 characters) for later use such as a migration URI
 * "fd:NAME". fd stays owned by the caller (QEMU gets a duplicate). Waits up to
 * QMP_DEFAULT_TIMEOUT_MS. Errors as qmp_execute(). */
int qmp_send_fd(struct qmp *q, int fd, const char *name);

/* "Class: description" of the last QMP error reply (or of the last protocol
 * failure), "" if there was none. Valid until the next call on q. */
const char *qmp_last_error(const struct qmp *q);

/* Number of asynchronous events received (and skipped) so far. */
uint64_t qmp_event_count(const struct qmp *q);
/* Name of the i-th most recent event (0 = newest), or NULL when fewer than
 * i+1 are remembered (at most QMP_EVENT_RING). */
const char *qmp_event_recent(const struct qmp *q, size_t i);

/* Reads, without waiting, what the server sent since the last call (events,
 * each counted and remembered as above; a late reply to a timed-out
 * command is skipped). Returns the number of events read, -ECONNRESET on
 * EOF, -EBADMSG when a line is not QMP. For a caller that polls
 * qmp_fd() between commands to learn of a run state change (STOP). */
int qmp_read_events(struct qmp *q);
/* The connection's fd, readable when the server sent something; -1 once
 * the connection is broken (nothing more will come). */
int qmp_fd(const struct qmp *q);

/*
 * Parses and validates one line received from a QMP server (without the line
 * terminator; trailing "\r" / whitespace is allowed). Returns 0 with the kind
 * and, if ret_msg, the parsed object (caller owns it); -EMSGSIZE when the
 * line is longer than QMP_MAX_LINE, -EBADMSG when it is not one JSON object
 * of a known QMP shape. Exposed for the fuzzer and for tests.
 */
int qmp_parse_message(const char *line, size_t len, enum qmp_msg_kind *ret_kind, json_t **ret_msg);
