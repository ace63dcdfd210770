/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's event loop: one poll(2) over the channel to the host, a
 * signalfd for SIGCHLD and the pipes/PTYs of the running processes.
 *
 * The channel fd stays blocking (writes block until the host drains them,
 * which it always does) and is only read after poll says so. While no host is
 * connected the virtio-serial port reports POLLIN|POLLHUP and reads return
 * 0: the agent then leaves the port out of the main poll, wakes every 2 ms to
 * look again, keeps its processes running and drops whatever it would have
 * sent. A host that comes back starts with HELLO, which ends the previous
 * connection's streams: its processes keep running, detached.
 */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "request.h"
#include "unixsock.h"
#include "util.h"

#define HOST_AWAY_POLL_MS 2
/* A host that froze the root file system and vanished must not leave the
 * guest frozen for good: the agent thaws by itself after this. */
#define FREEZE_MAX_MS 10000

#define VIRTIO_PORTS_DIR "/sys/class/virtio-ports"
#define AIRLOCK_PORT_NAME "airlock.0"

/* Reads the kernel's boot id (a UUID); empty when unreadable (host mode on
 * a kernel without it). */
static void read_boot_id(char *buf, size_t n) {
        _cleanup_free_ char *s = NULL;
        size_t len;
        buf[0] = 0;
        if (file_read_all("/proc/sys/kernel/random/boot_id", 64, &s, &len) < 0)
                return;
        s[strcspn(s, "\n")] = 0;
        snprintf(buf, n, "%s", s);
}

/* Thaws the root file system if FREEZE froze it. Logs go to the console
 * only (stderr), never to the rootfs, so they are safe while frozen. */
static int thaw(struct agent *a, const char *why) {
        if (a->frozen_fd < 0)
                return 0;
        int r = ioctl(a->frozen_fd, FITHAW, 0) < 0 ? negative_errno() : 0;
        /* EINVAL: not frozen (any more); nothing is left to undo */
        if (r == -EINVAL)
                r = 0;
        if (r < 0) {
                log_warn("Failed to thaw the root file system (%s): %s", why, strerror(-r));
                /* try again in a second, not in a busy loop */
                a->frozen_until_ns = now_monotonic_ns() + 1000000000ULL;
                return r;
        }
        close(a->frozen_fd);
        a->frozen_fd = -1;
        log_info("Root file system thawed (%s)", why);
        return 0;
}

/* FREEZE: flushes and freezes the root file system so the host can copy a
 * consistent disk image. In host test mode nothing is frozen: the host's
 * root must never be. A second FREEZE only extends the deadline. */
static int handle_freeze(struct agent *a, uint32_t stream) {
        if (a->opt.pid1 && a->frozen_fd < 0) {
                _cleanup_close_ int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return negative_errno();
                if (ioctl(fd, FIFREEZE, 0) < 0)
                        return negative_errno();
                a->frozen_fd = TAKE_FD(fd);
                log_info("Root file system frozen");
        }
        a->frozen_until_ns = now_monotonic_ns() + (uint64_t) FREEZE_MAX_MS * 1000000ULL;
        return agent_send_ok(a, stream);
}

/* Requests that write to the rootfs would block the single-threaded agent
 * until the thaw, which then could never arrive: refused while frozen. */
static bool writes_rootfs(uint8_t type) {
        switch (type) {
        case PROTO_IDENTITY:
        case PROTO_VOLUME_MOUNT:
        case PROTO_FILE_WRITE:
        case PROTO_FILE_DATA:
        case PROTO_FILE_END:
        case PROTO_RENAME:
        case PROTO_REMOVE:
        case PROTO_MKDIR:
        case PROTO_SETATTR: return true;
        default:
                return false;
        }
}

/* HELLO: a new host connection. Ends everything of the previous one, then
 * echoes the nonce. */
static int handle_hello(struct agent *a, uint32_t stream, const void *payload, size_t len) {
        _cleanup_free_ char *nonce = NULL;
        char boot_id[64];
        int r = guest_hello_parse(payload, len, &nonce);
        if (r < 0)
                return r;
        (void) thaw(a, "new host connection");
        /* an UPGRADE of the previous connection is nobody's now */
        a->upgrade_stream = 0;
        free(a->upgrade_path);
        a->upgrade_path = NULL;
        process_detach_all(a);
        files_discard_all(a);
        watch_discard_all(a);
        read_boot_id(boot_id, sizeof boot_id);
        log_info("Host connected (hello)");
        return agent_send_json(a, PROTO_HELLO, stream,
                               json_pack("{s:s,s:i,s:s,s:s,s:o}", "nonce", nonce, "version", PROTO_VERSION,
                                         "agent", GUEST_AGENT_NAME, "boot_id", boot_id, "features",
                                         guest_features_json()));
}

/* The requests that do work in the guest (processes, files). */
static int dispatch_work(struct agent *a, const struct proto_header *h, const uint8_t *payload) {
        int r;
        switch (h->type) {
        case PROTO_EXEC: r = process_exec(a, h->stream, payload, h->length); break;
        case PROTO_STDIN: r = process_stdin(a, h->stream, payload, h->length); break;
        case PROTO_STDIN_CLOSE: r = process_stdin_close(a, h->stream, payload, h->length); break;
        case PROTO_SIGNAL: r = process_signal(a, h->stream, payload, h->length); break;
        case PROTO_RESIZE: r = process_resize(a, h->stream, payload, h->length); break;
        case PROTO_PROCESSES: r = process_list(a, h->stream, payload, h->length); break;
        case PROTO_ADOPT: r = process_adopt(a, h->stream, payload, h->length); break;
        case PROTO_WATCH: r = watch_start(a, h->stream, payload, h->length); break;
        case PROTO_WATCH_END: r = watch_end(a, h->stream, payload, h->length); break;
        case PROTO_VOLUME_MOUNT: r = volume_mount_request(a, h->stream, payload, h->length); break;
        case PROTO_FILE_READ:
        case PROTO_FILE_WRITE:
        case PROTO_FILE_DATA:
        case PROTO_FILE_END:
        case PROTO_LIST:
        case PROTO_STAT:
        case PROTO_RENAME:
        case PROTO_REMOVE:
        case PROTO_MKDIR:
        case PROTO_SETATTR: r = files_handle(a, h->type, h->stream, payload, h->length); break;
        default: r = -EOPNOTSUPP; break;
        }
        return r;
}

/* Routes one frame. Handlers return 0 once they answered (or when nothing
 * is to be answered) and a negative errno to have it sent as ERROR. */
static void dispatch(struct agent *a, const struct proto_header *h, const uint8_t *payload) {
        int r;

        if (a->frozen_fd >= 0 && writes_rootfs(h->type)) {
                agent_send_error(a, h->stream, -EBUSY, "file system frozen");
                return;
        }
        switch (h->type) {
        case PROTO_HELLO: r = handle_hello(a, h->stream, payload, h->length); break;
        /* looking at the guest is not using it (idle suspend) */
        case PROTO_METRICS: r = metrics_handle(a, h->stream, payload, h->length); break;
        case PROTO_PING:
        case PROTO_SYNC: {
                r = guest_json_check(payload, h->length);
                /* the host is about to stop this VM: flush the disks (a
                 * frozen file system is clean already, and sync would wait) */
                if (r >= 0 && h->type == PROTO_SYNC && a->frozen_fd < 0)
                        sync();
                if (r >= 0 && h->type == PROTO_PING)
                        r = agent_send_json(a, PROTO_RESULT, h->stream,
                                            json_pack("{s:I}", "idle_ms",
                                                      (json_int_t) ((now_monotonic_ns() - a->active_ns) / 1000000ULL)));
                else if (r >= 0)
                        r = agent_send_ok(a, h->stream);
                break;
        }
        case PROTO_FREEZE:
        case PROTO_THAW: {
                r = guest_json_check(payload, h->length);
                if (r >= 0 && h->type == PROTO_FREEZE)
                        r = handle_freeze(a, h->stream);
                else if (r >= 0 && (r = thaw(a, "thaw request")) >= 0)
                        r = agent_send_ok(a, h->stream);
                break;
        }
        /* the node's housekeeping, like PING: not use */
        case PROTO_UPGRADE: r = upgrade_request(a, h->stream, payload, h->length); break;
        case PROTO_RESULT:
        case PROTO_ERROR:
                /* the agent sends no requests; a stray reply is dropped, never
                 * answered (two peers answering errors with errors would loop) */
                r = 0;
                break;
        case PROTO_IDENTITY: r = identity_apply(a, h->stream, payload, h->length); break;
        default:
                /* every other request is work someone asked for */
                a->active_ns = now_monotonic_ns();
                r = dispatch_work(a, h, payload);
                break;
        }
        if (r < 0)
                agent_send_error(a, h->stream, r, proto_type_name(h->type));
}


/* The stream id of a header the reader refused, for the ERROR answer. */
static uint32_t raw_header_stream(const struct proto_reader *rd) {
        const uint8_t *p = rd->buf + rd->start + 8;
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* Handles every complete frame in the reader. A header the reader refuses
 * (unknown version, length over 1 MiB) is answered with ERROR and skipped:
 * the bytes after it are garbage that the magic search drops. */
static void process_frames(struct agent *a) {
        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                int r = proto_reader_next(&a->reader, &h, &payload);
                if (r == 0)
                        break;
                if (r < 0) {
                        uint32_t stream = raw_header_stream(&a->reader);
                        log_warn("Dropping bad frame header: %s", strerror(-r));
                        agent_send_error(a, stream, r, "frame");
                        proto_reader_pop(&a->reader, &(struct proto_header){ .length = 0 });
                        continue;
                }
                dispatch(a, &h, payload);
                proto_reader_pop(&a->reader, &h);
                if (a->host_away)
                        break;
        }
        if (a->upgrade_stream && !a->host_away)
                upgrade_apply(a);
}

/* Finds the /dev node of the virtio-serial port named "airlock.0". */
static int find_virtio_port(char *ret_dev, size_t n) {
        _cleanup_(closedirp) DIR *d = opendir(VIRTIO_PORTS_DIR);
        if (!d)
                return negative_errno();
        struct dirent *de;
        while ((de = readdir(d))) {
                char path[512];
                _cleanup_free_ char *name = NULL;
                size_t len;
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof path, VIRTIO_PORTS_DIR "/%s/name", de->d_name);
                if (file_read_all(path, 256, &name, &len) < 0)
                        continue;
                name[strcspn(name, "\n")] = 0;
                if (strcmp(name, AIRLOCK_PORT_NAME) != 0)
                        continue;
                if ((size_t) snprintf(ret_dev, n, "/dev/%s", de->d_name) >= n)
                        return -ENAMETOOLONG;
                return 0;
        }
        return -ENOENT;
}

/* Opens the channel: --port PATH (a Unix socket is connected, anything else
 * opened read-write) or the virtio-serial port, which right after boot may
 * take a moment to appear: as PID 1 this waits for it forever. */
static int channel_open(struct agent *a) {
        if (a->opt.port_path) {
                struct stat st;
                if (stat(a->opt.port_path, &st) < 0)
                        return negative_errno();
                a->chan_is_socket = S_ISSOCK(st.st_mode);
                if (a->chan_is_socket)
                        return unix_connect(a->opt.port_path, 0, &a->chan_fd);
                a->chan_fd = open(a->opt.port_path, O_RDWR | O_CLOEXEC | O_NOCTTY);
                return a->chan_fd < 0 ? negative_errno() : 0;
        }
        for (unsigned tries = 0;; tries++) {
                char dev[300];
                int r = find_virtio_port(dev, sizeof dev);
                if (r >= 0) {
                        a->chan_fd = open(dev, O_RDWR | O_CLOEXEC | O_NOCTTY);
                        if (a->chan_fd >= 0) {
                                log_info("Channel %s open", dev);
                                return 0;
                        }
                        r = negative_errno();
                }
                if (tries % 50 == 0)
                        log_warn("Waiting for virtio-serial port " AIRLOCK_PORT_NAME ": %s", strerror(-r));
                if (!a->opt.pid1 && tries >= 500)
                        return r;
                usleep(100 * 1000);
        }
}

/* The host went away: its transfers are discarded, its processes kept
 * until the next HELLO. Returns -ENOTCONN when the agent should stop (host
 * test mode whose socket is gone for good). */
static int host_lost(struct agent *a) {
        if (!a->host_away)
                log_info("Host disconnected");
        a->host_away = true;
        files_discard_all(a);
        watch_discard_all(a);
        proto_reader_reset(&a->reader);
        if (!a->chan_is_socket)
                return 0;
        /* a socket does not come back by itself: connect again, or stop when
         * the listener is gone (tests end that way) */
        close(a->chan_fd);
        a->chan_fd = -1;
        int r = unix_connect(a->opt.port_path, 0, &a->chan_fd);
        if (r < 0)
                return -ENOTCONN;
        a->host_away = false;
        return 0;
}

/* Reads what the channel has and handles the frames in it. While the host
 * is away, looks first: a port whose host just came back but sent nothing
 * yet would block the read. */
static int channel_service(struct agent *a) {
        if (a->host_away) {
                struct pollfd p = { .fd = a->chan_fd, .events = POLLIN };
                if (poll(&p, 1, 0) <= 0)
                        return 0;
        }
        int r = proto_reader_fill(&a->reader, a->chan_fd);
        if (r == -EAGAIN)
                return 0;
        if (r <= 0)
                return host_lost(a);
        if (a->host_away)
                log_info("Host is back");
        a->host_away = false;
        process_frames(a);
        if (a->host_away)
                return host_lost(a);
        return 0;
}

/* Drains the signalfd and reaps. */
static void signals_service(struct agent *a) {
        struct signalfd_siginfo si[8];
        while (read(a->signal_fd, si, sizeof si) > 0)
                ;
        process_reap(a);
}

static int agent_setup(struct agent *a, const struct agent_options *opt) {
        sigset_t mask;
        int r;

        *a = (struct agent){ .opt = *opt, .chan_fd = -1, .signal_fd = -1, .frozen_fd = -1,
                            .active_ns = now_monotonic_ns() };
        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to block SIGCHLD: %m");
        a->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (a->signal_fd < 0)
                return log_error_errno(negative_errno(), "Failed to create signalfd: %m");
        /* The agent must answer while the guest's own processes take every
         * CPU: a fork bomb leaves a normal task 1/N of one. It runs at the
         * lowest real-time priority, and SCHED_RESET_ON_FORK gives every
         * process it starts the normal policy back. The kernel's RT
         * throttling (95 % of each second) bounds it should it ever spin.
         * Only as the guest's PID 1: never a host's process in test mode. */
        if (opt->pid1 && sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &(struct sched_param){ .sched_priority = 1 }) < 0)
                log_warn("Failed to run at real-time priority, a busy guest may starve the agent: %m");
        /* in host mode, orphans of our processes come to us as they would to PID 1 */
        if (!opt->pid1)
                (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
        r = proto_reader_init(&a->reader);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the frame reader: %m");
        if (opt->resume_fd >= 0)
                return upgrade_resume(a);
        r = channel_open(a);
        if (r < 0)
                return log_error_errno(r, "Failed to open channel %s: %m",
                                       opt->port_path ? opt->port_path : AIRLOCK_PORT_NAME);
        return 0;
}

static void agent_release(struct agent *a) {
        (void) thaw(a, "agent stopping");
        if (a->frozen_fd >= 0)
                close(a->frozen_fd);
        process_kill_all(a);
        files_discard_all(a);
        watch_discard_all(a);
        guest_strv_free(a->default_env);
        free(a->upgrade_path);
        proto_reader_release(&a->reader);
        if (a->chan_fd >= 0)
                close(a->chan_fd);
        if (a->signal_fd >= 0)
                close(a->signal_fd);
}

int agent_run(const struct agent_options *opt) {
        struct agent a;
        struct pollfd *pfd = NULL;
        bool reads_pending = false;
        int r;

        r = agent_setup(&a, opt);
        if (r < 0) {
                agent_release(&a);
                return r;
        }
        pfd = calloc(2 + 3 * GUEST_MAX_PROCESSES + GUEST_MAX_WATCHES, sizeof *pfd);
        if (!pfd) {
                agent_release(&a);
                return -ENOMEM;
        }
        log_info("Agent ready");
        for (;;) {
                int timeout = -1;
                size_t n = 0;

                pfd[n++] = (struct pollfd){ .fd = a.signal_fd, .events = POLLIN };
                /* while the host is away the port always reports HUP: leave it
                 * out and look again every few ms */
                pfd[n++] = (struct pollfd){ .fd = a.host_away ? -1 : a.chan_fd, .events = POLLIN };
                if (a.host_away)
                        timeout = HOST_AWAY_POLL_MS;
                if (reads_pending && !a.host_away)
                        timeout = 0; /* FILE_READ chunks to send */
                size_t n_proc = process_poll_fill(&a, pfd + n, &timeout);
                n += n_proc;
                size_t n_watch = watch_poll_fill(&a, pfd + n);
                n += n_watch;
                if (a.frozen_fd >= 0) {
                        uint64_t now = now_monotonic_ns();
                        int left = now >= a.frozen_until_ns ? 0
                                                            : (int) ((a.frozen_until_ns - now + 999999ULL) / 1000000ULL);
                        if (timeout < 0 || left < timeout)
                                timeout = left;
                }

                if (poll(pfd, n, timeout) < 0 && errno != EINTR) {
                        log_error("poll failed: %m");
                        usleep(10 * 1000);
                        continue;
                }
                if (pfd[0].revents)
                        signals_service(&a);
                if (pfd[1].revents || a.host_away) {
                        if (channel_service(&a) == -ENOTCONN) {
                                log_info("Channel closed, stopping (host test mode)");
                                break;
                        }
                }
                process_poll_dispatch(&a, pfd + 2, n_proc);
                watch_poll_dispatch(&a, pfd + 2 + n_proc, n_watch);
                if (a.frozen_fd >= 0 && now_monotonic_ns() >= a.frozen_until_ns)
                        (void) thaw(&a, "no thaw within 10 s");
                reads_pending = !a.host_away && files_pump(&a);
        }
        free(pfd);
        agent_release(&a);
        return 0;
}
