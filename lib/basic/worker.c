/* SPDX-License-Identifier: Apache-2.0 */
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct worker {
        int (*fn)(void *arg);
        void *arg;
        uint64_t interval_ms;
        unsigned flags;
        pthread_t thread;
        pthread_mutex_t lock; /* stop, woken */
        pthread_cond_t cond;  /* CLOCK_MONOTONIC */
        bool stop, woken;
};

/* Waits out the interval, or until woken or stopped; false once stopped. */
static bool wait_turn(struct worker *w) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t) (w->interval_ms / 1000);
        until.tv_nsec += (long) (w->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&w->lock);
        while (!w->stop && !w->woken && pthread_cond_timedwait(&w->cond, &w->lock, &until) == 0)
                ;
        w->woken = false;
        bool go = !w->stop;
        pthread_mutex_unlock(&w->lock);
        return go;
}

static void *worker_main(void *arg) {
        struct worker *w = arg;
        if ((w->flags & WORKER_WAIT_FIRST) && !wait_turn(w))
                return NULL;
        while (w->fn(w->arg) == 0 && wait_turn(w))
                ;
        return NULL;
}

int worker_start(int (*fn)(void *arg), void *arg, uint64_t interval_ms, unsigned flags, struct worker **ret) {
        if (!fn || !ret)
                return -EINVAL;
        struct worker *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (struct worker){ .fn = fn, .arg = arg, .interval_ms = interval_ms, .flags = flags };
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, &ca);
        pthread_condattr_destroy(&ca);
        int r = -pthread_create(&w->thread, NULL, worker_main, w);
        if (r < 0) {
                pthread_cond_destroy(&w->cond);
                pthread_mutex_destroy(&w->lock);
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

void worker_wake(struct worker *w) {
        pthread_mutex_lock(&w->lock);
        w->woken = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
}

void worker_stop(struct worker *w) {
        if (!w)
                return;
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w);
}
