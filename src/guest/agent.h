/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The agent's private interface: one struct agent holds the channel to the
 * host and the per-connection state (processes, file transfers). agent.c
 * runs the poll loop and dispatches frames to process.c, files.c, watch.c,
 * identity.c and metrics.c. Single-threaded: nothing here locks.
 *
 * Calls go one way, top to bottom (main.c and boot.c above all of it):
 *   agent.c                         poll loop, dispatch
 *   upgrade.c                       UPGRADE, and the start from its state
 *   process.c files.c watch.c identity.c
 *   fsuser.c metrics.c              (files.c and watch.c use fsuser.c,
 *                                    identity.c uses metrics.c)
 *   agent-send.c                    every frame to the host
 * with request.c and users.c (guest_lib, pure) beside them.
 */

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <poll.h>
#include <sys/types.h>

#include <jansson.h>

#include "macros.h"
#include "proto.h"
#include "request.h"

struct process;
struct transfer;
struct watch;

/* The per-connection lists of struct agent (processes, transfers,
 * watches) are singly linked through next; their items carry the stream
 * that made them as id. */
/* The item of list head whose id is want, or NULL. */
#define AGENT_LIST_FIND(head, want)                                     \
        ({                                                              \
                typeof(head) i_ = (head);                               \
                while (i_ && i_->id != (want))                          \
                        i_ = i_->next;                                  \
                i_;                                                     \
        })
/* Unlinks item from the list at *headp (when it is there) and counts it
 * out of *countp. */
#define AGENT_LIST_UNLINK(headp, item, countp)                          \
        do {                                                            \
                for (typeof(*(headp)) *pp_ = (headp); *pp_; pp_ = &(*pp_)->next) \
                        if (*pp_ == (item)) {                           \
                                *pp_ = (item)->next;                    \
                                (*(countp))--;                          \
                                break;                                  \
                        }                                               \
        } while (0)

struct agent_options {
        const char *port_path; /* NULL: find the virtio-serial port "airlock.0" */
        const char *run_dir;   /* where sandbox-id goes; NULL: nowhere */
        const char *log_level; /* as given, for the agent an upgrade starts */
        bool pid1;             /* owns the machine: hostname, clock, RNG */
        int resume_fd;         /* >= 0: an upgrade's state to start from (upgrade.c) */
        const char *resume_error; /* with resume_fd: the upgrade failed, why */
};

struct agent {
        struct agent_options opt;
        int chan_fd;
        bool chan_is_socket;
        bool host_away;
        struct proto_reader reader;
        int signal_fd;

        char **default_env; /* from IDENTITY */

        /* FREEZE: the open root directory whose file system is frozen, or
         * -1; thawed by THAW, a new HELLO, or at frozen_until_ns */
        int frozen_fd;
        uint64_t frozen_until_ns;

        /* CLOCK_MONOTONIC of the last sign of use: a request that does work,
         * output of any process (detached ones too), a process ending. PING
         * answers how long ago that was: the host suspends idle sandboxes. */
        uint64_t active_ns;

        struct process *processes;
        size_t n_processes;
        struct transfer *transfers;
        size_t n_transfers;
        struct watch *watches;
        size_t n_watches;

        /* UPGRADE asked on this stream (0: none), carried out once the
         * frames read with it are handled */
        uint32_t upgrade_stream;
        char *upgrade_path;
};

/* agent.c */
/* Runs the agent until it is asked to stop (never, as PID 1). */
int agent_run(const struct agent_options *opt);

/* agent-send.c */
/* Sends one frame unless the host is away (then drops it). */
int agent_send(struct agent *a, uint8_t type, uint32_t stream, const void *data, size_t len);
/* Sends obj (consumed, may be NULL on allocation failure) as JSON. */
int agent_send_json(struct agent *a, uint8_t type, uint32_t stream, json_t *obj);
/* Sends RESULT {}. */
int agent_send_ok(struct agent *a, uint32_t stream);
/* Sends ERROR {"errno":-err,"message":...}. err is a negative errno. */
int agent_send_error(struct agent *a, uint32_t stream, int err, const char *what);
/* The same with a message of its own (made valid UTF-8, at most 512 bytes). */
int agent_send_errorf(struct agent *a, uint32_t stream, int err, const char *fmt, ...) _printf_(4, 5);

/* process.c */
int process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len);
int process_stdin(struct agent *a, uint32_t stream, const void *data, size_t len);
int process_stdin_close(struct agent *a, uint32_t stream, const void *payload, size_t len);
int process_signal(struct agent *a, uint32_t stream, const void *payload, size_t len);
int process_resize(struct agent *a, uint32_t stream, const void *payload, size_t len);
/* PROCESSES: every live process EXEC started, attached or detached. */
int process_list(struct agent *a, uint32_t stream, const void *payload, size_t len);
/* ADOPT: attaches a detached process to this stream, replaying its ring. */
int process_adopt(struct agent *a, uint32_t stream, const void *payload, size_t len);
/* Reaps every exited child (known processes and orphans). */
void process_reap(struct agent *a);
/* Adds the process fds to pfd (room for 3 per process) and returns the
 * count; *timeout_ms is lowered to the next EXIT deadline. */
size_t process_poll_fill(struct agent *a, struct pollfd *pfd, int *timeout_ms);
/* Handles the poll results for the fds process_poll_fill() added. */
void process_poll_dispatch(struct agent *a, const struct pollfd *pfd, size_t n);
/* Stream id of a process whose host connection is gone (requests never use
 * stream 0): it keeps running, its output is read and dropped, its exit is
 * reaped without a message. */
#define PROCESS_DETACHED 0
/* Detaches every process (new host connection): a node that restarted, a
 * fork child or a woken sandbox must find the guest's programs still
 * running, and the new host's stream ids must not collide with old ones. */
void process_detach_all(struct agent *a);
/* SIGKILLs and forgets every process (agent shutdown). */
void process_kill_all(struct agent *a);
/* An upgrade's hand-over (upgrade.c): every process as JSON objects
 * appended to arr, their buffers in b; the other way, the processes of
 * arr appended to a's (take_fds false: a check of the state, which keeps
 * no fd); FD_CLOEXEC cleared (inherit) or set again on their fds. */
int process_state_save(struct agent *a, json_t *arr, struct guest_blob *b);
int process_state_load(struct agent *a, json_t *arr, const uint8_t *blob, size_t blob_size, bool take_fds);
int process_fds_inherit(struct agent *a, bool inherit);
/* Forgets every process without a signal (the end of a state's check). */
void process_forget_all(struct agent *a);

/* fsuser.c */
/* Who a file request acts as (docs/guest-protocol.md, Files: "user"): a
 * guest user's uid, gid and groups, or, inactive, the agent itself (root;
 * also any user of uid 0). */
struct fs_user {
        bool active;
        uid_t uid;
        gid_t gid;
        gid_t *groups; /* gid first, then the groups that list the user */
        size_t n_groups;
};
/* The identity fs_user_enter() replaced. */
struct fs_user_saved {
        bool switched;
        uid_t fsuid;
        gid_t fsgid;
        gid_t *groups;
        size_t n_groups;
};
/* Looks user name up in the guest's passwd and group files (NULL: the
 * agent's own identity). -ESRCH for a user the guest does not have. */
int fs_user_lookup(const char *name, struct fs_user *ret);
/* fs_user_lookup() for the request on stream: false when it failed, its
 * ERROR sent (ESRCH "unknown user 'NAME'" for a user the guest lacks). */
bool fs_user_request(struct agent *a, uint32_t stream, const char *name, struct fs_user *ret);
void fs_user_release(struct fs_user *u);
/* The user as JSON for an upgrade's state (NULL on ENOMEM), and back
 * (-EINVAL for an object that is not one). */
json_t *fs_user_to_json(const struct fs_user *u);
int fs_user_from_json(json_t *o, struct fs_user *ret);
/* Moves from into to (releasing what to held); from is left inactive. */
void fs_user_move(struct fs_user *from, struct fs_user *to);
/* Makes u (NULL or inactive: nothing to do) the filesystem identity of
 * the calling thread until fs_user_leave(); the agent's own is saved in
 * *ret. The pair brackets one request, nothing in between forks. */
int fs_user_enter(const struct fs_user *u, struct fs_user_saved *ret);
void fs_user_leave(struct fs_user_saved *saved);

/* files.c */
int files_handle(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len);
/* Sends the next chunk of every running FILE_READ; true if any is left. */
bool files_pump(struct agent *a);
/* Discards every transfer (disconnect, new host connection). */
void files_discard_all(struct agent *a);

/* metrics.c */
/* METRICS {} -> RESULT {cpu_count, cpu_used_pct (since the previous call), mem_total,
 * mem_used, mem_cache, disk_total, disk_used (bytes; the root file system)}. */
int metrics_handle(struct agent *a, uint32_t stream, const uint8_t *payload, size_t len);
/* Starts the CPU use the next METRICS reports from now (IDENTITY: a new sandbox). */
void metrics_prime(void);

/* watch.c */
/* WATCH: an inotify watch of a directory (and, recursive, of its
 * subdirectories) whose changes go out as WATCH_EVENT frames. */
int watch_start(struct agent *a, uint32_t stream, const void *payload, size_t len);
/* WATCH_END: ends the watch of that stream (none: nothing to do). */
int watch_end(struct agent *a, uint32_t stream, const void *payload, size_t len);
/* Adds the inotify fds to pfd (room for GUEST_MAX_WATCHES) and returns the count. */
size_t watch_poll_fill(struct agent *a, struct pollfd *pfd);
/* Handles the poll results for the fds watch_poll_fill() added. */
void watch_poll_dispatch(struct agent *a, const struct pollfd *pfd, size_t n);
/* Ends every watch (the host connection ended). */
void watch_discard_all(struct agent *a);
/* An upgrade's hand-over, as process_state_save() and the others. */
int watch_state_save(struct agent *a, json_t *arr);
int watch_state_load(struct agent *a, json_t *arr, bool take_fds);
int watch_fds_inherit(struct agent *a, bool inherit);

/* upgrade.c */
/* UPGRADE {"path","idle_ms"}: noted, carried out by upgrade_apply(). */
int upgrade_request(struct agent *a, uint32_t stream, const void *payload, size_t len);

/* volume.c: VOLUME_MOUNT (answers it, errors included). */
int volume_mount_request(struct agent *a, uint32_t stream, const uint8_t *payload, size_t len);

DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir)
DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose)
/* Replaces this agent with the staged one; returns only when that failed,
 * after answering the UPGRADE with ERROR. */
void upgrade_apply(struct agent *a);
/* Starts a (set up, its channel not opened) from opt.resume_fd's state and
 * answers the UPGRADE: RESULT, or ERROR after a rollback. Where the state
 * cannot be taken over, execs the previous agent to do it instead. */
int upgrade_resume(struct agent *a);
/* --check-state FD: reads the state as upgrade_resume() would, keeping
 * nothing. 0, or a negative errno with why. */
int upgrade_check_state(int fd, char *why, size_t n);

/* identity.c */
int identity_apply(struct agent *a, uint32_t stream, const void *payload, size_t len);
