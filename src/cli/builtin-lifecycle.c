/* SPDX-License-Identifier: Apache-2.0 */
/* pause, resume, stop, start, rollback: lifecycle verbs; op: inspect an
 * operation; snapshot, snapshots: disk snapshots. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

/* POST /v1/sandboxes/SBX/VERB, waiting for the operation unless --no-wait
 * (then the operation id is printed). Exits non-zero when it failed.
 * rollback takes a second argument, the snapshot id. */
static int lifecycle_verb(struct cli *cli, int argc, char **argv, const char *verb) {
        enum { OPT_NO_WAIT = CLI_OPT_FIRST_LOCAL };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"no-wait", no_argument, NULL, OPT_NO_WAIT},
                {},
        };
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};
        bool wait = true;
        int c, r;

        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (c == OPT_NO_WAIT) {
                        wait = false;
                        continue;
                }
                r = cli_common_option(cli, c, argv);
                if (r != CLI_PROCEED)
                        return r;
        }
        bool rollback = strcmp(verb, "rollback") == 0;
        if (argc - optind != (rollback ? 2 : 1))
                return cli_usage_error(cli, rollback ? "%s: expected a sandbox id and a snapshot id"
                                                     : "%s: expected one sandbox id", verb);
        const char *id = argv[optind];
        if (!cli_id_is_valid(id))
                return cli_usage_error(cli, "%s: invalid sandbox id '%s'", verb, id);
        _cleanup_(json_decrefp) json_t *body = NULL;
        if (rollback) {
                if (!cli_id_is_valid(argv[optind + 1]))
                        return cli_usage_error(cli, "%s: invalid snapshot id '%s'", verb, argv[optind + 1]);
                body = json_pack("{s:s}", "snapshot", argv[optind + 1]);
                if (!body)
                        return cli_fail("out of memory");
        }
        _cleanup_free_ char *path = NULL;
        /* valid ids need no escaping */
        if (asprintf(&path, "/v1/sandboxes/%s/%s%s", id, verb, wait ? "?wait=true" : "") < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "POST", path, body, &err, &resp) < 0)
                return cli_fail_error(&err, "%s %s", verb, id);

        const char *state = json_string_value(json_object_get(resp, "state"));
        if (cli->json) {
                if (cli_print_json(resp) < 0)
                        return CLI_EXIT_FAILURE;
        } else if (!wait) {
                const char *op = json_string_value(json_object_get(resp, "id"));
                printf("%s\n", op ? op : "");
        }
        if (state && strcmp(state, "failed") == 0) {
                const char *msg = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
                return cli_fail("%s %s: %s", verb, id, msg ? msg : "the operation failed");
        }
        if (wait && !(state && strcmp(state, "succeeded") == 0))
                return cli_fail("%s %s: still %s after waiting; see 'airlock op %s'", verb, id, state ? state : "?",
                                json_string_value(json_object_get(resp, "id")) ?: "?");
        if (wait && !cli->json)
                printf("%s\n", id);
        return CLI_EXIT_OK;
}

int cmd_pause(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, "pause");
}

int cmd_resume(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, "resume");
}

int cmd_stop(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, "stop");
}

int cmd_start(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, "start");
}

int cmd_rollback(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, "rollback");
}

/* POST /v1/sandboxes/SBX/snapshots {"kind":"disk"}: prints the new id. */
int cmd_snapshot(struct cli *cli, int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        _cleanup_(json_decrefp) json_t *body = NULL;
        _cleanup_free_ char *path = NULL;
        struct cli_error err = {};

        int r = cli_parse_plain(cli, argc, argv, 1, 1);
        if (r != CLI_PROCEED)
                return r;
        const char *id = argv[optind];
        if (!cli_id_is_valid(id))
                return cli_usage_error(cli, "snapshot: invalid sandbox id '%s'", id);
        body = json_pack("{s:s}", "kind", "disk");
        if (!body || asprintf(&path, "/v1/sandboxes/%s/snapshots", id) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "POST", path, body, &err, &resp) < 0)
                return cli_fail_error(&err, "snapshot %s", id);
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        printf("%s\n", json_string_value(json_object_get(resp, "id")) ?: "");
        return CLI_EXIT_OK;
}

/* GET /v1/sandboxes/SBX/snapshots as a table, newest first. */
int cmd_snapshots(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"ID", "KIND", "SIZE", "CREATED"};
        static const char *const fields[] = {"id", "kind", "size", "created_at"};
        return cli_list_command(cli, argc, argv, "snapshots", "/v1/sandboxes/", "/snapshots", "snapshots",
                                ARRAY_SIZE(header), header, fields);
}

int cmd_op(struct cli *cli, int argc, char **argv) {
        return cli_show_command(cli, argc, argv, "op", "/v1/operations/", "");
}
