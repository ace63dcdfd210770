/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Users and groups of the guest: its own passwd(5) and group(5) files,
 * parsed here rather than through getpwnam() and initgroups(), which go
 * through NSS: the agent is static, and NSS would load the modules of the
 * guest's glibc, another one than the agent was linked with. Only the
 * "files" source exists for it; a line that does not parse is skipped, as
 * glibc's own parser does.
 */
#include "request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "util.h"

/* Names longer than this are not names the agent passes on. */
#define ACCOUNT_NAME_MAX 256u

/* Splits line (NUL-terminated, modified) at ':' into exactly n fields;
 * false when it has fewer. The last field keeps any further ':'. */
static bool split_fields(char *line, char **fields, size_t n) {
        for (size_t i = 0; i < n; i++) {
                fields[i] = line;
                if (i + 1 == n)
                        break;
                char *c = strchr(line, ':');
                if (!c)
                        return false;
                *c = 0;
                line = c + 1;
        }
        return true;
}

static bool id_parse(const char *s, uint32_t *ret) {
        uint64_t v;
        /* (uid_t) -1 means "unchanged" to setuid-like calls: never an id */
        if (!s[0] || parse_u64(s, UINT32_MAX - 1, &v) < 0)
                return false;
        *ret = (uint32_t) v;
        return true;
}

/* Calls fn for every line of text (modified in place) that splits into n
 * fields, has a name (fields[0]) of at most ACCOUNT_NAME_MAX bytes and is
 * no NIS compat entry ("+", "-"); fn returns true to stop. */
static void for_each_entry(char *text, size_t n, bool (*fn)(char **fields, void *userdata), void *userdata) {
        char *fields[7];
        for (char *line = text, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                if (line[0] == '#' || line[0] == '+' || line[0] == '-' || !split_fields(line, fields, n))
                        continue;
                if (fields[0][0] == 0 || strlen(fields[0]) > ACCOUNT_NAME_MAX)
                        continue;
                if (fn(fields, userdata))
                        return;
        }
}

void guest_user_free(struct guest_user *u) {
        if (!u)
                return;
        free(u->name);
        free(u->home);
        free(u->shell);
        free(u->groups);
        free(u);
}

struct user_find {
        const char *name;
        struct guest_user *user;
        int r;
};

static bool passwd_match(char **f, void *userdata) {
        struct user_find *q = userdata;
        uint32_t uid, gid;
        if (strcmp(f[0], q->name) != 0 || !id_parse(f[2], &uid) || !id_parse(f[3], &gid))
                return false;
        struct guest_user *u = calloc(1, sizeof *u);
        if (!u) {
                q->r = -ENOMEM;
                return true;
        }
        /* the shell is the last field: a newline-less file ends in it */
        f[6][strcspn(f[6], "\r")] = 0;
        *u = (struct guest_user){ .uid = uid, .gid = gid };
        u->name = strdup(f[0]);
        u->home = strdup(f[5][0] ? f[5] : "/");
        u->shell = strdup(f[6][0] ? f[6] : "/bin/sh");
        u->groups = malloc(GUEST_MAX_GROUPS * sizeof *u->groups);
        if (!u->name || !u->home || !u->shell || !u->groups) {
                guest_user_free(u);
                q->r = -ENOMEM;
                return true;
        }
        u->groups[u->n_groups++] = gid;
        q->user = u;
        return true;
}

/* A group that lists the user among its members adds its gid. */
static bool group_match(char **f, void *userdata) {
        struct guest_user *u = userdata;
        uint32_t gid;
        if (u->n_groups >= GUEST_MAX_GROUPS)
                return true;
        if (!id_parse(f[2], &gid))
                return false;
        f[3][strcspn(f[3], "\r")] = 0;
        for (char *m = f[3], *next; m && *m; m = next) {
                next = strchr(m, ',');
                if (next)
                        *next++ = 0;
                if (strcmp(m, u->name) != 0)
                        continue;
                bool known = false;
                for (size_t i = 0; i < u->n_groups && !known; i++)
                        known = u->groups[i] == gid;
                if (!known)
                        u->groups[u->n_groups++] = gid;
                break;
        }
        return false;
}

int guest_user_lookup(const char *passwd_path, const char *group_path, const char *name,
                      struct guest_user **ret) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        r = file_read_all(passwd_path, GUEST_MAX_ACCOUNTS_FILE, &text, &len);
        if (r == -ENOENT)
                return -ESRCH;
        if (r < 0)
                return r;
        struct user_find q = { .name = name };
        for_each_entry(text, 7, passwd_match, &q);
        if (q.r < 0)
                return q.r;
        if (!q.user)
                return -ESRCH;
        _cleanup_(guest_user_freep) struct guest_user *u = q.user;

        free(TAKE_PTR(text));
        r = file_read_all(group_path, GUEST_MAX_ACCOUNTS_FILE, &text, &len);
        if (r < 0 && r != -ENOENT)
                return r;
        if (r >= 0)
                for_each_entry(text, 4, group_match, u);
        *ret = TAKE_PTR(u);
        return 0;
}

/* One id -> name table: names point into the file's text. */
struct idtable {
        char *text;
        struct idname {
                uint32_t id;
                const char *name;
        } *v;
        size_t n, cap;
};

struct guest_idmap {
        struct idtable users, groups;
};

struct idtable_fill {
        struct idtable *t;
        size_t id_field;
        int r;
};

static bool idtable_add(char **f, void *userdata) {
        struct idtable_fill *q = userdata;
        struct idtable *t = q->t;
        uint32_t id;
        if (!id_parse(f[q->id_field], &id))
                return false;
        if (t->n == t->cap) {
                size_t ncap = t->cap ? t->cap * 2 : 64;
                struct idname *nv = realloc(t->v, ncap * sizeof *nv);
                if (!nv) {
                        q->r = -ENOMEM;
                        return true;
                }
                t->v = nv;
                t->cap = ncap;
        }
        t->v[t->n++] = (struct idname){ .id = id, .name = f[0] };
        return false;
}

/* Loads one file; a missing or unreadable one leaves the table empty. */
static int idtable_load(struct idtable *t, const char *path, size_t fields, size_t id_field) {
        size_t len;
        if (file_read_all(path, GUEST_MAX_ACCOUNTS_FILE, &t->text, &len) < 0)
                return 0;
        struct idtable_fill q = { .t = t, .id_field = id_field };
        for_each_entry(t->text, fields, idtable_add, &q);
        return q.r;
}

static const char *idtable_find(const struct idtable *t, uint32_t id) {
        /* the first entry wins, as for getpwuid() */
        for (size_t i = 0; i < t->n; i++)
                if (t->v[i].id == id)
                        return t->v[i].name;
        return NULL;
}

void guest_idmap_free(struct guest_idmap *m) {
        if (!m)
                return;
        free(m->users.text);
        free(m->users.v);
        free(m->groups.text);
        free(m->groups.v);
        free(m);
}

int guest_idmap_load(const char *passwd_path, const char *group_path, struct guest_idmap **ret) {
        _cleanup_(guest_idmap_freep) struct guest_idmap *m = calloc(1, sizeof *m);
        int r;
        if (!m)
                return -ENOMEM;
        if ((r = idtable_load(&m->users, passwd_path, 7, 2)) < 0 ||
            (r = idtable_load(&m->groups, group_path, 4, 2)) < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

const char *guest_idmap_user(const struct guest_idmap *m, uint32_t uid) {
        return m ? idtable_find(&m->users, uid) : NULL;
}

const char *guest_idmap_group(const struct guest_idmap *m, uint32_t gid) {
        return m ? idtable_find(&m->groups, gid) : NULL;
}
