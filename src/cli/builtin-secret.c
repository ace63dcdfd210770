/* SPDX-License-Identifier: Apache-2.0 */
/* secret add/ls/rm: credentials the gateway injects (docs/cli.md,
 * "Credentials"); audit: the credential audit log. The value is read from a
 * file or stdin, never from the command line (where ps and shell history
 * would see it), and never printed. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"

#define SECRET_VALUE_MAX 8192

/* Reads a value of at most SECRET_VALUE_MAX bytes from fd; one trailing
 * newline (as `echo` and editors leave) is dropped. */
static int read_value(int fd, char **ret, size_t *ret_len) {
        char *buf = malloc(SECRET_VALUE_MAX + 2);
        if (!buf)
                return -ENOMEM;
        size_t n = 0;
        for (;;) {
                ssize_t k = read(fd, buf + n, SECRET_VALUE_MAX + 2 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        int e = -errno;
                        sodium_memzero(buf, SECRET_VALUE_MAX + 2);
                        free(buf);
                        return e;
                }
                if (k == 0)
                        break;
                n += (size_t)k;
                if (n == SECRET_VALUE_MAX + 2)
                        break;
        }
        if (n > 0 && buf[n - 1] == '\n')
                n--;
        if (n > 0 && buf[n - 1] == '\r')
                n--;
        if (n == 0 || n > SECRET_VALUE_MAX) {
                sodium_memzero(buf, SECRET_VALUE_MAX + 2);
                free(buf);
                return n == 0 ? -ENODATA : -EFBIG;
        }
        buf[n] = 0;
        *ret = buf;
        *ret_len = n;
        return 0;
}

/* "30d", "12h", "15m", "90s": from now, as Unix seconds; else the text
 * itself goes to airlockd (RFC 3339, which it checks). */
static json_t *expiry_json(const char *s) {
        size_t n = strlen(s);
        if (n >= 2 && n <= 9 && strspn(s, "0123456789") == n - 1 && strchr("smhd", s[n - 1])) {
                long long v = strtoll(s, NULL, 10);
                long long unit = s[n - 1] == 's' ? 1 : s[n - 1] == 'm' ? 60 : s[n - 1] == 'h' ? 3600 : 86400;
                return json_integer((json_int_t)((long long)time(NULL) + v * unit));
        }
        return json_string(s);
}

/* A comma list ("GET,POST") as a JSON array of strings (ints with as_int). */
static json_t *list_json(const char *s, bool as_int) {
        json_t *a = json_array();
        _cleanup_free_ char *copy = strdup(s);
        if (!a || !copy) {
                json_decref(a);
                return NULL;
        }
        char *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (as_int) {
                        if (strspn(t, "0123456789") != strlen(t) || strlen(t) > 5) {
                                json_decref(a);
                                return NULL;
                        }
                        json_array_append_new(a, json_integer(atoi(t)));
                } else
                        json_array_append_new(a, json_string(t));
        }
        return a;
}

static int secret_add(struct cli *cli, int argc, char **argv) {
        enum {
                OPT_VALUE_FILE = CLI_OPT_FIRST_LOCAL,
                OPT_VALUE_STDIN,
                OPT_HOST,
                OPT_PORT,
                OPT_HEADER,
                OPT_BASIC,
                OPT_METHOD,
                OPT_PATH,
                OPT_SANDBOX,
                OPT_EXPIRES,
                OPT_RATE,
                OPT_TENANT,
        };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"value-file", required_argument, NULL, OPT_VALUE_FILE},
                {"value-stdin", no_argument, NULL, OPT_VALUE_STDIN},
                {"host", required_argument, NULL, OPT_HOST},
                {"port", required_argument, NULL, OPT_PORT},
                {"header", required_argument, NULL, OPT_HEADER},
                {"basic", required_argument, NULL, OPT_BASIC},
                {"method", required_argument, NULL, OPT_METHOD},
                {"path", required_argument, NULL, OPT_PATH},
                {"sandbox", required_argument, NULL, OPT_SANDBOX},
                {"expires", required_argument, NULL, OPT_EXPIRES},
                {"rate", required_argument, NULL, OPT_RATE},
                {"tenant", required_argument, NULL, OPT_TENANT},
                {},
        };
        _cleanup_(json_decrefp) json_t *body = json_object(), *resp = NULL, *hosts = json_array();
        const char *value_file = NULL;
        bool value_stdin = false;
        struct cli_error err = {};
        int c, r, index = 0;
        if (!body || !hosts)
                return cli_fail("out of memory");
        while ((c = getopt_long(argc, argv, ":h", options, &index)) >= 0) {
                json_t *v = NULL;
                const char *key = NULL;
                switch (c) {
                case OPT_VALUE_FILE: value_file = optarg; continue;
                case OPT_VALUE_STDIN: value_stdin = true; continue;
                case OPT_HOST: {
                        _cleanup_(json_decrefp) json_t *more = list_json(optarg, false);
                        if (!more || json_array_extend(hosts, more) < 0)
                                return cli_fail("out of memory");
                        continue;
                }
                case OPT_PORT:
                        key = "ports";
                        if (!(v = list_json(optarg, true)))
                                return cli_usage_error(cli,
                                                       "secret add: --port takes port numbers (443,8443)");
                        break;
                case OPT_HEADER:
                case OPT_BASIC:
                case OPT_SANDBOX:
                case OPT_TENANT:
                        key = options[index].name; /* the member is named as the option */
                        v = json_string(optarg);
                        break;
                case OPT_METHOD:
                case OPT_PATH:
                        key = c == OPT_METHOD ? "methods" : "paths";
                        v = list_json(optarg, false);
                        break;
                case OPT_EXPIRES:
                        key = "expires_at";
                        v = expiry_json(optarg);
                        break;
                case OPT_RATE:
                        key = "rate_per_min";
                        if (strspn(optarg, "0123456789") != strlen(optarg) || !*optarg || strlen(optarg) > 6)
                                return cli_usage_error(cli, "secret add: --rate takes a number per minute");
                        v = json_integer(atoi(optarg));
                        break;
                default:
                        if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                                return r;
                        continue;
                }
                if (!v || json_object_set_new(body, key, v) < 0)
                        return cli_usage_error(cli, "secret add: bad --%s", key);
        }
        if (argc - optind != 1)
                return cli_usage_error(cli, "secret add: expected one secret name");
        if (!!value_file == value_stdin)
                return cli_usage_error(
                        cli, "secret add: give the value with one of --value-file F and --value-stdin");
        if (json_array_size(hosts) == 0)
                return cli_usage_error(cli, "secret add: --host is required (where the value may be sent)");
        int fd = value_stdin ? STDIN_FILENO : open(value_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return cli_fail("secret add: cannot open %s: %m", value_file);
        char *value = NULL;
        size_t vlen = 0;
        r = read_value(fd, &value, &vlen);
        if (!value_stdin)
                close(fd);
        if (r == -EFBIG)
                return cli_fail("secret add: the value is longer than %d bytes", SECRET_VALUE_MAX);
        if (r == -ENODATA)
                return cli_fail("secret add: the value is empty");
        if (r < 0)
                return cli_fail("secret add: cannot read the value: %s", strerror(-r));
        json_t *jv = json_stringn(value, vlen);
        sodium_memzero(value, vlen);
        free(value);
        if (!jv)
                return cli_fail("secret add: the value must be UTF-8 text");
        if (json_object_set_new(body, "value", jv) < 0 || json_object_set(body, "hosts", hosts) < 0 ||
            json_object_set_new(body, "name", json_string(argv[optind])) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        r = client_json(&cli->client, "POST", "/v1/secrets", body, &err, &resp);
        if (r < 0)
                return cli_fail_error(&err, "secret add %s", argv[optind]);
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        printf("%s\n", json_string_value(json_object_get(resp, "name")) ?: argv[optind]);
        return CLI_EXIT_OK;
}

int cmd_secret(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"NAME", "HOSTS", "EXPIRES", "CREATED"};
        static const char *const fields[] = {"name", "hosts", "expires_at", "created_at"};
        const char *verb = argc > 1 ? argv[1] : NULL;
        if (verb && strcmp(verb, "add") == 0)
                return secret_add(cli, argc - 1, argv + 1);
        if (verb && (strcmp(verb, "ls") == 0 || strcmp(verb, "list") == 0))
                return cli_list_command(cli, argc - 1, argv + 1, "secret ls", "/v1/secrets", NULL, "secrets",
                                        ARRAY_SIZE(header), header, fields);
        if (verb && strcmp(verb, "rm") == 0)
                return cli_delete_command(cli, argc - 1, argv + 1, "secret rm", "/v1/secrets/");
        return cli_usage_error(cli, "secret: expected 'add', 'ls' or 'rm'");
}

int cmd_audit(struct cli *cli, int argc, char **argv) {
        enum { OPT_SANDBOX = CLI_OPT_FIRST_LOCAL, OPT_SECRET, OPT_LIMIT };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"sandbox", required_argument, NULL, OPT_SANDBOX},
                {"secret", required_argument, NULL, OPT_SECRET},
                {"limit", required_argument, NULL, OPT_LIMIT},
                {},
        };
        static const char *const header[] = {"TIME",    "ACTOR", "ACTION", "SECRET",
                                             "SANDBOX", "HOST",  "REASON"};
        static const char *const fields[] = {"ts", "actor", "action", "secret", "sandbox", "host", "reason"};
        const char *sandbox = NULL, *secret = NULL, *limit = NULL;
        int c, r;
        while ((c = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                switch (c) {
                case OPT_SANDBOX: sandbox = optarg; break;
                case OPT_SECRET: secret = optarg; break;
                case OPT_LIMIT: limit = optarg; break;
                default:
                        if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                                return r;
                }
        }
        if (optind < argc)
                return cli_usage_error(cli, "audit: unexpected argument '%s'", argv[optind]);
        if ((sandbox && !cli_id_is_valid(sandbox)) || (secret && !cli_id_is_valid(secret)))
                return cli_usage_error(cli, "audit: --sandbox and --secret take ids and names");
        if (limit && (strspn(limit, "0123456789") != strlen(limit) || !*limit || strlen(limit) > 4))
                return cli_usage_error(cli, "audit: --limit must be a number from 1 to 1000");
        _cleanup_free_ char *path = NULL;
        /* checked ids and digits need no escaping */
        if (asprintf(&path, "/v1/audit?limit=%s%s%s%s%s", limit ?: "100", sandbox ? "&sandbox=" : "",
                     sandbox ?: "", secret ? "&secret=" : "", secret ?: "") < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        r = cli_request(cli, "GET", path, NULL, &resp, "audit");
        if (r != CLI_PROCEED)
                return r;
        return cli_print_answer_list(cli, resp, "audit", "events", ARRAY_SIZE(header), header, fields);
}
