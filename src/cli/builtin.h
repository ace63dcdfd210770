/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* One function per command, as listed in the table in cli.c. Each parses its
 * own options and returns the exit status (see cli.h). */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"

int cmd_create(struct cli *cli, int argc, char **argv);
int cmd_ls(struct cli *cli, int argc, char **argv);
int cmd_inspect(struct cli *cli, int argc, char **argv);
int cmd_rm(struct cli *cli, int argc, char **argv);
int cmd_pause(struct cli *cli, int argc, char **argv);
int cmd_resume(struct cli *cli, int argc, char **argv);
int cmd_stop(struct cli *cli, int argc, char **argv);
int cmd_start(struct cli *cli, int argc, char **argv);
int cmd_rollback(struct cli *cli, int argc, char **argv);
int cmd_suspend(struct cli *cli, int argc, char **argv);
int cmd_wake(struct cli *cli, int argc, char **argv);
int cmd_fork(struct cli *cli, int argc, char **argv);
int cmd_snapshot(struct cli *cli, int argc, char **argv);
int cmd_snapshots(struct cli *cli, int argc, char **argv);
int cmd_op(struct cli *cli, int argc, char **argv);
int cmd_exec(struct cli *cli, int argc, char **argv);
int cmd_cp(struct cli *cli, int argc, char **argv);
int cmd_templates(struct cli *cli, int argc, char **argv);
int cmd_pools(struct cli *cli, int argc, char **argv);
int cmd_health(struct cli *cli, int argc, char **argv);
int cmd_tenants(struct cli *cli, int argc, char **argv);
int cmd_keys(struct cli *cli, int argc, char **argv);
int cmd_signing_key(struct cli *cli, int argc, char **argv);

/* Parses options only: for commands that take none of their own, checks the
 * number of positional arguments (min..max, max < 0 for unlimited). Returns
 * CLI_PROCEED with optind at the first one, or an exit status. */
int cli_parse_plain(struct cli *cli, int argc, char **argv, int min, int max);

/* `airlock exec` arguments, exposed for the unit tests. */
struct exec_opts {
        json_t *env; /* object, never NULL after parsing */
        const char *cwd;
        bool interactive, tty;
        bool has_timeout;
        uint64_t timeout_s;
        const char *sandbox;
        char **cmd; /* NULL-terminated slice of argv */
        int ncmd;
};
int exec_parse_args(struct cli *cli, int argc, char **argv, struct exec_opts *ret);
void exec_opts_done(struct exec_opts *o);
