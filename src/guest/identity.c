/* SPDX-License-Identifier: Apache-2.0 */
/*
 * IDENTITY: what makes a VM restored from a shared snapshot its own sandbox.
 * Hostname, wall clock and kernel RNG are machine-wide, so they are only
 * touched when the agent owns the machine (PID 1); in host test mode the
 * agent keeps the environment and the sandbox id and leaves the host alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "macros.h"
#include "request.h"
#include "util.h"

/* Mixes seed into the kernel RNG and forces a reseed of the CRNG, so that
 * VMs restored from one snapshot do not share random state. */
static int rng_seed(const uint8_t *seed, size_t n) {
        struct {
                struct rand_pool_info info;
                uint8_t buf[GUEST_SEED_SIZE];
        } req;

        if (n > sizeof req.buf)
                return -EINVAL;
        req.info.entropy_count = (int) (n * 8);
        req.info.buf_size = (int) n;
        memcpy(req.buf, seed, n);
        _cleanup_close_ int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        int r = ioctl(fd, RNDADDENTROPY, &req) < 0 ? negative_errno() : 0;
        explicit_bzero(&req, sizeof req);
        if (r < 0)
                return r;
        if (ioctl(fd, RNDRESEEDCRNG) < 0)
                return negative_errno();
        return 0;
}

/* Replaces path with the one line "value\n" (no fsync: runtime state). */
static int write_line(const char *path, const char *value) {
        size_t n = strlen(value);
        _cleanup_free_ char *line = malloc(n + 2);
        if (!line)
                return -ENOMEM;
        memcpy(line, value, n);
        line[n] = '\n';
        line[n + 1] = 0;
        return file_write_replace(path, line, n + 1, 0644);
}

/* Sets the hostname, and /etc/hostname when it can be written. */
static int hostname_apply(const char *name) {
        if (sethostname(name, strlen(name)) < 0)
                return negative_errno();
        int r = write_line("/etc/hostname", name);
        if (r < 0)
                log_debug("Cannot write /etc/hostname: %s", strerror(-r));
        return 0;
}

/* Writes the sandbox id into <run_dir>/sandbox-id. */
static int sandbox_id_write(const char *run_dir, const char *id) {
        char path[4200];
        if ((size_t) snprintf(path, sizeof path, "%s/sandbox-id", run_dir) >= sizeof path)
                return -ENAMETOOLONG;
        int r = mkdir_p(run_dir, 0755);
        if (r < 0)
                return r;
        return write_line(path, id);
}

/* Applies every field present; answers RESULT {} or the first error (the
 * other fields are still applied). */
int identity_apply(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        _cleanup_(guest_identity_freep) struct guest_identity *id = NULL;
        int r, first = 0;

        r = guest_identity_parse(payload, len, &id);
        if (r < 0)
                return r;
        if (id->env) {
                guest_strv_free(a->default_env);
                a->default_env = TAKE_PTR(id->env);
        }
        if (a->opt.pid1) {
                if (id->has_seed && (r = rng_seed(id->seed, sizeof id->seed)) < 0) {
                        log_warn("Failed to seed the RNG: %s", strerror(-r));
                        first = first ? first : r;
                }
                if (id->has_time) {
                        struct timespec ts = { .tv_sec = (time_t) (id->time_ns / 1000000000u),
                                               .tv_nsec = (long) (id->time_ns % 1000000000u) };
                        if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
                                r = negative_errno();
                                log_warn("Failed to set the clock: %s", strerror(-r));
                                first = first ? first : r;
                        }
                }
                if (id->hostname && (r = hostname_apply(id->hostname)) < 0) {
                        log_warn("Failed to set the hostname: %s", strerror(-r));
                        first = first ? first : r;
                }
        } else if (id->has_seed || id->has_time || id->hostname)
                log_debug("Host test mode: leaving hostname, clock and RNG of the host alone");
        if (id->sandbox_id && a->opt.run_dir && (r = sandbox_id_write(a->opt.run_dir, id->sandbox_id)) < 0) {
                log_warn("Failed to write the sandbox id: %s", strerror(-r));
                first = first ? first : r;
        }
        if (first < 0)
                return first;
        log_info("Identity installed%s%s", id->sandbox_id ? ": " : "", id->sandbox_id ? id->sandbox_id : "");
        /* a new sandbox (a restore, a fork, a wake): its CPU use counts from here */
        metrics_prime();
        return agent_send_ok(a, stream);
}
