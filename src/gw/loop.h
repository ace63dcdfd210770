/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The gateway's event loop, in the style of Redis' ae: one epoll set, fd
 * watches with a callback each, and one-shot timers. Single-threaded; a
 * callback may remove any watch or timer, its own included: removed ones
 * are freed only after the batch of events they might still be in.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

struct loop;
struct loop_watch;
struct loop_timer;

typedef void (*loop_fd_fn)(int fd, uint32_t events, void *userdata);
typedef void (*loop_timer_fn)(void *userdata);

int loop_new(struct loop **ret);
void loop_free(struct loop *l);

/* Watches fd for events (EPOLLIN, EPOLLOUT, ...; level-triggered). */
int loop_watch_add(struct loop *l, int fd, uint32_t events, loop_fd_fn fn, void *userdata, struct loop_watch **ret);
int loop_watch_set(struct loop_watch *w, uint32_t events);
/* Stops watching (the fd is not closed); NULL is a no-op. */
void loop_watch_remove(struct loop_watch *w);

/* fn(userdata) once, after ms milliseconds. */
int loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, void *userdata, struct loop_timer **ret);
/* Cancels a timer that has not fired; NULL is a no-op. */
void loop_timer_cancel(struct loop_timer *t);

uint64_t loop_now_ms(void);

/* Runs until loop_stop(); 0, or a negative errno when epoll fails. */
int loop_run(struct loop *l);
void loop_stop(struct loop *l);
