/* SPDX-License-Identifier: Apache-2.0 */
#include "spawn.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "unixsock.h"
#include "util.h"

int spawn_node(const struct daemon_config *config, pid_t *ret_pid) {
        if (access(config->node_binary, X_OK) < 0)
                return log_error_errno(negative_errno(), "Node binary %s is not executable: %m", config->node_binary);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return log_error_errno(negative_errno(), "Failed to fork the node agent: %m");
        if (pid == 0) {
                /* child: only async-signal-safe calls until exec */
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGPIPE, SIG_DFL);
                /* airlockd gone (crashed, killed): the node hands its VMs
                 * over to the node of the next airlockd instead of stopping
                 * them */
                if (prctl(PR_SET_PDEATHSIG, SIGUSR1) < 0 || getppid() != parent)
                        _exit(127);
                char *const argv[] = {
                        (char *) config->node_binary, (char *) "--data-dir", (char *) config->data_dir,
                        (char *) "--socket", (char *) config->node_socket, (char *) "--cap-keys-dir",
                        (char *) config->cap_keys_dir, NULL,
                };
                execv(config->node_binary, argv);
                _exit(127);
        }
        log_info("started airlock-node pid=%d binary=%s", (int) pid, config->node_binary);
        *ret_pid = pid;
        return 0;
}

/* 0 when a connect() to the socket succeeds. */
static int try_connect(const char *path) {
        _cleanup_close_ int fd = -1;
        return unix_connect(path, 0, &fd);
}

int spawn_exited_early(pid_t pid) {
        int status;
        if (waitpid(pid, &status, WNOHANG) != pid)
                return 0;
        log_error("airlock-node exited during start-up (%s %d)", WIFEXITED(status) ? "status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return -ECHILD;
}

int spawn_wait_socket(const char *socket_path, pid_t pid, unsigned timeout_s) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) timeout_s * 1000000000ULL;
        for (;;) {
                if (try_connect(socket_path) == 0)
                        return 0;
                if (pid > 0 && spawn_exited_early(pid) < 0)
                        return -ECHILD;
                if (now_monotonic_ns() >= deadline)
                        return -ETIMEDOUT;
                nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000000L }, NULL);
        }
}

int spawn_stop(pid_t pid, int sig, unsigned grace_s, spawn_wait_fn wait, void *userdata) {
        if (pid <= 0)
                return -EINVAL;
        if (kill(pid, sig) < 0 && errno != ESRCH)
                return negative_errno();
        uint64_t deadline = now_monotonic_ns() + (uint64_t) grace_s * 1000000000ULL;
        for (;;) {
                int status;
                pid_t k = waitpid(pid, &status, WNOHANG);
                if (k == pid)
                        return status;
                if (k < 0)
                        return negative_errno();
                if (now_monotonic_ns() >= deadline) {
                        log_warn("airlock-node pid=%d did not stop within %us; killing it", (int) pid, grace_s);
                        kill(pid, SIGKILL);
                        if (waitpid(pid, &status, 0) < 0)
                                return negative_errno();
                        return status;
                }
                if (wait)
                        wait(userdata, 50);
                else
                        nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000000L }, NULL);
        }
}

int spawn_start(const struct daemon_config *c, void *userdata, pid_t *ret_pid) {
        *ret_pid = -1;
        int r = spawn_node(c, ret_pid);
        if (r < 0)
                return r;
        r = spawn_wait_socket(c->node_socket, *ret_pid, c->node_start_timeout_s);
        if (r < 0)
                return log_error_errno(r, "airlock-node did not open %s: %m", c->node_socket);
        return 0;
}

int spawn_restart(const struct daemon_config *c, uint64_t *restarts, size_t *n, spawn_start_fn start,
                 spawn_wait_fn wait, void *userdata, pid_t *ret_pid) {
        uint64_t now = now_monotonic_ns();
        size_t k = 0;
        for (size_t i = 0; i < *n; i++)
                if (now - restarts[i] < SPAWN_RESTART_WINDOW_NS)
                        restarts[k++] = restarts[i];
        *n = k;
        if (k >= SPAWN_RESTARTS_MAX)
                return -ELOOP;
        restarts[(*n)++] = now;
        pid_t pid = -1;
        int r = start(c, userdata, &pid);
        if (r < 0) {
                log_error_errno(r, "restarting airlock-node failed: %m");
                if (r != -ECHILD && pid > 0)
                        (void) spawn_stop(pid, SIGTERM, SPAWN_STOP_GRACE_S, wait, userdata);
                return r;
        }
        log_info("airlock-node restarted pid=%d", (int) pid);
        *ret_pid = pid;
        return 0;
}
