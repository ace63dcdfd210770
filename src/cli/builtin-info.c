/* SPDX-License-Identifier: Apache-2.0 */
/* templates, health: read-only questions about the control plane. */
#include <errno.h>
#include <stdio.h>

#include "builtin.h"
#include "cli-util.h"

int cmd_templates(struct cli *cli, int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};

        int r = cli_parse_plain(cli, argc, argv, 0, 0);
        if (r != CLI_PROCEED)
                return r;
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "GET", "/v1/templates", NULL, &err, &resp) < 0)
                return cli_fail_error(&err, "templates");
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;

        const json_t *list = json_object_get(resp, "templates");
        if (!json_is_array(list))
                return cli_fail("templates: airlockd answered without a template list");

        static const char *const header[] = {"NAME", "STATE"};
        static const char *const fields[] = {"name", "state"};
        if (cli_print_list(list, ARRAY_SIZE(header), header, fields) < 0)
                return cli_fail("templates: out of memory");
        return CLI_EXIT_OK;
}

int cmd_health(struct cli *cli, int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};

        int r = cli_parse_plain(cli, argc, argv, 0, 0);
        if (r != CLI_PROCEED)
                return r;
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "GET", "/v1/health", NULL, &err, &resp) < 0)
                return cli_fail_error(&err, "health");
        if (cli->json)
                r = resp ? cli_print_json(resp) : (printf("{}\n") < 0 ? -EIO : 0);
        else if (json_is_object(resp) && json_object_size(resp) > 0)
                r = cli_print_fields(resp);
        else
                r = printf("ok\n") < 0 ? -EIO : 0;
        return r < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
