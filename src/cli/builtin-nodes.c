/* SPDX-License-Identifier: Apache-2.0 */
/* nodes: the nodes of a cluster, their join tokens, draining and removing
 * them (the admin token's business; docs/cluster.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

/* One node as a table row: what an operator scans for. */
static json_t *node_row(const json_t *n) {
        const json_t *cap = json_object_get(n, "capacity"), *use = json_object_get(n, "usage");
        json_int_t max = json_integer_value(json_object_get(cap, "max_sandboxes"));
        json_int_t running = json_integer_value(json_object_get(use, "sandboxes"));
        char sandboxes[48], cpu_mem[64], disk[32];
        if (max > 0)
                snprintf(sandboxes, sizeof sandboxes, "%lld/%lld", (long long) running, (long long) max);
        else
                snprintf(sandboxes, sizeof sandboxes, "%lld", (long long) running);
        snprintf(cpu_mem, sizeof cpu_mem, "%lld CPU, %.1f GiB",
                 (long long) json_integer_value(json_object_get(cap, "cpus")),
                 (double) json_integer_value(json_object_get(cap, "memory_mib")) / 1024.0);
        snprintf(disk, sizeof disk, "%.1f GiB free",
                 (double) json_integer_value(json_object_get(use, "disk_free_bytes")) / (1024.0 * 1024 * 1024));
        _cleanup_free_ char *templates = NULL;
        size_t i, len = 0;
        json_t *t;
        FILE *f = open_memstream(&templates, &len);
        if (!f)
                return NULL;
        json_array_foreach(json_object_get(n, "templates"), i, t)
                fprintf(f, "%s%s", i ? "," : "", json_string_value(t) ?: "?");
        fclose(f);
        return json_pack("{s:O?, s:O?, s:s, s:s, s:s, s:s, s:O?}", "name", json_object_get(n, "name"), "state",
                         json_object_get(n, "state"), "sandboxes", sandboxes, "capacity", cpu_mem, "disk", disk,
                         "templates", templates && *templates ? templates : "-", "last_heartbeat",
                         json_object_get(n, "last_heartbeat"));
}

static int list(struct cli *cli) {
        static const char *const header[] = {"NAME", "STATE", "SANDBOXES", "CAPACITY", "DISK", "TEMPLATES",
                                             "LAST HEARTBEAT"};
        static const char *const fields[] = {"name", "state", "sandboxes", "capacity", "disk", "templates",
                                             "last_heartbeat"};
        _cleanup_(json_decrefp) json_t *resp = NULL;
        const json_t *nodes;
        int r = cli_request(cli, "GET", "/v1/nodes", NULL, &resp, "nodes");
        if (r == CLI_PROCEED)
                r = cli_answer_list(cli, resp, "nodes", "nodes", &nodes);
        if (r != CLI_PROCEED)
                return r;
        _cleanup_(json_decrefp) json_t *rows = json_array();
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n) if (!rows || json_array_append_new(rows, node_row(n)) < 0) return cli_fail(
                "nodes: out of memory");
        if (cli_print_list(rows, ARRAY_SIZE(header), header, fields) < 0)
                return cli_fail("nodes: out of memory");
        return CLI_EXIT_OK;
}

/* POST or DELETE on one node; prints the node's name. */
static int node_call(struct cli *cli, const char *method, const char *name, const char *suffix) {
        if (!cli_id_is_valid(name))
                return cli_usage_error(cli, "nodes: invalid node name '%s'", name);
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/nodes/%s%s", name, suffix) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_request(cli, method, path, NULL, &resp, "nodes %s", name);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json && resp)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        size_t n = json_array_size(json_object_get(resp, "suspending"));
        if (n)
                printf("%s (suspending %zu idle sandbox%s)\n", name, n, n == 1 ? "" : "es");
        else
                printf("%s\n", name);
        return CLI_EXIT_OK;
}

static int token(struct cli *cli, const char *ttl) {
        _cleanup_(json_decrefp) json_t *body = json_object();
        if (!body)
                return cli_fail("out of memory");
        if (ttl) {
                char *end;
                errno = 0;
                long long v = strtoll(ttl, &end, 10);
                if (errno || *end || v <= 0)
                        return cli_usage_error(cli, "nodes token: the lifetime must be whole seconds, not '%s'", ttl);
                json_object_set_new(body, "ttl_s", json_integer(v));
        }
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_request(cli, "POST", "/v1/nodes/tokens", body, &resp, "nodes token");
        if (r != CLI_PROCEED)
                return r;
        r = cli_print_member(cli, resp, "nodes token", "token", "token");
        if (r != CLI_EXIT_OK || cli->json)
                return r;
        fprintf(stderr, "valid until %s; give it to `airlock-node --join HOST:PORT --join-token-file FILE`\n",
                json_string_value(json_object_get(resp, "expires_at")) ?: "?");
        return CLI_EXIT_OK;
}

int cmd_nodes(struct cli *cli, int argc, char **argv) {
        const char *verb, *arg;
        int r = cli_parse_verb(cli, argc, argv, &verb, &arg);
        if (r != CLI_PROCEED)
                return r;
        if (!verb)
                return list(cli);
        if (strcmp(verb, "token") == 0)
                return token(cli, arg);
        if (strcmp(verb, "drain") != 0 && strcmp(verb, "undrain") != 0 && strcmp(verb, "rm") != 0)
                return cli_usage_error(cli, "nodes: unknown subcommand '%s' (token, drain, undrain, rm)", verb);
        if (!arg)
                return cli_usage_error(cli, "nodes: '%s' needs a node name", verb);
        if (strcmp(verb, "rm") == 0)
                return node_call(cli, "DELETE", arg, "");
        return node_call(cli, "POST", arg, strcmp(verb, "drain") == 0 ? "/drain" : "/undrain");
}
