/* SPDX-License-Identifier: Apache-2.0 */
#include <curl/curl.h>
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "airlock-config.h"
#include "builtin.h"
#include "cli-util.h"
#include "cli.h"

static const struct cli_command commands[] = {
        {"create", cmd_create,
         "[--template T] [--env K=V]... [--metadata K=V]... [--net MODE | --allow HOSTS]... [--deny HOSTS]...",
         "Create a sandbox and print its id",
         "  --template T      template to boot from (default: python)\n"
         "  -e, --env K=V     environment variable for commands in the sandbox (repeatable)\n"
         "  --metadata K=V    free-form label stored with the sandbox (repeatable)\n"
         "  --secret NAME     attach a credential: $NAME (upper-cased, '-' as '_') holds its\n"
         "                    placeholder (repeatable, or a comma list)\n"
         "  --memory-mib N    a smaller size than the template's: memory its VMM's cgroup allows\n"
         "  --vcpus N         and CPUs of time (at most the template's)\n" CLI_NET_HELP},
        {"ls", cmd_ls, "", "List sandboxes", NULL},
        {"inspect", cmd_inspect, "SBX", "Show one sandbox", NULL},
        {"rm", cmd_rm, "[--keep-snapshots] SBX...", "Delete sandboxes",
         "  --keep-snapshots  archive instead: VM and disk go, snapshots stay (rollback makes it again)\n"},
        {"pause", cmd_pause, "[--no-wait] SBX", "Pause a sandbox (VM kept in memory, vCPUs stopped)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"resume", cmd_resume, "[--no-wait] SBX", "Resume a paused sandbox",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"stop", cmd_stop, "[--no-wait] SBX", "Stop a sandbox (VM gone, disk kept)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"start", cmd_start, "[--no-wait] SBX", "Start a stopped sandbox (boots from its disk)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"snapshot", cmd_snapshot, "[--full] SBX",
         "Take a snapshot (disk: running or stopped; --full: memory too, running or paused); print its id",
         "  --full            memory and devices too: rollback resumes at that instant\n"},
        {"snapshots", cmd_snapshots, "SBX", "List the snapshots of a sandbox (newest first)", NULL},
        {"rollback", cmd_rollback, "[--no-wait] SBX SNAPSHOT",
         "Roll a sandbox back to a snapshot (disk: boots it; full: resumes its running point)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"suspend", cmd_suspend, "[--no-wait] SBX",
         "Suspend a sandbox to the object store (full snapshot; every node resource released)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"wake", cmd_wake, "[--no-wait] SBX", "Wake a suspended sandbox (any request to it does too)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"fork", cmd_fork, "[--no-wait] [--secrets] SBX", "Fork a running or paused sandbox; print the new sandbox's id",
         "  --no-wait         print the operation id instead of waiting for it\n"
         "  --secrets         the child gets the parent's credentials (default: none)\n"},
        {"op", cmd_op, "OPID", "Show an operation (create, delete or a lifecycle verb)", NULL},
        {"net", cmd_net, "SBX [--net MODE | --allow HOSTS ...] | log SBX [--limit N]",
         "Show or replace a sandbox's egress policy, or show its network log",
         "Without policy flags, shows the policy one rule a line; with them,\n"
         "replaces it (a running sandbox's new connections follow it at once).\n" CLI_NET_HELP
         "  --limit N         with 'net log': the newest N entries (1-1000, default 100)\n"},
        {"secret", cmd_secret,
         "add NAME (--value-file F | --value-stdin) --host H[,H...] [OPTIONS] | ls | rm NAME",
         "Manage credentials the gateway injects (the guest sees a placeholder)",
         "  --value-file F    read the value from file F (one trailing newline dropped)\n"
         "  --value-stdin     read the value from stdin\n"
         "  --host H[,H...]   hosts it may be sent to (exact, or *.example.com; repeatable)\n"
         "  --port P[,P...]   their ports (default 443)\n"
         "  --header 'N: T'   inject header N with template T holding {value} once\n"
         "                    (default 'Authorization: Bearer {value}')\n"
         "  --basic USER      inject HTTP basic auth, the value as the password\n"
         "  --method M,...    only for these methods; --path P,... only under these prefixes\n"
         "  --sandbox SBX     only for this sandbox (attached to it at once)\n"
         "  --expires WHEN    30d, 12h, 15m, 90s from now, or an RFC 3339 time\n"
         "  --rate N          at most N injections a minute (0: unlimited)\n"
         "  --tenant ID       the tenant's scope (admin token only)\n"},
        {"audit", cmd_audit, "[--sandbox SBX] [--secret NAME] [--limit N]",
         "Show the credential audit log, newest first", NULL},
        {"events", cmd_events, "[--sandbox SBX] [--after ID] [--count N]",
         "Follow the lifecycle events of your sandboxes (created, paused, woken, deleted, ...)",
         "  --sandbox SBX     one sandbox's only\n"
         "  --after ID        from after event ID (what was missed), not from now\n"
         "  --count N         stop after N events\n"},
        {"usage", cmd_usage, "[--history] SBX", "Show what a sandbox uses: CPU, memory, disk (and the guest's view)",
         "  --history         the node's samples of the last hour too\n"},
        {"exec", cmd_exec, "[-e K=V]... [-w DIR] [-i] [-t] [--timeout S] SBX -- CMD [ARGS...]",
         "Run a command in a sandbox, streaming its output",
         "  -e, --env K=V     environment variable for the command (repeatable)\n"
         "  -w, --cwd DIR     working directory in the sandbox\n"
         "  -i, --interactive forward this terminal's stdin to the command\n"
         "  -t, --tty         run the command on a pseudo-terminal\n"
         "  --timeout S       kill the command after S seconds (exit status 124)\n"
         "  --json            run to completion, then print the API's result object\n"
         "Exits with the command's status (128+N if killed by signal N, 255 if\n"
         "the connection fails). The first Ctrl-C is sent to the command as\n"
         "SIGINT; a second one makes airlock exit.\n"},
        {"cp", cmd_cp, "SRC DST", "Copy a file into or out of a sandbox",
         "One of SRC and DST is SBX:/absolute/path, the other a local path or '-'\n"
         "for stdin/stdout. Files only; a DST ending in '/' or naming a local\n"
         "directory gets SRC's file name.\n"},
        {"port", cmd_port, "[--print-url] SBX PORT [PATH]", "GET a page from a server in a sandbox, through its service port",
         "The body goes to stdout; a status that is not 2xx, the API's or the\n"
         "server's, fails with its message. With --print-url, prints the two URLs that\n"
         "reach the port: by path, and by host name (PORT-SBX.HOST; *.localhost\n"
         "is this machine). Either needs the API key (Authorization: Bearer, or\n"
         "X-Airlock-Key).\n"},
        {"templates", cmd_templates, "", "List templates", NULL},
        {"template", cmd_template,
         "build -f FILE [--name N] [--memory-mib N] [--vcpus N] [--disk-mib N] [--no-follow] [DIR] | ls | show NAME "
         "| logs NAME | rm NAME",
         "Build a template from a spec or a Dockerfile and follow its build; list, show, follow or remove templates",
         "  -f, --file FILE   the spec (FILE.json, docs/templates.md) or a Dockerfile\n"
         "  --name N          the template's name (a Dockerfile has none; overrides a spec's)\n"
         "  --memory-mib N, --vcpus N, --disk-mib N   its machine (over the spec's)\n"
         "  --no-follow       print the build's id instead of following it\n"
         "DIR (default .) holds what COPY names: only that is sent. The build's\n"
         "log and progress (step n of m, elapsed) are shown as it runs; the exit\n"
         "status is 0 once it is built, 1 when it failed.\n"},
        {"pools", cmd_pools, "", "List the warm pools (VMs restored ahead of creates)", NULL},
        {"health", cmd_health, "", "Check that airlockd answers", NULL},
        {"doctor", cmd_doctor, "", "Say what is wrong: this host's checks, airlockd, its node and templates",
         "One line per item (ok, warn or error, what was found, the fix). The host\n"
         "lines come from `airlockd --check --json` (the build tree's airlockd, or\n"
         "the one on PATH; AIRLOCK_DAEMON_BINARY overrides); the API lines from\n"
         "GET /v1/health and GET /v1/templates. Exits 1 when a line says error.\n"},
        {"tenants", cmd_tenants, "[create NAME | rm ID]",
         "List tenants, or create or delete one (admin token)", NULL},
        {"keys", cmd_keys, "TENANT [create [NAME] | rm KEYID] | kms TENANT [rotate | revoke | set KIND [LABEL [new]]]",
         "List a tenant's API keys, or create one (printed once) or revoke one; show, rotate or revoke the key "
         "that seals its images (admin token)",
         "`keys kms TENANT revoke` destroys the tenant's key-encryption key: every image\n"
         "sealed for it (suspended sandboxes in the object store) can never be opened\n"
         "again, and its wakes and suspends fail with key_revoked until `rotate` makes\n"
         "a new key. `keys kms TENANT set pkcs11 LABEL [new]` keeps it on the PKCS#11\n"
         "token airlockd was given (an HSM; `new` generates the key there), `set local`\n"
         "in a key file again.\n"},
        {"nodes", cmd_nodes, "[token [TTL_S] | drain NODE | undrain NODE | rm NODE]",
         "List the nodes of a cluster, make a join token, drain or remove a node (admin token)",
         "A join token (printed once, valid an hour unless TTL_S says otherwise)\n"
         "lets a machine join: airlock-node --join HOST:PORT --join-token-file FILE.\n"
         "A draining node gets no new sandboxes; its idle ones are suspended.\n"
         "A node is removed once it has no sandboxes.\n"},
        {"signing-key", cmd_signing_key, "[rotate]",
         "Show the capability signing key's id, or rotate it (admin token)",
         "Nodes pick the new public key up without a restart; capabilities signed\n"
         "by the previous key keep verifying until the next rotation.\n"},
};

static const char global_options_help[] =
        "Global options (also accepted after the command):\n"
        "  --url URL         airlockd address (env AIRLOCK_URL, default " CLIENT_DEFAULT_URL ")\n"
        "  --token TOKEN     API token (env AIRLOCK_TOKEN, else DATA_DIR/control/admin.token)\n"
        "  --data-dir DIR    where admin.token lives (env AIRLOCK_DATA_DIR,\n"
        "                    default " CLIENT_DEFAULT_DATA_DIR ")\n"
        "  --json            print the API's JSON instead of text\n"
        "  -h, --help        show help\n";

static void print_main_help(FILE *f) {
        fprintf(f, "Usage: airlock [OPTIONS] COMMAND [ARGS...]\n\nCommands:\n");
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
                fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
        fprintf(f, "\n%s  --version         print the version\n\nRun 'airlock COMMAND --help' for more.\n",
                global_options_help);
}

static void print_command_help(const struct cli_command *cmd) {
        printf("Usage: airlock %s %s\n\n%s.\n\n", cmd->name, cmd->synopsis, cmd->summary);
        if (cmd->options)
                printf("%s\n", cmd->options);
        printf("%s", global_options_help);
}

int cli_fail(const char *fmt, ...) {
        va_list ap;
        fputs("airlock: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return CLI_EXIT_FAILURE;
}

int cli_fail_error(const struct cli_error *err, const char *fmt, ...) {
        va_list ap;
        fputs("airlock: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, ": %s\n", err->message);
        return CLI_EXIT_FAILURE;
}

int cli_usage_error(struct cli *cli, const char *fmt, ...) {
        va_list ap;
        fputs("airlock: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        if (cli && cli->cmd)
                fprintf(stderr, "\nTry 'airlock %s --help'.\n", cli->cmd->name);
        else
                fprintf(stderr, "\nTry 'airlock --help'.\n");
        return CLI_EXIT_USAGE;
}

int cli_common_option(struct cli *cli, int c, char **argv) {
        switch (c) {
        case CLI_OPT_URL: cli->url = optarg; return CLI_PROCEED;
        case CLI_OPT_TOKEN: cli->token = optarg; return CLI_PROCEED;
        case CLI_OPT_DATA_DIR: cli->data_dir = optarg; return CLI_PROCEED;
        case CLI_OPT_JSON: cli->json = true; return CLI_PROCEED;
        case 'h':
                if (cli->cmd)
                        print_command_help(cli->cmd);
                else
                        print_main_help(stdout);
                return CLI_EXIT_OK;
        case ':': return cli_usage_error(cli, "option '%s' needs an argument", argv[optind - 1]);
        default:
                /* getopt leaves the bad short option in optopt, a bad long
                 * one only in argv. */
                if (optopt > 0 && optopt < 0x100)
                        return cli_usage_error(cli, "unknown option '-%c'", optopt);
                return cli_usage_error(cli, "unknown option '%s'", argv[optind - 1]);
        }
}

int cli_connect(struct cli *cli) {
        struct cli_error err = {};
        if (cli->connected)
                return 0;
        int r = client_init(&cli->client, cli->url, cli->token, cli->data_dir, &err);
        if (r < 0) {
                cli_fail("%s", err.message);
                return r;
        }
        cli->connected = true;
        return 0;
}

int cli_print_json(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY) < 0 || fputc('\n', stdout) == EOF)
                return -EIO;
        return 0;
}

int cli_cell(const json_t *v, char **ret) {
        char *s;
        if (!v || json_is_null(v))
                s = strdup("-");
        else if (json_is_string(v))
                s = strdup(json_string_value(v));
        else
                s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int cli_print_fields(const json_t *obj) {
        const char *key;
        json_t *v;
        int width = 0;

        if (!json_is_object(obj))
                return cli_print_json(obj);
        json_object_foreach((json_t *)obj, key, v) width = MAX(width, (int)MIN(strlen(key), (size_t)32));
        json_object_foreach((json_t *)obj, key, v) {
                _cleanup_free_ char *cell = NULL;
                int r = cli_cell(v, &cell);
                if (r < 0)
                        return r;
                printf("%-*s  %s\n", width + 1, key, cell);
        }
        return 0;
}

int cli_print_table(size_t ncols, const char *const *header, char *const *cells, size_t nrows) {
        _cleanup_free_ int *width = calloc(ncols, sizeof(int));
        if (!width)
                return -ENOMEM;
        for (size_t c = 0; c < ncols; c++) {
                width[c] = (int)strlen(header[c]);
                for (size_t r = 0; r < nrows; r++)
                        width[c] = MAX(width[c], (int)MIN(strlen(cells[r * ncols + c]), (size_t)64));
        }
        for (size_t r = 0; r <= nrows; r++)
                for (size_t c = 0; c < ncols; c++) {
                        const char *s = r == 0 ? header[c] : cells[(r - 1) * ncols + c];
                        if (c + 1 == ncols)
                                printf("%s\n", s);
                        else
                                printf("%-*s  ", width[c], s);
                }
        return 0;
}

/* created_at may come as RFC 3339 text or as seconds since the epoch. */
static int created_cell(const json_t *v, char **ret) {
        if (json_is_integer(v) || json_is_real(v)) {
                time_t t = json_is_integer(v) ? (time_t)json_integer_value(v) : (time_t)json_real_value(v);
                struct tm tm;
                char buf[32];
                if (gmtime_r(&t, &tm) && strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) > 0) {
                        char *s = strdup(buf);
                        if (!s)
                                return -ENOMEM;
                        *ret = s;
                        return 0;
                }
        }
        return cli_cell(v, ret);
}

/* Frees a table of n cells. */
static void cells_free(char **cells, size_t n) {
        if (!cells)
                return;
        for (size_t i = 0; i < n; i++)
                free(cells[i]);
        free(cells);
}

int cli_print_list(const json_t *list, size_t ncols, const char *const *header, const char *const *fields) {
        size_t nrows = json_array_size(list);
        char **cells = calloc(nrows * ncols + 1, sizeof(char *));
        int r = 0;

        if (!cells)
                return -ENOMEM;
        for (size_t i = 0; i < nrows && r >= 0; i++)
                for (size_t c = 0; c < ncols && r >= 0; c++) {
                        const json_t *v = json_object_get(json_array_get(list, i), fields[c]);
                        r = strcmp(fields[c], "created_at") == 0 ? created_cell(v, &cells[i * ncols + c])
                                                                 : cli_cell(v, &cells[i * ncols + c]);
                }
        if (r >= 0)
                r = cli_print_table(ncols, header, cells, nrows);
        cells_free(cells, nrows * ncols);
        return r;
}

int cli_get_plain(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                  json_t **ret) {
        struct cli_error err = {};
        _cleanup_free_ char *full = NULL;
        int nargs = suffix ? 1 : 0;
        int r = cli_parse_plain(cli, argc, argv, nargs, nargs);
        if (r != CLI_PROCEED)
                return r;
        const char *id = suffix ? argv[optind] : NULL;
        if (id) {
                /* valid ids need no escaping; the check keeps the path from
                 * naming another resource */
                if (!cli_id_is_valid(id))
                        return cli_usage_error(cli, "%s: invalid id '%s'", name, id);
                if (asprintf(&full, "%s%s%s", path, id, suffix) < 0)
                        return cli_fail("out of memory");
                path = full;
        }
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "GET", path, NULL, &err, ret) < 0)
                return id ? cli_fail_error(&err, "%s %s", name, id) : cli_fail_error(&err, "%s", name);
        return CLI_PROCEED;
}

int cli_show_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, name, path, suffix, &resp);
        if (r != CLI_PROCEED)
                return r;
        r = cli->json ? cli_print_json(resp) : cli_print_fields(resp);
        return r < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

int cli_list_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                     const char *key, size_t ncols, const char *const *header, const char *const *fields) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_get_plain(cli, argc, argv, name, path, suffix, &resp);
        if (r != CLI_PROCEED)
                return r;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;

        const json_t *list = json_object_get(resp, key);
        if (!json_is_array(list))
                return cli_fail("%s: airlockd answered without a %s list", name, key);
        if (cli_print_list(list, ncols, header, fields) < 0)
                return cli_fail("%s: out of memory", name);
        return CLI_EXIT_OK;
}

static const struct cli_command *find_command(const char *name) {
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
                if (strcmp(commands[i].name, name) == 0)
                        return &commands[i];
        return NULL;
}

int cli_main(int argc, char **argv) {
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"version", no_argument, NULL, CLI_OPT_VERSION},
                {},
        };
        struct cli cli = {};
        int c, ret;

        opterr = 0;
        /* '+': stop at the command name; what follows belongs to it. */
        while ((c = getopt_long(argc, argv, "+:h", options, NULL)) >= 0) {
                if (c == CLI_OPT_VERSION) {
                        printf("airlock %s\n", AIRLOCK_VERSION);
                        return CLI_EXIT_OK;
                }
                ret = cli_common_option(&cli, c, argv);
                if (ret != CLI_PROCEED)
                        return ret;
        }
        if (optind >= argc) {
                print_main_help(stderr);
                return CLI_EXIT_USAGE;
        }
        if (strcmp(argv[optind], "help") == 0) {
                const struct cli_command *cmd = optind + 1 < argc ? find_command(argv[optind + 1]) : NULL;
                if (cmd) {
                        cli.cmd = cmd;
                        print_command_help(cmd);
                } else
                        print_main_help(stdout);
                return CLI_EXIT_OK;
        }
        cli.cmd = find_command(argv[optind]);
        if (!cli.cmd)
                return cli_usage_error(&cli, "unknown command '%s'", argv[optind]);

        if (sodium_init() < 0)
                return cli_fail("failed to initialize libsodium");
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return cli_fail("failed to initialize libcurl");

        /* Commands parse their own options from a fresh getopt state. */
        int sub_argc = argc - optind;
        char **sub_argv = argv + optind;
        optind = 0;
        ret = cli.cmd->run(&cli, sub_argc, sub_argv);

        if (fflush(stdout) == EOF && ret == CLI_EXIT_OK)
                ret = cli_fail("failed to write output: %m");
        client_done(&cli.client);
        curl_global_cleanup();
        return ret;
}
