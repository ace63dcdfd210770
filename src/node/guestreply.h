/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the node reads from a guest agent, which is untrusted
 * (docs/security.md): the HELLO reply among the stale bytes of a
 * reconnected channel, RESULT and ERROR payloads, and the LIST/STAT entries
 * it passes on, rebuilt from checked fields only. Pure functions on bytes
 * and JSON, no I/O and no logging, so tests/fuzz/fuzz-guest-reply.c runs
 * them on anything.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* LIST: entries passed on at most (the guest's limit too). */
#define GUESTREPLY_LIST_MAX 10000
/* A LIST/STAT name: NAME_MAX bytes, each possibly replaced by the guest
 * with the 3-byte U+FFFD. */
#define GUESTREPLY_NAME_MAX (3 * 255)
/* An owner or group name (the guest passes on up to 256 bytes), a
 * symlink's target (PATH_MAX), a WATCH_EVENT name (a path below the
 * watched directory), each byte possibly a U+FFFD. */
#define GUESTREPLY_OWNER_MAX (3 * 256)
#define GUESTREPLY_TARGET_MAX (3 * 4096)
#define GUESTREPLY_EVENT_NAME_MAX (3 * 4096)
/* PROCESSES: entries at most (the guest's limit of live processes). */
#define GUESTREPLY_PROCESSES_MAX 256
/* The highest pid Linux hands out (PID_MAX_LIMIT). */
#define GUESTREPLY_PID_MAX 4194304

/* Looks for a complete HELLO frame on stream 0 carrying nonce anywhere in
 * buf[0..len). Every magic is a candidate: stale bytes may hold a frame cut
 * short, so no length is trusted before our reply. Returns 1 with
 * *ret_start (where the reply starts), *ret_end (just past it) and *ret_msg
 * (its JSON, owned by the caller); 0 when it is not (yet) there, with
 * *ret_keep_from: where the earliest candidate that may still complete
 * starts (the bytes before it can be dropped). */
int guestreply_find_hello(const uint8_t *buf, size_t len, const char *nonce, size_t *ret_start, size_t *ret_end,
                          json_t **ret_msg, size_t *ret_keep_from);

/* A RESULT or ERROR payload (type PROTO_RESULT / PROTO_ERROR). RESULT: 0,
 * *ret_error 0 and *ret_result its object (an empty payload is {}). ERROR:
 * 0, *ret_error the guest's -errno (-EIO unless it is in 1..4095) and
 * *ret_message its message (at most 4096 bytes; NULL without one). A
 * payload that is no JSON object: -EBADMSG, nothing set. */
int guestreply_parse(uint8_t type, const uint8_t *payload, size_t len, int *ret_error, json_t **ret_result,
                     char **ret_message);

/* A non-negative integer the guest reported, at most max; def when it is
 * not one. */
json_int_t guestreply_uint(json_t *v, json_int_t max, json_int_t def);

/* One LIST/STAT entry rebuilt from checked fields: name, type (file, dir,
 * symlink, other), size, mode (<= 07777), mtime, and when the guest sent
 * them (an older agent does not) uid, gid (< 2^32), owner, group (1 to
 * GUESTREPLY_OWNER_MAX bytes, no NUL) and, for a symlink, symlink_target
 * (1 to GUESTREPLY_TARGET_MAX bytes, no NUL; dropped on other types).
 * Clients use LIST names as path components (a directory download), so a
 * name must be one plain component: no '/' or NUL, not "." or "..", at
 * most GUESTREPLY_NAME_MAX bytes; only STAT of the root (root_ok) may be
 * named "/". NULL when the entry is malformed. */
json_t *guestreply_entry(json_t *e, bool root_ok);

/* LIST's reply from the guest's RESULT: {"entries": [...]} with at most
 * GUESTREPLY_LIST_MAX checked entries, "truncated": true when the guest
 * said so or sent more. NULL when it is malformed (or any entry is). */
json_t *guestreply_list(json_t *res);

/* One PROCESSES entry rebuilt from checked fields: pid (1 to
 * GUESTREPLY_PID_MAX), argv (1 to 4096 strings), cwd (a path as the node
 * accepts them), env (at most 4096 string values, keys non-empty without
 * '='), every string at most 128 KiB without NUL, tag (optional, at most
 * 256 bytes), pty, attached and truncated (booleans; absent is false,
 * truncated is only passed on when true). NULL when it is malformed. */
json_t *guestreply_process(json_t *e);

/* PROCESSES' reply: {"processes": [...]} of at most
 * GUESTREPLY_PROCESSES_MAX checked entries, distinct pids. NULL when it
 * is malformed (or any entry is). */
json_t *guestreply_processes(json_t *res);

/* A WATCH_EVENT rebuilt: {"type"} for "overflow", else {"name","type"}
 * with type one of create, write, remove, rename, chmod and name a
 * relative path below the watched directory (1 to
 * GUESTREPLY_EVENT_NAME_MAX bytes, no NUL, components non-empty and
 * neither "." nor ".."). NULL when it is malformed. */
json_t *guestreply_watch_event(json_t *ev);

/* ADOPT's RESULT for pid: 0 with *ret_pty and *ret_dropped (bytes the
 * guest's ring lost while nobody listened; 0 when absent), -EBADMSG when
 * the reply names another pid or its fields are of the wrong kind. */
int guestreply_adopt(json_t *res, long long pid, bool *ret_pty, uint64_t *ret_dropped);

/* METRICS' RESULT rebuilt: cpu_count 1..4096, cpu_used_pct 0..100 (a
 * number), mem_* and disk_* byte counts, used within total. NULL when it
 * is malformed. */
json_t *guestreply_metrics(json_t *res);
