/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the parser of credential sets (lib/credset: what the node takes in
 * sandbox.secrets.set and the gateway takes from the node): the bytes as
 * the set's JSON text. An accepted set has at most CREDSET_MAX entries,
 * each with a valid name, placeholder, value and 1..16 hosts, ports in
 * range (443 when none), a header that frames nothing, a template with
 * {value} once or a basic user without ':', methods in capitals and paths
 * from '/'; a refused one has a message that never quotes a value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "credset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct credset_entry *c) {
        if (!c->name || !c->name[0] || strlen(c->name) > CREDSET_NAME_MAX || !c->placeholder ||
            strlen(c->placeholder) != CREDSET_PLACEHOLDER_LEN || !credset_value_ok(c->value, c->value_len))
                abort();
        if (c->n_hosts < 1 || c->n_hosts > CREDSET_HOSTS_MAX || c->n_ports < 1 || c->n_ports > CREDSET_PORTS_MAX)
                abort();
        for (size_t i = 0; i < c->n_ports; i++)
                if (c->ports[i] == 0)
                        abort();
        if (!c->header || !credset_header_name_ok(c->header, strlen(c->header)))
                abort();
        if ((c->template == NULL) == (c->user == NULL))
                abort();
        if (c->template && (!strstr(c->template, "{value}") || strstr(strstr(c->template, "{value}") + 1, "{value}")))
                abort();
        if (c->user && strchr(c->user, ':'))
                abort();
        for (size_t i = 0; i < c->n_paths; i++)
                if (c->paths[i][0] != '/' || strpbrk(c->paths[i], " ?#\r\n"))
                        abort();
        for (size_t i = 0; i < c->n_methods; i++)
                for (const char *m = c->methods[i]; *m; m++)
                        if (*m < 'A' || *m > 'Z')
                                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_t *a = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
        if (!a)
                return 0;
        char err[256] = "";
        struct credset_entry set[CREDSET_MAX];
        size_t n = 0;
        if (credset_parse(a, set, &n, err, sizeof err) < 0) {
                if (!err[0])
                        abort();
                size_t i;
                json_t *o;
                json_array_foreach(a, i, o) {
                        const char *v = json_string_value(json_object_get(o, "value"));
                        if (v && strlen(v) >= 8 && strstr(err, v))
                                abort();
                }
        } else {
                if (n != json_array_size(a) || n > CREDSET_MAX)
                        abort();
                for (size_t i = 0; i < n; i++) {
                        check(&set[i]);
                        for (size_t j = 0; j < i; j++)
                                if (strcmp(set[i].name, set[j].name) == 0 ||
                                    strcmp(set[i].placeholder, set[j].placeholder) == 0)
                                        abort();
                }
        }
        json_decref(a);
        return 0;
}
