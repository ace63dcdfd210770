/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The sandbox lifecycle as one table: the states a sandbox row can be in,
 * the verbs that move it, and for each verb the states it may start from,
 * the transitional state it holds while the node works, and the state it
 * ends in. Everything that needs to know whether a verb is allowed (the
 * API, reconciliation) asks lifecycle_check(); nothing else hard-codes a
 * transition.
 */

#include <stdbool.h>

enum lifecycle_verb {
        LIFECYCLE_CREATE,
        LIFECYCLE_DELETE,
        LIFECYCLE_PAUSE,
        LIFECYCLE_RESUME,
        LIFECYCLE_STOP,
        LIFECYCLE_START,
        LIFECYCLE_ROLLBACK,
        LIFECYCLE_SUSPEND,
        LIFECYCLE_WAKE,
        LIFECYCLE_FORK,
        _LIFECYCLE_VERB_MAX,
};

struct lifecycle_transition {
        enum lifecycle_verb verb;
        const char *name;         /* "pause" */
        const char *const *from;  /* NULL-terminated legal from-states; NULL for create (no row yet) */
        const char *transitional; /* state while the verb runs */
        const char *target;       /* state once it succeeded ("deleted": the row is gone; NULL: the
                                   * state it started from, as fork leaves its parent) */
        const char *node_op;      /* node protocol op ("sandbox.pause") */
};

/* Every state a sandbox row can hold, NULL-terminated. */
extern const char *const lifecycle_states[];

/* The table entry of a verb; NULL for an out-of-range value. */
const struct lifecycle_transition *lifecycle_get(enum lifecycle_verb verb);
/* Verb by name ("pause"); -EINVAL when unknown. */
int lifecycle_verb_from_name(const char *name, enum lifecycle_verb *ret);
/* Whether state is a known state. */
bool lifecycle_state_is_valid(const char *state);
/* Whether state is the transitional state of some verb (a verb runs). */
bool lifecycle_state_is_transitional(const char *state);

/*
 * May verb start on a sandbox in current_state? 0 if so; -EBUSY when a verb
 * is in progress on it (current_state is transitional); -EPERM when the
 * transition is illegal (also for create, which has no from-state, and for
 * unknown states); -EINVAL for an unknown verb. The API answers both
 * refusals with 409 naming the current state.
 */
int lifecycle_check(enum lifecycle_verb verb, const char *current_state);
