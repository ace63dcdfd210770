/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-guest: the agent inside every sandbox VM (docs/guest-protocol.md).
 *
 * As PID 1 it first sets the machine up (boot.c), then serves the host over
 * the virtio-serial port "airlock.0" forever. With --port PATH it runs on
 * any host as an ordinary process ("host test mode"): no boot stage, and the
 * machine-wide parts of IDENTITY (hostname, clock, RNG) are left alone.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "boot.h"
#include "log.h"
#include "request.h"

/* A file descriptor number from the command line (3 or above). */
static int parse_fd(const char *s, int *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 3 || v > INT32_MAX)
                return -EINVAL;
        *ret = (int) v;
        return 0;
}

static void help(void) {
        printf("Usage: airlock-guest [OPTIONS]\n"
               "\n"
               "The Airlock guest agent. As PID 1 of a sandbox VM it mounts the root file\n"
               "system and serves the host over the virtio-serial port \"airlock.0\".\n"
               "\n"
               "  --port PATH        use PATH as the channel (a Unix socket is connected,\n"
               "                     anything else opened); host test mode, no boot stage\n"
               "  --run-dir DIR      write the sandbox id to DIR/sandbox-id\n"
               "                     (default " BOOT_RUN_DIR " as PID 1, none otherwise)\n"
               "  --log-level LEVEL  debug, info, warn or error (default info)\n"
               "  --resume FD        start from an upgrade's state (what UPGRADE runs)\n"
               "  --resume-error MSG with --resume: the upgrade failed, answer with MSG\n"
               "  --check-state FD   read an upgrade's state, print the version, exit\n"
               "  --version          print the version\n"
               "  --help             print this help\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                {"port", required_argument, NULL, 'p'},
                {"run-dir", required_argument, NULL, 'r'},
                {"log-level", required_argument, NULL, 'l'},
                {"resume", required_argument, NULL, 'R'},
                {"resume-error", required_argument, NULL, 'E'},
                {"check-state", required_argument, NULL, 'C'},
                {"version", no_argument, NULL, 'V'},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        struct agent_options opt = {.pid1 = getpid() == 1, .resume_fd = -1};
        enum log_level level = LOG_LEVEL_INFO;
        int c, check_fd = -1;

        /* as PID 1, the kernel hands us the command line words it did not
         * know: never fail on an argument there */
        opterr = !opt.pid1;
        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
                switch (c) {
                case 'p': opt.port_path = optarg; break;
                case 'r': opt.run_dir = optarg; break;
                case 'l':
                        if (log_level_from_string(optarg, &level) < 0) {
                                if (!opt.pid1) {
                                        fprintf(stderr, "Unknown log level: %s\n", optarg);
                                        return EXIT_FAILURE;
                                }
                                break;
                        }
                        opt.log_level = optarg;
                        break;
                case 'R':
                case 'C':
                        if (parse_fd(optarg, c == 'R' ? &opt.resume_fd : &check_fd) < 0) {
                                fprintf(stderr, "Not a file descriptor: %s\n", optarg);
                                return EXIT_FAILURE;
                        }
                        break;
                case 'E': opt.resume_error = optarg; break;
                case 'V': printf("%s\n", GUEST_AGENT_NAME); return EXIT_SUCCESS;
                case 'h': help(); return EXIT_SUCCESS;
                default:
                        if (!opt.pid1) {
                                fprintf(stderr, "Try airlock-guest --help\n");
                                return EXIT_FAILURE;
                        }
                }
        }
        if (check_fd >= 0) {
                char why[512];
                if (upgrade_check_state(check_fd, why, sizeof why) < 0) {
                        fprintf(stderr, "%s\n", why);
                        return EXIT_FAILURE;
                }
                printf("%s\n", GUEST_AGENT_NAME);
                return EXIT_SUCCESS;
        }
        log_setup("airlock-guest", level);

        if (opt.resume_fd >= 0) {
                /* an upgrade's agent: the machine and fds 0-2 are set up */
                opt.pid1 = opt.pid1 && !opt.port_path;
        } else if (opt.pid1 && !opt.port_path) {
                struct stat st;
                if (stat(BOOT_INITRAMFS_MARKER, &st) >= 0 && boot_initramfs() < 0)
                        boot_halt("the initramfs stage failed");
                if (boot_setup_root() < 0)
                        boot_halt("the root file system set-up failed");
                if (!opt.run_dir)
                        opt.run_dir = BOOT_RUN_DIR;
        } else {
                opt.pid1 = false;
                boot_console_setup(false);
        }

        int r = agent_run(&opt);
        if (getpid() == 1)
                boot_halt(r < 0 ? strerror(-r) : "the agent loop ended");
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
