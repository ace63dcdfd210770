/* SPDX-License-Identifier: Apache-2.0 */
/* pools, health: read-only questions about the control plane. */
#include <errno.h>
#include <stdio.h>

#include "builtin.h"
#include "cli-util.h"

int cmd_pools(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = { "TEMPLATE", "BUILD", "TARGET", "MAX",     "READY",
                                              "STARTING", "HITS",  "MISSES", "HIT_PCT" };
        static const char *const fields[] = { "template", "build", "target", "max",            "ready",
                                              "starting", "hits",  "misses", "recent_hit_pct" };
        return cli_list_command(cli, argc, argv, "pools", "/v1/pools", NULL, "pools", ARRAY_SIZE(header), header,
                                fields);
}

int cmd_health(struct cli *cli, int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, "health", "/v1/health", NULL, &resp);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json)
                r = resp ? cli_print_json(resp) : (printf("{}\n") < 0 ? -EIO : 0);
        else if (json_is_object(resp) && json_object_size(resp) > 0)
                r = cli_print_fields(resp);
        else
                r = printf("ok\n") < 0 ? -EIO : 0;
        return r < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
