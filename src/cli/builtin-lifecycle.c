/* SPDX-License-Identifier: Apache-2.0 */
/* pause, resume, stop, start, rollback, suspend, wake, fork: lifecycle
 * verbs, one command named as its verb; op: inspect an operation;
 * snapshot, snapshots: disk snapshots. */
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
        enum { OPT_NO_WAIT = CLI_OPT_FIRST_LOCAL, OPT_SECRETS };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"no-wait", no_argument, NULL, OPT_NO_WAIT},
                {"secrets", no_argument, NULL, OPT_SECRETS},
                {},
        };
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};
        bool wait = true, secrets = false;
        int c, r;

        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (c == OPT_NO_WAIT) {
                        wait = false;
                        continue;
                }
                if (c == OPT_SECRETS) {
                        if (strcmp(verb, "fork") != 0)
                                return cli_usage_error(cli, "%s: --secrets goes with fork", verb);
                        secrets = true;
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
        /* a fork child gets the parent's credentials only when asked */
        if (secrets && !(body = json_pack("{s:b}", "secrets", 1)))
                return cli_fail("out of memory");
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
        if (wait && !cli->json) {
                /* fork: the new sandbox is what the user wants next */
                const char *child = json_string_value(
                        json_object_get(json_object_get(json_object_get(resp, "result"), "sandbox"), "id"));
                printf("%s\n", child ? child : id);
        }
        return CLI_EXIT_OK;
}

int cmd_lifecycle(struct cli *cli, int argc, char **argv) {
        return lifecycle_verb(cli, argc, argv, cli->cmd->name);
}

/* POST /v1/sandboxes/SBX/snapshots {"kind":"disk"}: prints the new id. */
int cmd_snapshot(struct cli *cli, int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        _cleanup_(json_decrefp) json_t *body = NULL;
        _cleanup_free_ char *path = NULL;
        bool full = false;
        int r = cli_parse_flag(cli, argc, argv, "full", &full);
        if (r != CLI_PROCEED)
                return r;
        if (argc - optind != 1)
                return cli_usage_error(cli, "snapshot: expected one sandbox id");
        const char *id = argv[optind];
        if (!cli_id_is_valid(id))
                return cli_usage_error(cli, "snapshot: invalid sandbox id '%s'", id);
        body = json_pack("{s:s}", "kind", full ? "full" : "disk");
        if (!body || asprintf(&path, "/v1/sandboxes/%s/snapshots", id) < 0)
                return cli_fail("out of memory");
        r = cli_request(cli, "POST", path, body, &resp, "snapshot %s", id);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        printf("%s\n", json_string_value(json_object_get(resp, "id")) ?: "");
        return CLI_EXIT_OK;
}

/* Bytes as the table shows them: "512 B", "4.0 KiB", "1.5 GiB". */
static void format_size(json_int_t bytes, char *buf, size_t n) {
        static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
        if (bytes < 1024) {
                snprintf(buf, n, "%lld B", (long long)bytes);
                return;
        }
        double v = (double)bytes / 1024;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, n, "%.1f %s", v, units[u]);
}

/* GET /v1/sandboxes/SBX/snapshots as a table, newest first: sizes in
 * binary units, PINNED "yes" for snapshots taken on demand (retention
 * never deletes them), "no" for scheduled ones. */
int cmd_snapshots(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"ID", "CREATED", "KIND", "SIZE", "PINNED"};
        static const char *const fields[] = {"id", "created_at", "kind", "size", "pinned"};
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, "snapshots", "/v1/sandboxes/", "/snapshots", &resp);
        if (r != CLI_PROCEED)
                return r;
        const json_t *list;
        r = cli_answer_list(cli, resp, "snapshots", "snapshots", &list);
        if (r != CLI_PROCEED)
                return r;
        _cleanup_(json_decrefp) json_t *rows = json_array();
        if (!rows)
                return cli_fail("snapshots: out of memory");
        size_t i;
        const json_t *sn;
        json_array_foreach(list, i, sn) {
                char size[32] = "-";
                const json_t *sz = json_object_get(sn, "size");
                if (json_is_integer(sz))
                        format_size(json_integer_value(sz), size, sizeof size);
                const json_t *pinned = json_object_get(sn, "pinned");
                json_t *row = json_pack("{s:O?, s:O?, s:O?, s:s, s:s}", "id", json_object_get(sn, "id"),
                                        "created_at", json_object_get(sn, "created_at"), "kind",
                                        json_object_get(sn, "kind"), "size", size, "pinned",
                                        json_is_boolean(pinned) ? (json_is_true(pinned) ? "yes" : "no") : "-");
                if (!row || json_array_append_new(rows, row) < 0)
                        return cli_fail("snapshots: out of memory");
        }
        if (cli_print_list(rows, ARRAY_SIZE(header), header, fields) < 0)
                return cli_fail("snapshots: out of memory");
        return CLI_EXIT_OK;
}

int cmd_op(struct cli *cli, int argc, char **argv) {
        return cli_show_command(cli, argc, argv, "op", "/v1/operations/", "");
}
