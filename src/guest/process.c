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
};

static uint8_t io_buf[PROTO_DATA_CHUNK];

static void fd_closep_int(int *fd) {
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static struct process *process_find(struct agent *a, uint32_t id) {
        for (struct process *p = a->processes; p; p = p->next)
                if (p->id == id)
                        return p;
        return NULL;
}

/* Unlinks p from the list and frees it (fds closed, pending stdin lost). */
static void process_free(struct agent *a, struct process *p) {
        for (struct process **pp = &a->processes; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        a->n_processes--;
                        break;
                }
        fd_closep_int(&p->in_fd);
        fd_closep_int(&p->out_fd);
        fd_closep_int(&p->err_fd);
        free(p->in_buf);
        free(p);
}

static int fd_set_nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return negative_errno();
        return 0;
}

/* The child side of EXEC: never returns. On failure it writes the errno to
 * err_fd (close-on-exec, so success closes it silently) and exits 127. */
_noreturn_ static void child_run(const struct guest_exec_request *req, char **env, int in_fd, int out_fd,
                                 int err_fd, const char *pty_slave, int report_fd) {
        sigset_t all;
        int e;

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

        uid_t uid = req->has_uid ? req->uid : getuid();
        gid_t gid = req->has_gid ? req->gid : getgid();
        if (uid != geteuid() || gid != getegid()) {
                if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                        goto fail;
        }
        if (chdir(req->cwd) < 0)
                goto fail;
        environ = env; /* execvpe searches the PATH of environ */
        execvpe(req->argv[0], req->argv, env);
fail:
        e = errno > 0 ? errno : EIO;
        (void) !write(report_fd, &e, sizeof e);
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

/* Starts the child described by req as process id. The parent ends of its
 * stdio are returned in p. Exec failures come back as their errno. */
static int spawn(struct agent *a, const struct guest_exec_request *req, struct process *p) {
        _cleanup_(guest_strv_freep) char **env = NULL;
        int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 }, rep[2] = { -1, -1 };
        int master = -1;
        char slave[128];
        int r;

        r = guest_env_merge(a->default_env, req->env, default_home(), &env);
        if (r < 0)
                return r;
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
                child_run(req, env, in[0], out[1], err[1], req->pty ? slave : NULL, rep[1]);
        }
        fd_closep_int(&rep[1]);
        fd_closep_int(&in[0]);
        fd_closep_int(&out[1]);
        fd_closep_int(&err[1]);

        /* EOF: exec succeeded (the pipe was close-on-exec); an int: it failed */
        int child_errno = 0;
        ssize_t k;
        do
                k = read(rep[0], &child_errno, sizeof child_errno);
        while (k < 0 && errno == EINTR);
        if (k > 0) {
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                r = child_errno > 0 ? -child_errno : -EIO;
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

int process_exec(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        _cleanup_(guest_exec_request_freep) struct guest_exec_request *req = NULL;
        int r;

        r = guest_exec_request_parse(payload, len, &req);
        if (r < 0)
                return r;
        if (stream == 0)
                return -EINVAL;
        if (process_find(a, stream))
                return -EEXIST;
        if (a->n_processes >= GUEST_MAX_PROCESSES)
                return -EAGAIN;

        struct process *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        *p = (struct process){ .id = stream,
                               .in_fd = -1,
                               .out_fd = -1,
                               .err_fd = -1,
                               .idx_in = -1,
                               .idx_out = -1,
                               .idx_err = -1 };
        r = spawn(a, req, p);
        if (r < 0) {
                free(p);
                return r;
        }
        p->next = a->processes;
        a->processes = p;
        a->n_processes++;
        log_debug("Started process %u as pid %d: %s", stream, (int) p->pid, req->argv[0]);
        return agent_send_json(a, PROTO_RESULT, stream, json_pack("{s:i}", "pid", (int) p->pid));
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
        json_t *j = NULL;
        int r = guest_json_parse(payload, len, &j);
        json_decref(j);
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
        if (!p || !p->pty || p->out_fd < 0)
                return 0;
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
                if (p->id != PROCESS_DETACHED)
                        agent_send(a, type, p->id, io_buf, (size_t) k);
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
