/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The user a file request acts as. The agent stays root; around one
 * request it takes the user's filesystem identity: setfsuid/setfsgid and
 * the raw setgroups syscall, all three per thread on Linux (glibc's
 * setgroups() would signal every thread to change with it, the agent has
 * only one anyway). The kernel then checks the user's permissions (an
 * fsuid other than 0 drops CAP_DAC_OVERRIDE, CAP_FOWNER and the other
 * file capabilities from the effective set, and gives them back when the
 * fsuid returns to 0) and new files and directories are the user's and its
 * primary group's. Nothing here forks or runs anything: the processes the
 * agent starts never inherit the switched identity.
 */
#include "agent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "request.h"

void fs_user_release(struct fs_user *u) {
        if (!u)
                return;
        free(u->groups);
        *u = (struct fs_user){ 0 };
}

int fs_user_lookup(const char *name, struct fs_user *ret) {
        _cleanup_(guest_user_freep) struct guest_user *user = NULL;
        int r;

        if (!name) {
                *ret = (struct fs_user){ 0 };
                return 0;
        }
        r = guest_user_lookup(GUEST_PASSWD_PATH, GUEST_GROUP_PATH, name, &user);
        if (r < 0)
                return r;
        /* root (or any uid 0) is what the agent is already */
        if (user->uid == 0) {
                *ret = (struct fs_user){ 0 };
                return 0;
        }
        gid_t *groups = calloc(user->n_groups, sizeof *groups);
        if (!groups)
                return -ENOMEM;
        for (size_t i = 0; i < user->n_groups; i++)
                groups[i] = (gid_t) user->groups[i];
        *ret = (struct fs_user){ .active = true,
                                 .uid = (uid_t) user->uid,
                                 .gid = (gid_t) user->gid,
                                 .groups = groups,
                                 .n_groups = user->n_groups };
        return 0;
}

bool fs_user_request(struct agent *a, uint32_t stream, const char *name, struct fs_user *ret) {
        int r = fs_user_lookup(name, ret);
        if (r == -ESRCH)
                agent_send_errorf(a, stream, r, "unknown user '%s'", name);
        else if (r < 0)
                agent_send_errorf(a, stream, r, "user %s: %s", name, strerror(-r));
        return r >= 0;
}

json_t *fs_user_to_json(const struct fs_user *u) {
        json_t *groups = json_array();
        for (size_t i = 0; groups && i < u->n_groups; i++)
                if (json_array_append_new(groups, json_integer((json_int_t) u->groups[i])) < 0) {
                        json_decref(groups);
                        groups = NULL;
                }
        return groups ? json_pack("{s:b,s:I,s:I,s:o}", "active", u->active, "uid", (json_int_t) u->uid,
                                  "gid", (json_int_t) u->gid, "groups", groups)
                      : NULL;
}

int fs_user_from_json(json_t *o, struct fs_user *ret) {
        int active;
        json_int_t uid, gid;
        json_t *groups, *g;
        size_t i;
        if (json_unpack(o, "{s:b,s:I,s:I,s:o!}", "active", &active, "uid", &uid, "gid", &gid, "groups",
                        &groups) < 0 ||
            uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX || !json_is_array(groups) ||
            json_array_size(groups) > GUEST_MAX_GROUPS)
                return -EINVAL;
        struct fs_user u = {.active = active, .uid = (uid_t) uid, .gid = (gid_t) gid};
        if (json_array_size(groups) && !(u.groups = calloc(json_array_size(groups), sizeof *u.groups)))
                return -ENOMEM;
        json_array_foreach(groups, i, g) {
                if (!json_is_integer(g) || json_integer_value(g) < 0 ||
                    json_integer_value(g) >= UINT32_MAX) {
                        free(u.groups);
                        return -EINVAL;
                }
                u.groups[u.n_groups++] = (gid_t) json_integer_value(g);
        }
        *ret = u;
        return 0;
}

void fs_user_move(struct fs_user *from, struct fs_user *to) {
        fs_user_release(to);
        *to = *from;
        *from = (struct fs_user){ 0 };
}

/* setfsuid/setfsgid answer the previous id whether they changed it or
 * not; an invalid id ((uid_t) -1) changes nothing and tells the current. */
static uid_t current_fsuid(void) {
        return (uid_t) setfsuid((uid_t) -1);
}

static gid_t current_fsgid(void) {
        return (gid_t) setfsgid((gid_t) -1);
}

static int raw_setgroups(size_t n, const gid_t *groups) {
        return syscall(SYS_setgroups, n, groups) < 0 ? negative_errno() : 0;
}

int fs_user_enter(const struct fs_user *u, struct fs_user_saved *ret) {
        int r;

        *ret = (struct fs_user_saved){ 0 };
        if (!u || !u->active)
                return 0;
        int n = getgroups(0, NULL);
        if (n < 0)
                return negative_errno();
        gid_t *saved_groups = calloc((size_t) n + 1, sizeof *saved_groups);
        if (!saved_groups)
                return -ENOMEM;
        if (n > 0 && (n = getgroups(n, saved_groups)) < 0) {
                r = negative_errno();
                free(saved_groups);
                return r;
        }
        struct fs_user_saved s = { .switched = true, .fsuid = current_fsuid(), .fsgid = current_fsgid(),
                                   .groups = saved_groups, .n_groups = (size_t) n };
        r = raw_setgroups(u->n_groups, u->groups);
        if (r >= 0) {
                (void) setfsgid(u->gid);
                if (current_fsgid() != u->gid)
                        r = -EPERM;
        }
        if (r >= 0) {
                (void) setfsuid(u->uid);
                if (current_fsuid() != u->uid)
                        r = -EPERM;
        }
        if (r < 0) {
                fs_user_leave(&s);
                return r;
        }
        *ret = s;
        return 0;
}

void fs_user_leave(struct fs_user_saved *s) {
        if (!s || !s->switched)
                return;
        /* the fsuid first: back at 0 it has its capabilities again */
        (void) setfsuid(s->fsuid);
        (void) setfsgid(s->fsgid);
        int r = raw_setgroups(s->n_groups, s->groups);
        if (current_fsuid() != s->fsuid || current_fsgid() != s->fsgid || r < 0)
                log_error("Failed to return to the agent's own file system identity: %s",
                          strerror(r < 0 ? -r : EPERM));
        free(s->groups);
        *s = (struct fs_user_saved){ 0 };
}
