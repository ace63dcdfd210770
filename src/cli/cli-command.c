/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every command does: the global options and --help, the plain option
 * parser, the egress flags of create and net, connecting to airlockd, and
 * the whole of the commands that GET one resource and print it. Above
 * cli-output.c, below the builtins (builtin-*.c) and the table (cli.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

static const char global_options_help[] =
        "Global options (also accepted after the command):\n"
        "  --url URL         airlockd address (env AIRLOCK_URL, default " CLIENT_DEFAULT_URL ")\n"
        "  --token TOKEN     API token (env AIRLOCK_TOKEN, else DATA_DIR/control/admin.token)\n"
        "  --data-dir DIR    where admin.token lives (env AIRLOCK_DATA_DIR,\n"
        "                    default " CLIENT_DEFAULT_DATA_DIR ")\n"
        "  --json            print the API's JSON instead of text\n"
        "  -h, --help        show help\n";

void cli_print_main_help(const struct cli *cli, FILE *f) {
        fprintf(f, "Usage: airlock [OPTIONS] COMMAND [ARGS...]\n\nCommands:\n");
        for (size_t i = 0; i < cli->n_commands; i++)
                fprintf(f, "  %-10s %s\n", cli->commands[i].name, cli->commands[i].summary);
        fprintf(f, "\n%s  --version         print the version\n\nRun 'airlock COMMAND --help' for more.\n",
                global_options_help);
}

void cli_print_command_help(const struct cli_command *cmd) {
        printf("Usage: airlock %s %s\n\n%s.\n\n", cmd->name, cmd->synopsis, cmd->summary);
        if (cmd->options)
                printf("%s\n", cmd->options);
        printf("%s", global_options_help);
}

int cli_common_option(struct cli *cli, int c, char **argv) {
        switch (c) {
        case CLI_OPT_URL: cli->url = optarg; return CLI_PROCEED;
        case CLI_OPT_TOKEN: cli->token = optarg; return CLI_PROCEED;
        case CLI_OPT_DATA_DIR: cli->data_dir = optarg; return CLI_PROCEED;
        case CLI_OPT_JSON: cli->json = true; return CLI_PROCEED;
        case 'h':
                if (cli->cmd)
                        cli_print_command_help(cli->cmd);
                else
                        cli_print_main_help(cli, stdout);
                return CLI_EXIT_OK;
        case ':': return cli_usage_error(cli, "option '%s' needs an argument", argv[optind - 1]);
        default:
                /* getopt leaves the bad short option in optopt, a bad long
                 * one only in argv. */
                if (optopt > 0 && optopt < 0x100)
                        return cli_usage_error(cli, "unknown option '-%c'", optopt);
                return cli_usage_error(cli, "unknown option '%s'", argv[optind - 1]);
        }
}

int cli_parse_plain(struct cli *cli, int argc, char **argv, int min, int max) {
        static const struct option options[] = {CLI_GLOBAL_OPTIONS, {}};
        int c;

        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                int r = cli_common_option(cli, c, argv);
                if (r != CLI_PROCEED)
                        return r;
        }
        int n = argc - optind;
        if (n < min)
                return cli_usage_error(cli, "%s: missing argument", cli->cmd->name);
        if (max >= 0 && n > max)
                return cli_usage_error(cli, "%s: unexpected argument '%s'", cli->cmd->name,
                                       argv[optind + max]);
        return CLI_PROCEED;
}

int cli_parse_flag(struct cli *cli, int argc, char **argv, const char *flag, bool *ret) {
        const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {flag, no_argument, NULL, CLI_OPT_FIRST_LOCAL},
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (c == CLI_OPT_FIRST_LOCAL) {
                        *ret = true;
                        continue;
                }
                int r = cli_common_option(cli, c, argv);
                if (r != CLI_PROCEED)
                        return r;
        }
        return CLI_PROCEED;
}

int cli_parse_verb(struct cli *cli, int argc, char **argv, const char **ret_verb, const char **ret_arg) {
        int r = cli_parse_plain(cli, argc, argv, 0, 2);
        if (r != CLI_PROCEED)
                return r;
        int n = argc - optind;
        *ret_verb = n > 0 ? argv[optind] : NULL;
        *ret_arg = n > 1 ? argv[optind + 1] : NULL;
        return CLI_PROCEED;
}

int cli_net_option(struct cli *cli, struct cli_net *net, int c, const char *arg) {
        static const enum cli_net_flag flags[] = {
                [CLI_OPT_NET - CLI_OPT_NET] = CLI_NET_MODE,
                [CLI_OPT_ALLOW - CLI_OPT_NET] = CLI_NET_ALLOW,
                [CLI_OPT_ALLOW_CIDR - CLI_OPT_NET] = CLI_NET_ALLOW_CIDR,
                [CLI_OPT_DENY - CLI_OPT_NET] = CLI_NET_DENY,
                [CLI_OPT_DENY_CIDR - CLI_OPT_NET] = CLI_NET_DENY_CIDR,
        };
        if (c < CLI_OPT_NET || c > CLI_OPT_DENY_CIDR)
                return 0;
        char err[CLI_NET_ERR_MAX];
        int r = cli_net_add(net, flags[c - CLI_OPT_NET], arg, err);
        if (r == -ENOMEM)
                return cli_fail("out of memory");
        if (r < 0)
                return cli_usage_error(cli, "%s", err);
        return CLI_PROCEED;
}

int cli_connect(struct cli *cli) {
        struct cli_error err = {};
        if (cli->connected)
                return 0;
        int r = client_init(&cli->client, cli->url, cli->token, cli->data_dir, &err);
        if (r < 0) {
                cli_fail("%s", err.message);
                return r;
        }
        cli->connected = true;
        return 0;
}

int cli_request(struct cli *cli, const char *method, const char *path, const json_t *body, json_t **ret,
                const char *fmt, ...) {
        struct cli_error err = {};
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, method, path, body, &err, ret) < 0) {
                va_list ap;
                va_start(ap, fmt);
                int r = cli_fail_errorv(&err, fmt, ap);
                va_end(ap);
                return r;
        }
        return CLI_PROCEED;
}

int cli_call_and_print(struct cli *cli, const char *name, const char *method, const char *path, const json_t *body,
                       const char *print, const char *echo) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_request(cli, method, path, body, &resp, "%s", name);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json && !resp)
                return CLI_EXIT_OK;
        if (!print) {
                printf("%s\n", echo);
                return CLI_EXIT_OK;
        }
        return cli_print_member(cli, resp, name, print, print);
}

int cli_print_member(struct cli *cli, const json_t *resp, const char *name, const char *member, const char *what) {
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        const char *s = json_string_value(json_object_get(resp, member));
        if (!s)
                return cli_fail("%s: airlockd answered without a %s", name, what);
        printf("%s\n", s);
        return CLI_EXIT_OK;
}

int cli_answer_list(struct cli *cli, const json_t *resp, const char *name, const char *key, const json_t **ret_list) {
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        const json_t *list = json_object_get(resp, key);
        if (!json_is_array(list))
                return cli_fail("%s: airlockd answered without %s %s list", name, strchr("aeiou", key[0]) ? "an" : "a",
                                key);
        *ret_list = list;
        return CLI_PROCEED;
}

int cli_print_answer_list(struct cli *cli, const json_t *resp, const char *name, const char *key, size_t ncols,
                          const char *const *header, const char *const *fields) {
        const json_t *list;
        int r = cli_answer_list(cli, resp, name, key, &list);
        if (r != CLI_PROCEED)
                return r;
        if (cli_print_list(list, ncols, header, fields) < 0)
                return cli_fail("%s: out of memory", name);
        return CLI_EXIT_OK;
}

int cli_get_plain(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                  json_t **ret) {
        _cleanup_free_ char *full = NULL;
        int nargs = suffix ? 1 : 0;
        int r = cli_parse_plain(cli, argc, argv, nargs, nargs);
        if (r != CLI_PROCEED)
                return r;
        const char *id = suffix ? argv[optind] : NULL;
        if (id) {
                /* valid ids need no escaping; the check keeps the path from
                 * naming another resource */
                if (!cli_id_is_valid(id))
                        return cli_usage_error(cli, "%s: invalid id '%s'", name, id);
                if (asprintf(&full, "%s%s%s", path, id, suffix) < 0)
                        return cli_fail("out of memory");
                path = full;
        }
        return id ? cli_request(cli, "GET", path, NULL, ret, "%s %s", name, id)
                  : cli_request(cli, "GET", path, NULL, ret, "%s", name);
}

int cli_show_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, name, path, suffix, &resp);
        if (r != CLI_PROCEED)
                return r;
        r = cli->json ? cli_print_json(resp) : cli_print_fields(resp);
        return r < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

int cli_delete_command(struct cli *cli, int argc, char **argv, const char *name, const char *path) {
        int r = cli_parse_plain(cli, argc, argv, 1, 1);
        if (r != CLI_PROCEED)
                return r;
        const char *what = argv[optind];
        if (!cli_id_is_valid(what))
                return cli_usage_error(cli, "%s: invalid name '%s'", name, what);
        _cleanup_free_ char *url = NULL;
        struct cli_error err = {};
        /* a valid name needs no escaping */
        if (asprintf(&url, "%s%s", path, what) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "DELETE", url, NULL, &err, NULL) < 0)
                return cli_fail_error(&err, "%s %s", name, what);
        if (!cli->json)
                printf("%s\n", what);
        return CLI_EXIT_OK;
}

int cli_list_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                     const char *key, size_t ncols, const char *const *header, const char *const *fields) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, name, path, suffix, &resp);
        if (r != CLI_PROCEED)
                return r;
        return cli_print_answer_list(cli, resp, name, key, ncols, header, fields);
}
