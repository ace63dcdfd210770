/* SPDX-License-Identifier: Apache-2.0 */
#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "macros.h"

#define LOOP_EVENTS_MAX 256

struct loop_watch {
        struct loop *loop;
        int fd;
        loop_fd_fn fn;
        void *userdata;
        bool dead;
        struct loop_watch *next_dead;
};

struct loop_timer {
        struct loop *loop;
        uint64_t at;
        loop_timer_fn fn;
        void *userdata;
        struct loop_timer *next; /* sorted by at */
};

struct loop {
        int epfd;
        bool stop;
        struct loop_watch *dead; /* removed during this batch: freed after it */
        struct loop_timer *timers;
};

uint64_t loop_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

int loop_new(struct loop **ret) {
        struct loop *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd < 0) {
                int r = negative_errno();
                free(l);
                return r;
        }
        *ret = l;
        return 0;
}

static void free_dead(struct loop *l) {
        while (l->dead) {
                struct loop_watch *w = l->dead;
                l->dead = w->next_dead;
                free(w);
        }
}

void loop_free(struct loop *l) {
        if (!l)
                return;
        free_dead(l);
        while (l->timers) {
                struct loop_timer *t = l->timers;
                l->timers = t->next;
                free(t);
        }
        close(l->epfd);
        free(l);
}

int loop_watch_add(struct loop *l, int fd, uint32_t events, loop_fd_fn fn, void *userdata, struct loop_watch **ret) {
        struct loop_watch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (struct loop_watch){ .loop = l, .fd = fd, .fn = fn, .userdata = userdata };
        struct epoll_event ev = { .events = events, .data.ptr = w };
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int r = negative_errno();
                free(w);
                return r;
        }
        if (ret)
                *ret = w;
        return 0;
}

int loop_watch_set(struct loop_watch *w, uint32_t events) {
        struct epoll_event ev = { .events = events, .data.ptr = w };
        return epoll_ctl(w->loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0 ? negative_errno() : 0;
}

void loop_watch_remove(struct loop_watch *w) {
        if (!w || w->dead)
                return;
        (void) epoll_ctl(w->loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->dead = true;
        w->next_dead = w->loop->dead;
        w->loop->dead = w;
}

int loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, void *userdata, struct loop_timer **ret) {
        struct loop_timer *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        *t = (struct loop_timer){ .loop = l, .at = loop_now_ms() + ms, .fn = fn, .userdata = userdata };
        struct loop_timer **p = &l->timers;
        while (*p && (*p)->at <= t->at)
                p = &(*p)->next;
        t->next = *p;
        *p = t;
        if (ret)
                *ret = t;
        return 0;
}

void loop_timer_cancel(struct loop_timer *t) {
        if (!t)
                return;
        for (struct loop_timer **p = &t->loop->timers; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        free(t);
                        return;
                }
}

void loop_stop(struct loop *l) {
        l->stop = true;
}

int loop_run(struct loop *l) {
        struct epoll_event ev[LOOP_EVENTS_MAX];
        while (!l->stop) {
                int timeout = -1;
                if (l->timers) {
                        uint64_t now = loop_now_ms();
                        timeout = l->timers->at <= now ? 0 : (int) MIN(l->timers->at - now, 60000u);
                }
                int n = epoll_wait(l->epfd, ev, LOOP_EVENTS_MAX, timeout);
                if (n < 0 && errno != EINTR)
                        return negative_errno();
                for (int i = 0; i < n; i++) {
                        struct loop_watch *w = ev[i].data.ptr;
                        if (!w->dead)
                                w->fn(w->fd, ev[i].events, w->userdata);
                }
                free_dead(l);
                uint64_t now = loop_now_ms();
                while (l->timers && l->timers->at <= now) {
                        struct loop_timer *t = l->timers;
                        l->timers = t->next;
                        loop_timer_fn fn = t->fn;
                        void *userdata = t->userdata;
                        free(t);
                        fn(userdata);
                }
                free_dead(l);
        }
        return 0;
}
