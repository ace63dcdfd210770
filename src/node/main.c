/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-node: the node agent. Parses the configuration, picks the
 * accelerator, opens the storage, cleans up after an earlier run, serves the
 * node protocol and prebuilds templates in the background. It takes over
 * the sandboxes an earlier node left (their VMs keep running across a node
 * restart). SIGTERM/SIGINT stop it cleanly: every VM is stopped, its disk
 * and record kept, and the next node brings the sandboxes back. SIGUSR1
 * (the parent-death signal airlockd gives it) hands over instead: the node
 * exits and leaves the sandbox VMs running for the next one.
 *
 * Started as root with --join (a worker of a cluster, no airlockd on the
 * machine), it becomes airlock-nodemgr --worker, which keeps root for what
 * needs it and runs this binary again as the user airlock-node, as airlockd
 * started as root does on one machine (src/nodemgr/worker.c).
 */

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock-config.h"
#include "capcheck.h"
#include "config.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "membership.h"
#include "nodemetrics.h"
#include "nodeops.h"
#include "nodereport.h"
#include "nodeutil.h"
#include "objstore.h"
#include "pool.h"
#include "sandbox.h"
#include "server.h"
#include "session.h"
#include "storage.h"
#include "template-build.h"
#include "template-store.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

/* within the 30 s its parent gives a stopping node (SPAWN_STOP_GRACE_S, lib/spawn) */
#define NODE_LIFECYCLE_DRAIN_S 20
/* how long a stop waits for the template builds it cancelled to clean up */
#define BUILD_STOP_WAIT_MS 10000

static int signal_pipe[2] = { -1, -1 };

static void on_signal(int sig) {
        int saved = errno;
        unsigned char b = (unsigned char) sig;
        if (write(signal_pipe[1], &b, 1) < 0) {
                /* the pipe is full: a stop is already pending */
        }
        errno = saved;
}

static int setup_signals(void) {
        if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return negative_errno();
        struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
            sigaction(SIGUSR1, &sa, NULL) < 0)
                return negative_errno();
        /* writes to a client that went away fail with EPIPE instead */
        signal(SIGPIPE, SIG_IGN);
        return 0;
}

/* Becomes airlock-nodemgr in worker mode (same pid): it prepares the data
 * dir our configuration names (handed over in the environment,
 * node_config_export) and runs this binary again, unprivileged, with the
 * same arguments. Returns only on failure. */
static int exec_nodemgr(const struct node_config *cfg, int argc, char **argv) {
        const char *bin = getenv("AIRLOCK_NODEMGR_BINARY");
        if (!bin || !*bin)
                bin = AIRLOCK_NODEMGR_PATH;
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0 || (self[n] = 0, setenv("AIRLOCK_NODE_BINARY", self, 1) < 0)) {
                log_error_errno(n < 0 ? negative_errno() : -ENOMEM, "Cannot find this binary: %m");
                return 1;
        }
        _cleanup_free_ char **args = calloc((size_t) argc + 2, sizeof *args);
        if (!args || node_config_export(cfg) < 0) {
                log_error("Out of memory");
                return 1;
        }
        args[0] = (char *) bin;
        args[1] = (char *) "--worker";
        for (int i = 1; i < argc; i++)
                args[i + 1] = argv[i];
        execv(bin, args);
        log_error_errno(negative_errno(),
                        "Started as root with --join, but cannot run %s: %m (AIRLOCK_NODEMGR_BINARY; "
                        "AIRLOCK_PRIVSEP=0 runs the node as root)",
                        bin);
        return 1;
}

/* Accepts connections until a stop signal arrives (returned; 0 when serving
 * failed); runs housekeeping once a second. */
static int serve(int listen_fd, const struct node_config *cfg) {
        for (;;) {
                struct pollfd p[2] = { { .fd = listen_fd, .events = POLLIN }, { .fd = signal_pipe[0], .events = POLLIN } };
                int k = poll(p, 2, 1000);
                if (k < 0 && errno != EINTR) {
                        log_error_errno(negative_errno(), "poll failed: %m");
                        return 0;
                }
                if (p[1].revents & POLLIN) {
                        unsigned char sig = 0;
                        if (read(signal_pipe[0], &sig, 1) == 1)
                                log_info("received %s, %s", strsignal(sig),
                                         sig == SIGUSR1 ? "handing the sandboxes over to the next node"
                                                        : "shutting down");
                        return sig;
                }
                if (p[0].revents & POLLIN)
                        server_accept(listen_fd, NULL, cfg);
                session_gc();
        }
}

/* One key from a file: its first line, at most 1 KiB. */
static int read_key_file(const char *path, const char *what, char **ret) {
        _cleanup_free_ char *text = NULL;
        int r = file_read_all(path, 1024, &text, NULL);
        if (r < 0)
                return log_error_errno(r, "Cannot read the S3 %s from %s (it must be readable by this node's user): %m",
                                       what, path);
        text[strcspn(text, "\r\n")] = 0;
        if (!*text)
                return log_error_errno(-EINVAL, "The S3 %s file %s is empty", what, path);
        *ret = TAKE_PTR(text);
        return 0;
}

/* The S3 store of AIRLOCK_OBJSTORE, its keys read from their files. */
static int open_s3(const struct node_config *cfg, struct objstore **ret) {
        struct objstore_s3_location l;
        char why[256];
        int r = objstore_s3_parse_url(cfg->objstore_url, &l, why, sizeof why);
        if (r < 0)
                return log_error_errno(r, "AIRLOCK_OBJSTORE: %s", why);
        _cleanup_free_ char *access = NULL, *secret = NULL;
        if ((r = read_key_file(cfg->s3_access_key_file, "access key", &access)) < 0 ||
            (r = read_key_file(cfg->s3_secret_key_file, "secret key", &secret)) < 0)
                return r;
        r = objstore_open_s3(&l, access, secret, ret);
        sodium_memzero(secret, strlen(secret));
        if (r >= 0)
                log_info("object store: bucket %s at %s%s%s", l.bucket, l.endpoint, *l.prefix ? ", keys under " : "",
                         l.prefix);
        return r;
}

int main(int argc, char *argv[]) {
        _cleanup_(node_config_freep) struct node_config *cfg = NULL;
        enum node_config_action action;
        int r;

        log_setup("airlock-node", LOG_LEVEL_INFO);
        /* our own, not the parent's: airlockd writes with 077, and the
         * jail's private root and the template files need their modes */
        umask(022);
        r = node_config_load(argc, argv, &cfg, &action);
        if (r < 0) {
                fprintf(stderr, "Try 'airlock-node --help'.\n");
                return 2;
        }
        if (action == NODE_CONFIG_HELP) {
                node_config_usage(stdout);
                return 0;
        }
        if (action == NODE_CONFIG_VERSION) {
                printf("airlock-node %s\n", AIRLOCK_VERSION);
                return 0;
        }
        if (action == NODE_CONFIG_PRINT) {
                node_config_print(cfg, stdout);
                return 0;
        }
        log_setup("airlock-node", cfg->log_level);
        /* root is for airlock-nodemgr only: a node of a cluster started as
         * root becomes it; on one machine airlockd does that, and a root
         * node without --join keeps running as root (its parent's choice) */
        const char *privsep = getenv("AIRLOCK_PRIVSEP");
        if (cfg->join && geteuid() == 0 && !(privsep && strcmp(privsep, "0") == 0))
                return exec_nodemgr(cfg, argc, argv);
        if (sodium_init() < 0) {
                log_error("libsodium failed to initialise");
                return 1;
        }
        if (membership_take_token() < 0) {
                log_error("Out of memory");
                return 1;
        }
        r = setup_signals();
        if (r < 0) {
                log_error_errno(r, "Failed to set up signal handling: %m");
                return 1;
        }

        /* the jail first: the accelerator is what its VMs can use */
        r = vmm_jail_setup(cfg->qemu_binary, cfg->vmm_uid_base, NODE_VMM_UIDS);
        if (r < 0)
                return 1;
        enum vmm_accel accel;
        char reason[256] = "";
        r = vmm_accel_pick(cfg->accel, &accel, reason, sizeof reason);
        if (r < 0) {
                log_error_errno(r, "Accelerator %s is not usable: %s", cfg->accel, reason[0] ? reason : "(no reason given)");
                return 1;
        }
        /* vmm_accel_pick() logged the choice and its reason */
        if (vmm_cpu_setup(accel, cfg->cpu_model) < 0)
                return 1;
        /* the egress gateway airlock-nodemgr runs beside us (src/nodemgr/gwprep.c) */
        gwclient_setup(getenv("AIRLOCK_GW_SOCKET"), sandbox_net_reattach_all);
        if (!gwclient_enabled())
                log_warn("no egress gateway (AIRLOCK_GW_SOCKET unset): sandboxes have a NIC but no network");

        r = mkdir_p(cfg->data_dir, 0700);
        if (r < 0) {
                log_error_errno(r, "Failed to create %s: %m", cfg->data_dir);
                return 1;
        }
        /* One node per data dir: a node starting while the one it replaces
         * still hands over waits for it. */
        r = node_lock_data_dir(cfg->data_dir, NODE_LOCK_WAIT_S);
        if (r < 0) {
                log_error_errno(r, "Another airlock-node holds %s/node.lock: %m", cfg->data_dir);
                return 1;
        }
        struct storage *st = NULL;
        /* under airlock-nodemgr the storage is its (it mounts the volume) */
        const char *given = getenv("AIRLOCK_STORAGE_ROOT");
        const char *given_reflink = getenv("AIRLOCK_STORAGE_REFLINK");
        if (given && *given)
                r = storage_open_given(given, given_reflink && strcmp(given_reflink, "1") == 0, &st);
        else
                r = storage_open(cfg->data_dir, cfg->volume_gib, cfg->storage == NODE_STORAGE_AUTO, &st);
        if (r < 0) {
                log_error_errno(r, "Failed to open storage in %s: %m", cfg->data_dir);
                return 1;
        }
        log_info("storage root %s (reflink %s%s)", st->root, st->reflink ? "yes" : "no",
                 st->mounted_volume ? ", btrfs loop volume" : "");
        if (!st->reflink)
                log_warn("storage under %s cannot reflink: sandbox disks will be full copies", st->root);

        char templates_dir[4200], sandboxes_dir[4200], pool_dir[4200];
        if (cfg->templates_dir)
                snprintf(templates_dir, sizeof templates_dir, "%s", cfg->templates_dir);
        else
                snprintf(templates_dir, sizeof templates_dir, "%s/templates", st->root);
        snprintf(sandboxes_dir, sizeof sandboxes_dir, "%s/sandboxes", st->root);
        snprintf(pool_dir, sizeof pool_dir, "%s/pool", st->root);

        char objstore_dir[4200];
        if (cfg->objstore_url)
                snprintf(objstore_dir, sizeof objstore_dir, "%s", cfg->objstore_url);
        else if (cfg->objstore_dir)
                snprintf(objstore_dir, sizeof objstore_dir, "%s", cfg->objstore_dir);
        else
                snprintf(objstore_dir, sizeof objstore_dir, "%s/objstore", st->root);
        struct objstore *objstore = NULL;
        r = cfg->objstore_url ? open_s3(cfg, &objstore) : objstore_open_local(objstore_dir, &objstore);
        if (r < 0) {
                log_error_errno(r, "Failed to open the object store %s: %m", objstore_dir);
                return 1;
        }
        /* uploads cut off by a crash never became restorable: drop them; a
         * configured store may be shared: never race another node's upload */
        r = objstore_gc(objstore, cfg->objstore_dir || cfg->objstore_url ? 3600 : 0);
        if (r > 0)
                log_info("object store %s: removed %d leftovers of interrupted uploads", objstore_dir, r);
        sandbox_set_objstore(objstore);
        if ((r = nodemetrics_init()) < 0) {
                log_error_errno(r, "Failed to set up the node's metrics: %m");
                return 1;
        }
        /* a cluster's nodes share templates through a store they share */
        template_store_init(objstore, cfg->join && (cfg->objstore_url || cfg->objstore_dir), cfg->node_name);

        int listen_fd = -1;
        bool inherited = false; /* airlock-nodemgr's socket: not ours to remove */
        int exit_code = 1;
        bool hand_over = false;
        template_set_build_state(template_custom_state);
        if ((r = template_init(cfg, templates_dir, accel)) < 0 ||
            (r = sandbox_manager_init(cfg, accel, sandboxes_dir)) < 0 ||
            (r = pool_init(cfg, pool_dir)) < 0 || (r = capcheck_init(cfg)) < 0)
                goto out;
        capcheck_set_key_refresh(membership_refresh_keys);
        session_init(cfg);
        nodeops_init(cfg, accel, reason);
        server_set_dispatch(nodeops_dispatch);

        gid_t socket_group = (gid_t) -1;
        if (cfg->socket_group) {
                struct group *g = getgrnam(cfg->socket_group);
                if (!g) {
                        log_error("No group %s for %s (--socket-group)", cfg->socket_group, cfg->socket_path);
                        goto out;
                }
                socket_group = g->gr_gid;
        }
        /* under airlock-nodemgr the socket is its (we cannot write
         * DATA_DIR/run): fd 3, and fd 4 is where we say we are ready */
        inherited = false;
        const char *lfd_s = getenv("AIRLOCK_NODE_LISTEN_FD"), *ready_s = getenv("AIRLOCK_NODE_READY_FD");
        if (lfd_s && *lfd_s) {
                uint64_t v;
                int accepting = 0;
                socklen_t alen = sizeof accepting;
                if (parse_u64(lfd_s, INT32_MAX, &v) < 0 ||
                    getsockopt((int) v, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &alen) < 0 || !accepting ||
                    fcntl((int) v, F_SETFD, FD_CLOEXEC) < 0 ||
                    fcntl((int) v, F_SETFL, fcntl((int) v, F_GETFL) | O_NONBLOCK) < 0) {
                        log_error("AIRLOCK_NODE_LISTEN_FD=%s is not a listening socket", lfd_s);
                        goto out;
                }
                listen_fd = (int) v;
                inherited = true;
        } else if ((r = server_listen(cfg->socket_path, socket_group, &listen_fd)) < 0)
                goto out;
        unsetenv("AIRLOCK_NODE_LISTEN_FD");
        log_info("listening on %s; templates in %s; sandboxes in %s", cfg->socket_path, templates_dir, sandboxes_dir);
        if (ready_s && *ready_s) {
                uint64_t v;
                if (parse_u64(ready_s, INT32_MAX, &v) >= 0) {
                        (void) !write((int) v, "R", 1);
                        close((int) v);
                }
                unsetenv("AIRLOCK_NODE_READY_FD");
        }

        if (cfg->n_prebuild + cfg->n_prebuild_background > 0) {
                r = template_prebuild_start();
                if (r < 0) {
                        log_error_errno(r, "Failed to start the prebuild thread: %m");
                        goto out;
                }
        }
        r = pool_start();
        if (r < 0) {
                log_error_errno(r, "Failed to start the warm pool thread: %m");
                goto out;
        }
        if ((r = nodereport_start()) < 0) {
                log_error_errno(r, "Failed to start the usage sampler: %m");
                goto out;
        }
        if (membership_start(cfg) < 0)
                goto out;

        hand_over = serve(listen_fd, cfg) == SIGUSR1;
        exit_code = 0;
out:
        membership_stop(); /* no replica reaches us any more */
        nodereport_stop();
        if (listen_fd >= 0) {
                close(listen_fd);
                if (!inherited)
                        unlink(cfg->socket_path);
        }
        /* a verb done and not answered would leave airlockd guessing (a
         * suspend whose image landed, undone by the next node) */
        unsigned left = nodeops_lifecycle_drain(NODE_LIFECYCLE_DRAIN_S);
        if (left > 0)
                log_warn("%u lifecycle requests still running; stopping without their answers", left);
        template_shutdown();
        template_custom_shutdown();
        /* what they killed ends: its VM's run dir and temporary files go
         * before the node does */
        template_custom_shutdown_wait(BUILD_STOP_WAIT_MS);
        template_shutdown_wait(BUILD_STOP_WAIT_MS);
        pool_shutdown();
        sandbox_uploads_stop();
        if (hand_over)
                sandbox_hand_over_all(); /* VMs and the volume stay for the next node */
        else {
                sandbox_shutdown_all();
                storage_close(st);
        }
        log_info("stopped");
        /* connection and build threads may still run: end the process
         * without running destructors under their feet */
        fflush(stdout);
        fflush(stderr);
        _exit(exit_code);
}
