/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* One function per command, as listed in the table in cli.c. Each parses its
 * own options and returns the exit status (see cli.h). */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli-net.h"
#include "cli.h"

int cmd_create(struct cli *cli, int argc, char **argv);
int cmd_ls(struct cli *cli, int argc, char **argv);
int cmd_agent(struct cli *cli, int argc, char **argv);
int cmd_inspect(struct cli *cli, int argc, char **argv);
int cmd_rm(struct cli *cli, int argc, char **argv);
/* pause, resume, stop, start, rollback, suspend, wake, fork: the verb is
 * the command's name */
int cmd_lifecycle(struct cli *cli, int argc, char **argv);
int cmd_snapshot(struct cli *cli, int argc, char **argv);
int cmd_snapshots(struct cli *cli, int argc, char **argv);
int cmd_op(struct cli *cli, int argc, char **argv);
int cmd_exec(struct cli *cli, int argc, char **argv);
int cmd_cp(struct cli *cli, int argc, char **argv);
int cmd_port(struct cli *cli, int argc, char **argv);
int cmd_templates(struct cli *cli, int argc, char **argv);
int cmd_template(struct cli *cli, int argc, char **argv);
int cmd_pools(struct cli *cli, int argc, char **argv);
int cmd_health(struct cli *cli, int argc, char **argv);
int cmd_tenants(struct cli *cli, int argc, char **argv);
int cmd_nodes(struct cli *cli, int argc, char **argv);
int cmd_keys(struct cli *cli, int argc, char **argv);
int cmd_signing_key(struct cli *cli, int argc, char **argv);
int cmd_doctor(struct cli *cli, int argc, char **argv);
int cmd_net(struct cli *cli, int argc, char **argv);
int cmd_secret(struct cli *cli, int argc, char **argv);
int cmd_volume(struct cli *cli, int argc, char **argv);
int cmd_webhook(struct cli *cli, int argc, char **argv);
int cmd_audit(struct cli *cli, int argc, char **argv);
int cmd_events(struct cli *cli, int argc, char **argv);
int cmd_usage(struct cli *cli, int argc, char **argv);
int cmd_mcp(struct cli *cli, int argc, char **argv);

/* The egress flags of create and net (cli-net.h), as long options. */
enum {
        CLI_OPT_NET = CLI_OPT_FIRST_LOCAL + 64,
        CLI_OPT_ALLOW,
        CLI_OPT_ALLOW_CIDR,
        CLI_OPT_DENY,
        CLI_OPT_DENY_CIDR,
};
/* clang-format off */
#define CLI_NET_OPTIONS                                                         \
        { "net", required_argument, NULL, CLI_OPT_NET },                        \
        { "allow", required_argument, NULL, CLI_OPT_ALLOW },                    \
        { "allow-cidr", required_argument, NULL, CLI_OPT_ALLOW_CIDR },          \
        { "deny", required_argument, NULL, CLI_OPT_DENY },                      \
        { "deny-cidr", required_argument, NULL, CLI_OPT_DENY_CIDR }
/* clang-format on */
/* Option lines of --help for them. */
#define CLI_NET_HELP                                                                              \
        "  --net MODE        egress: allow-all, deny-all (default: the tenant's, else the node's)\n"  \
        "  --allow HOSTS     allow these hosts only (comma-separated, HOST or HOST:PORT;\n"          \
        "                    *.example.org for its subdomains; ports 80 and 443 by default)\n"       \
        "  --allow-cidr C    allow raw TCP to a range, C is CIDR[:PORT[,PORT...]] (repeatable)\n"    \
        "  --deny HOSTS      deny these hosts (with --net allow-all or --allow)\n"                   \
        "  --deny-cidr C     deny a range (repeatable)\n"
/* Collects option c into net when it is one of them (cli-command.c): CLI_PROCEED when it
 * was, 0 when it is another option, a usage error's exit code. */
int cli_net_option(struct cli *cli, struct cli_net *net, int c, const char *arg);

/* Parses options only (cli-command.c): for commands that take none of their own, checks the
 * number of positional arguments (min..max, max < 0 for unlimited). Returns
 * CLI_PROCEED with optind at the first one, or an exit status. */
int cli_parse_plain(struct cli *cli, int argc, char **argv, int min, int max);
/* Parses options for a command whose only own one is the flag --flag
 * (cli-command.c): *ret is set true when it is given. Positional
 * arguments are the caller's to check. CLI_PROCEED or an exit status. */
int cli_parse_flag(struct cli *cli, int argc, char **argv, const char *flag, bool *ret);
/* cli_parse_plain() for [VERB [ARG]] (cli-command.c): *ret_verb and
 * *ret_arg, NULL when not given. */
int cli_parse_verb(struct cli *cli, int argc, char **argv, const char **ret_verb, const char **ret_arg);

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

/* `airlock doctor`'s report: airlockd's host checks plus the API's view,
 * one item a line (exposed for the unit tests). */
enum doctor_status { DOCTOR_OK, DOCTOR_WARN, DOCTOR_ERROR };
struct doctor_item {
        char item[32];
        enum doctor_status status;
        char detail[1024];
        char fix[512]; /* empty when ok */
};
struct doctor_report {
        struct doctor_item items[24];
        size_t n;
};
/* The --listen HOST:PORT of airlockd serving url (http://127.0.0.1:7420,
 * http://[::1]:80, http://localhost:7420); -EADDRNOTAVAIL for a host name
 * airlockd cannot listen on, -EINVAL for no URL. */
int doctor_listen_from_url(const char *url, char *buf, size_t n);
/* The node and templates items of a GET /v1/health answer (status, body);
 * templates only when the answer lists them. */
void doctor_health_items(long status, const json_t *body, struct doctor_report *rep);
/* "STATUS  ITEM      detail; fix: ..." lines, as `airlockd --check`. */
void doctor_report_print(const struct doctor_report *rep, FILE *f);
/* [{item,status,detail,fix}] (fix null when ok); NULL on ENOMEM. */
json_t *doctor_report_json(const struct doctor_report *rep);
