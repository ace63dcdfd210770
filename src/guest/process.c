/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Processes started by EXEC. Each one is a session leader (so SIGNAL reaches
 * its whole process group) with either three pipes or one PTY. The agent
 * reads their output non-blocking, one chunk per fd per loop turn, so a
 * chatty child never wedges the loop, and buffers stdin (bounded) when the
 * child does not read.
 *
 * EXIT is the last frame of a process: sent once the child was reaped and
 * its output reached EOF, or 100 ms after the exit when a grandchild keeps
 * the output open.
 *
 * A process outlives its host connection: a new HELLO detaches it (a
 * suspend and wake, a node restart). What a detached process writes goes
 * into a small ring (the last OUTPUT_RING_MAX bytes, records of one type
 * each), which ADOPT replays on the stream it attaches the process to.
 * PROCESSES lists them all with the configuration EXEC gave them.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

#define EXIT_GRACE_NS (100ull * 1000 * 1000)
#define STDIN_BUFFER_MAX (4u << 20) /* pending stdin per process */
#define FINAL_DRAIN_MAX (1u << 20)  /* output still read when the grace ends */
#define OUTPUT_RING_MAX (64u << 10) /* output a detached process keeps for ADOPT */
/* PROCESSES fits one frame with room for what the host adds to each entry */
#define PROCESSES_REPLY_MAX (PROTO_MAX_PAYLOAD - (64u << 10))

/* A record of the output ring: the header, then len bytes. */
struct ring_record {
        uint8_t type; /* PROTO_STDOUT / PROTO_STDERR */
        uint32_t len;
};

/* The steps of the child that can fail before exec, reported with the errno. */
enum child_step {
        CHILD_STEP_SETUP,
        CHILD_STEP_USER,
        CHILD_STEP_CWD,
        CHILD_STEP_EXEC,
};

struct child_report {
        int step; /* enum child_step */
        int err;
};

/* Who the child becomes: a user of the guest's passwd file, or uid/gid. */
struct child_identity {
        bool has_user;
        uid_t uid;
        gid_t gid;
        gid_t *groups;
        size_t n_groups;
};

struct process {
        struct process *next;
        uint32_t id;
        pid_t pid;
        bool pty;
        int in_fd;  /* pipe to stdin, or a dup of the PTY master */
        int out_fd; /* stdout pipe, or the PTY master */
        int err_fd; /* stderr pipe; -1 with a PTY */
        uint8_t *in_buf;
        size_t in_len;
        bool in_close_pending, in_closed, in_overflow;
        bool exited;
        int status;
        uint64_t exit_ns;
        int idx_in, idx_out, idx_err; /* poll slots of this turn, -1 if none */
        json_t *info;                 /* for PROCESSES: guest_process_info() */
        uint8_t *ring;                /* output while detached: ring_record + data, oldest first */
        size_t ring_len;
        size_t ring_last;             /* offset of the newest record; SIZE_MAX when empty */
        uint64_t ring_dropped;        /* bytes of that output the ring let go */
};

static uint8_t io_buf[PROTO_DATA_CHUNK];

static void fd_closep_int(int *fd) {
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static struct process *process_find(struct agent *a, uint32_t id) {
        return AGENT_LIST_FIND(a->processes, id);
}

/* A stream a new process may take: -EINVAL for 0 (PROCESS_DETACHED),
 * -EEXIST for one a process has. */
static int stream_unused(struct agent *a, uint32_t stream) {
        if (stream == 0)
                return -EINVAL;
        return process_find(a, stream) ? -EEXIST : 0;
}

/* Unlinks p from the list and frees it (fds closed, pending stdin lost). */
static void process_free(struct agent *a, struct process *p) {
        AGENT_LIST_UNLINK(&a->processes, p, &a->n_processes);
        fd_closep_int(&p->in_fd);
        fd_closep_int(&p->out_fd);
        fd_closep_int(&p->err_fd);
        free(p->in_buf);
        json_decref(p->info);
        free(p->ring);
        free(p);
}

/* Keeps output nobody can take now (the process is detached, or the host
 * away) in p's ring: appended to the last record when it is of the same
 * type, the oldest output dropped (the front of the oldest record, or
 * whole records) to make room, and only the tail of a chunk larger than
 * the whole ring kept. */
static void ring_append(struct process *p, uint8_t type, const uint8_t *data, size_t len) {
        const size_t hdr = sizeof(struct ring_record);
        struct ring_record rec = { 0 };

        if (len > OUTPUT_RING_MAX - hdr) {
                p->ring_dropped += len - (OUTPUT_RING_MAX - hdr);
                data += len - (OUTPUT_RING_MAX - hdr);
                len = OUTPUT_RING_MAX - hdr;
        }
        if (!p->ring && !(p->ring = malloc(OUTPUT_RING_MAX))) {
                p->ring_dropped += len;
                return;
        }
        if (p->ring_len == 0)
                p->ring_last = SIZE_MAX;
        if (p->ring_last != SIZE_MAX)
                memcpy(&rec, p->ring + p->ring_last, hdr);
        bool extend = p->ring_last != SIZE_MAX && rec.type == type;
        for (;;) {
                size_t need = len + (extend ? 0 : hdr);
                if (p->ring_len + need <= OUTPUT_RING_MAX)
                        break;
                size_t excess = p->ring_len + need - OUTPUT_RING_MAX;
                struct ring_record first;
                memcpy(&first, p->ring, hdr);
                if (first.len > excess) {
                        /* the oldest record loses its front, and the rest fits */
                        memmove(p->ring + hdr, p->ring + hdr + excess, p->ring_len - hdr - excess);
                        first.len -= (uint32_t) excess;
                        memcpy(p->ring, &first, hdr);
                        p->ring_len -= excess;
                        p->ring_dropped += excess;
                        if (p->ring_last > 0)
                                p->ring_last -= excess;
                        break;
                }
                size_t n = hdr + first.len;
                memmove(p->ring, p->ring + n, p->ring_len - n);
                p->ring_len -= n;
                p->ring_dropped += first.len;
                if (p->ring_last == 0) {
                        p->ring_last = SIZE_MAX;
                        extend = false;
                } else
                        p->ring_last -= n;
        }
        if (extend) {
                memcpy(&rec, p->ring + p->ring_last, hdr);
                rec.len += (uint32_t) len;
                memcpy(p->ring + p->ring_last, &rec, hdr);
        } else {
                rec = (struct ring_record){ .type = type, .len = (uint32_t) len };
                p->ring_last = p->ring_len;
                memcpy(p->ring + p->ring_len, &rec, hdr);
                p->ring_len += hdr;
        }
        memcpy(p->ring + p->ring_len, data, len);
        p->ring_len += len;
}

/* Sends what the ring holds on p's stream and empties it. */
static void ring_flush(struct agent *a, struct process *p) {
        const size_t hdr = sizeof(struct ring_record);
        for (size_t off = 0; off < p->ring_len;) {
                struct ring_record rec;
                memcpy(&rec, p->ring + off, hdr);
                agent_send(a, rec.type, p->id, p->ring + off + hdr, rec.len);
                off += hdr + rec.len;
        }
        free(p->ring);
        p->ring = NULL;
        p->ring_len = 0;
}

static int fd_set_nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return negative_errno();
        return 0;
}

/* The child side of EXEC: never returns. On failure it writes the step
 * and the errno to report_fd (close-on-exec, so success closes it
 * silently) and exits 127. */
_noreturn_ static void child_run(const struct guest_exec_request *req, const struct child_identity *who,
                                 const char *cwd, char **env, int in_fd, int out_fd, int err_fd,
                                 const char *pty_slave, int report_fd) {
        struct child_report rep = { .step = CHILD_STEP_SETUP };
        sigset_t all;

        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (int s = 1; s < NSIG; s++)
                signal(s, SIG_DFL);

        if (setsid() < 0)
                goto fail;
        if (pty_slave) {
                int fd = open(pty_slave, O_RDWR | O_CLOEXEC);
                if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) < 0)
                        goto fail;
                in_fd = out_fd = err_fd = fd;
        }
        /* the agent keeps fds 0-2 open, so these never collide with 0-2
         * except as the very target, where dup2 would keep O_CLOEXEC */
        int fds[3] = { in_fd, out_fd, err_fd };
        for (int i = 0; i < 3; i++) {
                if (fds[i] == i) {
                        if (fcntl(i, F_SETFD, 0) < 0)
                                goto fail;
                } else if (dup2(fds[i], i) < 0)
                        goto fail;
        }

        rep.step = CHILD_STEP_USER;
        if (who->has_user) {
                /* what initgroups() and login do, from the files read before the fork */
                if (setgroups(who->n_groups, who->groups) < 0 || setgid(who->gid) < 0 ||
                    setuid(who->uid) < 0)
                        goto fail;
        } else {
                uid_t uid = req->has_uid ? req->uid : getuid();
                gid_t gid = req->has_gid ? req->gid : getgid();
                if (uid != geteuid() || gid != getegid()) {
                        if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                                goto fail;
                }
        }
        /* as the new user: a directory it may not enter is its error too */
        rep.step = CHILD_STEP_CWD;
        if (chdir(cwd) < 0)
                goto fail;
        rep.step = CHILD_STEP_EXEC;
        environ = env; /* execvpe searches the PATH of environ */
        execvpe(req->argv[0], req->argv, env);
fail:
        rep.err = errno > 0 ? errno : EIO;
        (void) !write(report_fd, &rep, sizeof rep);
        _exit(127);
}

/* HOME for processes: /root when it exists, else "/". */
static const char *default_home(void) {
        struct stat st;
        return stat("/root", &st) >= 0 && S_ISDIR(st.st_mode) ? "/root" : "/";
}

/* Opens a PTY master (non-blocking, close-on-exec) sized rows x cols and
 * returns the slave's path. */
static int pty_open(uint16_t rows, uint16_t cols, int *ret_master, char *ret_slave, size_t n) {
        _cleanup_close_ int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (m < 0)
                return negative_errno();
        if (grantpt(m) < 0 || unlockpt(m) < 0)
                return negative_errno();
        int r = ptsname_r(m, ret_slave, n);
        if (r != 0)
                return -r;
        struct winsize ws = { .ws_row = rows, .ws_col = cols };
        if (ioctl(m, TIOCSWINSZ, &ws) < 0)
                return negative_errno();
        r = fd_set_nonblock(m);
        if (r < 0)
                return r;
        *ret_master = TAKE_FD(m);
        return 0;
}

/* "KEY=value" into v[*n] (room for it). */
static int env_entry(char **v, size_t *n, const char *key, const char *value) {
        char *e = strdup_printf("%s=%s", key, value);
        if (!e)
                return -ENOMEM;
        v[(*n)++] = e;
        return 0;
}

/* The environment of a new process: the IDENTITY env, then what the
 * user's passwd entry says (HOME, USER, LOGNAME, SHELL), then the
 * request's env; PATH and HOME defaults where still missing. */
static int process_env(struct agent *a, const struct guest_exec_request *req, const struct guest_user *user,
                       char ***ret) {
        _cleanup_(guest_strv_freep) char **base = NULL;
        if (user) {
                _cleanup_(guest_strv_freep) char **uv = calloc(5, sizeof(char *));
                size_t n = 0;
                int r;
                if (!uv)
                        return -ENOMEM;
                if ((r = env_entry(uv, &n, "HOME", user->home)) < 0 ||
                    (r = env_entry(uv, &n, "USER", user->name)) < 0 ||
                    (r = env_entry(uv, &n, "LOGNAME", user->name)) < 0 ||
                    (r = env_entry(uv, &n, "SHELL", user->shell)) < 0)
                        return r;
                r = guest_env_merge(a->default_env, uv, NULL, &base);
                if (r < 0)
                        return r;
        }
        return guest_env_merge(user ? base : a->default_env, req->env, default_home(), ret);
}

/* Starts the child described by req as process id, as who in cwd. The
 * parent ends of its stdio are returned in p. A failure before the exec
 * comes back as its errno, *ret_step saying which step failed. */
static int spawn(struct agent *a, const struct guest_exec_request *req, const struct child_identity *who,
                 const char *cwd, char **env, struct process *p, enum child_step *ret_step) {
        int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 }, rep[2] = { -1, -1 };
        int master = -1;
        char slave[128];
        int r = 0;

        *ret_step = CHILD_STEP_SETUP;
        if (req->pty)
                r = pty_open(req->rows, req->cols, &master, slave, sizeof slave);
        else if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
                r = negative_errno();
        if (r >= 0 && pipe2(rep, O_CLOEXEC) < 0)
                r = negative_errno();
        if (r < 0)
                goto finish;

        pid_t pid = fork();
        if (pid < 0) {
                r = negative_errno();
                goto finish;
        }
        if (pid == 0) {
                close(rep[0]);
                if (master >= 0)
                        close(master);
                child_run(req, who, cwd, env, in[0], out[1], err[1], req->pty ? slave : NULL, rep[1]);
        }
        fd_closep_int(&rep[1]);
        fd_closep_int(&in[0]);
        fd_closep_int(&out[1]);
        fd_closep_int(&err[1]);

        /* EOF: exec succeeded (the pipe was close-on-exec); a report: it failed */
        struct child_report report = { .step = CHILD_STEP_SETUP };
        ssize_t k;
        do
                k = read(rep[0], &report, sizeof report);
        while (k < 0 && errno == EINTR);
        if (k > 0) {
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                r = k == sizeof report && report.err > 0 ? -report.err : -EIO;
                if (k == sizeof report && report.step >= CHILD_STEP_SETUP && report.step <= CHILD_STEP_EXEC)
                        *ret_step = (enum child_step) report.step;
                goto finish;
        }

        p->pid = pid;
        p->pty = req->pty;
        if (req->pty) {
                p->out_fd = master;
                p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
                master = -1;
                if (p->in_fd < 0)
                        p->in_closed = true;
        } else {
                p->in_fd = in[1];
                p->out_fd = out[0];
                p->err_fd = err[0];
                in[1] = out[0] = err[0] = -1;
                (void) fd_set_nonblock(p->in_fd);
                (void) fd_set_nonblock(p->out_fd);
                (void) fd_set_nonblock(p->err_fd);
        }
        r = 0;
finish:
        fd_closep_int(&master);
        for (int i = 0; i < 2; i++) {
                fd_closep_int(&in[i]);
                fd_closep_int(&out[i]);
                fd_closep_int(&err[i]);
                fd_closep_int(&rep[i]);
        }
        return r;
}

/* The directory a process of user starts in without a cwd: its home, when
 * that is a directory the agent may name, else "/". */
static const char *user_default_cwd(const struct guest_user *user) {
        struct stat st;
        if (guest_path_validate(user->home) >= 0 && stat(user->home, &st) >= 0 && S_ISDIR(st.st_mode))
                return user->home;
        return "/";
}

int process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        _cleanup_(guest_exec_request_freep) struct guest_exec_request *req = NULL;
        _cleanup_(guest_user_freep) struct guest_user *user = NULL;
        _cleanup_(guest_strv_freep) char **env = NULL;
        _cleanup_free_ gid_t *groups = NULL;
        _cleanup_free_ char *cwd_clean = NULL;
        struct child_identity who = { 0 };
        enum child_step step;
        int r;

        r = guest_exec_request_parse(payload, len, &req);
        if (r < 0)
                return r;
        r = stream_unused(a, stream);
        if (r < 0)
                return r;
        if (a->n_processes >= GUEST_MAX_PROCESSES)
                return -EAGAIN;

        const char *cwd = req->cwd;
        if (req->user) {
                r = guest_user_lookup(GUEST_PASSWD_PATH, GUEST_GROUP_PATH, req->user, &user);
                if (r == -ESRCH)
                        return agent_send_errorf(a, stream, r, "unknown user '%s'", req->user);
                if (r < 0)
                        return agent_send_errorf(a, stream, r, "user %s: %s", req->user, strerror(-r));
                groups = calloc(user->n_groups, sizeof *groups);
                if (!groups)
                        return -ENOMEM;
                for (size_t i = 0; i < user->n_groups; i++)
                        groups[i] = (gid_t) user->groups[i];
                who = (struct child_identity){ .has_user = true,
                                               .uid = (uid_t) user->uid,
                                               .gid = (gid_t) user->gid,
                                               .groups = groups,
                                               .n_groups = user->n_groups };
                if (!req->has_cwd)
                        cwd = user_default_cwd(user);
        }
        r = process_env(a, req, user, &env);
        if (r < 0)
                return r;
        /* a home directory from the passwd file may be any bytes: JSON takes UTF-8 */
        r = guest_utf8_sanitize(cwd, strlen(cwd), &cwd_clean);
        if (r < 0)
                return r;
        _cleanup_json_ json_t *info_full = guest_process_info(req, cwd_clean);
        json_t *info = info_full ? guest_process_info_fit(info_full, GUEST_MAX_PROCESS_INFO) : NULL;
        if (!info)
                return -ENOMEM;

        struct process *p = calloc(1, sizeof *p);
        if (!p) {
                json_decref(info);
                return -ENOMEM;
        }
        *p = (struct process){ .id = stream,
                               .in_fd = -1,
                               .out_fd = -1,
                               .err_fd = -1,
                               .idx_in = -1,
                               .idx_out = -1,
                               .idx_err = -1,
                               .info = info };
        r = spawn(a, req, &who, cwd, env, p, &step);
        if (r < 0) {
                json_decref(p->info);
                free(p);
                /* E2B and the node tell a bad cwd from a missing program:
                 * a cwd that is missing or no directory is ENOTDIR */
                if (step == CHILD_STEP_CWD)
                        return agent_send_errorf(a, stream, r == -ENOENT ? -ENOTDIR : r, "cwd %s: %s", cwd,
                                                 strerror(-r));
                if (step == CHILD_STEP_USER)
                        return agent_send_errorf(a, stream, r, "user %s: %s",
                                                 req->user ? req->user : "(uid/gid)", strerror(-r));
                return r;
        }
        p->next = a->processes;
        a->processes = p;
        a->n_processes++;
        log_debug("Started process %u as pid %d: %s", stream, (int) p->pid, req->argv[0]);
        return agent_send_json(a, PROTO_RESULT, stream, json_pack("{s:i}", "pid", (int) p->pid));
}

static int pid_compare(const void *x, const void *y) {
        pid_t a = (*(struct process *const *) x)->pid, b = (*(struct process *const *) y)->pid;
        return (a > b) - (a < b);
}

/* The PROCESSES list with every entry cut to at most max bytes (SIZE_MAX:
 * whole). */
static json_t *processes_json(struct process **v, size_t n, size_t max) {
        _cleanup_json_ json_t *arr = json_array();
        if (!arr)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                json_t *e =
                        max == SIZE_MAX ? json_copy(v[i]->info) : guest_process_info_fit(v[i]->info, max);
                /* fit may hand back the stored object itself: never change that */
                if (e && e == v[i]->info) {
                        json_decref(e);
                        e = json_copy(v[i]->info);
                }
                if (!e || json_object_set_new(e, "pid", json_integer(v[i]->pid)) < 0 ||
                    json_object_set_new(e, "attached", json_boolean(v[i]->id != PROCESS_DETACHED)) < 0 ||
                    json_array_append_new(arr, e) < 0)
                        return NULL;
        }
        return json_pack("{s:O}", "processes", arr);
}

int process_list(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        int r = guest_json_check(payload, len);
        if (r < 0)
                return r;
        _cleanup_free_ struct process **v = calloc(MAX(a->n_processes, (size_t) 1), sizeof *v);
        size_t n = 0;
        if (!v)
                return -ENOMEM;
        for (struct process *p = a->processes; p; p = p->next)
                if (!p->exited && n < a->n_processes)
                        v[n++] = p;
        qsort(v, n, sizeof *v, pid_compare);

        /* each entry keeps at most 64 KiB; 256 of those do not fit a frame,
         * so then every entry gets its share */
        _cleanup_json_ json_t *res = processes_json(v, n, SIZE_MAX);
        _cleanup_free_ char *s = NULL;
        size_t slen;
        r = res ? guest_json_dump(res, PROCESSES_REPLY_MAX, &s, &slen) : -ENOMEM;
        if (r == -EMSGSIZE) {
                json_decref(res);
                res = processes_json(v, n, PROCESSES_REPLY_MAX / MAX(n, (size_t) 1) - 64);
                r = res ? guest_json_dump(res, PROCESSES_REPLY_MAX, &s, &slen) : -ENOMEM;
        }
        if (r < 0)
                return r;
        return agent_send(a, PROTO_RESULT, stream, s, slen);
}

int process_adopt(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        int32_t pid;
        int r = guest_adopt_parse(payload, len, &pid);
        if (r < 0)
                return r;
        r = stream_unused(a, stream);
        if (r < 0)
                return r;
        struct process *p = NULL;
        for (struct process *q = a->processes; q && !p; q = q->next)
                if (q->pid == pid && !q->exited)
                        p = q;
        if (!p)
                return agent_send_errorf(a, stream, -ENOENT, "no process %d", (int) pid);
        /* one stream per process: the host ends the other one's use first
         * (the node refuses an adopt of a process one of its sessions has) */
        if (p->id != PROCESS_DETACHED)
                return agent_send_errorf(a, stream, -EBUSY, "process %d is attached to stream %u", (int) pid,
                                         p->id);
        r = agent_send_json(a, PROTO_RESULT, stream,
                            json_pack("{s:i, s:b, s:I}", "pid", (int) p->pid, "pty", p->pty, "dropped",
                                      (json_int_t) MIN(p->ring_dropped, (uint64_t) INT64_MAX)));
        if (r < 0)
                return r;
        p->id = stream;
        p->ring_dropped = 0;
        ring_flush(a, p);
        log_debug("Process %d adopted by stream %u", (int) p->pid, stream);
        return 0;
}

/* Closes the child's stdin: the pipe, or with a PTY an EOF character (the
 * terminal stays, as it would for a user typing ^D). */
static void stdin_finish(struct process *p) {
        if (p->pty && p->in_fd >= 0) {
                struct termios t;
                char eof = tcgetattr(p->in_fd, &t) >= 0 && t.c_cc[VEOF] ? (char) t.c_cc[VEOF] : 4;
                (void) !write(p->in_fd, &eof, 1);
        }
        fd_closep_int(&p->in_fd);
        p->in_closed = true;
        p->in_close_pending = false;
        free(p->in_buf);
        p->in_buf = NULL;
        p->in_len = 0;
}

/* Writes as much pending stdin as the child takes without blocking. */
static void stdin_flush(struct process *p) {
        while (p->in_len > 0 && p->in_fd >= 0) {
                ssize_t k = write(p->in_fd, p->in_buf, p->in_len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        /* EPIPE: the child closed its stdin; drop the rest */
                        stdin_finish(p);
                        return;
                }
                memmove(p->in_buf, p->in_buf + k, p->in_len - (size_t) k);
                p->in_len -= (size_t) k;
        }
        if (p->in_len == 0 && p->in_close_pending)
                stdin_finish(p);
}

int process_stdin(struct agent *a, uint32_t stream, const void *data, size_t len) {
        struct process *p = process_find(a, stream);
        /* input for a process that already ended (or whose stdin is closed)
         * crosses its EXIT on the wire: dropped without an answer */
        if (!p || p->in_closed || p->in_close_pending || len == 0)
                return 0;
        if (p->in_len + len > STDIN_BUFFER_MAX) {
                if (!p->in_overflow) {
                        p->in_overflow = true;
                        return -ENOBUFS;
                }
                return 0;
        }
        uint8_t *nb = realloc(p->in_buf, p->in_len + len);
        if (!nb)
                return -ENOMEM;
        memcpy(nb + p->in_len, data, len);
        p->in_buf = nb;
        p->in_len += len;
        stdin_flush(p);
        return 0;
}

int process_stdin_close(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        int r = guest_json_check(payload, len);
        if (r < 0)
                return r;
        struct process *p = process_find(a, stream);
        if (!p || p->in_closed)
                return 0;
        p->in_close_pending = true;
        stdin_flush(p);
        return 0;
}

int process_signal(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        int sig, r;
        r = guest_signal_parse(payload, len, &sig);
        if (r < 0)
                return r;
        struct process *p = process_find(a, stream);
        if (!p)
                return 0;
        /* the group outlives a reaped leader only while members remain, so
         * its id cannot have been reused; the leader's pid alone could */
        if (kill(-p->pid, sig) >= 0)
                return 0;
        if (errno != ESRCH)
                return negative_errno();
        if (p->exited || kill(p->pid, sig) >= 0 || errno == ESRCH)
                return 0;
        return negative_errno();
}

int process_resize(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        uint16_t rows, cols;
        int r = guest_resize_parse(payload, len, &rows, &cols);
        if (r < 0)
                return r;
        struct process *p = process_find(a, stream);
        if (!p || p->out_fd < 0)
                return 0;
        if (!p->pty)
                return -ENOTTY;
        struct winsize ws = { .ws_row = rows, .ws_col = cols };
        if (ioctl(p->out_fd, TIOCSWINSZ, &ws) < 0)
                return negative_errno();
        return 0;
}

void process_reap(struct agent *a) {
        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, WNOHANG);
                if (pid <= 0)
                        return;
                struct process *p = NULL;
                for (struct process *q = a->processes; q; q = q->next)
                        if (q->pid == pid && !q->exited) {
                                p = q;
                                break;
                        }
                if (!p)
                        continue; /* an orphan, or a process of an earlier host */
                p->exited = true;
                p->status = status;
                p->exit_ns = now_monotonic_ns();
        }
}

/* Reads one chunk from an output fd and forwards it. Returns false at EOF
 * (a PTY master gives EIO once every slave fd is closed). */
static bool output_read(struct agent *a, struct process *p, int fd, uint8_t type) {
        ssize_t k;
        do
                k = read(fd, io_buf, sizeof io_buf);
        while (k < 0 && errno == EINTR);
        if (k > 0) {
                a->active_ns = now_monotonic_ns();
                if (p->id == PROCESS_DETACHED || a->host_away)
                        ring_append(p, type, io_buf, (size_t) k);
                else {
                        if (p->ring)
                                ring_flush(a, p); /* kept while the host was away: it comes first */
                        agent_send(a, type, p->id, io_buf, (size_t) k);
                }
                return true;
        }
        return k < 0 && errno == EAGAIN;
}

/* Sends EXIT and forgets p. */
static void process_finish(struct agent *a, struct process *p) {
        int code = 0, sig = 0;
        a->active_ns = now_monotonic_ns();
        if (WIFEXITED(p->status))
                code = WEXITSTATUS(p->status);
        else if (WIFSIGNALED(p->status)) {
                sig = WTERMSIG(p->status);
                code = 128 + sig;
        }
        if (p->id != PROCESS_DETACHED)
                agent_send_json(a, PROTO_EXIT, p->id, json_pack("{s:i,s:i}", "exit_code", code, "signal", sig));
        log_debug("Process %u (pid %d) exited: code=%d signal=%d", p->id, (int) p->pid, code, sig);
        process_free(a, p);
}

/* Reads what is left in an fd (bounded) and closes it, at the end of the
 * grace period. */
static void output_drain(struct agent *a, struct process *p, int *fd, uint8_t type) {
        for (size_t total = 0; *fd >= 0 && total < FINAL_DRAIN_MAX; total += sizeof io_buf)
                if (!output_read(a, p, *fd, type))
                        break;
        fd_closep_int(fd);
}

size_t process_poll_fill(struct agent *a, struct pollfd *pfd, int *timeout_ms) {
        size_t n = 0;
        uint64_t now = 0;

        for (struct process *p = a->processes; p; p = p->next) {
                p->idx_in = p->idx_out = p->idx_err = -1;
                if (p->out_fd >= 0) {
                        p->idx_out = (int) n;
                        pfd[n++] = (struct pollfd){ .fd = p->out_fd, .events = POLLIN };
                }
                if (p->err_fd >= 0) {
                        p->idx_err = (int) n;
                        pfd[n++] = (struct pollfd){ .fd = p->err_fd, .events = POLLIN };
                }
                if (p->in_fd >= 0 && p->in_len > 0) {
                        p->idx_in = (int) n;
                        pfd[n++] = (struct pollfd){ .fd = p->in_fd, .events = POLLOUT };
                }
                if (p->exited) {
                        if (!now)
                                now = now_monotonic_ns();
                        uint64_t end = p->exit_ns + EXIT_GRACE_NS;
                        int ms = end <= now ? 0 : (int) ((end - now + 999999) / 1000000);
                        if (*timeout_ms < 0 || ms < *timeout_ms)
                                *timeout_ms = ms;
                }
        }
        return n;
}

void process_poll_dispatch(struct agent *a, const struct pollfd *pfd, size_t n) {
        struct process *next;
        uint64_t now = now_monotonic_ns();

        for (struct process *p = a->processes; p; p = next) {
                next = p->next;
                if (p->idx_out >= 0 && (size_t) p->idx_out < n && pfd[p->idx_out].revents &&
                    !output_read(a, p, p->out_fd, PROTO_STDOUT))
                        fd_closep_int(&p->out_fd);
                if (p->idx_err >= 0 && (size_t) p->idx_err < n && pfd[p->idx_err].revents &&
                    !output_read(a, p, p->err_fd, PROTO_STDERR))
                        fd_closep_int(&p->err_fd);
                if (p->idx_in >= 0 && (size_t) p->idx_in < n && pfd[p->idx_in].revents)
                        stdin_flush(p);
                p->idx_in = p->idx_out = p->idx_err = -1;
                if (!p->exited)
                        continue;
                if (p->out_fd >= 0 || p->err_fd >= 0) {
                        if (now < p->exit_ns + EXIT_GRACE_NS)
                                continue;
                        output_drain(a, p, &p->out_fd, PROTO_STDOUT);
                        output_drain(a, p, &p->err_fd, PROTO_STDERR);
                }
                process_finish(a, p);
        }
}

void process_detach_all(struct agent *a) {
        for (struct process *p = a->processes; p; p = p->next)
                p->id = PROCESS_DETACHED;
}

void process_kill_all(struct agent *a) {
        while (a->processes) {
                struct process *p = a->processes;
                (void) kill(-p->pid, SIGKILL);
                if (!p->exited)
                        (void) kill(p->pid, SIGKILL);
                process_free(a, p);
        }
}

/* ---- upgrade: the processes handed to the next agent (upgrade.c) ---- */

int process_state_save(struct agent *a, json_t *arr, struct guest_blob *b) {
        for (struct process *p = a->processes; p; p = p->next) {
                json_t *o = json_pack(
                        "{s:I,s:i,s:b,s:i,s:i,s:i,s:b,s:b,s:b,s:b,s:i,s:I,s:I,s:I}", "id",
                        (json_int_t) p->id, "pid", (int) p->pid, "pty", p->pty, "in_fd", p->in_fd, "out_fd",
                        p->out_fd, "err_fd", p->err_fd, "in_close_pending", p->in_close_pending, "in_closed",
                        p->in_closed, "in_overflow", p->in_overflow, "exited", p->exited, "status",
                        p->status, "exit_ns", (json_int_t) p->exit_ns, "ring_last",
                        p->ring_last == SIZE_MAX ? (json_int_t) -1 : (json_int_t) p->ring_last,
                        "ring_dropped", (json_int_t) MIN(p->ring_dropped, (uint64_t) INT64_MAX));
                if (!o || json_array_append_new(arr, o) < 0)
                        return -ENOMEM;
                if (p->info && json_object_set(o, "info", p->info) < 0)
                        return -ENOMEM;
                if (p->in_len &&
                    json_object_set_new(o, "in_buf", guest_blob_add(b, p->in_buf, p->in_len)) < 0)
                        return -ENOMEM;
                if (p->ring_len &&
                    json_object_set_new(o, "ring", guest_blob_add(b, p->ring, p->ring_len)) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* One process of the state, or -EINVAL for an entry that does not hold
 * together (every fd >= 3 or -1, a ring that fits). */
static int process_from_state(json_t *o, const uint8_t *blob, size_t blob_size, struct process **ret) {
        json_int_t id, exit_ns, ring_last, ring_dropped;
        int pid, in_fd, out_fd, err_fd, pty, icp, ic, io, exited, status;
        json_t *info = NULL, *in_ref = NULL, *ring_ref = NULL;
        if (json_unpack(o, "{s:I,s:i,s:b,s:i,s:i,s:i,s:b,s:b,s:b,s:b,s:i,s:I,s:I,s:I,s?o,s?o,s?o!}", "id",
                        &id, "pid", &pid, "pty", &pty, "in_fd", &in_fd, "out_fd", &out_fd, "err_fd", &err_fd,
                        "in_close_pending", &icp, "in_closed", &ic, "in_overflow", &io, "exited", &exited,
                        "status", &status, "exit_ns", &exit_ns, "ring_last", &ring_last, "ring_dropped",
                        &ring_dropped, "info", &info, "in_buf", &in_ref, "ring", &ring_ref) < 0)
                return -EINVAL;
        if (id < 0 || id > UINT32_MAX || pid <= 0 || (in_fd < 3 && in_fd != -1) ||
            (out_fd < 3 && out_fd != -1) || (err_fd < 3 && err_fd != -1) || exit_ns < 0 ||
            ring_dropped < 0 || (info && !json_is_object(info)))
                return -EINVAL;
        _cleanup_free_ struct process *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        *p = (struct process){.id = (uint32_t) id,
                              .pid = pid,
                              .pty = pty,
                              .in_fd = in_fd,
                              .out_fd = out_fd,
                              .err_fd = err_fd,
                              .in_close_pending = icp,
                              .in_closed = ic,
                              .in_overflow = io,
                              .exited = exited,
                              .status = status,
                              .exit_ns = (uint64_t) exit_ns,
                              .idx_in = -1,
                              .idx_out = -1,
                              .idx_err = -1,
                              .ring_last = SIZE_MAX,
                              .ring_dropped = (uint64_t) ring_dropped};
        const uint8_t *data;
        size_t len;
        if (in_ref) {
                if (guest_blob_get(blob, blob_size, in_ref, STDIN_BUFFER_MAX, &data, &len) < 0)
                        return -EINVAL;
                if (len && !(p->in_buf = malloc(len)))
                        return -ENOMEM;
                if (len)
                        memcpy(p->in_buf, data, len);
                p->in_len = len;
        }
        if (ring_ref) {
                if (guest_blob_get(blob, blob_size, ring_ref, OUTPUT_RING_MAX, &data, &len) < 0 ||
                    ring_last < 0 || (size_t) ring_last + sizeof(struct ring_record) > len) {
                        free(p->in_buf);
                        return -EINVAL;
                }
                if (!(p->ring = malloc(OUTPUT_RING_MAX))) {
                        free(p->in_buf);
                        return -ENOMEM;
                }
                memcpy(p->ring, data, len);
                p->ring_len = len;
                p->ring_last = (size_t) ring_last;
        }
        p->info = json_incref(info);
        *ret = TAKE_PTR(p);
        return 0;
}

int process_state_load(struct agent *a, json_t *arr, const uint8_t *blob, size_t blob_size, bool take_fds) {
        struct process **tail = &a->processes;
        json_t *o;
        size_t i;
        if (!json_is_array(arr) || json_array_size(arr) > GUEST_MAX_PROCESSES)
                return -EINVAL;
        while (*tail)
                tail = &(*tail)->next;
        json_array_foreach(arr, i, o) {
                struct process *p;
                int r = process_from_state(o, blob, blob_size, &p);
                if (r < 0)
                        return r;
                if (!take_fds) /* a check of the state: the fds are the old agent's */
                        p->in_fd = p->out_fd = p->err_fd = -1;
                *tail = p;
                tail = &p->next;
                a->n_processes++;
        }
        return 0;
}

void process_forget_all(struct agent *a) {
        while (a->processes)
                process_free(a, a->processes);
}

int process_fds_inherit(struct agent *a, bool inherit) {
        for (struct process *p = a->processes; p; p = p->next) {
                int r;
                if ((r = fd_set_cloexec(p->in_fd, !inherit)) < 0 ||
                    (r = fd_set_cloexec(p->out_fd, !inherit)) < 0 ||
                    (r = fd_set_cloexec(p->err_fd, !inherit)) < 0)
                        return r;
        }
        return 0;
}
