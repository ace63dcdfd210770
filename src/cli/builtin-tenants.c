/* SPDX-License-Identifier: Apache-2.0 */
/* tenants, keys, signing-key: tenants, their API keys and the capability
 * signing key (the admin token's business). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builtin.h"
#include "cli-util.h"

static int list_and_print(struct cli *cli, const char *path, const char *key, size_t ncols,
                          const char *const *header, const char *const *fields) {
        _cleanup_(json_decrefp) json_t *resp = NULL;
        int r = cli_request(cli, "GET", path, NULL, &resp, "%s", cli->cmd->name);
        if (r != CLI_PROCEED)
                return r;
        return cli_print_answer_list(cli, resp, cli->cmd->name, key, ncols, header, fields);
}

/* The answer's member print, or echo (see cli_call_and_print()). */
static int call_and_print(struct cli *cli, const char *method, const char *path, const json_t *body, const char *print,
                          const char *echo) {
        return cli_call_and_print(cli, cli->cmd->name, method, path, body, print, echo);
}

int cmd_tenants(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"ID", "NAME", "CREATED"};
        static const char *const fields[] = {"id", "name", "created_at"};
        const char *verb, *arg;
        int r = cli_parse_verb(cli, argc, argv, &verb, &arg);
        if (r != CLI_PROCEED)
                return r;
        if (!verb)
                return list_and_print(cli, "/v1/tenants", "tenants", ARRAY_SIZE(header), header, fields);
        if (!arg)
                return cli_usage_error(cli, "tenants: '%s' needs an argument", verb);
        /* names and ids share the id alphabet: no escaping needed */
        if (!cli_id_is_valid(arg))
                return cli_usage_error(cli, "tenants: invalid %s '%s'", strcmp(verb, "rm") == 0 ? "id" : "name", arg);
        if (strcmp(verb, "create") == 0) {
                _cleanup_(json_decrefp) json_t *body = json_pack("{s:s}", "name", arg);
                if (!body)
                        return cli_fail("out of memory");
                return call_and_print(cli, "POST", "/v1/tenants", body, "id", NULL);
        }
        if (strcmp(verb, "rm") == 0) {
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "/v1/tenants/%s", arg) < 0)
                        return cli_fail("out of memory");
                return call_and_print(cli, "DELETE", path, NULL, NULL, arg);
        }
        return cli_usage_error(cli, "tenants: unknown subcommand '%s' (create, rm)", verb);
}

/* keys kms TENANT [rotate | revoke | set local | set pkcs11 LABEL [new]]:
 * the tenant's key-encryption key, which wraps the data keys of its sealed
 * images (docs/storage.md). */
static int keys_kms(struct cli *cli, const char *tenant, const char *verb, int n_more, char **more) {
        if (!tenant || !cli_id_is_valid(tenant))
                return cli_usage_error(cli, "keys kms: needs a tenant id");
        _cleanup_free_ char *path = NULL;
        if (!verb) {
                if (asprintf(&path, "/v1/tenants/%s/kms", tenant) < 0)
                        return cli_fail("out of memory");
                return call_and_print(cli, "GET", path, NULL, "state", NULL); /* --json: the version too */
        }
        if (strcmp(verb, "set") == 0) {
                const char *kind = n_more > 0 ? more[0] : NULL;
                bool pkcs11 = kind && strcmp(kind, "pkcs11") == 0;
                if (!kind || (!pkcs11 && strcmp(kind, "local") != 0) || (pkcs11 && n_more < 2) ||
                    (!pkcs11 && n_more > 1) || n_more > 3 || (n_more == 3 && strcmp(more[2], "new") != 0))
                        return cli_usage_error(cli, "keys kms: set local | set pkcs11 LABEL [new]");
                _cleanup_(json_decrefp) json_t *body =
                        pkcs11 ? json_pack("{s:s, s:s, s:b}", "kind", "pkcs11", "label", more[1], "generate", n_more == 3)
                               : json_pack("{s:s}", "kind", "local");
                if (!body || asprintf(&path, "/v1/tenants/%s/kms", tenant) < 0)
                        return cli_fail("out of memory");
                return call_and_print(cli, "PUT", path, body, "state", NULL);
        }
        if (n_more > 0)
                return cli_usage_error(cli, "keys kms: unexpected argument '%s'", more[0]);
        if (strcmp(verb, "rotate") != 0 && strcmp(verb, "revoke") != 0)
                return cli_usage_error(cli, "keys kms: unknown subcommand '%s' (rotate, revoke, set)", verb);
        if (asprintf(&path, "/v1/tenants/%s/kms/%s", tenant, verb) < 0)
                return cli_fail("out of memory");
        return call_and_print(cli, "POST", path, NULL, "state", NULL);
}

int cmd_keys(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"ID", "NAME", "CREATED"};
        static const char *const fields[] = {"id", "name", "created_at"};
        int r = cli_parse_plain(cli, argc, argv, 1, 6);
        if (r != CLI_PROCEED)
                return r;
        int n = argc - optind;
        if (strcmp(argv[optind], "kms") == 0) /* no tenant id is "kms" */
                return keys_kms(cli, n > 1 ? argv[optind + 1] : NULL, n > 2 ? argv[optind + 2] : NULL,
                                n > 3 ? n - 3 : 0, argv + optind + 3);
        if (n > 3)
                return cli_usage_error(cli, "%s: unexpected argument '%s'", cli->cmd->name, argv[optind + 3]);
        const char *tenant = argv[optind];
        const char *verb = n > 1 ? argv[optind + 1] : NULL, *arg = n > 2 ? argv[optind + 2] : NULL;
        if (!cli_id_is_valid(tenant))
                return cli_usage_error(cli, "keys: invalid tenant id '%s'", tenant);
        if (arg && !cli_id_is_valid(arg))
                return cli_usage_error(cli, "keys: invalid %s '%s'", strcmp(verb, "rm") == 0 ? "key id" : "name", arg);
        _cleanup_free_ char *path = NULL;
        if (!verb || strcmp(verb, "create") == 0) {
                if (asprintf(&path, "/v1/tenants/%s/keys", tenant) < 0)
                        return cli_fail("out of memory");
                if (!verb)
                        return list_and_print(cli, path, "keys", ARRAY_SIZE(header), header, fields);
                _cleanup_(json_decrefp) json_t *body = arg ? json_pack("{s:s}", "name", arg) : json_object();
                if (!body)
                        return cli_fail("out of memory");
                /* the key is shown this once: print it alone, for scripts */
                return call_and_print(cli, "POST", path, body, "key", NULL);
        }
        if (strcmp(verb, "rm") == 0) {
                if (!arg)
                        return cli_usage_error(cli, "keys: rm needs a key id");
                if (asprintf(&path, "/v1/keys/%s", arg) < 0)
                        return cli_fail("out of memory");
                return call_and_print(cli, "DELETE", path, NULL, NULL, arg);
        }
        return cli_usage_error(cli, "keys: unknown subcommand '%s' (create, rm)", verb);
}

/* signing-key [rotate]: the key that signs execution capabilities. */
int cmd_signing_key(struct cli *cli, int argc, char **argv) {
        int r = cli_parse_plain(cli, argc, argv, 0, 1);
        if (r != CLI_PROCEED)
                return r;
        const char *verb = argc - optind > 0 ? argv[optind] : NULL;
        if (!verb)
                return call_and_print(cli, "GET", "/v1/capability-keys", NULL, "current", NULL);
        if (strcmp(verb, "rotate") == 0)
                return call_and_print(cli, "POST", "/v1/capability-keys", NULL, "current", NULL);
        return cli_usage_error(cli, "signing-key: unknown subcommand '%s' (rotate)", verb);
}
