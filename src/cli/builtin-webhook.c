/* SPDX-License-Identifier: Apache-2.0 */
/* webhook add/ls/inspect/rm/deliveries: sandboxes' lifecycle events POSTed
 * to a URL, signed (docs/webhooks.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

/* "add URL [--events T,T...] [--secret S] [--tenant ID]": prints the id
 * and the secret, which is shown only now. */
static int webhook_add(struct cli *cli, int argc, char **argv) {
        enum { OPT_EVENTS = CLI_OPT_FIRST_LOCAL, OPT_SECRET, OPT_TENANT };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"events", required_argument, NULL, OPT_EVENTS},
                {"secret", required_argument, NULL, OPT_SECRET},
                {"tenant", required_argument, NULL, OPT_TENANT},
                {},
        };
        const char *events = NULL, *secret = NULL, *tenant = NULL;
        int c, r;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                switch (c) {
                case OPT_EVENTS: events = optarg; break;
                case OPT_SECRET: secret = optarg; break;
                case OPT_TENANT: tenant = optarg; break;
                default:
                        if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                                return r;
                }
        }
        if (optind + 1 != argc)
                return cli_usage_error(cli, "webhook add: expected one URL");
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s}", "url", argv[optind]);
        if (!body)
                return cli_usage_error(cli, "webhook add: the URL must be UTF-8");
        if (events) {
                json_t *list = json_array();
                for (const char *p = events; list && *p;) {
                        const char *e = strchrnul(p, ',');
                        if (e > p)
                                json_array_append_new(list, json_stringn(p, (size_t) (e - p)));
                        p = *e ? e + 1 : e;
                }
                if (!list || json_object_set_new(body, "events", list) < 0)
                        return cli_fail("out of memory");
        }
        if ((secret && json_object_set_new(body, "secret", json_string(secret)) < 0) ||
            (tenant && json_object_set_new(body, "tenant", json_string(tenant)) < 0))
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        r = cli_request(cli, "POST", "/v1/webhooks", body, &resp, "webhook add %s", argv[optind]);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        const char *id = json_string_value(json_object_get(resp, "id"));
        const char *sec = json_string_value(json_object_get(resp, "secret"));
        if (!id || !sec)
                return cli_fail("webhook add: airlockd answered without an id and a secret");
        printf("%s\nsecret: %s\n", id, sec);
        return CLI_EXIT_OK;
}

int cmd_webhook(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"ID", "URL", "EVENTS", "DELIVERED", "FAILED", "LAST ERROR"};
        static const char *const fields[] = {"id", "url", "events", "delivered", "failed", "last_error"};
        static const char *const dheader[] = {"TIME",    "EVENT",  "TYPE", "SANDBOX",
                                              "ATTEMPT", "STATUS", "MS",   "ERROR"};
        static const char *const dfields[] = {"ts",      "event_id", "event_type",  "sandbox_id",
                                              "attempt", "status",   "duration_ms", "error"};
        const char *verb = argc > 1 ? argv[1] : NULL;
        if (verb && strcmp(verb, "add") == 0)
                return webhook_add(cli, argc - 1, argv + 1);
        if (verb && (strcmp(verb, "ls") == 0 || strcmp(verb, "list") == 0))
                return cli_list_command(cli, argc - 1, argv + 1, "webhook ls", "/v1/webhooks", NULL,
                                        "webhooks", ARRAY_SIZE(header), header, fields);
        if (verb && strcmp(verb, "inspect") == 0)
                return cli_show_command(cli, argc - 1, argv + 1, "webhook inspect", "/v1/webhooks/", "");
        if (verb && strcmp(verb, "deliveries") == 0)
                return cli_list_command(cli, argc - 1, argv + 1, "webhook deliveries", "/v1/webhooks/",
                                        "/deliveries", "deliveries", ARRAY_SIZE(dheader), dheader, dfields);
        if (verb && strcmp(verb, "rm") == 0)
                return cli_delete_command(cli, argc - 1, argv + 1, "webhook rm", "/v1/webhooks/");
        return cli_usage_error(cli, "webhook: expected 'add', 'ls', 'inspect', 'deliveries' or 'rm'");
}
