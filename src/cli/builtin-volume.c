/* SPDX-License-Identifier: Apache-2.0 */
/* volume create/ls/inspect/rm/snapshot: persistent disks that outlive
 * sandboxes (docs/volumes.md); `create --volume NAME:/PATH` mounts one. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

/* "create NAME --size S" and "snapshot NAME [--name N]": one option each. */
static int volume_post(struct cli *cli, int argc, char **argv, bool create) {
        enum { OPT_SIZE = CLI_OPT_FIRST_LOCAL, OPT_NAME };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"size", required_argument, NULL, OPT_SIZE},
                {"name", required_argument, NULL, OPT_NAME},
                {},
        };
        const char *verb = create ? "volume create" : "volume snapshot";
        const char *size = NULL, *name = NULL;
        int c, r;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                switch (c) {
                case OPT_SIZE: size = optarg; break;
                case OPT_NAME: name = optarg; break;
                default:
                        r = cli_common_option(cli, c, argv);
                        if (r != CLI_PROCEED)
                                return r;
                }
        }
        if (optind + 1 != argc)
                return cli_usage_error(cli, "%s: expected one volume name", verb);
        const char *vol = argv[optind];
        if (!cli_id_is_valid(vol))
                return cli_usage_error(cli, "%s: invalid name '%s'", verb, vol);
        if (create ? (!size || name) : !!size)
                return cli_usage_error(cli, create ? "volume create: --size is required (10G, 512M, ...)"
                                                   : "volume snapshot: takes --name, not --size");
        _cleanup_(json_decrefp) json_t *body = create ? json_pack("{s:s, s:s}", "name", vol, "size", size)
                                               : name ? json_pack("{s:s}", "name", name)
                                                      : json_object();
        _cleanup_free_ char *path = NULL;
        if (!body)
                return cli_usage_error(cli, "%s: arguments must be UTF-8", verb);
        if (!create && asprintf(&path, "/v1/volumes/%s/snapshot", vol) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        r = cli_request(cli, "POST", create ? "/v1/volumes" : path, body, &resp, "%s %s", verb, vol);
        if (r != CLI_PROCEED)
                return r;
        return cli_print_member(cli, resp, verb, "name", "volume name");
}

int cmd_volume(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"NAME", "ID", "SIZE", "HELD BY", "CREATED"};
        static const char *const fields[] = {"name", "id", "size", "held_by", "created_at"};
        const char *verb = argc > 1 ? argv[1] : NULL;
        if (verb && strcmp(verb, "create") == 0)
                return volume_post(cli, argc - 1, argv + 1, true);
        if (verb && strcmp(verb, "snapshot") == 0)
                return volume_post(cli, argc - 1, argv + 1, false);
        if (verb && (strcmp(verb, "ls") == 0 || strcmp(verb, "list") == 0))
                return cli_list_command(cli, argc - 1, argv + 1, "volume ls", "/v1/volumes", NULL, "volumes",
                                        ARRAY_SIZE(header), header, fields);
        if (verb && strcmp(verb, "inspect") == 0)
                return cli_show_command(cli, argc - 1, argv + 1, "volume inspect", "/v1/volumes/", "");
        if (verb && strcmp(verb, "rm") == 0)
                return cli_delete_command(cli, argc - 1, argv + 1, "volume rm", "/v1/volumes/");
        return cli_usage_error(cli, "volume: expected 'create', 'ls', 'inspect', 'rm' or 'snapshot'");
}
