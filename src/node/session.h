/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Command sessions: a process in a sandbox whose output outlives any one
 * client. Output goes into a bounded replay buffer (oldest dropped, losses
 * counted); any number of clients attach, get the replay, then live events
 * until the exit. Finished sessions are forgotten SESSION_RETAIN_S after
 * their exit, with their sandbox, or (the one that ended first) when a new
 * one would pass SESSION_MAX_PER_SANDBOX: running ones are the limit.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct guestconn;
struct sandbox;
struct node_conn;
struct node_config;

#define SESSION_RETAIN_S 600
#define SESSION_MAX_PER_SANDBOX 64

void session_init(const struct node_config *cfg);

/* session.start: runs argv in s as session session_id. On failure replies
 * to the client itself and returns a negative errno. */
int session_start(struct node_conn *c, struct sandbox *s, const char *session_id, json_t *exec_req);

/* session.adopt: a session for process pid, which the guest kept running
 * after the host connection that started it ended (ADOPT; its output
 * since, as far as the guest's ring kept it, is replayed first). A
 * process one of s's sessions has is a conflict: attach to that one.
 * Replies to the client itself. */
int session_adopt(struct node_conn *c, struct sandbox *s, const char *session_id, long long pid);

/* The live session of s whose process is pid on guest channel gc, for
 * session.list: 0 with its id, or -ENOENT. */
int session_of_pid(struct sandbox *s, struct guestconn *gc, long long pid, char ret_id[static 65]);

/* The sandbox session_id runs in (a reference), for the capability check
 * of the session ops. -ENOENT. */
int session_sandbox(const char *session_id, struct sandbox **ret);

/* session.attach: replies, then replays (unless from_now: only what comes
 * after) and streams events until the exit (then NODE_END) or until the
 * client hangs up. */
int session_attach(struct node_conn *c, const char *session_id, bool from_now);

/* A session whose sandbox runs another execution than the one it started
 * in is revoked: attach replays it and ends with an exit event whose error
 * is "revoked: ..."; stdin and signal are a conflict. */

/* session.stdin: data (may be empty), then STDIN_CLOSE when close. */
int session_stdin(struct node_conn *c, const char *session_id, const uint8_t *data, size_t len, bool close_stdin);

/* session.signal. */
int session_signal(struct node_conn *c, const char *session_id, int signo);

/* session.resize: the terminal of a PTY session (conflict for one of
 * pipes). */
int session_resize(struct node_conn *c, const char *session_id, unsigned rows, unsigned cols);

/* Ends the sessions of a deleted sandbox (attached clients get an exit
 * event with error "sandbox deleted") and forgets them. */
void session_sandbox_deleted(struct sandbox *s);

/* Forgets sessions that exited more than SESSION_RETAIN_S ago. */
void session_gc(void);
