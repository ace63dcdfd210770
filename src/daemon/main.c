/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlockd: the Airlock control plane. Started as root it becomes
 * airlock-nodemgr (src/nodemgr/), which runs it again as the user `airlock`
 * with --no-spawn-node; what follows is then the nodemgr's job for the
 * node. Start-up order: configuration, data directory (DATA_DIR/control),
 * store, admin token, signing key, node agent (spawned unless --no-spawn-node),
 * HTTP API. Then it waits for a signal: SIGTERM/SIGINT stop everything
 * cleanly (exit 0). A node agent that dies is started again (its VMs keep
 * running and the new node adopts them); one that keeps dying within a
 * minute is fatal (exit 1). airlockd is a child subreaper, so the VMs a
 * dead node orphaned are reaped here when they end.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock-config.h"
#include "api.h"
#include "auth.h"
#include "check.h"
#include "cluster.h"
#include "config.h"
#include "datakey.h"
#include "dataplane.h"
#include "e2b-api.h"
#include "http.h"
#include "idle.h"
#include "log.h"
#include "nodes.h"
#include "replica.h"
#include "macros.h"
#include "mcp.h"
#include "privsep.h"
#include "progress.h"
#include "scheduler.h"
#include "spawn.h"
#include "store.h"
#include "util.h"
#include "webhook.h"

/* The API's address as a client reaches it: http://HOST:PORT (a wildcard
 * address is reached on loopback). */
static void api_url(const struct daemon_config *c, uint16_t port, char *buf, size_t n) {
        char host[INET6_ADDRSTRLEN + 2] = "127.0.0.1";
        if (c->listen_addr.ss_family == AF_INET6) {
                char a[INET6_ADDRSTRLEN];
                const struct in6_addr *a6 = &((const struct sockaddr_in6 *) &c->listen_addr)->sin6_addr;
                inet_ntop(AF_INET6, IN6_IS_ADDR_UNSPECIFIED(a6) ? &in6addr_loopback : a6, a, sizeof a);
                snprintf(host, sizeof host, "[%s]", a);
        } else {
                const struct sockaddr_in *a4 = (const struct sockaddr_in *) &c->listen_addr;
                if (a4->sin_addr.s_addr != htonl(INADDR_ANY))
                        inet_ntop(AF_INET, &a4->sin_addr, host, sizeof host);
        }
        snprintf(buf, n, "http://%s:%u", host, port);
}

/* Prints where the API is; the lines to paste follow once the node is
 * ready (progress.h). */
static void print_banner(const struct daemon_config *c, const char *url) {
        printf("airlockd %s is listening\n"
               "  API:   %s/v1\n"
               "  token: %s/%s\n"
               "sandboxes can be created once the default templates are ready (the first start\n"
               "builds them, which takes minutes; the progress follows)\n",
               AIRLOCK_VERSION, url, c->control_dir, AUTH_ADMIN_TOKEN_FILE);
        fflush(stdout);
}

static int prepare_dirs(const struct daemon_config *c) {
        int r = privsep_control_dir(c);
        if (r < 0 || !c->local_node)
                return r; /* the node's socket is ours to make on one machine only */
        char sock_dir[sizeof c->node_socket];
        memcpy(sock_dir, c->node_socket, sizeof sock_dir);
        r = mkdir_p(dirname(sock_dir), 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create socket dir for %s: %m", c->node_socket);
        return 0;
}

/* The data dir's format (check.h): a newer one is refused, an existing one
 * without the file is the current format and gets it. */
static int data_format(const struct daemon_config *c) {
        unsigned format;
        int r = check_format_read(c->control_dir, &format);
        if (r == -EBADMSG)
                return config_start_failed(
                        r, "%s/%s holds no format number; restore it or use another --data-dir",
                        c->control_dir, CHECK_FORMAT_FILE);
        if (r < 0)
                return config_start_failed(r, "cannot read %s/%s: %m", c->control_dir, CHECK_FORMAT_FILE);
        if (format > CHECK_DATA_FORMAT)
                return config_start_failed(
                        -EPROTO,
                        "data dir %s has format %u, newer than this airlockd %s knows (%u); run the "
                        "newer Airlock on it, or start this one with another --data-dir",
                        c->data_dir, format, AIRLOCK_VERSION, CHECK_DATA_FORMAT);
        r = check_format_write(c->control_dir);
        if (r < 0)
                return config_start_failed(r, "cannot write %s/%s: %m%s", c->control_dir, CHECK_FORMAT_FILE,
                                          r == -ENOSPC ? " (the disk is full: free space)" : "");
        return 0;
}

/* A day: the node joins within seconds of our start, or airlock-nodemgr
 * keeps trying with this token (made again at every start). */
#define LOCAL_NODE_TOKEN_TTL_S (24 * 3600)

/* One machine on a shared store: a join token for this machine's node in
 * CONTROL_DIR (0600, ours; airlock-nodemgr reads it as root). */
static int local_node_token(const struct daemon_config *c, struct replica *rp) {
        char token[CLUSTER_TOKEN_MAX + 1], id[17], path[sizeof c->control_dir + 32];
        int64_t expires_at;
        int r = replica_join_token(rp, LOCAL_NODE_TOKEN_TTL_S, token, sizeof token - 1, id, &expires_at);
        if (r < 0)
                return r;
        size_t len = strlen(token);
        token[len++] = '\n';
        snprintf(path, sizeof path, "%s/%s", c->control_dir, CONFIG_LOCAL_NODE_TOKEN_FILE);
        r = file_write_replace(path, token, len, 0600);
        explicit_bzero(token, sizeof token);
        if (r < 0)
                return r;
        log_info("join token %s for this machine's node in %s", id, path);
        return 0;
}

/* Runs airlockd until a signal; *ret_served says whether it got as far as
 * serving the API (a failure before is a failed start). */
static int run(const struct daemon_config *c, uint64_t start_ns, bool *ret_served) {
        _cleanup_(store_closep) struct store *store = NULL;
        struct http_server *http = NULL;
        struct scheduler *scheduler = NULL;
        struct idle_watch *idle = NULL;
        struct api_audit_poller *audit = NULL;
        struct webhook_worker *webhooks = NULL;
        struct progress_watch *progress = NULL;
        pid_t node_pid = -1;
        uint64_t restarts[SPAWN_RESTARTS_MAX];
        size_t n_restarts = 0;
        int r, exit_code = 0;
        *ret_served = false;

        /* VMs outlive a node that dies; they become our children, not
         * init's, and the SIGCHLD loop below reaps them */
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                log_warn_errno(negative_errno(), "Failed to become a child subreaper: %m");

        _cleanup_close_ int sfd = signalfd_supervisor();
        if (sfd < 0)
                return log_error_errno(sfd, "Failed to set up signal handling: %m");

        umask(0077); /* what airlockd writes is its own (keys set their modes) */
        if ((r = prepare_dirs(c)) < 0)
                return config_start_failed(r, "cannot set up the data dir %s: %m%s", c->data_dir,
                                          r == -ENOSPC ? " (the disk is full: free space)" : "");
        if ((r = data_format(c)) < 0)
                return r;
        r = store_open(c->database, &store);
        if (r == -EPROTO)
                return config_start_failed(
                        r,
                        "the store %s was written by a newer airlockd; run that version, or start "
                        "this one with another --data-dir",
                        c->database);
        if (r < 0)
                return config_start_failed(log_error_errno(r, "Failed to open store %s: %m", c->database),
                                          "cannot open the store %s: %m", c->database);
        bool created;
        r = auth_admin_token_init(store, c->control_dir, c->shared_store, &created);
        if (r < 0)
                return config_start_failed(
                        log_error_errno(r, "Failed to set up the admin token in %s: %m", c->control_dir),
                        "cannot set up the admin token in %s: %m", c->control_dir);
        log_info("admin token %s %s/%s", created ? "written to" : "loaded from", c->control_dir,
                 AUTH_ADMIN_TOKEN_FILE);
        if ((r = api_metrics_init(c)) < 0)
                return config_start_failed(r, "cannot set up the metrics token in %s: %m", c->control_dir);
        r = api_secrets_init(c, store);
        if (r < 0)
                return config_start_failed(log_error_errno(r, "Failed to open the credential store: %m"),
                                          "cannot open the credential store (%s/%s): %m", c->control_dir,
                                          CREDSTORE_KEY_FILE);
        if ((r = e2b_init(c)) < 0)
                return config_start_failed(r, "cannot set up the E2B token key in %s: %m", c->control_dir);
        /* before the node starts: it reads the public key this writes */
        if ((r = dataplane_init(c)) < 0)
                return config_start_failed(r, "cannot set up the capability keys in %s: %m", c->cap_keys_dir);
        if ((r = datakey_init(c)) < 0)
                return config_start_failed(r, "cannot open the key store in %s: %m", c->kms_dir);

        nodes_init(c, store);
        _cleanup_(replica_stopp) struct replica *replica = NULL;
        if ((r = replica_start(c, store, &replica)) < 0)
                return config_start_failed(r, "cannot start serving the cluster (%s): %m",
                                          c->cluster_listen[0] ? c->cluster_listen : "shared store");

        if (c->join_local) {
                /* this machine's node joins like any worker, with the token
                 * airlock-nodemgr hands it */
                if ((r = local_node_token(c, replica)) < 0)
                        return config_start_failed(r, "cannot make a join token for this machine's node: %m");
                log_info("this machine's node %s joins the cluster at %s (airlock-nodemgr starts it)",
                         c->local_node_name, c->advertise);
        } else if (!c->local_node) {
                /* no node of our own: the joined ones; operations other
                 * replicas left are settled by lease (replica.c) */
                log_info("no local node: sandboxes go to the nodes that joined the cluster");
        } else if (c->spawn_node) {
                r = spawn_start(c, NULL, &node_pid);
                if (r < 0) {
                        if (r != -ECHILD && node_pid > 0)
                                (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, NULL, NULL);
                        if (r == -ECHILD)
                                return config_start_failed(
                                        r, "airlock-node exited while starting; its error line above "
                                           "(prog=airlock-node) says why");
                        if (r == -ETIMEDOUT)
                                return config_start_failed(
                                        r,
                                        "airlock-node did not open %s within %us; its log lines "
                                        "above (prog=airlock-node) say where it stopped",
                                        c->node_socket, c->node_start_timeout_s);
                        return config_start_failed(r, "cannot start airlock-node (%s): %m", c->node_binary);
                }
                log_info("airlock-node is listening on %s", c->node_socket);
                api_reconcile_startup(c, store);
        } else {
                log_info("not spawning airlock-node; expecting it on %s", c->node_socket);
                api_reconcile_startup(c, store); /* when it is there already (airlock-nodemgr started it) */
        }
        r = 0;

        r = http_server_start(c, store, &http);
        if (r < 0) {
                /* libmicrohttpd does not keep bind's errno: ask bind again */
                int why = check_listen_probe(&c->listen_addr, c->listen_addr_len);
                char m[512];
                check_listen_message(c->listen, why < 0 ? why : r, m, sizeof m);
                log_error("%s", m);
                if (node_pid > 0)
                        (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, NULL, NULL);
                return config_start_failed(why < 0 ? why : r, "%s", m);
        }
        log_info("listening on %s", c->listen);
        *ret_served = true;
        /* the node is up: scheduled snapshots can start (without it the
         * API still works) */
        r = scheduler_start(c, store, &scheduler);
        if (r < 0)
                log_error_errno(r, "Failed to start the snapshot scheduler: %m");
        r = api_audit_poller_start(c, store, &audit);
        if (r < 0)
                log_error_errno(r, "Failed to start the audit poller: %m");
        r = idle_watch_start(c, store, &idle);
        if (r < 0)
                log_error_errno(r, "Failed to start the idle watch: %m");
        r = webhook_worker_start(c, store, &webhooks);
        if (r < 0)
                log_error_errno(r, "Failed to start the webhook senders: %m");
        char url[160];
        api_url(c, http_server_port(http), url, sizeof url);
        print_banner(c, url);
        r = progress_watch_start(c, url, start_ns, &progress);
        if (r < 0)
                log_warn_errno(r, "Failed to start the start-up progress: %m");

        for (;;) {
                struct signalfd_siginfo si;
                ssize_t k = read(sfd, &si, sizeof si);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k != (ssize_t) sizeof si) {
                        r = log_error_errno(k < 0 ? negative_errno() : -EIO, "Failed to read signalfd: %m");
                        exit_code = 1;
                        break;
                }
                if (si.ssi_signo == SIGCHLD) {
                        /* the node, or strays: VMs a dead node orphaned */
                        int status;
                        bool node_exited = false;
                        for (pid_t p; (p = waitpid(-1, &status, WNOHANG)) > 0;)
                                if (p == node_pid) {
                                        log_error("airlock-node pid=%d exited (%s %d)", (int) node_pid,
                                                  WIFEXITED(status) ? "status" : "signal",
                                                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                                        node_pid = -1;
                                        node_exited = true;
                                }
                        /* its VMs keep running: a new node adopts them */
                        if (node_exited && spawn_restart(c, restarts, &n_restarts, spawn_start, NULL, NULL, &node_pid) < 0) {
                                log_error("airlock-node keeps failing; stopping so a supervisor can restart Airlock");
                                exit_code = 1;
                                break;
                        }
                        continue;
                }
                log_info("received %s; shutting down", strsignal((int) si.ssi_signo));
                break;
        }

        /* first: the node may end before us (it got our signal too) */
        api_lifecycle_shutdown_begin();
        progress_watch_stop(progress);
        http_server_quiesce(http);
        /* before the node: a scheduled snapshot in progress ends first */
        scheduler_stop(scheduler);
        idle_watch_stop(idle);
        api_audit_poller_stop(audit);
        webhook_worker_stop(webhooks);
        replica_stop(TAKE_PTR(replica));
        if (node_pid > 0) {
                r = spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, NULL, NULL);
                if (r < 0)
                        log_warn_errno(r, "Failed to stop airlock-node: %m");
        }
        http_server_stop(http);
        /* the node is gone: verb workers' calls fail at once and finish */
        api_lifecycle_drain(30);
        mcp_drain(30);
        api_secrets_shutdown();
        log_info("stopped");
        return exit_code ? -ECHILD : 0;
}

/* When the root airlockd started, for the one airlock-nodemgr runs. */
#define START_NS_ENV "AIRLOCK_START_NS"

/* Becomes airlock-nodemgr (same pid, same arguments); it starts airlockd
 * again, unprivileged, from the binary named in AIRLOCK_DAEMON_BINARY. */
static int exec_nodemgr(char **argv) {
        const char *bin = getenv("AIRLOCK_NODEMGR_BINARY");
        if (!bin || !*bin)
                bin = AIRLOCK_NODEMGR_PATH;
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0 || (self[n] = 0, setenv("AIRLOCK_DAEMON_BINARY", self, 1) < 0)) {
                fprintf(stderr, "airlockd: cannot find its own binary: %s\n", strerror(errno));
                return 1;
        }
        argv[0] = (char *) bin;
        execv(bin, argv);
        fprintf(stderr, "airlockd: started as root, but cannot run %s: %s (AIRLOCK_PRIVSEP=0 runs all as root)\n",
                bin, strerror(errno));
        return 1;
}

/* The command that started us, if it says when (./run.sh: it installs and
 * builds first): "ready after" counts from there. Realtime nanoseconds, at
 * most a day ago. */
#define COMMAND_START_ENV "AIRLOCK_COMMAND_STARTED_NS"

static uint64_t command_start_ns(uint64_t start_ns) {
        const char *v = getenv(COMMAND_START_ENV);
        uint64_t t, now = now_realtime_ns();
        if (v && parse_u64(v, now, &t) >= 0 && now - t < 24 * 3600 * 1000000000ULL && now - t < start_ns)
                start_ns -= now - t;
        unsetenv(COMMAND_START_ENV);
        return start_ns;
}

int main(int argc, char **argv) {
        uint64_t start_ns = command_start_ns(now_monotonic_ns());
        struct daemon_config config;
        char err[512] = "";
        int r = config_load(argc, argv, &config, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "airlockd: %s\nTry 'airlockd --help'.\n", err);
                return 2;
        }
        switch (config.action) {
        case CONFIG_HELP:
                config_help(stdout);
                return 0;
        case CONFIG_VERSION:
                printf("airlockd %s\n", AIRLOCK_VERSION);
                return 0;
        case CONFIG_PRINT:
                config_print(&config, stdout);
                return 0;
        case CONFIG_CHECK: signal(SIGPIPE, SIG_IGN); return check_main(&config);
        case CONFIG_RUN:
                break;
        }
        /* what would stop the start anyway, before anything starts: a
         * clear line each, nothing left behind */
        if (check_startup(&config, stderr) < 0)
                return AIRLOCKD_EXIT_START_FAILED;
        /* root is only for airlock-nodemgr: it runs us again as `airlock` */
        const char *privsep = getenv("AIRLOCK_PRIVSEP");
        bool no_privsep = privsep && strcmp(privsep, "0") == 0;
        if (config.join_local && (geteuid() == 0 ? no_privsep : !getenv(CONFIG_LOCAL_NODE_ENV))) {
                /* this machine's node, joined: airlock-nodemgr (root) runs it */
                fprintf(stderr,
                        "airlockd: with a shared store this machine's node joins the cluster, and airlock-nodemgr "
                        "starts it: start airlockd as root%s, or pass --no-local-node (AIRLOCK_LOCAL_NODE=0) for a "
                        "replica without a node of its own\n",
                        no_privsep ? " without AIRLOCK_PRIVSEP=0" : "");
                return 2;
        }
        unsetenv(CONFIG_LOCAL_NODE_ENV);
        if (geteuid() == 0 && !config.local_node && !config.join_local)
                fprintf(stderr, "airlockd: warning: a replica without a local node needs no privileges; run it as "
                                "an unprivileged user\n");
        else if (geteuid() == 0 && !no_privsep) {
                /* "ready after" counts from this start, not from the
                 * unprivileged one (the monotonic clock is the machine's) */
                char t[32];
                snprintf(t, sizeof t, "%llu", (unsigned long long) start_ns);
                (void) setenv(START_NS_ENV, t, 1);
                return exec_nodemgr(argv);
        }
        const char *started = getenv(START_NS_ENV);
        uint64_t t;
        if (!config.spawn_node && started && parse_u64(started, start_ns, &t) >= 0)
                start_ns = t;
        unsetenv(START_NS_ENV);
        /* one write per log line: airlockd, airlock-nodemgr and the node
         * share the terminal (or log file), and unbuffered stderr writes a
         * line in pieces that the others' lines cut through */
        setvbuf(stderr, NULL, _IOLBF, 0);
        log_setup("airlockd", config.log_level);
        signal(SIGPIPE, SIG_IGN); /* peers hanging up show as EPIPE */
        if (sodium_init() < 0) {
                log_error("Failed to initialise libsodium");
                return 1;
        }
        bool served;
        r = run(&config, start_ns, &served);
        /* airlock-nodemgr tells a start that failed (nothing to hand over)
         * from a crash by this status */
        return r >= 0 ? 0 : served ? 1 : AIRLOCKD_EXIT_START_FAILED;
}
