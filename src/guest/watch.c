/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Directory watches (WATCH): one inotify instance per watch, read
 * non-blocking from the agent's poll loop. A recursive watch also watches
 * every subdirectory on the same file system, those created (or moved in)
 * later included, up to GUEST_MAX_WATCH_DIRS. Events go out as WATCH_EVENT
 * {"name","type"} with the name relative to the watched directory, the
 * types those of E2B's envd (fsnotify's): create (also a name moved in),
 * write, remove, rename (a name moved away), chmod. What a new
 * subdirectory of a recursive watch held before its watch began (a file
 * made right after the directory, a tree moved in) is named as created
 * after it (dirs_list()).
 *
 * Everything is bounded: at most GUEST_MAX_WATCHES watches, a few inotify
 * buffers read per watch and loop turn (the kernel queues the rest, and
 * says IN_Q_OVERFLOW when its queue is full, which goes out as
 * {"type":"overflow"}), repeats of one event in a batch sent once. A
 * watch ends with WATCH_END from the host, with its host connection, or
 * from here with ERROR when the watched directory itself goes away.
 *
 * A watch with a "user" sees what that user may: the directories are
 * opened and watched with its filesystem identity (fsuser.c), the
 * subdirectories a recursive watch adds later too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

#define WATCH_MASK \
        (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | \
         IN_MOVE_SELF | IN_EXCL_UNLINK | IN_ONLYDIR)
/* The relative paths one watch keeps, in all (so 8192 deep paths cannot
 * take the guest's memory). */
#define WATCH_PATH_BYTES_MAX (4u << 20)
/* inotify buffers read per watch and loop turn. */
#define READS_PER_TURN 4
/* Entries of a new directory named as created, at most (then overflow). */
#define WATCH_NEW_ENTRIES_MAX 1024

struct watch_dir {
        int wd;
        char *rel; /* "" for the watched directory, else "a/b" */
};

struct watch {
        struct watch *next;
        uint32_t id;
        int fd; /* inotify, non-blocking */
        bool recursive;
        dev_t dev;   /* the walk stays on the watched directory's file system */
        char *root;  /* the path WATCH named */
        struct watch_dir *dirs;
        size_t n_dirs, cap_dirs;
        size_t path_bytes;  /* of every rel */
        bool full_reported; /* an overflow went out for a subdirectory over the limits */
        int idx;            /* poll slot of this turn, -1 if none */
        struct fs_user user; /* who walks and watches the directories */
};

static uint8_t event_buf[16 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));

static struct watch *watch_find(struct agent *a, uint32_t id) {
        return AGENT_LIST_FIND(a->watches, id);
}

/* Frees w; its inotify fd takes the kernel's watches with it. */
static void watch_destroy(struct watch *w) {
        if (w->fd >= 0)
                close(w->fd);
        for (size_t i = 0; i < w->n_dirs; i++)
                free(w->dirs[i].rel);
        free(w->dirs);
        free(w->root);
        fs_user_release(&w->user);
        free(w);
}

/* Unlinks w and frees it. */
static void watch_free(struct agent *a, struct watch *w) {
        AGENT_LIST_UNLINK(&a->watches, w, &a->n_watches);
        watch_destroy(w);
}

void watch_discard_all(struct agent *a) {
        while (a->watches)
                watch_free(a, a->watches);
}

static struct watch_dir *dir_find(struct watch *w, int wd) {
        for (size_t i = 0; i < w->n_dirs; i++)
                if (w->dirs[i].wd == wd)
                        return &w->dirs[i];
        return NULL;
}

static void dir_remove(struct watch *w, struct watch_dir *d) {
        w->path_bytes -= strlen(d->rel);
        free(d->rel);
        *d = w->dirs[--w->n_dirs];
}

/* The absolute path of rel. */
static char *dir_path(const struct watch *w, const char *rel) {
        return rel[0] ? strdup_printf("%s/%s", w->root, rel) : strdup(w->root);
}

/* Watches directory rel (takes it): -E2BIG over the limits, -ENAMETOOLONG
 * for a path longer than any the host may name, or what inotify says
 * (ENOSPC: the kernel's watches are used up). */
static int dir_add(struct watch *w, char *rel) {
        _cleanup_free_ char *owned = rel, *path = NULL;
        if (w->n_dirs >= GUEST_MAX_WATCH_DIRS || w->path_bytes + strlen(rel) > WATCH_PATH_BYTES_MAX)
                return -E2BIG;
        if (strlen(w->root) + 1 + strlen(rel) > GUEST_MAX_PATH)
                return -ENAMETOOLONG;
        if (!(path = dir_path(w, rel)))
                return -ENOMEM;
        int wd = inotify_add_watch(w->fd, path, WATCH_MASK | (rel[0] ? IN_DONT_FOLLOW : 0));
        if (wd < 0)
                return negative_errno();
        struct watch_dir *d = dir_find(w, wd);
        if (d) {
                /* the same directory again (moved back meanwhile): its new name */
                w->path_bytes -= strlen(d->rel);
                free(d->rel);
                d->rel = TAKE_PTR(owned);
                w->path_bytes += strlen(d->rel);
                return 0;
        }
        if (w->n_dirs == w->cap_dirs) {
                size_t ncap = w->cap_dirs ? w->cap_dirs * 2 : 16;
                struct watch_dir *nd = realloc(w->dirs, ncap * sizeof *nd);
                if (!nd) {
                        (void) inotify_rm_watch(w->fd, wd);
                        return -ENOMEM;
                }
                w->dirs = nd;
                w->cap_dirs = ncap;
        }
        w->path_bytes += strlen(owned);
        w->dirs[w->n_dirs++] = (struct watch_dir){ .wd = wd, .rel = TAKE_PTR(owned) };
        return 0;
}

/* Adds the subdirectories below dirs[from..] (those it adds included: the
 * array is the walk's queue), without following symlinks or leaving the
 * file system. A directory that vanished meanwhile is skipped. */
static int dirs_walk(struct watch *w, size_t from) {
        for (size_t i = from; i < w->n_dirs; i++) {
                _cleanup_free_ char *path = dir_path(w, w->dirs[i].rel);
                _cleanup_free_ char *base = strdup(w->dirs[i].rel);
                if (!path || !base)
                        return -ENOMEM;
                int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue;
                DIR *dir = fdopendir(fd);
                if (!dir) {
                        close(fd);
                        return -ENOMEM;
                }
                int r = 0;
                struct dirent *de;
                while (r >= 0 && (de = readdir(dir))) {
                        struct stat st;
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
                                continue;
                        if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                            !S_ISDIR(st.st_mode) || st.st_dev != w->dev)
                                continue;
                        char *rel = base[0] ? strdup_printf("%s/%s", base, de->d_name) : strdup(de->d_name);
                        r = rel ? dir_add(w, rel) : -ENOMEM;
                        /* gone or replaced meanwhile, too deep: skipped; only
                         * the limits and memory end the walk */
                        if (r != -E2BIG && r != -ENOSPC && r != -ENOMEM)
                                r = 0;
                }
                closedir(dir);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Names a new directory held before its watch began. */
struct names {
        char **v;
        size_t n, cap;
        bool over; /* more than WATCH_NEW_ENTRIES_MAX: the rest not named */
};

static void names_freep(struct names *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i]);
        free(l->v);
}

/*
 * The entries of dirs[from..] (a directory just created or moved in, and
 * the subdirectories the walk found in it), as relative names. A file made
 * in a new directory before the agent read the directory's own create
 * and watched it (`mkdir d; echo > d/f`, or a tree moved in) has no event
 * of its own: the watch names it as created, once the directory's create
 * went out. One made after the watch began may be named twice.
 */
static void dirs_list(struct watch *w, size_t from, struct names *out) {
        for (size_t i = from; i < w->n_dirs && !out->over; i++) {
                _cleanup_free_ char *path = dir_path(w, w->dirs[i].rel);
                DIR *dir = path ? opendir(path) : NULL;
                if (!dir)
                        continue; /* gone meanwhile: its remove says so */
                for (struct dirent *de; !out->over && (de = readdir(dir));) {
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        if (out->n == WATCH_NEW_ENTRIES_MAX) {
                                out->over = true;
                                break;
                        }
                        if (out->n == out->cap) {
                                size_t ncap = out->cap ? out->cap * 2 : 16;
                                char **nv = realloc(out->v, ncap * sizeof *nv);
                                if (!nv) {
                                        out->over = true;
                                        break;
                                }
                                out->v = nv;
                                out->cap = ncap;
                        }
                        char *name = strdup_printf("%s/%s", w->dirs[i].rel, de->d_name);
                        if (!name) {
                                out->over = true;
                                break;
                        }
                        out->v[out->n++] = name;
                }
                closedir(dir);
        }
}

/* WATCH's work once the request is parsed, as user (taken on success). */
static int watch_setup(struct agent *a, uint32_t stream, struct guest_path_request *req, struct fs_user *user) {
        struct stat st;
        int r = 0;

        struct watch *w = NULL;
        if (stream == 0)
                r = -EINVAL;
        else if (watch_find(a, stream))
                r = -EEXIST;
        else if (a->n_watches >= GUEST_MAX_WATCHES)
                r = agent_send_errorf(a, stream, -EMFILE, "watch: at most %u watches", GUEST_MAX_WATCHES);
        else if (stat(req->path, &st) < 0)
                r = negative_errno();
        else if (!S_ISDIR(st.st_mode))
                r = -ENOTDIR;
        else if (!(w = calloc(1, sizeof *w)))
                r = -ENOMEM;
        if (!w)
                return r;
        *w = (struct watch){ .id = stream,
                             .recursive = req->flag,
                             .dev = st.st_dev,
                             .root = TAKE_PTR(req->path),
                             .idx = -1 };
        fs_user_move(user, &w->user);
        w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        char *rel = strdup("");
        if (w->fd < 0)
                r = negative_errno();
        else
                r = rel ? dir_add(w, TAKE_PTR(rel)) : -ENOMEM;
        free(rel);
        if (r >= 0 && w->recursive)
                r = dirs_walk(w, 0);
        if (r == -E2BIG) {
                watch_free(a, w);
                return agent_send_errorf(a, stream, r, "watch: more than %u directories below it",
                                         GUEST_MAX_WATCH_DIRS);
        }
        if (r < 0) {
                watch_free(a, w);
                return r;
        }
        w->next = a->watches;
        a->watches = w;
        a->n_watches++;
        log_debug("Watching %s%s on stream %u (%zu directories)", w->root,
                  w->recursive ? " recursively" : "", stream, w->n_dirs);
        return agent_send_ok(a, stream);
}

int watch_start(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        struct guest_path_request req;
        struct fs_user user = { 0 };
        struct fs_user_saved saved;
        int r;

        r = guest_path_request_parse(PROTO_WATCH, payload, len, &req);
        if (r < 0)
                return r;
        if (fs_user_request(a, stream, req.user, &user) && (r = fs_user_enter(&user, &saved)) >= 0) {
                r = watch_setup(a, stream, &req, &user);
                fs_user_leave(&saved);
        }
        fs_user_release(&user);
        guest_path_request_release(&req);
        return r;
}

int watch_end(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        int r = guest_json_check(payload, len);
        if (r < 0)
                return r;
        /* it may cross the ERROR that ended the watch from here */
        struct watch *w = watch_find(a, stream);
        if (w)
                watch_free(a, w);
        return 0;
}

size_t watch_poll_fill(struct agent *a, struct pollfd *pfd) {
        size_t n = 0;
        for (struct watch *w = a->watches; w && n < GUEST_MAX_WATCHES; w = w->next) {
                w->idx = (int) n;
                pfd[n++] = (struct pollfd){ .fd = w->fd, .events = POLLIN };
        }
        return n;
}

static int send_event(struct agent *a, struct watch *w, const char *name, const char *type) {
        if (!name)
                return agent_send_json(a, PROTO_WATCH_EVENT, w->id, json_pack("{s:s}", "type", type));
        _cleanup_free_ char *clean = NULL;
        int r = guest_utf8_sanitize(name, strlen(name), &clean);
        if (r < 0)
                return r;
        return agent_send_json(a, PROTO_WATCH_EVENT, w->id,
                               json_pack("{s:s,s:s}", "name", clean, "type", type));
}

/* A subdirectory over the limits is not watched: said once with an
 * overflow, since its events are lost. */
static void report_full(struct agent *a, struct watch *w) {
        if (w->full_reported)
                return;
        w->full_reported = true;
        log_warn("Watch of %s is over its limits: a new subdirectory is not watched", w->root);
        send_event(a, w, NULL, "overflow");
}

/* Stops watching rel and everything below it (it moved away: its
 * descendants' names would be wrong). */
static void dirs_forget(struct watch *w, const char *rel) {
        size_t rl = strlen(rel);
        for (size_t i = 0; i < w->n_dirs;) {
                const char *x = w->dirs[i].rel;
                if (strncmp(x, rel, rl) == 0 && (x[rl] == 0 || x[rl] == '/')) {
                        (void) inotify_rm_watch(w->fd, w->dirs[i].wd);
                        dir_remove(w, &w->dirs[i]);
                } else
                        i++;
        }
}

static const char *event_type(uint32_t mask) {
        if (mask & (IN_CREATE | IN_MOVED_TO))
                return "create";
        if (mask & IN_MODIFY)
                return "write";
        if (mask & IN_DELETE)
                return "remove";
        if (mask & IN_MOVED_FROM)
                return "rename";
        if (mask & IN_ATTRIB)
                return "chmod";
        return NULL;
}

/* Handles one batch of events; false when the watch ended. prev/prev_type
 * (the last event sent) let a repeat in the batch go out once. */
static bool handle_events(struct agent *a, struct watch *w, const uint8_t *buf, size_t len, char **prev,
                          const char **prev_type) {
        for (size_t off = 0; off + sizeof(struct inotify_event) <= len;) {
                const struct inotify_event *ev = (const struct inotify_event *) (buf + off);
                off += sizeof *ev + ev->len;
                if (ev->mask & IN_Q_OVERFLOW) {
                        send_event(a, w, NULL, "overflow");
                        free(*prev);
                        *prev = NULL;
                        continue;
                }
                struct watch_dir *d = dir_find(w, ev->wd);
                if (!d)
                        continue; /* a subdirectory forgotten meanwhile */
                bool root = d->rel[0] == 0;
                if (ev->mask & IN_IGNORED) {
                        if (root) {
                                agent_send_errorf(a, w->id, -ENOENT, "watch: %s was removed", w->root);
                                return false;
                        }
                        dir_remove(w, d);
                        continue;
                }
                if (root && (ev->mask & IN_MOVE_SELF)) {
                        agent_send_errorf(a, w->id, -ENOENT, "watch: %s was moved away", w->root);
                        return false;
                }
                const char *type = event_type(ev->mask);
                if (ev->len == 0 || !type || !ev->name[0])
                        continue; /* about a watched directory itself: its parent says it */
                _cleanup_free_ char *rel =
                        root ? strdup(ev->name) : strdup_printf("%s/%s", d->rel, ev->name);
                if (!rel)
                        continue;
                _cleanup_(names_freep) struct names found = { 0 };
                if (w->recursive && (ev->mask & IN_ISDIR)) {
                        if (ev->mask & IN_MOVED_FROM)
                                dirs_forget(w, rel);
                        else if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
                                size_t from = w->n_dirs;
                                struct fs_user_saved saved;
                                int r = fs_user_enter(&w->user, &saved);
                                if (r >= 0) {
                                        char *copy = strdup(rel);
                                        r = copy ? dir_add(w, copy) : -ENOMEM;
                                        if (r >= 0)
                                                r = dirs_walk(w, from);
                                        if (r >= 0)
                                                dirs_list(w, from, &found);
                                        fs_user_leave(&saved);
                                }
                                if (r == -E2BIG || r == -ENOSPC)
                                        report_full(a, w);
                        }
                }
                if (!(*prev && *prev_type == type && strcmp(*prev, rel) == 0)) {
                        send_event(a, w, rel, type);
                        free(*prev);
                        *prev = TAKE_PTR(rel);
                        *prev_type = type;
                }
                /* what the new directory held before its watch began */
                for (size_t i = 0; i < found.n; i++)
                        send_event(a, w, found.v[i], "create");
                if (found.over)
                        send_event(a, w, NULL, "overflow");
        }
        return true;
}

void watch_poll_dispatch(struct agent *a, const struct pollfd *pfd, size_t n) {
        struct watch *next;
        for (struct watch *w = a->watches; w; w = next) {
                next = w->next;
                int idx = w->idx;
                w->idx = -1;
                if (idx < 0 || (size_t) idx >= n || !pfd[idx].revents)
                        continue;
                _cleanup_free_ char *prev = NULL;
                const char *prev_type = NULL;
                bool alive = true;
                for (int i = 0; i < READS_PER_TURN && alive && !a->host_away; i++) {
                        ssize_t k = read(w->fd, event_buf, sizeof event_buf);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                break;
                        alive = handle_events(a, w, event_buf, (size_t) k, &prev, &prev_type);
                }
                if (!alive)
                        watch_free(a, w);
        }
}

/* ---- upgrade: the watches handed to the next agent (upgrade.c) ---- */

int watch_state_save(struct agent *a, json_t *arr) {
        for (struct watch *w = a->watches; w; w = w->next) {
                json_t *dirs = json_array();
                for (size_t i = 0; dirs && i < w->n_dirs; i++)
                        if (json_array_append_new(dirs, json_pack("[i,s]", w->dirs[i].wd, w->dirs[i].rel)) <
                            0) {
                                json_decref(dirs);
                                dirs = NULL;
                        }
                json_t *o =
                        dirs ? json_pack("{s:I,s:i,s:b,s:I,s:s,s:o,s:b,s:o}", "id", (json_int_t) w->id, "fd",
                                         w->fd, "recursive", w->recursive, "dev", (json_int_t) w->dev,
                                         "root", w->root, "dirs", dirs, "full_reported", w->full_reported,
                                         "user", fs_user_to_json(&w->user))
                             : NULL;
                if (!o || json_array_append_new(arr, o) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* One watch of the state, or -EINVAL for an entry that does not hold
 * together. */
static int watch_from_state(json_t *o, struct watch **ret) {
        json_int_t id, dev;
        int fd, recursive, full;
        const char *root;
        json_t *dirs, *user, *d;
        size_t i;
        if (json_unpack(o, "{s:I,s:i,s:b,s:I,s:s,s:o,s:b,s:o!}", "id", &id, "fd", &fd, "recursive",
                        &recursive, "dev", &dev, "root", &root, "dirs", &dirs, "full_reported", &full,
                        "user", &user) < 0 ||
            id <= 0 || id > UINT32_MAX || fd < 3 || guest_path_validate(root) < 0 || !json_is_array(dirs) ||
            json_array_size(dirs) > GUEST_MAX_WATCH_DIRS)
                return -EINVAL;
        struct watch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (struct watch){.id = (uint32_t) id,
                            .fd = fd,
                            .recursive = recursive,
                            .dev = (dev_t) dev,
                            .root = strdup(root),
                            .full_reported = full,
                            .idx = -1};
        int r = w->root ? fs_user_from_json(user, &w->user) : -ENOMEM;
        if (r >= 0 && json_array_size(dirs) && !(w->dirs = calloc(json_array_size(dirs), sizeof *w->dirs)))
                r = -ENOMEM;
        w->cap_dirs = json_array_size(dirs);
        json_array_foreach(dirs, i, d) {
                int wd;
                const char *rel;
                if (r < 0)
                        break;
                if (json_unpack(d, "[is!]", &wd, &rel) < 0 || strlen(rel) > GUEST_MAX_PATH ||
                    w->path_bytes + strlen(rel) > WATCH_PATH_BYTES_MAX)
                        r = -EINVAL;
                else if (!(w->dirs[i].rel = strdup(rel)))
                        r = -ENOMEM;
                else {
                        w->dirs[i].wd = wd;
                        w->path_bytes += strlen(rel);
                        w->n_dirs++;
                }
        }
        if (r < 0) {
                w->fd = -1; /* not ours to close: the caller's state still names it */
                watch_destroy(w);
                return r;
        }
        *ret = w;
        return 0;
}

int watch_state_load(struct agent *a, json_t *arr, bool take_fds) {
        struct watch **tail = &a->watches;
        json_t *o;
        size_t i;
        if (!json_is_array(arr) || json_array_size(arr) > GUEST_MAX_WATCHES)
                return -EINVAL;
        while (*tail)
                tail = &(*tail)->next;
        json_array_foreach(arr, i, o) {
                struct watch *w;
                int r = watch_from_state(o, &w);
                if (r < 0)
                        return r;
                if (!take_fds)
                        w->fd = -1;
                *tail = w;
                tail = &w->next;
                a->n_watches++;
        }
        return 0;
}

int watch_fds_inherit(struct agent *a, bool inherit) {
        for (struct watch *w = a->watches; w; w = w->next) {
                int r = fd_set_cloexec(w->fd, !inherit);
                if (r < 0)
                        return r;
        }
        return 0;
}
