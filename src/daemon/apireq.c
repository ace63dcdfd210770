/* SPDX-License-Identifier: Apache-2.0 */
#include "apireq.h"
#include "apierror.h"
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macros.h"
#include "proto.h"
#include "util.h"

int apireq_parse_object(const char *body, size_t len, json_t **ret, char *err) {
        json_error_t jerr;
        json_t *o;
        if (!body || len == 0)
                o = json_object();
        else
                o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
                return len == 0
                               ? -ENOMEM
                               : api_error_invalid(err,
                                                   "request body is not valid JSON: %s (line %d, column %d)",
                                                   jerr.text, jerr.line, jerr.column);
        if (!json_is_object(o)) {
                json_decref(o);
                return api_error_invalid(err, "request body must be a JSON object");
        }
        *ret = o;
        return 0;
}

/* A key as a message shows it: printable ASCII (anything else '?', so the
 * message stays valid UTF-8 and one line), cut at 64 bytes. */
static void key_for_message(const char *k, char *buf, size_t n) {
        size_t i = 0;
        for (; k[i] && i < 64 && i + 4 < n; i++)
                buf[i] = k[i] >= 0x20 && k[i] < 0x7f ? k[i] : '?';
        if (k[i])
                buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
        buf[i] = 0;
}

int apireq_check_fields(const json_t *o, const char *const *known, const char *where, bool lenient, char *err) {
        if (!json_is_object(o))
                return where ? api_error_invalid(err, "field '%s' must be an object", where)
                             : api_error_invalid(err, "request body must be a JSON object");
        if (lenient)
                return 0;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                if (strv_contains(known, k))
                        continue;
                char shown[72];
                key_for_message(k, shown, sizeof shown);
                return where ? api_error_invalid(err, "unknown field \"%s\" in \"%s\"", shown, where)
                             : api_error_invalid(err, "unknown field \"%s\" in the request body", shown);
        }
        return 0;
}

/* A create's "snapshot_policy" and its tiers: retention_policy_parse()
 * refuses unknown keys as well, but this names them as every other
 * unknown field is named. Wrong types are left to it. */
static int check_create_nested(const json_t *o, bool lenient, char *err) {
        json_t *sp = json_object_get(o, "snapshot_policy");
        if (!json_is_object(sp))
                return 0;
        int r = apireq_check_fields(sp, retention_policy_keys, "snapshot_policy", lenient, err);
        if (r < 0)
                return r;
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(sp, "tiers"), i, t) {
                if (!json_is_object(t))
                        continue;
                char where[48];
                snprintf(where, sizeof where, "snapshot_policy.tiers[%zu]", i);
                if ((r = apireq_check_fields(t, retention_tier_keys, where, lenient, err)) < 0)
                        return r;
        }
        return 0;
}

/* The fields each body's handler reads: one more here is one more the API
 * accepts. */
static const struct {
        const char *const *fields;
        int (*check_nested)(const json_t *o, bool lenient, char *err);
} bodies[_APIREQ_BODY_MAX] = {
        [APIREQ_BODY_NONE] = { (const char *const[]){ NULL } },
        /* "tenant" is read by the handler (api.c), the rest by apireq_parse_create() */
        [APIREQ_BODY_CREATE] = { (const char *const[]){ "template", "image", "env", "metadata", "snapshot_policy",
                                                        "idle_timeout_s", "recovery", "tenant", "network", "secrets",
                                                        "node", "node_labels", "memory_mib", "vcpus", "volumes",
                                                        "template_wait_s", NULL },
                                 check_create_nested },
        [APIREQ_BODY_EXEC] = { (const char *const[]){ "cmd", "env", "cwd", "stdin", "timeout_s", NULL } },
        [APIREQ_BODY_SESSION] = { (const char *const[]){ "cmd", "env", "cwd", "pty", "rows", "cols", NULL } },
        [APIREQ_BODY_STDIN] = { (const char *const[]){ "data", "text", "close", NULL } },
        [APIREQ_BODY_SIGNAL] = { (const char *const[]){ "signal", NULL } },
        [APIREQ_BODY_RESIZE] = { (const char *const[]){ "rows", "cols", NULL } },
        [APIREQ_BODY_ROLLBACK] = { (const char *const[]){ "snapshot", NULL } },
        [APIREQ_BODY_SNAPSHOT] = { (const char *const[]){ "kind", NULL } },
        [APIREQ_BODY_NAME] = { (const char *const[]){ "name", NULL } },
        [APIREQ_BODY_IMAGE] = { (const char *const[]){ "name", "snapshot", NULL } },
        [APIREQ_BODY_TENANT] = { (const char *const[]){ "name", "network", NULL } },
        [APIREQ_BODY_JOIN_TOKEN] = { (const char *const[]){ "ttl_s", NULL } },
        /* netpolicy_parse() is as strict inside the rules */
        [APIREQ_BODY_NETWORK] = { (const char *const[]){ "mode", "allow", "deny", NULL } },
        [APIREQ_BODY_SECRET] = { (const char *const[]){ "name", "value", "hosts", "ports", "header", "basic",
                                                        "methods", "paths", "sandbox", "expires_at", "rate_per_min",
                                                        "tenant", NULL } },
        [APIREQ_BODY_FORK] = { (const char *const[]){ "secrets", NULL } },
        [APIREQ_BODY_KMS] = { (const char *const[]){ "kind", "label", "generate", NULL } },
        /* lib/tplspec checks the spec itself */
        [APIREQ_BODY_TEMPLATE] = { (const char *const[]){ "spec", "dockerfile", "name", "memory_mib", "vcpus",
                                                          "disk_mib", NULL } },
        [APIREQ_BODY_VOLUME] = { (const char *const[]){ "name", "size", "node", NULL } },
        [APIREQ_BODY_WEBHOOK] = { (const char *const[]){ "url", "events", "secret", "tenant", NULL } },
};

int apireq_check_body(const json_t *o, enum apireq_body kind, bool lenient, char *err) {
        if ((unsigned) kind >= _APIREQ_BODY_MAX)
                return api_error_invalid(err, "no such kind of request body");
        if (!o)
                return 0;
        int r = apireq_check_fields(o, bodies[kind].fields, NULL, lenient, err);
        if (r < 0 || !bodies[kind].check_nested)
                return r;
        return bodies[kind].check_nested(o, lenient, err);
}

static bool env_name_is_valid(const char *k) {
        size_t n = strlen(k);
        if (n == 0 || n > 256 || (k[0] >= '0' && k[0] <= '9'))
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = k[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
                        return false;
        }
        return true;
}

int apireq_check_env(const json_t *env, const char *field, char *err) {
        if (!json_is_object(env))
                return api_error_invalid(err, "field '%s' must be an object of strings", field);
        if (json_object_size(env) > APIREQ_ENV_MAX)
                return api_error_invalid(err, "field '%s' has more than %d entries", field, APIREQ_ENV_MAX);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) env, k, v) {
                if (!env_name_is_valid(k))
                        return api_error_invalid(err, "field '%s': '%.64s' is not a valid variable name",
                                                 field, k);
                if (!json_is_string(v))
                        return api_error_invalid(err, "field '%s': value of '%.64s' must be a string", field,
                                                 k);
        }
        return 0;
}

static int check_metadata(const json_t *md, char *err) {
        if (!json_is_object(md))
                return api_error_invalid(err, "field 'metadata' must be an object of strings");
        if (json_object_size(md) > APIREQ_METADATA_MAX)
                return api_error_invalid(err, "field 'metadata' has more than %d entries",
                                         APIREQ_METADATA_MAX);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) md, k, v) {
                if (strlen(k) == 0 || strlen(k) > 128)
                        return api_error_invalid(err, "field 'metadata': keys must be 1..128 bytes");
                if (!json_is_string(v) || json_string_length(v) > APIREQ_METADATA_VALUE_MAX)
                        return api_error_invalid(
                                err,
                                "field 'metadata': value of '%.64s' must be a string of at most %d bytes", k,
                                APIREQ_METADATA_VALUE_MAX);
        }
        return 0;
}

int apireq_check_cmd(const json_t *cmd, char *err) {
        static const char msg[] = "field 'cmd' must be a non-empty array of strings";
        if (!json_is_array(cmd) || json_array_size(cmd) == 0)
                return api_error_invalid(err, "%s", msg);
        if (json_array_size(cmd) > APIREQ_CMD_MAX_ARGS)
                return api_error_invalid(err, "field 'cmd' has more than %d elements", APIREQ_CMD_MAX_ARGS);
        size_t i;
        json_t *v;
        json_array_foreach(cmd, i, v) {
                if (!json_is_string(v))
                        return api_error_invalid(err, "%s", msg);
        }
        if (json_string_length(json_array_get(cmd, 0)) == 0)
                return api_error_invalid(err, "field 'cmd': the program name (cmd[0]) must not be empty");
        return 0;
}

int apireq_check_path(const char *path, size_t len, char *err) {
        if (!path || len == 0)
                return api_error_invalid(err, "path must not be empty");
        if (len > APIREQ_PATH_MAX)
                return api_error_invalid(err, "path is longer than %d bytes", APIREQ_PATH_MAX);
        if (memchr(path, 0, len))
                return api_error_invalid(err, "path must not contain NUL bytes");
        if (path[0] != '/')
                return api_error_invalid(err, "path must be absolute (start with '/')");
        if (path_check(path, len) < 0)
                return api_error_invalid(err, "path must not contain '..' components");
        return 0;
}

/* Optional string field; *ret stays NULL when absent. */
static int opt_string(const json_t *o, const char *field, char **ret, char *err) {
        json_t *v = json_object_get(o, field);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v))
                return api_error_invalid(err, "field '%s' must be a string", field);
        char *s = strndup(json_string_value(v), json_string_length(v));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* Optional env object; an empty object when absent. */
static int opt_env(const json_t *o, json_t **ret, char *err) {
        json_t *v = json_object_get(o, "env");
        if (!v || json_is_null(v)) {
                json_t *e = json_object();
                if (!e)
                        return -ENOMEM;
                *ret = e;
                return 0;
        }
        int r = apireq_check_env(v, "env", err);
        if (r < 0)
                return r;
        *ret = json_incref(v);
        return 0;
}

static int opt_cwd(const json_t *o, char **ret, char *err) {
        _cleanup_free_ char *cwd = NULL;
        int r = opt_string(o, "cwd", &cwd, err);
        if (r < 0)
                return r;
        /* none: the node's default (the template's WORKDIR, else
         * /root for root, the user's home for a user) */
        if (!cwd)
                return 0;
        char perr[API_ERRMSG_MAX];
        if (apireq_check_path(cwd, strlen(cwd), perr) < 0)
                return api_error_invalid(err, "field 'cwd': %s", perr);
        *ret = TAKE_PTR(cwd);
        return 0;
}

static int opt_uint(const json_t *o, const char *field, uint32_t min, uint32_t max, uint32_t def, uint32_t *ret,
                    char *err) {
        json_t *v = json_object_get(o, field);
        if (!v || json_is_null(v)) {
                *ret = def;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < (json_int_t) min || json_integer_value(v) > (json_int_t) max)
                return api_error_invalid(err, "field '%s' must be an integer from %u to %u", field, min,
                                         max);
        *ret = (uint32_t) json_integer_value(v);
        return 0;
}

static int opt_bool(const json_t *o, const char *field, bool *ret, char *err) {
        json_t *v = json_object_get(o, field);
        if (!v || json_is_null(v)) {
                *ret = false;
                return 0;
        }
        if (!json_is_boolean(v))
                return api_error_invalid(err, "field '%s' must be true or false", field);
        *ret = json_is_true(v);
        return 0;
}

int apireq_parse_create(const json_t *o, struct apireq_create *ret, char *err) {
        _cleanup_(apireq_create_release) struct apireq_create c = { 0 };
        int r = opt_string(o, "template", &c.template_name, err);
        if (r < 0 || (r = opt_string(o, "image", &c.image, err)) < 0)
                return r;
        if (c.image && c.template_name)
                return api_error_invalid(err, "give 'template' or 'image', not both");
        if (c.image && !name_is_valid(c.image))
                return api_error_invalid(err, "field 'image' must be 1..64 characters of [A-Za-z0-9._-]");
        /* made from an image: the handler takes the image's template */
        if (!c.template_name && !(c.template_name = strdup(APIREQ_DEFAULT_TEMPLATE)))
                return -ENOMEM;
        if (!name_is_valid(c.template_name))
                return api_error_invalid(err, "field 'template' must be 1..64 characters of [A-Za-z0-9._-]");
        r = opt_env(o, &c.env, err);
        if (r < 0)
                return r;
        json_t *md = json_object_get(o, "metadata");
        if (md && !json_is_null(md)) {
                r = check_metadata(md, err);
                if (r < 0)
                        return r;
                c.metadata = json_incref(md);
        } else if (!(c.metadata = json_object()))
                return -ENOMEM;
        json_t *sp = json_object_get(o, "snapshot_policy");
        if (sp && !json_is_null(sp)) {
                if (!json_is_object(sp))
                        return api_error_invalid(err, "field 'snapshot_policy' must be an object");
                c.snapshot_policy = json_incref(sp);
        }
        json_t *idle = json_object_get(o, "idle_timeout_s");
        if (idle && !json_is_null(idle)) {
                if (!json_is_integer(idle) || json_integer_value(idle) < 0 ||
                    json_integer_value(idle) > CONFIG_IDLE_TIMEOUT_S_MAX)
                        return api_error_invalid(
                                err, "field 'idle_timeout_s' must be an integer from 0 (never) to %d",
                                CONFIG_IDLE_TIMEOUT_S_MAX);
                c.has_idle_timeout = true;
                c.idle_timeout_s = json_integer_value(idle);
        }
        json_t *rec = json_object_get(o, "recovery");
        if (rec && !json_is_null(rec)) {
                const char *v = json_string_value(rec);
                if (!v || (strcmp(v, "boot") != 0 && strcmp(v, "checkpoint") != 0))
                        return api_error_invalid(
                                err,
                                "field 'recovery' must be \"boot\" (after a crash, boot the disk: nothing "
                                "acknowledged is lost) or \"checkpoint\" (resume the newest full snapshot: "
                                "processes kept, later writes lost)");
                c.recovery = strcmp(v, "boot") == 0 ? "boot" : "checkpoint";
        }
        json_t *net = json_object_get(o, "network");
        if (net && !json_is_null(net)) {
                if (!json_is_object(net))
                        return api_error_invalid(err, "field 'network' must be an object");
                c.network = json_incref(net);
        }
        /* a size within the template's: the node checks it against that */
        json_t *mem = json_object_get(o, "memory_mib"), *cpus = json_object_get(o, "vcpus");
        if (mem && !json_is_null(mem)) {
                if (!json_is_integer(mem) || json_integer_value(mem) < APIREQ_MEMORY_MIN_MIB ||
                    json_integer_value(mem) > (1 << 20))
                        return api_error_invalid(err,
                                                 "field 'memory_mib' must be an integer from %d (MiB; at "
                                                 "most the template's)",
                                                 APIREQ_MEMORY_MIN_MIB);
                c.memory_mib = json_integer_value(mem);
        }
        if (cpus && !json_is_null(cpus)) {
                if (!json_is_integer(cpus) || json_integer_value(cpus) < 1 || json_integer_value(cpus) > 256)
                        return api_error_invalid(
                                err, "field 'vcpus' must be an integer from 1 (at most the template's)");
                c.vcpus = json_integer_value(cpus);
        }
        json_t *wait = json_object_get(o, "template_wait_s");
        if (wait && !json_is_null(wait)) {
                if (!json_is_integer(wait) || json_integer_value(wait) < 1 ||
                    json_integer_value(wait) > APIREQ_TEMPLATE_WAIT_MAX_S)
                        return api_error_invalid(
                                err, "field 'template_wait_s' must be an integer from 1 to %d (seconds)",
                                APIREQ_TEMPLATE_WAIT_MAX_S);
                c.template_wait_s = json_integer_value(wait);
        }
        /* [{"name","path","read_only"?}]: the volumes (api-volumes.c
         * resolves them, the node and the guest check the paths again) */
        json_t *vols = json_object_get(o, "volumes");
        if (vols && !json_is_null(vols)) {
                size_t i;
                json_t *v;
                if (!json_is_array(vols) || json_array_size(vols) > APIREQ_VOLUMES_MAX)
                        return api_error_invalid(err,
                                                 "field 'volumes' must be an array of at most %d volumes",
                                                 APIREQ_VOLUMES_MAX);
                json_array_foreach(vols, i, v) {
                        json_t *ro = json_object_get(v, "read_only");
                        const char *name = json_string_value(json_object_get(v, "name"));
                        const char *path = json_string_value(json_object_get(v, "path"));
                        if (!json_is_object(v) || json_object_size(v) != 2u + (ro ? 1u : 0u) || !name ||
                            !name_is_valid(name) || !path || (ro && !json_is_boolean(ro)))
                                return api_error_invalid(
                                        err,
                                        "volumes[%zu] must be {\"name\": a volume's name or id, \"path\": "
                                        "where it is mounted, \"read_only\"?: bool}",
                                        i);
                        if (!proto_volume_path_is_allowed(path))
                                return api_error_invalid(
                                        err,
                                        "volumes[%zu]: '%.128s' is not a path a volume may be mounted at: "
                                        "absolute, plain, not / and not under /bin /boot /dev /etc /lib* "
                                        "/proc /run /sbin /sys /usr (the system's own)",
                                        i, path);
                }
                c.volumes = json_incref(vols);
        }
        if ((r = opt_string(o, "node", &c.node, err)) < 0)
                return r;
        if (c.node && (strlen(c.node) > 63 || !name_is_valid(c.node)))
                return api_error_invalid(err, "field 'node' must be a node's name (see GET /v1/nodes)");
        json_t *labels = json_object_get(o, "node_labels");
        if (labels && !json_is_null(labels)) {
                const char *k;
                json_t *v;
                if (!json_is_object(labels) || json_object_size(labels) > 16)
                        return api_error_invalid(
                                err, "field 'node_labels' must be an object of at most 16 strings");
                json_object_foreach(labels, k, v) if (
                        !json_is_string(v) || strlen(k) > 63 ||
                        strlen(json_string_value(v)) >
                                63) return api_error_invalid(err, "field 'node_labels' must map label keys "
                                                                  "to strings of at most 63 characters");
                c.node_labels = json_incref(labels);
        }
        *ret = c;
        c = (struct apireq_create){ 0 };
        return 0;
}

int apireq_check_snapshot_policy(const json_t *policy, const struct retention_policy *base, char **ret_text,
                                 char *err) {
        if (!policy) {
                *ret_text = NULL;
                return 0;
        }
        struct retention_policy p;
        _cleanup_free_ char *msg = NULL;
        int r = retention_policy_parse((json_t *) policy, base, &p, &msg);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return api_error_invalid(err, "field 'snapshot_policy': %s",
                                         msg ? msg : "invalid snapshot policy");
        char *text = json_dumps(policy, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text)
                return -ENOMEM;
        *ret_text = text;
        return 0;
}

void apireq_create_release(struct apireq_create *c) {
        if (!c)
                return;
        free(c->template_name);
        free(c->image);
        json_decref(c->env);
        json_decref(c->metadata);
        json_decref(c->snapshot_policy);
        json_decref(c->network);
        free(c->node);
        json_decref(c->node_labels);
        json_decref(c->volumes);
        *c = (struct apireq_create){ 0 };
}

int apireq_parse_exec(const json_t *o, uint32_t max_timeout_s, struct apireq_exec *ret, char *err) {
        _cleanup_(apireq_exec_release) struct apireq_exec e = { 0 };
        json_t *cmd = json_object_get(o, "cmd");
        int r = apireq_check_cmd(cmd, err);
        if (r < 0)
                return r;
        e.cmd = json_incref(cmd);
        if ((r = opt_env(o, &e.env, err)) < 0 || (r = opt_cwd(o, &e.cwd, err)) < 0 ||
            (r = opt_string(o, "stdin", &e.stdin_data, err)) < 0)
                return r;
        if (e.stdin_data && strlen(e.stdin_data) != json_string_length(json_object_get(o, "stdin")))
                return api_error_invalid(
                        err,
                        "field 'stdin' must not contain NUL characters; use a session for binary input");
        r = opt_uint(o, "timeout_s", 1, max_timeout_s, MIN((uint32_t) APIREQ_DEFAULT_EXEC_TIMEOUT_S, max_timeout_s),
                     &e.timeout_s, err);
        if (r < 0)
                return r;
        *ret = e;
        e = (struct apireq_exec){ 0 };
        return 0;
}

void apireq_exec_release(struct apireq_exec *e) {
        if (!e)
                return;
        json_decref(e->cmd);
        json_decref(e->env);
        free(e->cwd);
        free(e->stdin_data);
        *e = (struct apireq_exec){ 0 };
}

int apireq_parse_session(const json_t *o, struct apireq_session *ret, char *err) {
        _cleanup_(apireq_session_release) struct apireq_session s = { 0 };
        json_t *cmd = json_object_get(o, "cmd");
        int r = apireq_check_cmd(cmd, err);
        if (r < 0)
                return r;
        s.cmd = json_incref(cmd);
        if ((r = opt_env(o, &s.env, err)) < 0 || (r = opt_cwd(o, &s.cwd, err)) < 0 ||
            (r = opt_bool(o, "pty", &s.pty, err)) < 0 || (r = opt_uint(o, "rows", 1, 1000, 24, &s.rows, err)) < 0 ||
            (r = opt_uint(o, "cols", 1, 1000, 80, &s.cols, err)) < 0)
                return r;
        *ret = s;
        s = (struct apireq_session){ 0 };
        return 0;
}

void apireq_session_release(struct apireq_session *s) {
        if (!s)
                return;
        json_decref(s->cmd);
        json_decref(s->env);
        free(s->cwd);
        *s = (struct apireq_session){ 0 };
}

int apireq_base64_decode(const char *s, size_t len, size_t max, uint8_t **ret, size_t *ret_len) {
        if (!s)
                return -EINVAL;
        size_t cap = len / 4 * 3 + 3;
        if (len % 4 != 0)
                return -EINVAL;
        /* padding can shave at most two bytes off the bound */
        if (cap - 3 > max + 2)
                return -EFBIG;
        _cleanup_free_ uint8_t *buf = malloc(cap ? cap : 1);
        if (!buf)
                return -ENOMEM;
        size_t n = 0;
        const char *end = NULL;
        if (sodium_base642bin(buf, cap, s, len, NULL, &n, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
            end != s + len)
                return -EINVAL;
        if (n > max)
                return -EFBIG;
        *ret = TAKE_PTR(buf);
        *ret_len = n;
        return 0;
}

int apireq_base64_encode(const uint8_t *data, size_t len, char **ret) {
        size_t n = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
        char *s = malloc(n);
        if (!s)
                return -ENOMEM;
        sodium_bin2base64(s, n, data, len, sodium_base64_VARIANT_ORIGINAL);
        *ret = s;
        return 0;
}

int apireq_parse_stdin(const json_t *o, struct apireq_stdin *ret, char *err) {
        struct apireq_stdin s = { 0 };
        json_t *data = json_object_get(o, "data"), *text = json_object_get(o, "text");
        int r;
        if (data && !json_is_null(data) && text && !json_is_null(text))
                return api_error_invalid(err, "give either 'data' or 'text', not both");
        if (data && !json_is_null(data)) {
                if (!json_is_string(data))
                        return api_error_invalid(err, "field 'data' must be a base64 string");
                r = apireq_base64_decode(json_string_value(data), json_string_length(data), APIREQ_STDIN_MAX, &s.data,
                                         &s.len);
                if (r == -EFBIG) {
                        api_error_invalid(err, "field 'data' decodes to more than %u bytes",
                                          APIREQ_STDIN_MAX);
                        return -EFBIG;
                }
                if (r < 0)
                        return r == -ENOMEM ? r : api_error_invalid(err, "field 'data' is not valid base64");
        } else if (text && !json_is_null(text)) {
                if (!json_is_string(text))
                        return api_error_invalid(err, "field 'text' must be a string");
                if (json_string_length(text) > APIREQ_STDIN_MAX) {
                        api_error_invalid(err, "field 'text' is longer than %u bytes", APIREQ_STDIN_MAX);
                        return -EFBIG;
                }
                s.len = json_string_length(text);
                if (s.len > 0) {
                        s.data = malloc(s.len);
                        if (!s.data)
                                return -ENOMEM;
                        memcpy(s.data, json_string_value(text), s.len);
                }
        }
        r = opt_bool(o, "close", &s.close, err);
        if (r < 0) {
                free(s.data);
                return r;
        }
        if (s.len == 0 && !s.close) {
                free(s.data);
                return api_error_invalid(err, "nothing to do: give 'data', 'text' or \"close\":true");
        }
        if (s.len == 0) {
                free(s.data);
                s.data = NULL;
        }
        *ret = s;
        return 0;
}

void apireq_stdin_release(struct apireq_stdin *s) {
        if (!s)
                return;
        free(s->data);
        *s = (struct apireq_stdin){ 0 };
}

static const struct {
        const char *name;
        int sig;
} signal_names[] = {
        { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT }, { "KILL", SIGKILL },
        { "TERM", SIGTERM }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "STOP", SIGSTOP },
        { "CONT", SIGCONT }, { "WINCH", SIGWINCH }, { "ALRM", SIGALRM }, { "PIPE", SIGPIPE },
        { "TSTP", SIGTSTP }, { "ABRT", SIGABRT },
};

int apireq_signal_from_name(const char *name) {
        if (!name)
                return -EINVAL;
        if (strncasecmp(name, "SIG", 3) == 0)
                name += 3;
        for (size_t i = 0; i < ARRAY_SIZE(signal_names); i++)
                if (strcasecmp(name, signal_names[i].name) == 0)
                        return signal_names[i].sig;
        return -EINVAL;
}

int apireq_parse_resize(const json_t *o, unsigned *ret_rows, unsigned *ret_cols, char *err) {
        static const char *const keys[] = { "rows", "cols" };
        unsigned v[2];
        for (size_t i = 0; i < 2; i++) {
                json_t *n = json_object_get(o, keys[i]);
                if (!json_is_integer(n) || json_integer_value(n) < 1 || json_integer_value(n) > APIREQ_TERMINAL_MAX)
                        return api_error_invalid(err, "field '%s' must be an integer from 1 to %d", keys[i],
                                                 APIREQ_TERMINAL_MAX);
                v[i] = (unsigned) json_integer_value(n);
        }
        *ret_rows = v[0];
        *ret_cols = v[1];
        return 0;
}

int apireq_parse_signal(const json_t *o, int *ret, char *err) {
        json_t *v = json_object_get(o, "signal");
        if (json_is_integer(v)) {
                json_int_t n = json_integer_value(v);
                if (n < 1 || n > 64)
                        return api_error_invalid(err, "field 'signal' must be a signal number from 1 to 64");
                *ret = (int) n;
                return 0;
        }
        if (json_is_string(v)) {
                int sig = apireq_signal_from_name(json_string_value(v));
                if (sig < 0)
                        return api_error_invalid(err, "field 'signal': unknown signal name '%.32s'",
                                                 json_string_value(v));
                *ret = sig;
                return 0;
        }
        return api_error_invalid(err,
                                 "field 'signal' must be a number or a name like \"TERM\" or \"SIGKILL\"");
}
