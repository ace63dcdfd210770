/* SPDX-License-Identifier: Apache-2.0 */
/* net: a sandbox's egress policy and its log (docs/cli.md, docs/network.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

/* Prints a policy answer: the JSON with --json, else one rule a line. */
static int print_policy(struct cli *cli, const json_t *policy) {
        if (cli->json)
                return cli_print_json(policy) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        if (cli_net_print(policy, stdout) < 0)
                return cli_fail("net: airlockd answered without a policy");
        return CLI_EXIT_OK;
}

int cmd_net(struct cli *cli, int argc, char **argv) {
        enum { OPT_LIMIT = CLI_OPT_FIRST_LOCAL };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                CLI_NET_OPTIONS,
                {"limit", required_argument, NULL, OPT_LIMIT},
                {},
        };
        _cleanup_(cli_net_done) struct cli_net net = {};
        _cleanup_(json_decrefp) json_t *body = NULL, *resp = NULL;
        const char *limit = NULL;
        struct cli_error err = {};
        int c, r;

        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (c == OPT_LIMIT) {
                        limit = optarg;
                        continue;
                }
                if ((r = cli_net_option(cli, &net, c, optarg)) == CLI_PROCEED)
                        continue;
                if (r != 0)
                        return r;
                if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                        return r;
        }
        int n = argc - optind;
        bool log = n == 2 && strcmp(argv[optind], "log") == 0;
        if (n < 1)
                return cli_usage_error(cli, "net: expected a sandbox id");
        if (n > (log ? 2 : 1))
                return cli_usage_error(cli, "net: unexpected argument '%s'", argv[optind + (log ? 2 : 1)]);
        const char *id = argv[optind + (log ? 1 : 0)];
        if (!cli_id_is_valid(id))
                return cli_usage_error(cli, "net: invalid sandbox id '%s'", id);
        if (log && cli_net_given(&net))
                return cli_usage_error(cli, "net log: takes no policy flags");
        if (limit && !log)
                return cli_usage_error(cli, "net: --limit goes with 'net log'");
        if (limit && (strspn(limit, "0123456789") != strlen(limit) || !*limit || strlen(limit) > 4))
                return cli_usage_error(cli, "net log: --limit must be a number from 1 to 1000");

        _cleanup_free_ char *path = NULL;
        /* a valid id and a digits-only limit need no escaping */
        if (asprintf(&path, "/v1/sandboxes/%s/network%s%s%s", id, log ? "/log" : "", limit ? "?limit=" : "",
                     limit ?: "") < 0)
                return cli_fail("out of memory");
        if (cli_net_given(&net) && (r = cli_net_policy(&net, &body)) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        r = client_json(&cli->client, body ? "PUT" : "GET", path, body, &err, &resp);
        if (r < 0)
                return cli_fail_error(&err, "net %s%s", log ? "log " : "", id);
        if (!log)
                return print_policy(cli, resp);
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        if (cli_net_log_print(resp, stdout) < 0)
                return cli_fail("net log: airlockd answered without a log");
        return CLI_EXIT_OK;
}
