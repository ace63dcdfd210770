/* SPDX-License-Identifier: Apache-2.0 */
/* The lifecycle verbs: pause, resume, stop, start (layer 3). */
#include "sandbox-internal.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "util.h"

static int run_state_command(struct sandbox *s, bool pause, const char **ret_state, char **ret_error) {
        int r = sandbox_life_begin(s, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED,
                           ret_state);
        if (r < 0)
                return r;
        r = sandbox_post_command(s, pause ? SANDBOX_CMD_PAUSE : SANDBOX_CMD_RESUME, NULL, LIFECYCLE_CMD_WAIT_MS);
        sandbox_life_end(s);
        if (r < 0) {
                if (ret_error)
                        *ret_error = strdup_printf("QMP %s failed: %s", pause ? "stop" : "cont", strerror(-r));
                return r == -ETIMEDOUT ? r : -EIO;
        }
        (void) sandbox_record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox %s", pause ? "paused" : "resumed");
        return 0;
}

int sandbox_pause(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, true, ret_state, ret_error);
}

int sandbox_resume(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, false, ret_state, ret_error);
}

int sandbox_stop(struct sandbox *s, const char **ret_state, char **ret_error) {
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        sandbox_stop_claimed(s, true);
        sandbox_life_end(s);
        (void) ret_error;
        return 0;
}

int sandbox_start(struct sandbox *s, const char **ret_state, char **ret_error) {
        int r = sandbox_life_begin(s, SANDBOX_STOPPED, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        r = sandbox_start_claimed(s, ret_error);
        sandbox_life_end(s); /* on failure still stopped: the disk is untouched, a later start may work */
        return r;
}
