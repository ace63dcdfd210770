/* SPDX-License-Identifier: Apache-2.0 */
/*
 * UPGRADE: the agent replaces itself in place (docs/guest-protocol.md,
 * "Upgrades"). The host stages a new airlock-guest in the guest
 * (FILE_WRITE) and sends UPGRADE {"path","idle_ms"}: the idle time PING
 * answers goes back to idle_ms (the staging was no use of the sandbox).
 * Once the frames read with it are handled, the running agent
 *   1. refuses while the root file system is frozen or a file transfer is
 *      open (EBUSY): those hold state no exec keeps;
 *   2. copies the staged binary into a sealed memfd, so that what runs is
 *      what was checked, and removes the staged file;
 *   3. writes its state into another memfd: the channel's fd and its
 *      unread bytes, the default environment, every process (its fds,
 *      pending stdin, output ring) and every watch (its inotify fd and
 *      directories), the stream of the UPGRADE, and an fd of its own binary;
 *   4. runs the new binary once as a child with --check-state: it must read
 *      that state and print its name within UPGRADE_CHECK_MS, or the
 *      upgrade fails here with what it said and this agent carries on;
 *   5. lets the fds the state names survive an exec and execs the new
 *      binary with --resume: the same pid (PID 1 stays PID 1), so the
 *      processes stay its children and every fd stays open.
 * The new agent rebuilds its struct agent from the state and answers the
 * UPGRADE with RESULT {"agent","version","features","previous"}. When it
 * cannot, it execs the old binary again with --resume and the reason, and
 * the old agent answers ERROR with it: a failed upgrade rolls back.
 *
 * The state: UPGRADE_STATE_MAGIC, the JSON's length (4 bytes, little
 * endian), the JSON, then the blob area its {"off","len"} name.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U /* Linux 6.3; older kernels make every memfd executable */
#endif

#define UPGRADE_STATE_MAGIC "ALKU"
#define UPGRADE_STATE_FORMAT 1
#define UPGRADE_CHECK_MS 10000
#define UPGRADE_BINARY_MAX (64u << 20)
/* rings and pending stdin of GUEST_MAX_PROCESSES processes, and more */
#define UPGRADE_STATE_MAX ((size_t) 2 << 30)
#define UPGRADE_CHECK_OUTPUT_MAX 512

extern char **environ;

int upgrade_request(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        _cleanup_free_ char *path = NULL;
        int64_t idle_ms;
        int r = guest_upgrade_parse(payload, len, &path, &idle_ms);
        if (r < 0)
                return r;
        if (a->upgrade_stream)
                return agent_send_errorf(a, stream, -EBUSY, "upgrade: another one is under way");
        a->upgrade_stream = stream;
        a->upgrade_path = TAKE_PTR(path);
        /* the host's staging of the binary was housekeeping, not use */
        uint64_t now = now_monotonic_ns();
        if (idle_ms >= 0 && (uint64_t) idle_ms * 1000000ULL < now)
                a->active_ns = now - (uint64_t) idle_ms * 1000000ULL;
        return 0;
}

/* A memfd (close-on-exec) named name; executable where the kernel asks. */
static int memfd_new(const char *name, bool exec) {
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | (exec ? MFD_EXEC : 0));
        if (fd < 0 && errno == EINVAL && exec)
                fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        return fd < 0 ? negative_errno() : fd;
}

/* The staged binary at path, copied into a sealed memfd. */
static int binary_load(const char *path, int *ret_fd, char *why, size_t n) {
        _cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0) {
                int r = negative_errno();
                snprintf(why, n, "the staged agent %s: %s", path, strerror(-r));
                return r;
        }
        if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t) st.st_size > UPGRADE_BINARY_MAX) {
                snprintf(why, n, "the staged agent %s is not a regular file of 1 to %u bytes", path,
                         UPGRADE_BINARY_MAX);
                return -EINVAL;
        }
        _cleanup_close_ int fd = memfd_new("airlock-guest", true);
        if (fd < 0) {
                snprintf(why, n, "memfd_create: %s", strerror(-fd));
                return fd;
        }
        for (off_t left = st.st_size; left > 0;) {
                ssize_t k = sendfile(fd, in, NULL, (size_t) left);
                if (k <= 0) {
                        int r = k < 0 ? negative_errno() : -EIO;
                        snprintf(why, n, "copying the staged agent: %s", strerror(-r));
                        return r;
                }
                left -= k;
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
                int r = negative_errno();
                snprintf(why, n, "sealing the agent's copy: %s", strerror(-r));
                return r;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Writes the state the next agent resumes from into a new memfd. */
static int state_write(struct agent *a, uint32_t stream, int exe_fd, int *ret_fd) {
        _cleanup_(guest_blob_release) struct guest_blob blob = { 0 };
        _cleanup_json_ json_t *st = json_pack(
                "{s:i,s:s,s:I,s:i,s:b,s:b,s:i,s:I,s:[],s:[]}", "format", UPGRADE_STATE_FORMAT, "from",
                GUEST_AGENT_NAME, "stream", (json_int_t) stream, "chan_fd", a->chan_fd, "chan_is_socket",
                a->chan_is_socket, "host_away", a->host_away, "exe_fd", exe_fd, "active_ns",
                (json_int_t) a->active_ns, "processes", "watches");
        if (!st)
                return -ENOMEM;
        /* the bytes after the last whole frame: the start of the next one */
        size_t unread = a->reader.len - a->reader.start;
        json_t *env = json_array();
        for (char **e = a->default_env; env && e && *e; e++)
                if (json_array_append_new(env, json_string(*e)) < 0) {
                        json_decref(env);
                        env = NULL;
                }
        int r;
        if (!env || json_object_set_new(st, "default_env", env) < 0 ||
            json_object_set_new(st, "unread", guest_blob_add(&blob, a->reader.buf + a->reader.start, unread)) < 0)
                return -ENOMEM;
        if ((r = process_state_save(a, json_object_get(st, "processes"), &blob)) < 0 ||
            (r = watch_state_save(a, json_object_get(st, "watches"))) < 0)
                return r;
        _cleanup_free_ char *text = json_dumps(st, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        uint8_t hdr[8] = { UPGRADE_STATE_MAGIC[0], UPGRADE_STATE_MAGIC[1], UPGRADE_STATE_MAGIC[2],
                           UPGRADE_STATE_MAGIC[3], (uint8_t) len, (uint8_t) (len >> 8), (uint8_t) (len >> 16),
                           (uint8_t) (len >> 24) };
        _cleanup_close_ int fd = memfd_new("airlock-guest-state", false);
        if (fd < 0)
                return fd;
        if ((r = fd_write_all(fd, hdr, sizeof hdr)) < 0 || (r = fd_write_all(fd, text, len)) < 0 ||
            (r = fd_write_all(fd, blob.data, blob.len)) < 0)
                return r;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Runs the new binary with --check-state: 0 once it read the state and
 * printed its name (into name), else why it failed. */
static int binary_check(int bin_fd, int state_fd, char *name, size_t name_size, char *why, size_t n) {
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0) {
                int r = negative_errno();
                snprintf(why, n, "pipe: %s", strerror(-r));
                return r;
        }
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                close(pipefd[0]);
                close(pipefd[1]);
                snprintf(why, n, "fork: %s", strerror(-r));
                return r;
        }
        if (pid == 0) {
                char fdarg[16];
                snprintf(fdarg, sizeof fdarg, "%d", state_fd);
                if (dup2(pipefd[1], STDOUT_FILENO) < 0 || dup2(pipefd[1], STDERR_FILENO) < 0 ||
                    fd_set_cloexec(state_fd, false) < 0)
                        _exit(127);
                char *argv[] = { (char *) "airlock-guest", (char *) "--check-state", fdarg, NULL };
                fexecve(bin_fd, argv, environ);
                fprintf(stderr, "cannot execute it: %s", strerror(errno));
                _exit(127);
        }
        close(pipefd[1]);
        char out[UPGRADE_CHECK_OUTPUT_MAX + 1];
        bool timed_out = fd_read_until_eof(pipefd[0], out, sizeof out,
                                           now_monotonic_ns() + (uint64_t) UPGRADE_CHECK_MS * 1000000ULL) ==
                         -ETIMEDOUT;
        close(pipefd[0]);
        if (timed_out)
                (void) kill(pid, SIGKILL);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        out[strcspn(out, "\n")] = 0;
        if (timed_out) {
                snprintf(why, n, "the new agent's check did not end within %d ms", UPGRADE_CHECK_MS);
                return -ETIMEDOUT;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                if (WIFSIGNALED(status))
                        snprintf(why, n, "the new agent's check was killed by signal %d: %s", WTERMSIG(status), out);
                else
                        snprintf(why, n, "the new agent's check failed (exit %d): %s", WEXITSTATUS(status), out);
                return -ENOEXEC;
        }
        if (strncmp(out, "airlock-guest ", strlen("airlock-guest ")) != 0) {
                snprintf(why, n, "the staged binary is no airlock-guest: its check printed \"%s\"", out);
                return -ENOEXEC;
        }
        snprintf(name, name_size, "%s", out);
        return 0;
}

/* FD_CLOEXEC off (inherit) or on again for every fd the state names. */
static int fds_inherit(struct agent *a, int exe_fd, int state_fd, bool inherit) {
        int r;
        if ((r = fd_set_cloexec(a->chan_fd, !inherit)) < 0 || (r = fd_set_cloexec(exe_fd, !inherit)) < 0 ||
            (r = fd_set_cloexec(state_fd, !inherit)) < 0 || (r = process_fds_inherit(a, inherit)) < 0 ||
            (r = watch_fds_inherit(a, inherit)) < 0)
                return r;
        return 0;
}

/* The arguments of the agent that resumes from state_fd: the options this
 * one runs with. error (may be NULL) is a rollback's reason. */
static void resume_argv(struct agent *a, int state_fd, const char *error, char fdarg[static 16], char **argv) {
        size_t n = 0;
        snprintf(fdarg, 16, "%d", state_fd);
        argv[n++] = (char *) "airlock-guest";
        argv[n++] = (char *) "--resume";
        argv[n++] = fdarg;
        argv[n++] = (char *) "--log-level";
        argv[n++] = (char *) (a->opt.log_level ?: "info");
        if (a->opt.port_path) {
                argv[n++] = (char *) "--port";
                argv[n++] = (char *) a->opt.port_path;
        }
        if (a->opt.run_dir) {
                argv[n++] = (char *) "--run-dir";
                argv[n++] = (char *) a->opt.run_dir;
        }
        if (error) {
                argv[n++] = (char *) "--resume-error";
                argv[n++] = (char *) error;
        }
        argv[n] = NULL;
}
#define RESUME_ARGV_MAX 12

/* Steps 1 to 5: returns only when the upgrade failed, with why. */
static int upgrade_exec(struct agent *a, uint32_t stream, const char *path, char *why, size_t n) {
        if (a->frozen_fd >= 0) {
                snprintf(why, n, "the root file system is frozen");
                return -EBUSY;
        }
        if (a->n_transfers > 0) {
                snprintf(why, n, "%zu file transfers are open", a->n_transfers);
                return -EBUSY;
        }
        _cleanup_close_ int bin_fd = -1, exe_fd = -1, state_fd = -1;
        int r = binary_load(path, &bin_fd, why, n);
        if (r < 0)
                return r;
        (void) unlink(path);
        exe_fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (exe_fd < 0) {
                r = negative_errno();
                snprintf(why, n, "opening the running agent for a rollback: %s", strerror(-r));
                return r;
        }
        r = state_write(a, stream, exe_fd, &state_fd);
        if (r < 0) {
                snprintf(why, n, "writing the state: %s", strerror(-r));
                return r;
        }
        char name[UPGRADE_CHECK_OUTPUT_MAX + 1];
        r = binary_check(bin_fd, state_fd, name, sizeof name, why, n);
        if (r < 0)
                return r;
        log_info("Upgrading to %s (stream %u, %zu processes, %zu watches)", name, stream, a->n_processes,
                 a->n_watches);
        char fdarg[16], *argv[RESUME_ARGV_MAX];
        resume_argv(a, state_fd, NULL, fdarg, argv);
        r = fds_inherit(a, exe_fd, state_fd, true);
        if (r >= 0) {
                fexecve(bin_fd, argv, environ);
                r = negative_errno();
        }
        (void) fds_inherit(a, exe_fd, state_fd, false);
        snprintf(why, n, "executing %s: %s", name, strerror(-r));
        return r;
}

void upgrade_apply(struct agent *a) {
        uint32_t stream = a->upgrade_stream;
        _cleanup_free_ char *path = TAKE_PTR(a->upgrade_path);
        char why[768];
        a->upgrade_stream = 0;
        int r = upgrade_exec(a, stream, path, why, sizeof why);
        log_warn("Upgrade from %s failed, this agent runs on: %s", path, why);
        agent_send_errorf(a, stream, r, "upgrade: %s", why);
}

/* ---- the other side: the agent that starts from a state ---- */

struct state {
        uint8_t *map;
        size_t size;
        json_t *json;
        const uint8_t *blob;
        size_t blob_size;
};

static void state_release(struct state *s) {
        json_decref(s->json);
        if (s->map)
                munmap(s->map, s->size);
        *s = (struct state){ 0 };
}

static int state_read(int fd, struct state *ret, char *why, size_t n) {
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = negative_errno();
                snprintf(why, n, "state fd %d: %s", fd, strerror(-r));
                return r;
        }
        if (st.st_size < 8 || (uint64_t) st.st_size > UPGRADE_STATE_MAX) {
                snprintf(why, n, "the state is %lld bytes", (long long) st.st_size);
                return -EINVAL;
        }
        struct state s = { .size = (size_t) st.st_size };
        s.map = mmap(NULL, s.size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (s.map == MAP_FAILED) {
                int r = negative_errno();
                snprintf(why, n, "mapping the state: %s", strerror(-r));
                return r;
        }
        size_t len = (size_t) s.map[4] | (size_t) s.map[5] << 8 | (size_t) s.map[6] << 16 | (size_t) s.map[7] << 24;
        json_error_t jerr;
        if (memcmp(s.map, UPGRADE_STATE_MAGIC, 4) != 0 || len > s.size - 8 ||
            !(s.json = json_loadb((const char *) s.map + 8, len, JSON_REJECT_DUPLICATES, &jerr))) {
                snprintf(why, n, "the state is not one this agent reads");
                state_release(&s);
                return -EINVAL;
        }
        s.blob = s.map + 8 + len;
        s.blob_size = s.size - 8 - len;
        *ret = s;
        return 0;
}

/* Fills a (set up by agent.c, its channel not opened) from the state;
 * take_fds false for a check, which keeps none of them. */
static int state_load(struct agent *a, struct state *s, bool take_fds, uint32_t *ret_stream, int *ret_exe_fd,
                      const char **ret_from, char *why, size_t n) {
        int format, chan_fd, chan_is_socket, host_away, exe_fd;
        json_int_t stream, active_ns;
        const char *from;
        json_t *env, *unread, *procs, *watches, *e;
        size_t i;
        if (json_unpack(s->json, "{s:i,s:s,s:I,s:i,s:b,s:b,s:i,s:I,s:o,s:o,s:o,s:o!}", "format", &format, "from",
                        &from, "stream", &stream, "chan_fd", &chan_fd, "chan_is_socket", &chan_is_socket,
                        "host_away", &host_away, "exe_fd", &exe_fd, "active_ns", &active_ns, "default_env", &env,
                        "unread", &unread, "processes", &procs, "watches", &watches) < 0 ||
            format != UPGRADE_STATE_FORMAT || stream <= 0 || stream > UINT32_MAX || chan_fd < 3 || exe_fd < 3 ||
            active_ns < 0 || !json_is_array(env) || json_array_size(env) > GUEST_MAX_ENV) {
                snprintf(why, n, "the state's header is not one this agent reads");
                return -EINVAL;
        }
        const uint8_t *bytes;
        size_t len;
        if (guest_blob_get(s->blob, s->blob_size, unread, PROTO_HEADER_SIZE + PROTO_MAX_PAYLOAD, &bytes, &len) < 0 ||
            proto_reader_feed(&a->reader, bytes, len) < 0) {
                snprintf(why, n, "the state's unread bytes are not valid");
                return -EINVAL;
        }
        a->default_env = calloc(json_array_size(env) + 1, sizeof *a->default_env);
        if (!a->default_env)
                return -ENOMEM;
        json_array_foreach(env, i, e) {
                if (!json_is_string(e) || !(a->default_env[i] = strdup(json_string_value(e)))) {
                        snprintf(why, n, "the state's environment is not valid");
                        return -EINVAL;
                }
        }
        int r = process_state_load(a, procs, s->blob, s->blob_size, take_fds);
        if (r < 0) {
                snprintf(why, n, "the state's processes: %s", strerror(-r));
                return r;
        }
        r = watch_state_load(a, watches, take_fds);
        if (r < 0) {
                snprintf(why, n, "the state's watches: %s", strerror(-r));
                return r;
        }
        if (take_fds) {
                a->chan_fd = chan_fd;
                a->chan_is_socket = chan_is_socket;
                a->host_away = host_away;
                a->active_ns = (uint64_t) active_ns;
        }
        *ret_stream = (uint32_t) stream;
        *ret_exe_fd = exe_fd;
        *ret_from = from;
        return 0;
}

int upgrade_check_state(int fd, char *why, size_t n) {
        struct agent a = { .chan_fd = -1, .frozen_fd = -1, .signal_fd = -1 };
        struct state s = { 0 };
        uint32_t stream;
        int exe_fd;
        const char *from;
        int r = proto_reader_init(&a.reader);
        if (r >= 0)
                r = state_read(fd, &s, why, n);
        if (r >= 0)
                r = state_load(&a, &s, false, &stream, &exe_fd, &from, why, n);
        process_forget_all(&a);
        watch_discard_all(&a);
        guest_strv_free(a.default_env);
        proto_reader_release(&a.reader);
        state_release(&s);
        return r;
}

/* The new agent could not take over: the old one comes back from the
 * same state and says why. Returns only when even that failed. */
static int rollback(struct agent *a, int exe_fd, int state_fd, const char *why) {
        log_error("Cannot take over (%s), going back to the previous agent", why);
        char fdarg[16], *argv[RESUME_ARGV_MAX];
        resume_argv(a, state_fd, why, fdarg, argv);
        fexecve(exe_fd, argv, environ);
        return log_error_errno(negative_errno(), "Failed to execute the previous agent: %m");
}

int upgrade_resume(struct agent *a) {
        int state_fd = a->opt.resume_fd;
        struct state s = { 0 };
        uint32_t stream = 0;
        int exe_fd = -1;
        const char *from = "?";
        char why[512];
        int r = state_read(state_fd, &s, why, sizeof why);
        if (r >= 0)
                r = state_load(a, &s, true, &stream, &exe_fd, &from, why, sizeof why);
#ifdef GUEST_TEST_RESUME_FAILS
        /* tests/meson.build's airlock-guest-noresume: the rollback's test */
        if (r >= 0 && !a->opt.resume_error) {
                snprintf(why, sizeof why, "this agent is built to fail here (GUEST_TEST_RESUME_FAILS)");
                r = -ENOTRECOVERABLE;
        }
#endif
        if (r < 0) {
                /* the exe fd, when the state got that far, leads back */
                if (!a->opt.resume_error && exe_fd >= 0)
                        (void) rollback(a, exe_fd, state_fd, why);
                state_release(&s);
                return log_error_errno(r, "Cannot resume from the upgrade's state: %s", why);
        }
        /* what the state handed over is this agent's now: none of it goes to
         * the processes it starts */
        (void) fds_inherit(a, -1, -1, false);
        metrics_prime();
        if (a->opt.resume_error) {
                log_warn("Back on %s after a failed upgrade: %s", GUEST_AGENT_NAME, a->opt.resume_error);
                agent_send_errorf(a, stream, -ENOEXEC, "upgrade: the new agent could not take over (%s); %s runs on",
                                  a->opt.resume_error, GUEST_AGENT_NAME);
        } else {
                log_info("Upgraded from %s: %zu processes, %zu watches kept", from, a->n_processes, a->n_watches);
                agent_send_json(a, PROTO_RESULT, stream,
                                json_pack("{s:s,s:i,s:o,s:s}", "agent", GUEST_AGENT_NAME, "version", PROTO_VERSION,
                                          "features", guest_features_json(), "previous", from));
        }
        close(exe_fd);
        close(state_fd);
        state_release(&s);
        return 0;
}
