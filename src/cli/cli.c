/* SPDX-License-Identifier: Apache-2.0 */
#include <curl/curl.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "airlock-config.h"
#include "builtin.h"
#include "cli-util.h"
#include "cli.h"

static const struct cli_command commands[] = {
        {"create", cmd_create,
         "[--template T] [--env K=V]... [--metadata K=V]... [--net MODE | --allow HOSTS]... [--deny "
         "HOSTS]...",
         "Create a sandbox and print its id",
         "  --template T      template to boot from (default: python)\n"
         "  -e, --env K=V     environment variable for commands in the sandbox (repeatable)\n"
         "  --metadata K=V    free-form label stored with the sandbox (repeatable)\n"
         "  --secret NAME     attach a credential: $NAME (upper-cased, '-' as '_') holds its\n"
         "                    placeholder (repeatable, or a comma list)\n"
         "  --memory-mib N    a smaller size than the template's: memory its VMM's cgroup allows\n"
         "  --vcpus N         and CPUs of time (at most the template's)\n"
         "  --volume NAME:/PATH[:ro]  mount volume NAME at /PATH (read-write: one sandbox at a\n"
         "                    time; :ro read-only, many at once; up to 4; repeatable)\n" CLI_NET_HELP},
        {"ls", cmd_ls, "[--agent VERSION]", "List sandboxes",
         "  --agent VERSION   only those whose guest agent is this version (running ones)\n"},
        {"inspect", cmd_inspect, "SBX", "Show one sandbox", NULL},
        {"rm", cmd_rm, "[--keep-snapshots] SBX...", "Delete sandboxes",
         "  --keep-snapshots  archive instead: VM and disk go, snapshots stay (rollback makes it again)\n"},
        {"pause", cmd_lifecycle, "[--no-wait] SBX", "Pause a sandbox (VM kept in memory, vCPUs stopped)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"resume", cmd_lifecycle, "[--no-wait] SBX", "Resume a paused sandbox",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"stop", cmd_lifecycle, "[--no-wait] SBX", "Stop a sandbox (VM gone, disk kept)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"start", cmd_lifecycle, "[--no-wait] SBX", "Start a stopped sandbox (boots from its disk)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"snapshot", cmd_snapshot, "[--full] SBX",
         "Take a snapshot (disk: running or stopped; --full: memory too, running or paused); print its id",
         "  --full            memory and devices too: rollback resumes at that instant\n"},
        {"snapshots", cmd_snapshots, "SBX", "List the snapshots of a sandbox (newest first)", NULL},
        {"rollback", cmd_lifecycle, "[--no-wait] SBX SNAPSHOT",
         "Roll a sandbox back to a snapshot (disk: boots it; full: resumes its running point)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"suspend", cmd_lifecycle, "[--no-wait] SBX",
         "Suspend a sandbox to the object store (full snapshot; every node resource released)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"wake", cmd_lifecycle, "[--no-wait] SBX", "Wake a suspended sandbox (any request to it does too)",
         "  --no-wait         print the operation id instead of waiting for it\n"},
        {"fork", cmd_lifecycle, "[--no-wait] [--secrets] SBX",
         "Fork a running or paused sandbox; print the new sandbox's id",
         "  --no-wait         print the operation id instead of waiting for it\n"
         "  --secrets         the child gets the parent's credentials (default: none)\n"},
        {"agent", cmd_agent, "upgrade SBX",
         "Upgrade a running sandbox's guest agent to its node's, in place; print the version",
         "Its processes, command sessions and file watches go on. A node also does\n"
         "this by itself once a sandbox is idle (AIRLOCK_AGENT_UPGRADE_IDLE).\n"},
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
        {"volume", cmd_volume,
         "create NAME --size SIZE | ls | inspect NAME | rm NAME | snapshot NAME [--name N]",
         "Manage volumes: persistent disks that outlive sandboxes (create --volume mounts one)",
         "  --size SIZE       with 'create': bytes, or with K, M, G or T (10G); at least 16M\n"
         "  --name N          with 'snapshot': the copy's name (default NAME-TIME)\n"},
        {"webhook", cmd_webhook, "add URL [--events T,...] [--secret S] | ls | inspect ID | deliveries ID | rm ID",
         "Manage webhooks: sandboxes' lifecycle events POSTed to a URL, signed (docs/webhooks.md)",
         "  --events T,...    with 'add': only these (sandbox.created, sandbox.paused, ...;\n"
         "                    default every event)\n"
         "  --secret S        with 'add': the signing secret, whsec_ and base64 of 24-64 bytes\n"
         "                    (default: one is made and printed, this once)\n"
         "  --tenant ID       with 'add': the tenant's scope (admin token only)\n"},
        {"audit", cmd_audit, "[--sandbox SBX] [--secret NAME] [--limit N]",
         "Show the credential audit log, newest first", NULL},
        {"events", cmd_events, "[--sandbox SBX] [--after ID] [--count N]",
         "Follow the lifecycle events of your sandboxes (created, paused, woken, deleted, ...)",
         "  --sandbox SBX     one sandbox's only\n"
         "  --after ID        from after event ID (what was missed), not from now\n"
         "  --count N         stop after N events\n"},
        {"mcp", cmd_mcp, "",
         "Serve MCP over stdio: an agent's tools for sandboxes (docs/mcp.md), through airlockd's /v1/mcp",
         "  for an agent's configuration: {\"command\":\"airlock\",\"args\":[\"mcp\"]} with AIRLOCK_URL\n"
         "  and AIRLOCK_TOKEN (an API key) in its environment\n"},
        {"usage", cmd_usage, "[--history] SBX",
         "Show what a sandbox uses: CPU, memory, disk (and the guest's view)",
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
        {"port", cmd_port, "[--print-url] SBX PORT [PATH]",
         "GET a page from a server in a sandbox, through its service port",
         "The body goes to stdout; a status that is not 2xx, the API's or the\n"
         "server's, fails with its message. With --print-url, prints the two URLs that\n"
         "reach the port: by path, and by host name (PORT-SBX.HOST; *.localhost\n"
         "is this machine). Either needs the API key (Authorization: Bearer, or\n"
         "X-Airlock-Key).\n"},
        {"templates", cmd_templates, "", "List templates", NULL},
        {"template", cmd_template,
         "build [-f FILE] [-t NAME] [--memory-mib N] [--vcpus N] [--disk-mib N] [--no-follow] [DIR] | ls | "
         "show NAME | logs NAME | rm NAME",
         "Build a template from a spec or a Dockerfile and follow its build; list, show, follow or remove "
         "templates",
         "  -f, --file FILE   the spec (FILE.json, docs/templates.md) or a Dockerfile\n"
         "                    (default DIR/Dockerfile)\n"
         "  -t, --name NAME   the template's name (a Dockerfile has none; overrides a spec's)\n"
         "  --memory-mib N, --vcpus N, --disk-mib N   its machine (over the spec's)\n"
         "  --no-follow       print the build's id instead of following it\n"
         "DIR (default .) holds what COPY names: only that is sent. The build's\n"
         "log and progress (step n of m, elapsed) are shown as it runs; the exit\n"
         "status is 0 once it is built, 1 when it failed. docker build's --tag and\n"
         "E2B's -n, -p DIR, --dockerfile, --cpu-count and --memory-mb work too.\n"},
        {"pools", cmd_pools, "", "List the warm pools (VMs restored ahead of creates)", NULL},
        {"health", cmd_health, "", "Check that airlockd answers", NULL},
        {"doctor", cmd_doctor, "", "Say what is wrong: this host's checks, airlockd, its node and templates",
         "One line per item (ok, warn or error, what was found, the fix). The host\n"
         "lines come from `airlockd --check --json` (the build tree's airlockd, or\n"
         "the one on PATH; AIRLOCK_DAEMON_BINARY overrides); the API lines from\n"
         "GET /v1/health and GET /v1/templates. Exits 1 when a line says error.\n"},
        {"tenants", cmd_tenants, "[create NAME | rm ID]",
         "List tenants, or create or delete one (admin token)", NULL},
        {"keys", cmd_keys,
         "TENANT [create [NAME] | rm KEYID] | kms TENANT [rotate | revoke | set KIND [LABEL [new]]]",
         "List a tenant's API keys, or create one (printed once) or revoke one; show, rotate or revoke the "
         "key "
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
        struct cli cli = { .commands = commands, .n_commands = ARRAY_SIZE(commands) };
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
                cli_print_main_help(&cli, stderr);
                return CLI_EXIT_USAGE;
        }
        if (strcmp(argv[optind], "help") == 0) {
                const struct cli_command *cmd = optind + 1 < argc ? find_command(argv[optind + 1]) : NULL;
                if (cmd) {
                        cli.cmd = cmd;
                        cli_print_command_help(cmd);
                } else
                        cli_print_main_help(&cli, stdout);
                return CLI_EXIT_OK;
        }
        cli.cmd = find_command(argv[optind]);
        if (!cli.cmd)
                return cli_usage_error(&cli, "unknown command '%s'", argv[optind]);
        /* `airlock CMD --help` for every command, those with subcommands
         * (secret, template, volume...) included */
        if (optind + 1 < argc && (strcmp(argv[optind + 1], "--help") == 0 || strcmp(argv[optind + 1], "-h") == 0)) {
                cli_print_command_help(cli.cmd);
                return CLI_EXIT_OK;
        }

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
