/* SPDX-License-Identifier: Apache-2.0 */
/* Template specs, JSON and Dockerfile: see tplspec.h. */
#include "tplspec.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define DEFAULT_READY_TIMEOUT_S 60

static int fail(char *err, const char *fmt, ...) _printf_(2, 3);
static int fail(char *err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, TPLSPEC_ERR_MAX, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static void strv_freep(char ***v) {
        strv_free(*v);
}

static void step_release(struct tplspec_step *st) {
        strv_free(st->argv);
        strv_free(st->srcs);
        free(st->dst);
        free(st->key);
        free(st->value);
        free(st->path);
}

void tplspec_free(struct tplspec *s) {
        if (!s)
                return;
        free(s->name);
        free(s->from);
        strv_free(s->packages);
        for (size_t i = 0; i < s->n_steps; i++)
                step_release(&s->steps[i]);
        free(s->steps);
        strv_free(s->start);
        strv_free(s->ready_cmd);
        free(s);
}

/* ---- checks ---- */

static bool text_ok(const char *s, size_t max) {
        size_t n = strnlen(s, max + 1);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20 && s[i] != '\t' && s[i] != '\n')
                        return false;
        return true;
}

/* 1..max of [a-z0-9-], starting with a letter or digit: a template's
 * name (63), a Debian suite's (32). */
static bool slug_ok(const char *s, size_t max) {
        size_t n = strlen(s);
        if (n == 0 || n > max || !(islower((unsigned char) s[0]) || isdigit((unsigned char) s[0])))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!islower((unsigned char) s[i]) && !isdigit((unsigned char) s[i]) && s[i] != '-')
                        return false;
        return true;
}

static bool template_name_ok(const char *s) {
        return slug_ok(s, 63);
}

bool tplspec_suite_ok(const char *s) {
        return slug_ok(s, 32);
}

/* Debian's rule: [a-z0-9][a-z0-9+.-]+ */
bool tplspec_package_ok(const char *s) {
        size_t n = strlen(s);
        if (n < 2 || n > 128 || !(islower((unsigned char) s[0]) || isdigit((unsigned char) s[0])))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!islower((unsigned char) s[i]) && !isdigit((unsigned char) s[i]) && !strchr("+.-", s[i]))
                        return false;
        return true;
}

static bool path_ok(const char *s, bool absolute, bool relative);

bool tplspec_oci_ok(const char *s) {
        size_t n = strlen(s);
        if (n < 5 || n > 512)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] <= 0x20 || (unsigned char) s[i] >= 0x7f || s[i] == '\'' || s[i] == '\\')
                        return false;
        if (strncmp(s, "docker://", 9) == 0)
                return n > 9;
        char buf[TPLSPEC_PATH_MAX + 1];
        return tplspec_oci_context_path(s, buf, sizeof buf) != NULL;
}

const char *tplspec_oci_context_path(const char *ref, char *buf, size_t n) {
        const char *p = strncmp(ref, "oci:", 4) == 0              ? ref + 4
                        : strncmp(ref, "docker-archive:", 15) == 0 ? ref + 15
                                                                   : NULL;
        if (!p)
                return NULL;
        /* oci:DIR:TAG -- the tag after the first ':'; an archive has none */
        size_t l = p == ref + 4 ? strcspn(p, ":") : strlen(p);
        if (l == 0 || l >= n || (p == ref + 15 && strchr(p, ':')))
                return NULL;
        memcpy(buf, p, l);
        buf[l] = 0;
        return path_ok(buf, false, true) ? buf : NULL;
}

static bool env_key_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 128 || isdigit((unsigned char) s[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && s[i] != '_')
                        return false;
        return true;
}

static bool user_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 32)
                return false;
        bool digits = strspn(s, "0123456789") == n;
        if (digits)
                return n <= 10;
        if (!(islower((unsigned char) s[0]) || s[0] == '_'))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!islower((unsigned char) s[i]) && !isdigit((unsigned char) s[i]) && s[i] != '_' && s[i] != '-')
                        return false;
        return true;
}

/* A path: no NUL, no control bytes; absolute when asked; no ".." part. */
static bool path_ok(const char *s, bool absolute, bool relative) {
        if (!text_ok(s, TPLSPEC_PATH_MAX) || strchr(s, '\n') || strchr(s, '\t'))
                return false;
        if (absolute && s[0] != '/')
                return false;
        if (relative && s[0] == '/')
                return false;
        for (const char *p = s; (p = strstr(p, "..")); p += 2)
                if ((p == s || p[-1] == '/') && (p[2] == 0 || p[2] == '/'))
                        return false;
        return true;
}

/* ---- building the struct ---- */

static char **strv_new(size_t n) {
        return calloc(n + 1, sizeof(char *));
}

static char **shell_argv(const char *text) {
        char **v = strv_new(3);
        if (v && (!(v[0] = strdup("/bin/sh")) || !(v[1] = strdup("-c")) || !(v[2] = strdup(text)))) {
                strv_free(v);
                return NULL;
        }
        return v;
}

static struct tplspec_step *step_add(struct tplspec *s, enum tplspec_step_kind kind, char *err) {
        if (s->n_steps >= TPLSPEC_STEPS_MAX) {
                fail(err, "at most %d steps", TPLSPEC_STEPS_MAX);
                return NULL;
        }
        struct tplspec_step *n = realloc(s->steps, (s->n_steps + 1) * sizeof *n);
        if (!n) {
                fail(err, "out of memory");
                return NULL;
        }
        s->steps = n;
        n[s->n_steps] = (struct tplspec_step){ .kind = kind };
        return &n[s->n_steps++];
}

static size_t env_count(const struct tplspec *s) {
        size_t k = 0;
        for (size_t i = 0; i < s->n_steps; i++)
                k += s->steps[i].kind == TPLSPEC_ENV;
        return k;
}

/* A command: a string (shell form) or an array of strings (exec form). */
static int command_json(const json_t *v, const char *what, char ***ret, char *err) {
        if (json_is_string(v)) {
                if (!text_ok(json_string_value(v), TPLSPEC_TEXT_MAX) || strlen(json_string_value(v)) != json_string_length(v))
                        return fail(err, "%s must be a command of 1..%u bytes", what, TPLSPEC_TEXT_MAX);
                return (*ret = shell_argv(json_string_value(v))) ? 0 : -ENOMEM;
        }
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > TPLSPEC_ARGV_MAX)
                return fail(err, "%s must be a string (run by /bin/sh -c) or an array of 1..%d strings", what,
                            TPLSPEC_ARGV_MAX);
        char **argv = strv_new(json_array_size(v));
        if (!argv)
                return -ENOMEM;
        for (size_t i = 0; i < json_array_size(v); i++) {
                const json_t *a = json_array_get(v, i);
                if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a) ||
                    json_string_length(a) > TPLSPEC_TEXT_MAX || (i == 0 && json_string_length(a) == 0)) {
                        strv_free(argv);
                        return fail(err, "%s[%zu] must be a string of at most %u bytes", what, i, TPLSPEC_TEXT_MAX);
                }
                if (!(argv[i] = strdup(json_string_value(a)))) {
                        strv_free(argv);
                        return -ENOMEM;
                }
        }
        *ret = argv;
        return 0;
}

static int only_keys(const json_t *o, const char *const *keys, const char *what, char *err) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                bool known = false;
                for (size_t i = 0; keys[i] && !known; i++)
                        known = strcmp(keys[i], k) == 0;
                if (!known)
                        return fail(err, "unknown field \"%.64s\" in %s", k, what);
        }
        return 0;
}

static int uint_field(const json_t *o, const char *key, unsigned lo, unsigned hi, unsigned *ret, char *err) {
        const json_t *v = json_object_get(o, key);
        if (!v)
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
                return fail(err, "field \"%s\" must be an integer from %u to %u", key, lo, hi);
        *ret = (unsigned) json_integer_value(v);
        return 0;
}

static int base_json(struct tplspec *s, const json_t *b, char *err) {
        static const char *const keys[] = { "template", "debian", "packages", "oci", NULL };
        if (!json_is_object(b))
                return fail(err, "field \"base\" must be {\"template\":NAME}, {\"debian\":SUITE,\"packages\":[...]} or "
                                 "{\"oci\":REF}");
        int r = only_keys(b, keys, "\"base\"", err);
        if (r < 0)
                return r;
        const char *t = json_string_value(json_object_get(b, "template"));
        const char *d = json_string_value(json_object_get(b, "debian"));
        const char *o = json_string_value(json_object_get(b, "oci"));
        const json_t *p = json_object_get(b, "packages");
        if ((t != NULL) + (d != NULL) + (o != NULL) != 1 || (p && !d))
                return fail(err, "field \"base\" names one of \"template\", \"debian\" (with \"packages\") or \"oci\"");
        if (t && !name_is_valid(t))
                return fail(err, "base template \"%.64s\" is no template name", t);
        if (d && !tplspec_suite_ok(d))
                return fail(err, "base debian suite \"%.32s\" is no suite name (bookworm, trixie, ...)", d);
        if (o && !tplspec_oci_ok(o))
                return fail(err, "base oci \"%.64s\" must be oci:DIR[:TAG] or docker-archive:FILE (a path in the build "
                                 "context) or docker://REF", o);
        s->base = t ? TPLSPEC_BASE_TEMPLATE : d ? TPLSPEC_BASE_DEBIAN : TPLSPEC_BASE_OCI;
        if (!(s->from = strdup(t ?: d ?: o)))
                return -ENOMEM;
        if (!d)
                return 0;
        if (p && (!json_is_array(p) || json_array_size(p) > TPLSPEC_PACKAGES_MAX))
                return fail(err, "field \"packages\" must be an array of at most %d package names", TPLSPEC_PACKAGES_MAX);
        size_t n = p ? json_array_size(p) : 0;
        if (!(s->packages = strv_new(n)))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const char *name = json_string_value(json_array_get(p, i));
                if (!name || !tplspec_package_ok(name))
                        return fail(err, "packages[%zu] is no Debian package name", i);
                if (!(s->packages[i] = strdup(name)))
                        return -ENOMEM;
        }
        return 0;
}

static int env_step(struct tplspec *s, const char *k, const char *v, const char *where, char *err) {
        if (!env_key_ok(k))
                return fail(err, "%s: \"%.64s\" is no environment variable name", where, k);
        if (strlen(v) > TPLSPEC_TEXT_MAX)
                return fail(err, "%s: the value of %s is longer than %u bytes", where, k, TPLSPEC_TEXT_MAX);
        if (env_count(s) >= TPLSPEC_ENV_MAX)
                return fail(err, "%s: at most %d environment variables", where, TPLSPEC_ENV_MAX);
        struct tplspec_step *st = step_add(s, TPLSPEC_ENV, err);
        if (!st)
                return -EINVAL;
        return (st->key = strdup(k)) && (st->value = strdup(v)) ? 0 : -ENOMEM;
}

static int copy_step(struct tplspec *s, char **srcs, const char *dst, const char *where, char *err) {
        for (size_t i = 0; srcs[i]; i++)
                if (!path_ok(srcs[i], false, true)) {
                        fail(err, "%s: source \"%.64s\" must be a path inside the build context (relative, no \"..\")",
                             where, srcs[i]);
                        strv_free(srcs);
                        return -EINVAL;
                }
        if (!srcs[0] || !path_ok(dst, false, false)) {
                strv_free(srcs);
                return fail(err, "%s: copy needs one or more sources and a destination path", where);
        }
        struct tplspec_step *st = step_add(s, TPLSPEC_COPY, err);
        if (!st) {
                strv_free(srcs);
                return -EINVAL;
        }
        st->srcs = srcs;
        return (st->dst = strdup(dst)) ? 0 : -ENOMEM;
}

static int path_step(struct tplspec *s, enum tplspec_step_kind kind, const char *v, const char *where, char *err) {
        if (kind == TPLSPEC_WORKDIR && !path_ok(v, true, false))
                return fail(err, "%s: workdir must be an absolute path without \"..\"", where);
        if (kind == TPLSPEC_USER && !user_ok(v))
                return fail(err, "%s: user \"%.32s\" is no user name or uid", where, v);
        struct tplspec_step *st = step_add(s, kind, err);
        if (!st)
                return -EINVAL;
        return (st->path = strdup(v)) ? 0 : -ENOMEM;
}

static int step_json(struct tplspec *s, const json_t *o, size_t i, char *err) {
        char where[32];
        snprintf(where, sizeof where, "steps[%zu]", i);
        static const char *const keys[] = { "run", "copy", "to", "env", "workdir", "user", NULL };
        if (!json_is_object(o))
                return fail(err, "%s must be an object: {\"run\"}, {\"copy\",\"to\"}, {\"env\"}, {\"workdir\"} or {\"user\"}",
                            where);
        int r = only_keys(o, keys, where, err);
        if (r < 0)
                return r;
        size_t n = json_object_size(o);
        const json_t *run = json_object_get(o, "run"), *copy = json_object_get(o, "copy"), *to = json_object_get(o, "to"),
                     *env = json_object_get(o, "env"), *wd = json_object_get(o, "workdir"), *user = json_object_get(o, "user");
        if ((copy ? n != 2 || !to : n != 1) || (to && !copy))
                return fail(err, "%s must have one of \"run\", \"copy\" (with \"to\"), \"env\", \"workdir\", \"user\"",
                            where);
        if (run) {
                char **argv = NULL;
                char what[48];
                snprintf(what, sizeof what, "%s.run", where);
                if ((r = command_json(run, what, &argv, err)) < 0)
                        return r;
                struct tplspec_step *st = step_add(s, TPLSPEC_RUN, err);
                if (!st) {
                        strv_free(argv);
                        return -EINVAL;
                }
                st->argv = argv;
                return 0;
        }
        if (copy) {
                const char *dst = json_string_value(to);
                if (json_is_string(copy)) {
                        char **v = strv_new(1);
                        if (!v || !(v[0] = strdup(json_string_value(copy)))) {
                                strv_free(v);
                                return -ENOMEM;
                        }
                        return copy_step(s, v, dst ?: "", where, err);
                }
                if (!json_is_array(copy) || json_array_size(copy) == 0 || json_array_size(copy) > TPLSPEC_ARGV_MAX)
                        return fail(err, "%s.copy must be a path or an array of 1..%d paths", where, TPLSPEC_ARGV_MAX);
                char **v = strv_new(json_array_size(copy));
                if (!v)
                        return -ENOMEM;
                for (size_t k = 0; k < json_array_size(copy); k++) {
                        const char *p = json_string_value(json_array_get(copy, k));
                        if (!p || !(v[k] = strdup(p))) {
                                strv_free(v);
                                return p ? -ENOMEM : fail(err, "%s.copy[%zu] must be a path", where, k);
                        }
                }
                return copy_step(s, v, dst ?: "", where, err);
        }
        if (env) {
                if (!json_is_object(env) || json_object_size(env) == 0)
                        return fail(err, "%s.env must be an object of strings", where);
                const char *k;
                json_t *v;
                json_object_foreach((json_t *) env, k, v) {
                        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
                                return fail(err, "%s.env.%.64s must be a string", where, k);
                        if ((r = env_step(s, k, json_string_value(v), where, err)) < 0)
                                return r;
                }
                return 0;
        }
        const json_t *v = wd ?: user;
        if (!json_is_string(v))
                return fail(err, "%s.%s must be a string", where, wd ? "workdir" : "user");
        return path_step(s, wd ? TPLSPEC_WORKDIR : TPLSPEC_USER, json_string_value(v), where, err);
}

static int ready_json(struct tplspec *s, const json_t *o, char *err) {
        static const char *const keys[] = { "port", "command", "timeout_s", NULL };
        if (!json_is_object(o))
                return fail(err, "field \"ready\" must be {\"port\":N} or {\"command\":...}, with \"timeout_s\"");
        int r = only_keys(o, keys, "\"ready\"", err);
        if (r < 0)
                return r;
        const json_t *port = json_object_get(o, "port"), *cmd = json_object_get(o, "command");
        if (!port == !cmd)
                return fail(err, "field \"ready\" has one of \"port\" and \"command\"");
        if (port && (r = uint_field(o, "port", 1, 65535, &s->ready_port, err)) < 0)
                return r;
        if (cmd && (r = command_json(cmd, "ready.command", &s->ready_cmd, err)) < 0)
                return r;
        return uint_field(o, "timeout_s", 1, 3600, &s->ready_timeout_s, err);
}

static int check_whole(struct tplspec *s, char *err) {
        if ((s->ready_port || s->ready_cmd) && !s->start)
                return fail(err, "a readiness check needs a start command (\"start\", or CMD)");
        if (s->start && !s->ready_timeout_s)
                s->ready_timeout_s = DEFAULT_READY_TIMEOUT_S;
        return 0;
}

int tplspec_parse_json(const json_t *j, struct tplspec **ret, char *err) {
        static const char *const keys[] = { "name", "base", "steps", "start", "ready", "memory_mib", "vcpus",
                                             "disk_mib", NULL };
        if (!json_is_object(j))
                return fail(err, "a template spec is a JSON object");
        int r = only_keys(j, keys, "the spec", err);
        if (r < 0)
                return r;
        _cleanup_(tplspec_freep) struct tplspec *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        const char *name = json_string_value(json_object_get(j, "name"));
        if (!name || !template_name_ok(name))
                return fail(err, "field \"name\" must be 1-63 of [a-z0-9-], starting with a letter or digit");
        if (!(s->name = strdup(name)))
                return -ENOMEM;
        if (!json_object_get(j, "base"))
                return fail(err, "field \"base\" is required");
        if ((r = base_json(s, json_object_get(j, "base"), err)) < 0)
                return r;
        const json_t *steps = json_object_get(j, "steps");
        if (steps && (!json_is_array(steps) || json_array_size(steps) > TPLSPEC_STEPS_MAX))
                return fail(err, "field \"steps\" must be an array of at most %d steps", TPLSPEC_STEPS_MAX);
        for (size_t i = 0; steps && i < json_array_size(steps); i++)
                if ((r = step_json(s, json_array_get(steps, i), i, err)) < 0)
                        return r;
        const json_t *start = json_object_get(j, "start");
        if (start && (r = command_json(start, "field \"start\"", &s->start, err)) < 0)
                return r;
        if (json_object_get(j, "ready") && (r = ready_json(s, json_object_get(j, "ready"), err)) < 0)
                return r;
        if ((r = uint_field(j, "memory_mib", 64, 1 << 20, &s->memory_mib, err)) < 0 ||
            (r = uint_field(j, "vcpus", 1, 64, &s->vcpus, err)) < 0 ||
            (r = uint_field(j, "disk_mib", 64, 1 << 20, &s->disk_mib, err)) < 0 || (r = check_whole(s, err)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

/* ---- Dockerfile ---- */

/* A Dockerfile's instruction: its keyword and arguments (continuations
 * joined), and the line it started on. */
struct instr {
        char keyword[16];
        char *args;
        unsigned line;
};

/* The next instruction from *p; 0 at the end, 1 with one. */
static int next_instr(const char **p, const char *end, unsigned *line, struct instr *ret, char *err) {
        char *buf = NULL;
        size_t len = 0;
        unsigned first = 0;
        while (*p < end) {
                const char *nl = memchr(*p, '\n', (size_t) (end - *p));
                const char *e = nl ? nl : end;
                (*line)++;
                const char *a = *p;
                *p = nl ? nl + 1 : end;
                while (a < e && (*a == ' ' || *a == '\t'))
                        a++;
                const char *b = e;
                while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
                        b--;
                if (!buf && (a == b || *a == '#'))
                        continue; /* blank, or a comment */
                if (buf && a < b && *a == '#')
                        continue; /* a comment inside a continuation */
                bool more = b > a && b[-1] == '\\';
                if (more)
                        b--;
                if (len + (size_t) (b - a) + 2 > TPLSPEC_TEXT_MAX + 64) {
                        free(buf);
                        return fail(err, "line %u: an instruction longer than %u bytes", *line, TPLSPEC_TEXT_MAX);
                }
                char *n = realloc(buf, len + (size_t) (b - a) + 2);
                if (!n) {
                        free(buf);
                        return -ENOMEM;
                }
                buf = n;
                if (!first)
                        first = *line;
                memcpy(buf + len, a, (size_t) (b - a));
                len += (size_t) (b - a);
                buf[len] = 0;
                if (more) {
                        buf[len++] = ' ';
                        buf[len] = 0;
                        continue;
                }
                break;
        }
        if (!buf)
                return 0;
        if (memchr(buf, 0, len)) {
                free(buf);
                return fail(err, "line %u: a NUL byte", first);
        }
        size_t k = strcspn(buf, " \t");
        if (k == 0 || k >= sizeof ret->keyword) {
                free(buf);
                return fail(err, "line %u: no instruction", first);
        }
        for (size_t i = 0; i < k; i++)
                ret->keyword[i] = (char) toupper((unsigned char) buf[i]);
        ret->keyword[k] = 0;
        const char *args = buf + k;
        while (*args == ' ' || *args == '\t')
                args++;
        ret->args = strdup(args);
        ret->line = first;
        free(buf);
        return ret->args ? 1 : -ENOMEM;
}

/* Whitespace-separated words (COPY's, EXPOSE's). */
static char **words(const char *s, size_t max) {
        char **v = strv_new(max);
        size_t n = 0;
        while (v && *s) {
                while (*s == ' ' || *s == '\t')
                        s++;
                size_t k = strcspn(s, " \t");
                if (k == 0)
                        break;
                if (n >= max || !(v[n++] = strndup(s, k))) {
                        strv_free(v);
                        return NULL;
                }
                s += k;
        }
        return v;
}

/* RUN/CMD/HEALTHCHECK's command: exec form (a JSON array) or shell form. */
static int command_text(const char *args, const char *where, char ***ret, char *err) {
        if (!*args)
                return fail(err, "%s: a command is missing", where);
        if (args[0] == '[') {
                _cleanup_(json_decrefp) json_t *j = json_loads(args, 0, NULL);
                if (!j)
                        return fail(err, "%s: the exec form must be a JSON array of strings", where);
                return command_json(j, where, ret, err);
        }
        _cleanup_(json_decrefp) json_t *j = json_string(args);
        return j ? command_json(j, where, ret, err) : fail(err, "%s: the command is not UTF-8", where);
}

/* ENV K=V K2="V 2" ..., or the old ENV K V. */
static int env_text(struct tplspec *s, const char *args, const char *where, char *err) {
        const char *eq = strchr(args, '='), *sp = args + strcspn(args, " \t");
        if (!eq || sp < eq) { /* ENV K V */
                _cleanup_free_ char *k = strndup(args, (size_t) (sp - args));
                while (*sp == ' ' || *sp == '\t')
                        sp++;
                if (!k)
                        return -ENOMEM;
                if (!*sp)
                        return fail(err, "%s: ENV needs KEY=VALUE or KEY VALUE", where);
                return env_step(s, k, sp, where, err);
        }
        const char *p = args;
        while (*p) {
                while (*p == ' ' || *p == '\t')
                        p++;
                if (!*p)
                        break;
                const char *e = strchr(p, '=');
                if (!e || memchr(p, ' ', (size_t) (e - p)))
                        return fail(err, "%s: ENV needs KEY=VALUE pairs", where);
                _cleanup_free_ char *k = strndup(p, (size_t) (e - p));
                _cleanup_free_ char *v = malloc(strlen(e) + 1);
                if (!k || !v)
                        return -ENOMEM;
                size_t n = 0;
                p = e + 1;
                if (*p == '"') {
                        for (p++; *p && *p != '"'; p++) {
                                if (*p == '\\' && p[1])
                                        p++;
                                v[n++] = *p;
                        }
                        if (*p != '"')
                                return fail(err, "%s: an unterminated quote", where);
                        p++;
                } else
                        while (*p && *p != ' ' && *p != '\t')
                                v[n++] = *p++;
                v[n] = 0;
                int r = env_step(s, k, v, where, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int from_text(struct tplspec *s, const char *args, const char *where, char *err) {
        _cleanup_(strv_freep) char **w = words(args, 4);
        if (!w)
                return -ENOMEM;
        if (!w[0] || w[1])
                return fail(err, "%s: FROM takes one image (no AS, no --platform)", where);
        const char *ref = w[0];
        if (strncmp(ref, "debian:", 7) == 0) {
                if (!tplspec_suite_ok(ref + 7))
                        return fail(err, "%s: \"%.64s\" names no Debian suite", where, ref);
                s->base = TPLSPEC_BASE_DEBIAN;
                s->packages = strv_new(0);
                s->from = strdup(ref + 7);
        } else if (tplspec_oci_ok(ref)) {
                s->base = TPLSPEC_BASE_OCI;
                s->from = strdup(ref);
        } else if (name_is_valid(ref)) {
                s->base = TPLSPEC_BASE_TEMPLATE;
                s->from = strdup(ref);
        } else
                return fail(err, "%s: FROM takes a template name, debian:SUITE, oci:DIR[:TAG], docker-archive:FILE "
                                 "or docker://REF",
                            where);
        return s->from && (s->base != TPLSPEC_BASE_DEBIAN || s->packages) ? 0 : -ENOMEM;
}

int tplspec_parse_dockerfile(const char *text, size_t len, const char *name, struct tplspec **ret, char *err) {
        if (len > TPLSPEC_INPUT_MAX)
                return fail(err, "a Dockerfile of at most %u bytes", TPLSPEC_INPUT_MAX);
        if (!name || !template_name_ok(name))
                return fail(err, "the template's name must be 1-63 of [a-z0-9-], starting with a letter or digit");
        /* every string of it ends up in JSON: the whole text must be UTF-8
         * (jansson refuses to make a string of anything else) */
        _cleanup_(json_decrefp) json_t *utf8 = json_stringn(text, len);
        if (!utf8)
                return fail(err, "the Dockerfile is not UTF-8");
        _cleanup_(tplspec_freep) struct tplspec *s = calloc(1, sizeof *s);
        if (!s || !(s->name = strdup(name)))
                return -ENOMEM;
        const char *p = text, *end = text + len;
        unsigned line = 0;
        bool have_from = false;
        int r;
        for (;;) {
                struct instr in = { 0 };
                r = next_instr(&p, end, &line, &in, err);
                if (r <= 0)
                        break;
                _cleanup_free_ char *args = in.args;
                char where[48];
                snprintf(where, sizeof where, "line %u (%s)", in.line, in.keyword);
                if (!have_from && strcmp(in.keyword, "FROM") != 0)
                        return fail(err, "line %u: the first instruction must be FROM", in.line);
                if (strcmp(in.keyword, "FROM") == 0) {
                        if (have_from)
                                return fail(err, "%s: one FROM only (no multi-stage builds)", where);
                        have_from = true;
                        r = from_text(s, args, where, err);
                } else if (strcmp(in.keyword, "RUN") == 0) {
                        char **argv = NULL;
                        if ((r = command_text(args, where, &argv, err)) >= 0) {
                                struct tplspec_step *st = step_add(s, TPLSPEC_RUN, err);
                                if (!st) {
                                        strv_free(argv);
                                        r = -EINVAL;
                                } else
                                        st->argv = argv;
                        }
                } else if (strcmp(in.keyword, "COPY") == 0) {
                        if (args[0] == '-')
                                return fail(err, "%s: no COPY options (--chown, --from, ...)", where);
                        char **w = words(args, TPLSPEC_ARGV_MAX + 1);
                        size_t n = 0;
                        while (w && w[n])
                                n++;
                        if (!w)
                                return -ENOMEM;
                        if (n < 2) {
                                strv_free(w);
                                return fail(err, "%s: COPY SRC... DST", where);
                        }
                        char *dst = w[n - 1];
                        w[n - 1] = NULL;
                        r = copy_step(s, w, dst, where, err);
                        free(dst);
                } else if (strcmp(in.keyword, "ENV") == 0)
                        r = env_text(s, args, where, err);
                else if (strcmp(in.keyword, "WORKDIR") == 0)
                        r = path_step(s, TPLSPEC_WORKDIR, args, where, err);
                else if (strcmp(in.keyword, "USER") == 0)
                        r = path_step(s, TPLSPEC_USER, args, where, err);
                else if (strcmp(in.keyword, "CMD") == 0) {
                        strv_free(s->start);
                        s->start = NULL;
                        r = command_text(args, where, &s->start, err);
                } else if (strcmp(in.keyword, "EXPOSE") == 0) {
                        uint64_t port;
                        char num[8];
                        snprintf(num, sizeof num, "%.*s", (int) MIN(strcspn(args, "/ \t"), sizeof num - 1), args);
                        if (parse_u64(num, 65535, &port) < 0 || port == 0)
                                return fail(err, "%s: EXPOSE takes a port, 1..65535", where);
                        if (!s->ready_port && !s->ready_cmd)
                                s->ready_port = (unsigned) port;
                        r = 0;
                } else if (strcmp(in.keyword, "HEALTHCHECK") == 0) {
                        if (strcasecmp(args, "NONE") == 0) {
                                r = 0;
                                continue;
                        }
                        if (strncasecmp(args, "CMD ", 4) != 0)
                                return fail(err, "%s: HEALTHCHECK CMD command (no options)", where);
                        strv_free(s->ready_cmd);
                        s->ready_cmd = NULL;
                        s->ready_port = 0;
                        r = command_text(args + 4, where, &s->ready_cmd, err);
                } else
                        return fail(err, "line %u: %s is not supported (FROM, RUN, COPY, ENV, WORKDIR, USER, CMD, "
                                         "EXPOSE and HEALTHCHECK are)",
                                    in.line, in.keyword);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        if (!have_from)
                return fail(err, "the Dockerfile has no FROM");
        if (s->ready_port && !s->start)
                s->ready_port = 0; /* EXPOSE without CMD: nothing to wait for */
        if ((r = check_whole(s, err)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

/* ---- canonical JSON ---- */

static json_t *strv_json(char *const *v) {
        json_t *a = json_array();
        for (size_t i = 0; a && v && v[i]; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

json_t *tplspec_to_json(const struct tplspec *s) {
        json_t *base = s->base == TPLSPEC_BASE_TEMPLATE ? json_pack("{s:s}", "template", s->from)
                       : s->base == TPLSPEC_BASE_DEBIAN  ? json_pack("{s:s, s:o}", "debian", s->from, "packages",
                                                                     strv_json(s->packages))
                                                         : json_pack("{s:s}", "oci", s->from);
        json_t *steps = json_array();
        for (size_t i = 0; steps && i < s->n_steps; i++) {
                const struct tplspec_step *st = &s->steps[i];
                json_t *o = st->kind == TPLSPEC_RUN    ? json_pack("{s:o}", "run", strv_json(st->argv))
                            : st->kind == TPLSPEC_COPY ? json_pack("{s:o, s:s}", "copy", strv_json(st->srcs), "to", st->dst)
                            : st->kind == TPLSPEC_ENV  ? json_pack("{s:{s:s}}", "env", st->key, st->value)
                            : st->kind == TPLSPEC_WORKDIR ? json_pack("{s:s}", "workdir", st->path)
                                                          : json_pack("{s:s}", "user", st->path);
                json_array_append_new(steps, o);
        }
        json_t *o = json_pack("{s:s, s:o, s:o}", "name", s->name, "base", base, "steps", steps);
        if (!o)
                return NULL;
        if (s->start)
                json_object_set_new(o, "start", strv_json(s->start));
        if (s->ready_port || s->ready_cmd) {
                json_t *r = s->ready_port ? json_pack("{s:i}", "port", (int) s->ready_port)
                                          : json_pack("{s:o}", "command", strv_json(s->ready_cmd));
                if (r)
                        json_object_set_new(r, "timeout_s", json_integer(s->ready_timeout_s));
                json_object_set_new(o, "ready", r);
        }
        static const char *const sizes[] = { "memory_mib", "vcpus", "disk_mib" };
        const unsigned v[] = { s->memory_mib, s->vcpus, s->disk_mib };
        for (size_t i = 0; i < 3; i++)
                if (v[i])
                        json_object_set_new(o, sizes[i], json_integer(v[i]));
        return o;
}

const char **tplspec_context_paths(const struct tplspec *s) {
        size_t n = 0;
        for (size_t i = 0; i < s->n_steps; i++)
                for (size_t k = 0; s->steps[i].kind == TPLSPEC_COPY && s->steps[i].srcs[k]; k++)
                        n++;
        char oci[TPLSPEC_PATH_MAX + 1];
        const char *op = s->base == TPLSPEC_BASE_OCI ? tplspec_oci_context_path(s->from, oci, sizeof oci) : NULL;
        /* one allocation: the vector, then a copy of the OCI path */
        size_t vec = (n + 2) * sizeof(const char *);
        const char **v = calloc(1, vec + (op ? strlen(op) + 1 : 0));
        size_t j = 0;
        if (v && op)
                v[j++] = memcpy((char *) v + vec, op, strlen(op) + 1);
        for (size_t i = 0; v && i < s->n_steps; i++)
                for (size_t k = 0; s->steps[i].kind == TPLSPEC_COPY && s->steps[i].srcs[k]; k++)
                        v[j++] = s->steps[i].srcs[k];
        return v;
}
