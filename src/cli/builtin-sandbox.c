/* SPDX-License-Identifier: Apache-2.0 */
/* create, ls, inspect, rm: the sandbox lifecycle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

static int sandbox_path(const char *id, const char *suffix, char **ret) {
        if (!cli_id_is_valid(id))
                return -EINVAL;
        /* Valid ids need no escaping; the check above is what keeps the path
         * from naming another resource. */
        return asprintf(ret, "/v1/sandboxes/%s%s", id, suffix) < 0 ? -ENOMEM : 0;
}

int cmd_create(struct cli *cli, int argc, char **argv) {
        enum {
                OPT_TEMPLATE = CLI_OPT_FIRST_LOCAL,
                OPT_METADATA,
                OPT_SECRET,
                OPT_MEMORY,
                OPT_VCPUS,
                OPT_VOLUME
        };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                CLI_NET_OPTIONS,
                {"template", required_argument, NULL, OPT_TEMPLATE},
                {"env", required_argument, NULL, 'e'},
                {"metadata", required_argument, NULL, OPT_METADATA},
                {"secret", required_argument, NULL, OPT_SECRET},
                {"memory-mib", required_argument, NULL, OPT_MEMORY},
                {"vcpus", required_argument, NULL, OPT_VCPUS},
                {"volume", required_argument, NULL, OPT_VOLUME},
                {},
        };
        long long memory_mib = 0, vcpus = 0;
        _cleanup_(json_decrefp) json_t *env = json_object(), *meta = json_object(), *body = NULL,
                                       *resp = NULL, *policy = NULL, *secrets = json_array(),
                                       *volumes = json_array();
        _cleanup_(cli_net_done) struct cli_net net = {};
        const char *template = "python";
        int c, r;

        if (!env || !meta || !secrets || !volumes)
                return cli_fail("out of memory");
        while ((c = getopt_long(argc, argv, ":he:", options, NULL)) >= 0) {
                switch (c) {
                case OPT_TEMPLATE: template = optarg; break;
                case OPT_VOLUME: {
                        /* NAME:/PATH[:ro] (airlockd checks the name and the path) */
                        _cleanup_free_ char *spec = strdup(optarg);
                        char *path = spec ? strchr(spec, ':') : NULL;
                        if (!spec)
                                return cli_fail("out of memory");
                        if (!path || path == spec || path[1] != '/')
                                return cli_usage_error(cli, "--volume: expected NAME:/PATH[:ro], got '%s'",
                                                       optarg);
                        *path++ = 0;
                        char *mode = strchr(path, ':');
                        if (mode)
                                *mode++ = 0;
                        if (mode && strcmp(mode, "ro") != 0 && strcmp(mode, "rw") != 0)
                                return cli_usage_error(cli,
                                                       "--volume: the mode after the path is 'ro' or 'rw', "
                                                       "not '%s'",
                                                       mode);
                        json_t *v = json_pack("{s:s, s:s, s:b}", "name", spec, "path", path, "read_only",
                                              mode && strcmp(mode, "ro") == 0);
                        if (!v || json_array_append_new(volumes, v) < 0)
                                return cli_usage_error(cli, "--volume: '%s' must be UTF-8", optarg);
                        break;
                }
                case OPT_MEMORY:
                case OPT_VCPUS: {
                        char *end = NULL;
                        long long v = strtoll(optarg, &end, 10);
                        if (!*optarg || *end || v < 1 || v > (1 << 20))
                                return cli_usage_error(cli, "create: %s takes a number",
                                                       c == OPT_MEMORY ? "--memory-mib" : "--vcpus");
                        *(c == OPT_MEMORY ? &memory_mib : &vcpus) = v;
                        break;
                }
                case OPT_SECRET: {
                        _cleanup_free_ char *list = strdup(optarg);
                        char *save = NULL;
                        if (!list)
                                return cli_fail("out of memory");
                        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
                                if (json_array_append_new(secrets, json_string(t)) < 0)
                                        return cli_usage_error(cli, "--secret: '%s' is not a name", t);
                        break;
                }
                case 'e':
                case OPT_METADATA:
                        r = cli_kv_add(c == 'e' ? env : meta, optarg);
                        if (r < 0)
                                return cli_usage_error(cli, "%s: expected KEY=VALUE in UTF-8, got '%s'",
                                                       c == 'e' ? "--env" : "--metadata", optarg);
                        break;
                default:
                        if ((r = cli_net_option(cli, &net, c, optarg)) == CLI_PROCEED)
                                break;
                        if (r != 0)
                                return r;
                        r = cli_common_option(cli, c, argv);
                        if (r != CLI_PROCEED)
                                return r;
                }
        }
        if (optind < argc)
                return cli_usage_error(cli, "create: unexpected argument '%s'", argv[optind]);
        if (!*template)
                return cli_usage_error(cli, "create: --template must not be empty");

        body = json_pack("{s:s, s:O, s:O}", "template", template, "env", env, "metadata", meta);
        if (!body)
                return cli_usage_error(cli, "create: --template must be UTF-8");
        if (json_array_size(secrets) > 0 && json_object_set(body, "secrets", secrets) < 0)
                return cli_fail("out of memory");
        if (json_array_size(volumes) > 0 && json_object_set(body, "volumes", volumes) < 0)
                return cli_fail("out of memory");
        if ((memory_mib && json_object_set_new(body, "memory_mib", json_integer(memory_mib)) < 0) ||
            (vcpus && json_object_set_new(body, "vcpus", json_integer(vcpus)) < 0))
                return cli_fail("out of memory");
        /* no flag: the tenant's default, else the node's */
        if (cli_net_given(&net) &&
            (cli_net_policy(&net, &policy) < 0 || json_object_set(body, "network", policy) < 0))
                return cli_fail("out of memory");
        r = cli_request(cli, "POST", "/v1/sandboxes", body, &resp, "create");
        if (r != CLI_PROCEED)
                return r;
        return cli_print_member(cli, resp, "create", "id", "sandbox id");
}

/* A guest agent's version as ls --agent takes it: [0-9A-Za-z.+~-], 1-32
 * (needs no escaping in a query). */
static bool agent_version_is_valid(const char *v) {
        size_t n = strlen(v);
        return n >= 1 && n <= 32 &&
               strspn(v, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+~-") == n;
}

int cmd_ls(struct cli *cli, int argc, char **argv) {
        enum { OPT_AGENT = CLI_OPT_FIRST_LOCAL };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"agent", required_argument, NULL, OPT_AGENT},
                {},
        };
        static const char *const header[] = {"ID", "TEMPLATE", "STATE", "AGENT", "CREATED"};
        static const char *const fields[] = {"id", "template", "state", "agent.version", "created_at"};
        const char *agent = NULL;
        int c, r;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (c == OPT_AGENT)
                        agent = optarg;
                else if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                        return r;
        }
        if (optind < argc)
                return cli_usage_error(cli, "ls: unexpected argument '%s'", argv[optind]);
        if (agent && !agent_version_is_valid(agent))
                return cli_usage_error(cli, "ls: --agent takes a version such as 0.2.0");
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/sandboxes%s%s", agent ? "?agent=" : "", agent ?: "") < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        if ((r = cli_request(cli, "GET", path, NULL, &resp, "ls")) != CLI_PROCEED)
                return r;
        return cli_print_answer_list(cli, resp, "ls", "sandboxes", ARRAY_SIZE(header), header, fields);
}

int cmd_agent(struct cli *cli, int argc, char **argv) {
        const char *verb, *id;
        int r = cli_parse_verb(cli, argc, argv, &verb, &id);
        if (r != CLI_PROCEED)
                return r;
        if (!verb || strcmp(verb, "upgrade") != 0)
                return cli_usage_error(cli, "agent: expected 'upgrade SBX'");
        if (!id || !cli_id_is_valid(id))
                return cli_usage_error(cli, "agent upgrade: expected a sandbox id");
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/sandboxes/%s/agent/upgrade", id) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        if ((r = cli_request(cli, "POST", path, NULL, &resp, "agent upgrade %s", id)) != CLI_PROCEED)
                return r;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        const char *v = json_string_value(json_object_get(json_object_get(resp, "agent"), "version"));
        printf("%s\n", v ? v : "unknown");
        return CLI_EXIT_OK;
}

int cmd_inspect(struct cli *cli, int argc, char **argv) {
        return cli_show_command(cli, argc, argv, "inspect", "/v1/sandboxes/", "");
}

int cmd_rm(struct cli *cli, int argc, char **argv) {
        bool keep = false;
        int r = cli_parse_flag(cli, argc, argv, "keep-snapshots", &keep);
        if (r != CLI_PROCEED)
                return r;
        if (optind >= argc)
                return cli_usage_error(cli, "rm: expected at least one sandbox id");
        for (int i = optind; i < argc; i++)
                if (!cli_id_is_valid(argv[i]))
                        return cli_usage_error(cli, "rm: invalid sandbox id '%s'", argv[i]);
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;

        /* Like rm(1): try every argument, fail if any failed. */
        int ret = CLI_EXIT_OK;
        for (int i = optind; i < argc; i++) {
                _cleanup_free_ char *path = NULL;
                struct cli_error err = {};
                if (sandbox_path(argv[i], keep ? "?keep_snapshots=true" : "", &path) < 0) {
                        ret = cli_fail("out of memory");
                        continue;
                }
                if (client_json(&cli->client, "DELETE", path, NULL, &err, NULL) < 0) {
                        ret = cli_fail_error(&err, "%s", argv[i]);
                        continue;
                }
                /* DELETE answers 204 without a body (200 with the archived
                 * sandbox when keeping snapshots); --json prints nothing. */
                if (!cli->json)
                        printf("%s\n", argv[i]);
        }
        return ret;
}
