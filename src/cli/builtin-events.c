/* SPDX-License-Identifier: Apache-2.0 */
/* events: follow the lifecycle events of the caller's sandboxes (GET
 * /v1/events); usage: what a sandbox uses, now and over the last hour
 * (GET /v1/sandboxes/ID/metrics). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"
#include "sse.h"

struct follow {
        struct cli *cli;
        unsigned long count, max; /* max 0: no end */
        int error;
};

static int on_event(const struct sse_event *ev, void *userdata) {
        struct follow *f = userdata;
        if (strcmp(ev->type, "error") == 0) {
                fprintf(stderr, "airlock: events: %s\n", ev->data);
                return -EIO;
        }
        _cleanup_(json_decrefp) json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
        if (!json_is_object(d))
                return 0; /* not one of ours: skipped */
        if (f->cli->json) {
                _cleanup_free_ char *line = json_dumps(d, JSON_COMPACT);
                if (line)
                        printf("%s\n", line);
        } else {
                const char *ts = json_string_value(json_object_get(d, "ts")) ?: "";
                const char *type = json_string_value(json_object_get(d, "type")) ?: ev->type;
                const char *sbx = json_string_value(json_object_get(d, "sandbox_id")) ?: "";
                const char *state = json_string_value(json_object_get(d, "state")) ?: "-";
                printf("%-24s  %-20s  %-20s  %s\n", ts, type, sbx, state);
        }
        fflush(stdout);
        f->count++;
        return f->max && f->count >= f->max ? -ECANCELED : 0; /* enough: end the stream */
}

int cmd_events(struct cli *cli, int argc, char **argv) {
        enum { OPT_SANDBOX = CLI_OPT_FIRST_LOCAL, OPT_AFTER, OPT_COUNT };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"sandbox", required_argument, NULL, OPT_SANDBOX},
                {"after", required_argument, NULL, OPT_AFTER},
                {"count", required_argument, NULL, OPT_COUNT},
                {},
        };
        const char *sandbox = NULL, *after = NULL;
        unsigned long count = 0;
        int c, r;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                switch (c) {
                case OPT_SANDBOX: sandbox = optarg; break;
                case OPT_AFTER: after = optarg; break;
                case OPT_COUNT: {
                        char *end = NULL;
                        count = strtoul(optarg, &end, 10);
                        if (!*optarg || *end || count == 0 || count > 1000000)
                                return cli_usage_error(cli, "events: --count must be a number from 1");
                        break;
                }
                default:
                        if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                                return r;
                }
        }
        if (optind < argc)
                return cli_usage_error(cli, "events: unexpected argument '%s'", argv[optind]);
        if (sandbox && !cli_id_is_valid(sandbox))
                return cli_usage_error(cli, "events: --sandbox takes a sandbox id");
        if (after && (!*after || strspn(after, "0123456789") != strlen(after) || strlen(after) > 18))
                return cli_usage_error(cli, "events: --after takes an event id");
        /* a checked id and digits need no escaping */
        char path[256];
        snprintf(path, sizeof path, "/v1/events?sandbox_id=%s&after=%s", sandbox ?: "", after ?: "");
        if (!sandbox && !after)
                snprintf(path, sizeof path, "/v1/events");
        else if (!after)
                snprintf(path, sizeof path, "/v1/events?sandbox_id=%s", sandbox);
        else if (!sandbox)
                snprintf(path, sizeof path, "/v1/events?after=%s", after);
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        struct follow f = { .cli = cli, .max = count };
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        CURLcode res = CURLE_OK;
        f.error = client_sse(&cli->client, path, on_event, &f, &call, &res);
        if (!call)
                return cli_fail("out of memory");
        if (f.error == -ECANCELED)
                return CLI_EXIT_OK; /* --count reached */
        if (f.error == -EMSGSIZE)
                return cli_fail("events: an event from airlockd exceeded the size limit");
        if (f.error < 0)
                return CLI_EXIT_FAILURE;
        struct cli_error err = {};
        if (client_call_finish(&cli->client, call, res, &err, NULL) < 0)
                return cli_fail_error(&err, "events");
        return CLI_EXIT_OK; /* the server ended the stream */
}

static void human_bytes(double b, char out[32]) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        size_t u = 0;
        while (b >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
                b /= 1024;
                u++;
        }
        snprintf(out, 32, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static void usage_line(const char *when, const json_t *s) {
        char mem[32], disk[32], cpu[16] = "-";
        human_bytes((double) json_integer_value(json_object_get(s, "memory_bytes")), mem);
        human_bytes((double) json_integer_value(json_object_get(s, "disk_bytes")), disk);
        const json_t *pct = json_object_get(s, "cpu_pct");
        if (json_is_number(pct))
                snprintf(cpu, sizeof cpu, "%.1f", json_number_value(pct));
        printf("%-24s  %8s  %12s  %12s\n", when, cpu, mem, disk);
}

int cmd_usage(struct cli *cli, int argc, char **argv) {
        bool history = false;
        int r = cli_parse_flag(cli, argc, argv, "history", &history);
        if (r != CLI_PROCEED)
                return r;
        if (argc - optind != 1)
                return cli_usage_error(cli, "usage: %s", argc - optind < 1 ? "missing SBX" : "one SBX only");
        const char *id = argv[optind];
        if (!cli_id_is_valid(id))
                return cli_usage_error(cli, "usage: '%s' is no sandbox id", id);
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/sandboxes/%s/metrics", id) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        r = cli_request(cli, "GET", path, NULL, &resp, "usage");
        if (r != CLI_PROCEED)
                return r;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        const json_t *now = json_object_get(resp, "now");
        printf("%-24s  %8s  %12s  %12s\n", "WHEN", "CPU %", "MEMORY", "DISK");
        if (history) {
                size_t i;
                const json_t *s;
                json_array_foreach(json_object_get(resp, "history"), i, s) {
                        char ts[32];
                        snprintf(ts, sizeof ts, "%lld s ago",
                                 (long long) ((json_integer_value(json_object_get(now, "ts_ms")) -
                                               json_integer_value(json_object_get(s, "ts_ms"))) /
                                              1000));
                        usage_line(json_is_object(now) ? ts : "-", s);
                }
        }
        if (json_is_object(now))
                usage_line("now", now);
        else
                printf("(no VM: the sandbox is %s)\n", json_string_value(json_object_get(resp, "state")) ?: "?");
        const json_t *g = json_object_get(resp, "guest");
        if (json_is_object(g)) {
                char used[32], total[32];
                human_bytes((double) json_integer_value(json_object_get(g, "mem_used")), used);
                human_bytes((double) json_integer_value(json_object_get(g, "mem_total")), total);
                printf("guest: %lld vCPUs at %.1f%%, memory %s of %s\n",
                       (long long) json_integer_value(json_object_get(g, "cpu_count")),
                       json_number_value(json_object_get(g, "cpu_used_pct")), used, total);
        }
        return CLI_EXIT_OK;
}
