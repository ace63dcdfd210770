/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File operations. FILE_READ and FILE_WRITE are transfers (at most
 * GUEST_MAX_TRANSFERS open): a read sends one 64 KiB chunk per loop turn, so
 * a big file never holds up processes; a write lands in a temporary file
 * beside the target that is renamed into place on FILE_END. The others
 * (LIST, STAT, RENAME, REMOVE, MKDIR) answer at once; LIST and STAT
 * entries name owner and group from the guest's own passwd and group files.
 * A request with a "user" runs with that user's filesystem identity
 * (fsuser.c); so does a write's rename on FILE_END. A request with a
 * "root" (a volume's mount: the node's way to a volume's files, E2B's
 * volume content API) sees that directory as "/": the agent, single
 * threaded, chroots into it for the request and back, so ".." and absolute
 * symlinks stay in the volume, and its entries name owners by number (the
 * volume's passwd is not the guest's). SETATTR changes owner and mode.
 *
 * DATA and END for a stream without a transfer are dropped silently: after
 * an ERROR the host may still have frames of that stream in flight.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

struct transfer {
        struct transfer *next;
        uint32_t id;
        bool write;
        int fd;
        /* write: the target's directory (opened at FILE_WRITE, under the
         * request's root: the rename on FILE_END is there, whatever the
         * agent's root is by then), the target's name in it, and the
         * temporary file's, unlinked unless renamed */
        int dir_fd;
        char *name;
        char *tmp_name;
        uint64_t size;  /* write: bytes received */
        struct fs_user user; /* write: who renames it into place */
};

static uint8_t chunk_buf[PROTO_DATA_CHUNK];

static struct transfer *transfer_find(struct agent *a, uint32_t id) {
        return AGENT_LIST_FIND(a->transfers, id);
}

/* Unlinks t from the list and frees it; a write's temporary file goes. */
static void transfer_free(struct agent *a, struct transfer *t) {
        AGENT_LIST_UNLINK(&a->transfers, t, &a->n_transfers);
        if (t->fd >= 0)
                close(t->fd);
        if (t->tmp_name)
                (void) unlinkat(t->dir_fd, t->tmp_name, 0);
        if (t->dir_fd >= 0)
                close(t->dir_fd);
        free(t->name);
        free(t->tmp_name);
        fs_user_release(&t->user);
        free(t);
}

void files_discard_all(struct agent *a) {
        while (a->transfers)
                transfer_free(a, a->transfers);
}

/* A new transfer for stream id, if the stream is free and the limit allows. */
static int transfer_new(struct agent *a, uint32_t id, bool write, struct transfer **ret) {
        if (transfer_find(a, id))
                return -EEXIST;
        if (a->n_transfers >= GUEST_MAX_TRANSFERS)
                return -EAGAIN;
        struct transfer *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        *t = (struct transfer){.next = a->transfers, .id = id, .write = write, .fd = -1, .dir_fd = -1};
        a->transfers = t;
        a->n_transfers++;
        *ret = t;
        return 0;
}

/* FILE_READ: regular files only (a FIFO or a device could stream forever or
 * block the agent); the RESULT goes out now, the data from files_pump(). */
static int file_read_start(struct agent *a, uint32_t stream, const char *path) {
        struct stat st;
        struct transfer *t;
        int r;

        if (transfer_find(a, stream))
                return -EEXIST;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return negative_errno();
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        r = transfer_new(a, stream, false, &t);
        if (r < 0)
                return r;
        t->fd = TAKE_FD(fd);
        return agent_send_json(
                a, PROTO_RESULT, stream,
                json_pack("{s:I,s:i}", "size", (json_int_t) st.st_size, "mode", (int) (st.st_mode & 07777)));
}

bool files_pump(struct agent *a) {
        struct transfer *next;
        bool more = false;

        for (struct transfer *t = a->transfers; t; t = next) {
                next = t->next;
                if (t->write)
                        continue;
                ssize_t k = read(t->fd, chunk_buf, sizeof chunk_buf);
                if (k < 0 && (errno == EINTR || errno == EAGAIN)) {
                        more = true;
                        continue;
                }
                if (k > 0) {
                        agent_send(a, PROTO_FILE_DATA, t->id, chunk_buf, (size_t) k);
                        more = true;
                        continue;
                }
                if (k == 0)
                        agent_send(a, PROTO_FILE_END, t->id, "{}", 2);
                else
                        agent_send_error(a, t->id, negative_errno(), "file-read");
                transfer_free(a, t);
        }
        return more;
}

/* Splits path into its directory ("/" for top-level names) and its last
 * name (empty for "/" itself). */
static int path_split(const char *path, char **ret_dir, char **ret_name) {
        const char *slash = strrchr(path, '/');
        size_t n = slash && slash != path ? (size_t) (slash - path) : 1;
        _cleanup_free_ char *d = strndup(path, n), *name = strdup(slash ? slash + 1 : path);
        if (!d || !name)
                return -ENOMEM;
        *ret_dir = TAKE_PTR(d);
        *ret_name = TAKE_PTR(name);
        return 0;
}

/* FILE_WRITE: creates the parents (0755) and a temporary file beside the
 * target with the requested mode; the transfer takes user, for the rename. */
static int file_write_start(struct agent *a, uint32_t stream, const char *path, uint32_t mode,
                            struct fs_user *user) {
        _cleanup_free_ char *dir = NULL, *name = NULL;
        struct transfer *t;
        int r;

        if (transfer_find(a, stream))
                return -EEXIST;
        if (a->n_transfers >= GUEST_MAX_TRANSFERS)
                return -EAGAIN;
        if ((r = path_split(path, &dir, &name)) < 0)
                return r;
        if (!*name)
                return -EISDIR;
        if (strcmp(dir, "/") != 0 && (r = mkdir_p(dir, 0755)) < 0)
                return r;
        /* O_PATH: a user that may write the directory need not read it */
        _cleanup_close_ int dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd < 0)
                return negative_errno();
        _cleanup_free_ char *tmp_path =
                strdup_printf("%s/.airlock-write-XXXXXX", strcmp(dir, "/") == 0 ? "" : dir);
        if (!tmp_path)
                return -ENOMEM;
        _cleanup_close_ int fd = mkostemp(tmp_path, O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        const char *tmp = strrchr(tmp_path, '/') + 1;
        if (fchmod(fd, mode) < 0) {
                r = negative_errno();
                (void) unlinkat(dir_fd, tmp, 0);
                return r;
        }
        r = transfer_new(a, stream, true, &t);
        if (r < 0) {
                (void) unlinkat(dir_fd, tmp, 0);
                return r;
        }
        t->fd = TAKE_FD(fd);
        t->dir_fd = TAKE_FD(dir_fd);
        t->name = TAKE_PTR(name);
        fs_user_move(user, &t->user);
        if (!(t->tmp_name = strdup(tmp))) {
                (void) unlinkat(t->dir_fd, tmp, 0);
                transfer_free(a, t);
                return -ENOMEM;
        }
        return 0;
}

/* FILE_DATA for a write: appended; the first error ends the transfer with
 * one ERROR. */
static int file_write_data(struct agent *a, uint32_t stream, const void *data, size_t len) {
        struct transfer *t = transfer_find(a, stream);
        if (!t || !t->write)
                return 0;
        int r = fd_write_all(t->fd, data, len);
        if (r < 0) {
                transfer_free(a, t);
                return r;
        }
        t->size += len;
        return 0;
}

/* FILE_END for a write: rename into place and answer with the size, or
 * with an abort discard the temporary file and answer ECANCELED. */
static int file_write_end(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        struct transfer *t = transfer_find(a, stream);
        bool abort_;
        int r;

        if (!t || !t->write)
                return 0;
        r = guest_file_end_parse(payload, len, &abort_);
        if (r < 0 || abort_) {
                transfer_free(a, t);
                return r < 0 ? r : -ECANCELED;
        }
        /* The API acknowledges the write once we answer: it must survive
         * the VM's death from then on (a crash, a recovery that boots the
         * disk), so the data and the rename reach the disk first. */
        if (fsync(t->fd) < 0 || close(t->fd) < 0) {
                r = negative_errno();
                if (t->fd >= 0)
                        (void) close(t->fd);
                t->fd = -1;
                transfer_free(a, t);
                return r;
        }
        t->fd = -1;
        /* as the user: replacing a file is its directory's permission */
        struct fs_user_saved saved;
        r = fs_user_enter(&t->user, &saved);
        if (r >= 0) {
                r = renameat(t->dir_fd, t->tmp_name, t->dir_fd, t->name) < 0 ? negative_errno() : 0;
                fs_user_leave(&saved);
        }
        if (r < 0) {
                transfer_free(a, t);
                return r;
        }
        /* the rename durable too (best effort, as the agent: the data is
         * synced already; a crash keeps the old name, never a torn file) */
        int dir = openat(t->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir >= 0) {
                (void) fsync(dir);
                close(dir);
        }
        free(t->tmp_name);
        t->tmp_name = NULL;
        uint64_t size = t->size;
        transfer_free(a, t);
        return agent_send_json(a, PROTO_RESULT, stream, json_pack("{s:I}", "size", (json_int_t) size));
}

static const char *file_type_name(mode_t m) {
        if (S_ISREG(m))
                return "file";
        if (S_ISDIR(m))
                return "dir";
        if (S_ISLNK(m))
                return "symlink";
        return "other";
}

/* The name ids gives id, made valid UTF-8, or the number as a string. */
static char *id_name(const char *name, uint32_t id) {
        char *s = NULL;
        if (name)
                return guest_utf8_sanitize(name, strlen(name), &s) < 0 ? NULL : s;
        return strdup_printf("%u", id);
}

/* One LIST/STAT entry: the owner and group by name from the guest's own
 * files (ids), a symlink's target (NULL for others). Names are made valid
 * UTF-8 for JSON. */
static json_t *entry_json(const char *name, const struct stat *st, const struct guest_idmap *ids,
                          const char *target) {
        _cleanup_free_ char *clean = NULL, *clean_target = NULL;
        _cleanup_free_ char *owner = id_name(guest_idmap_user(ids, st->st_uid), st->st_uid);
        _cleanup_free_ char *group = id_name(guest_idmap_group(ids, st->st_gid), st->st_gid);
        if (!owner || !group || guest_utf8_sanitize(name, strlen(name), &clean) < 0)
                return NULL;
        if (target && guest_utf8_sanitize(target, strlen(target), &clean_target) < 0)
                return NULL;
        json_t *e = json_pack("{s:s,s:s,s:I,s:i,s:I,s:I,s:I,s:I,s:I,s:s,s:s}", "name", clean, "type",
                              file_type_name(st->st_mode), "size", (json_int_t) st->st_size, "mode",
                              (int) (st->st_mode & 07777), "mtime", (json_int_t) st->st_mtim.tv_sec, "atime",
                              (json_int_t) st->st_atim.tv_sec, "ctime", (json_int_t) st->st_ctim.tv_sec,
                              "uid", (json_int_t) st->st_uid, "gid", (json_int_t) st->st_gid, "owner", owner,
                              "group", group);
        if (e && clean_target && json_object_set_new(e, "symlink_target", json_string(clean_target)) < 0) {
                json_decref(e);
                return NULL;
        }
        return e;
}

/* A symlink's target (readlinkat of dirfd/name; at most GUEST_MAX_PATH
 * bytes, what Linux allows), or NULL when it is none or unreadable. */
static char *link_target(int dirfd, const char *name, const struct stat *st) {
        char buf[GUEST_MAX_PATH + 1];
        if (!S_ISLNK(st->st_mode))
                return NULL;
        ssize_t n = readlinkat(dirfd, name, buf, sizeof buf - 1);
        if (n < 0)
                return NULL;
        return strndup(buf, (size_t) n);
}

static int name_compare(const void *x, const void *y) {
        return strcmp(*(char *const *) x, *(char *const *) y);
}

static void names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* LIST: entries sorted by name, symlinks not followed, at most
 * GUEST_MAX_LIST_ENTRIES and never more than one frame holds ("truncated"
 * then says some were left out). */
static int list_dir(struct agent *a, uint32_t stream, const char *path, bool names_of_ids) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -ENOMEM;
        }
        char **names = calloc(GUEST_MAX_LIST_ENTRIES, sizeof(char *));
        size_t n = 0;
        bool truncated = false;
        int r = names ? 0 : -ENOMEM;
        struct dirent *de;

        while (r >= 0 && (errno = 0, de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (n == GUEST_MAX_LIST_ENTRIES) {
                        truncated = true;
                        break;
                }
                if (!(names[n] = strdup(de->d_name)))
                        r = -ENOMEM;
                else
                        n++;
        }
        if (r >= 0 && !de && errno != 0)
                r = negative_errno();
        if (r >= 0)
                qsort(names, n, sizeof(char *), name_compare);

        _cleanup_(guest_idmap_freep) struct guest_idmap *ids = NULL;
        if (r >= 0 && names_of_ids)
                r = guest_idmap_load(GUEST_PASSWD_PATH, GUEST_GROUP_PATH, &ids);
        json_t *entries = r >= 0 ? json_array() : NULL;
        if (r >= 0 && !entries)
                r = -ENOMEM;
        for (size_t i = 0; r >= 0 && i < n; i++) {
                struct stat st;
                if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                _cleanup_free_ char *target = link_target(dirfd(d), names[i], &st);
                if (json_array_append_new(entries, entry_json(names[i], &st, ids, target)) < 0)
                        r = -ENOMEM;
        }
        closedir(d);
        if (names)
                names_free(names, n);
        if (r < 0) {
                json_decref(entries);
                return r;
        }

        /* 10000 long names can exceed a frame: halve until it fits */
        for (;;) {
                _cleanup_free_ char *s = NULL;
                size_t len;
                json_t *res = json_pack("{s:O}", "entries", entries);
                if (!res) {
                        json_decref(entries);
                        return -ENOMEM;
                }
                if (truncated)
                        json_object_set_new(res, "truncated", json_true());
                r = guest_json_dump(res, PROTO_MAX_PAYLOAD, &s, &len);
                json_decref(res);
                if (r == -EMSGSIZE && json_array_size(entries) > 0) {
                        size_t keep = json_array_size(entries) / 2;
                        while (json_array_size(entries) > keep)
                                json_array_remove(entries, json_array_size(entries) - 1);
                        truncated = true;
                        continue;
                }
                json_decref(entries);
                if (r < 0)
                        return r;
                return agent_send(a, PROTO_RESULT, stream, s, len);
        }
}

/* STAT: lstat, so a symlink is reported as one. */
static int stat_path(struct agent *a, uint32_t stream, const char *path, bool names_of_ids) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return negative_errno();
        const char *end = path + strlen(path);
        while (end > path + 1 && end[-1] == '/')
                end--;
        const char *start = end;
        while (start > path && start[-1] != '/')
                start--;
        _cleanup_free_ char *name = start == end ? strdup("/") : strndup(start, (size_t) (end - start));
        if (!name)
                return -ENOMEM;
        _cleanup_(guest_idmap_freep) struct guest_idmap *ids = NULL;
        int r = names_of_ids ? guest_idmap_load(GUEST_PASSWD_PATH, GUEST_GROUP_PATH, &ids) : 0;
        if (r < 0)
                return r;
        _cleanup_free_ char *target = link_target(AT_FDCWD, path, &st);
        return agent_send_json(a, PROTO_RESULT, stream, entry_json(name, &st, ids, target));
}

/* REMOVE: files and symlinks are unlinked (never followed), directories
 * removed when empty or, with recursive, with everything below them without
 * following symlinks or crossing mount points. The root itself is refused. */
static int remove_path(const char *path, bool recursive) {
        struct stat st, root;
        if (lstat(path, &st) < 0)
                return negative_errno();
        if (!S_ISDIR(st.st_mode))
                return unlink(path) < 0 ? negative_errno() : 0;
        if (stat("/", &root) >= 0 && root.st_dev == st.st_dev && root.st_ino == st.st_ino)
                return -EBUSY;
        if (recursive)
                return rm_rf(path);
        return rmdir(path) < 0 ? negative_errno() : 0;
}

/* MKDIR: 0755; with parents, an existing directory is fine. */
static int make_dir(const char *path, bool parents) {
        if (!parents)
                return mkdir(path, 0755) < 0 ? negative_errno() : 0;
        int r = mkdir_p(path, 0755);
        if (r < 0)
                return r;
        struct stat st;
        if (stat(path, &st) < 0)
                return negative_errno();
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* SETATTR: owner and group (either may stay), then the mode. */
static int set_attr(const struct guest_path_request *req) {
        if ((req->uid >= 0 || req->gid >= 0) && chown(req->path, (uid_t) req->uid, (gid_t) req->gid) < 0)
                return negative_errno();
        if (req->has_mode && chmod(req->path, req->mode) < 0)
                return negative_errno();
        return 0;
}

/* The agent's root and working directory while a request is under another
 * root. */
struct root_saved {
        int root_fd, cwd_fd;
};

static void root_leave(struct root_saved *s) {
        if (s->root_fd < 0)
                return;
        /* back to the real root: the fd held open outside the chroot */
        if (fchdir(s->root_fd) < 0 || chroot(".") < 0 || fchdir(s->cwd_fd) < 0) {
                /* PID 1 with a root that is not the guest's cannot go on */
                log_error_errno(negative_errno(), "cannot leave a volume's root: %m");
                abort();
        }
        close(s->root_fd);
        close(s->cwd_fd);
        *s = (struct root_saved){-1, -1};
}

static int root_enter(const char *root, struct root_saved *s) {
        *s = (struct root_saved){-1, -1};
        _cleanup_close_ int root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC),
                            cwd_fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0 || cwd_fd < 0)
                return negative_errno();
        *s = (struct root_saved){TAKE_FD(root_fd), TAKE_FD(cwd_fd)};
        if (chroot(root) < 0 || chdir("/") < 0) {
                int r = negative_errno();
                root_leave(s); /* a chdir that failed after the chroot: back */
                return r;
        }
        return 0;
}

/* One parsed request, run as whoever the caller made the thread. */
static int files_run(struct agent *a, uint8_t type, uint32_t stream, const struct guest_path_request *req,
                     struct fs_user *user) {
        int r;
        switch (type) {
        case PROTO_FILE_READ: return file_read_start(a, stream, req->path);
        case PROTO_FILE_WRITE: return file_write_start(a, stream, req->path, req->mode, user);
        case PROTO_LIST: return list_dir(a, stream, req->path, !req->root);
        case PROTO_STAT: return stat_path(a, stream, req->path, !req->root);
        case PROTO_SETATTR: r = set_attr(req); return r < 0 ? r : agent_send_ok(a, stream);
        case PROTO_RENAME: return rename(req->path, req->to) < 0 ? negative_errno() : agent_send_ok(a, stream);
        case PROTO_REMOVE:
                r = remove_path(req->path, req->flag);
                return r < 0 ? r : agent_send_ok(a, stream);
        case PROTO_MKDIR:
                r = make_dir(req->path, req->flag);
                return r < 0 ? r : agent_send_ok(a, stream);
        default: return -EOPNOTSUPP;
        }
}

int files_handle(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        struct guest_path_request req;
        struct fs_user user = { 0 };
        struct fs_user_saved saved;
        int r;

        if (type == PROTO_FILE_DATA)
                return file_write_data(a, stream, payload, len);
        if (type == PROTO_FILE_END)
                return file_write_end(a, stream, payload, len);

        r = guest_path_request_parse(type, payload, len, &req);
        if (r < 0)
                return r;
        /* an unknown user is refused before anything is touched */
        struct root_saved root = {-1, -1};
        if (fs_user_request(a, stream, req.user, &user) &&
            (!req.root || (r = root_enter(req.root, &root)) >= 0) &&
            (r = fs_user_enter(&user, &saved)) >= 0) {
                r = files_run(a, type, stream, &req, &user);
                fs_user_leave(&saved);
        }
        root_leave(&root);
        fs_user_release(&user);
        guest_path_request_release(&req);
        return r;
}
