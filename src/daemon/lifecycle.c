/* SPDX-License-Identifier: Apache-2.0 */
#include "lifecycle.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "macros.h"

const char *const lifecycle_states[] = {
        "creating", "running", "pausing", "paused",   "resuming", "stopping",
        "stopped",  "starting", "deleting", "failed", "rolling_back", "recovering",
        "suspending", "suspended", "waking", "forking", "archived", "lost", NULL,
};

/* A state no API verb enters: the node recovers a sandbox whose VM died
 * (a new execution, booted from its disk). Nothing may start meanwhile. */
static const char *const node_transitional[] = { "recovering", NULL };

/* delete works from every settled state; while a verb runs it is refused
 * (the node serialises lifecycle changes of one sandbox: a delete racing a
 * start would tear down a VM the start is still booting). */
/* lost: its node stopped heartbeating (src/daemon/replica.c); deleting
 * it removes the row, and the node removes the VM when it comes back */
static const char *const from_delete[] = { "running", "paused", "stopped", "failed", "suspended", "archived", "lost",
                                           NULL };
static const char *const from_pause[] = { "running", NULL };
static const char *const from_resume[] = { "paused", NULL };
/* a paused VM can be stopped directly: its memory is thrown away either way */
static const char *const from_stop[] = { "running", "paused", NULL };
static const char *const from_start[] = { "stopped", NULL };
/* a paused VM is refused: its disk cannot be flushed while its vCPUs are
 * stopped, and a rollback that silently threw its memory away would
 * surprise (stop it first) */
static const char *const from_rollback[] = { "running", "stopped", "archived", NULL };
/* suspend and fork take a full snapshot: the VM must be in memory */
static const char *const from_suspend[] = { "running", "paused", NULL };
static const char *const from_wake[] = { "suspended", NULL };
static const char *const from_fork[] = { "running", "paused", NULL };

static const struct lifecycle_transition table[_LIFECYCLE_VERB_MAX] = {
        [LIFECYCLE_CREATE] = { LIFECYCLE_CREATE, "create", NULL, "creating", "running", "sandbox.create" },
        [LIFECYCLE_DELETE] = { LIFECYCLE_DELETE, "delete", from_delete, "deleting", "deleted", "sandbox.delete" },
        [LIFECYCLE_PAUSE] = { LIFECYCLE_PAUSE, "pause", from_pause, "pausing", "paused", "sandbox.pause" },
        [LIFECYCLE_RESUME] = { LIFECYCLE_RESUME, "resume", from_resume, "resuming", "running", "sandbox.resume" },
        [LIFECYCLE_STOP] = { LIFECYCLE_STOP, "stop", from_stop, "stopping", "stopped", "sandbox.stop" },
        [LIFECYCLE_START] = { LIFECYCLE_START, "start", from_start, "starting", "running", "sandbox.start" },
        [LIFECYCLE_ROLLBACK] = { LIFECYCLE_ROLLBACK, "rollback", from_rollback, "rolling_back", "running",
                                 "sandbox.rollback" },
        [LIFECYCLE_SUSPEND] = { LIFECYCLE_SUSPEND, "suspend", from_suspend, "suspending", "suspended",
                                "sandbox.suspend" },
        [LIFECYCLE_WAKE] = { LIFECYCLE_WAKE, "wake", from_wake, "waking", "running", "sandbox.wake" },
        [LIFECYCLE_FORK] = { LIFECYCLE_FORK, "fork", from_fork, "forking", NULL, "sandbox.fork" },
};

const struct lifecycle_transition *lifecycle_get(enum lifecycle_verb verb) {
        if ((unsigned) verb >= _LIFECYCLE_VERB_MAX)
                return NULL;
        return &table[verb];
}

int lifecycle_verb_from_name(const char *name, enum lifecycle_verb *ret) {
        if (!name)
                return -EINVAL;
        for (size_t i = 0; i < ARRAY_SIZE(table); i++)
                if (strcmp(table[i].name, name) == 0) {
                        *ret = table[i].verb;
                        return 0;
                }
        return -EINVAL;
}

static bool in_list(const char *const *list, const char *s) {
        for (size_t i = 0; list && list[i]; i++)
                if (strcmp(list[i], s) == 0)
                        return true;
        return false;
}

bool lifecycle_state_is_valid(const char *state) {
        return state && in_list(lifecycle_states, state);
}

bool lifecycle_state_is_transitional(const char *state) {
        if (!state)
                return false;
        if (in_list(node_transitional, state))
                return true;
        for (size_t i = 0; i < ARRAY_SIZE(table); i++)
                if (strcmp(table[i].transitional, state) == 0)
                        return true;
        return false;
}

int lifecycle_check(enum lifecycle_verb verb, const char *current_state) {
        const struct lifecycle_transition *t = lifecycle_get(verb);
        if (!t)
                return -EINVAL;
        if (!lifecycle_state_is_valid(current_state))
                return -EPERM;
        if (in_list(t->from, current_state))
                return 0;
        if (lifecycle_state_is_transitional(current_state))
                return -EBUSY;
        return -EPERM;
}
