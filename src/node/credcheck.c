/* SPDX-License-Identifier: Apache-2.0 */
#include "credcheck.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "macros.h"

static int bad(char *err, size_t errsz, const char *fmt, ...) _printf_(3, 4);
static int bad(char *err, size_t errsz, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (err && errsz)
                vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A string of 1..max bytes without NUL, CR, LF (and other controls). */
static bool str_ok(const json_t *v, size_t max) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!s || n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20 || s[i] == 0x7f)
                        return false;
        return true;
}

static bool name_ok(const json_t *v) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!s || n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
                        return false;
        return true;
}

static bool placeholder_ok(const json_t *v) {
        static const char prefix[] = "airlock_ph_";
        const char *s = json_string_value(v);
        if (!s || json_string_length(v) != sizeof prefix - 1 + 32 || strncmp(s, prefix, sizeof prefix - 1) != 0)
                return false;
        for (size_t i = sizeof prefix - 1; i < sizeof prefix - 1 + 32; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

static bool host_ok(const json_t *v) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!s || n == 0 || n > 255)
                return false;
        size_t i = n > 2 && s[0] == '*' && s[1] == '.' ? 2 : 0;
        for (; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.'))
                        return false;
        return true;
}

/* An array of at most max strings, each accepted by ok (or str_ok). */
static bool list_ok(const json_t *v, size_t min, size_t max, bool (*ok)(const json_t *)) {
        if (!json_is_array(v) || json_array_size(v) < min || json_array_size(v) > max)
                return false;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (ok ? !ok(e) : !str_ok(e, CREDCHECK_STRING_MAX)) return false;
        return true;
}

static bool inject_ok(const json_t *v) {
        if (!json_is_object(v))
                return false;
        if (json_object_size(v) == 1)
                return str_ok(json_object_get(v, "basic"), CREDCHECK_STRING_MAX);
        const json_t *t = json_object_get(v, "template");
        return json_object_size(v) == 2 && str_ok(json_object_get(v, "header"), 64) &&
               str_ok(t, CREDCHECK_STRING_MAX) && strstr(json_string_value(t), "{value}");
}

static bool uint_ok(const json_t *v) {
        return json_is_integer(v) && json_integer_value(v) >= 0;
}

static int check_one(const json_t *o, size_t i, char *err, size_t errsz) {
        static const char *const known[] = { "name",   "placeholder", "value", "hosts",      "ports",
                                             "inject", "methods",     "paths", "expires_at", "rate_per_min" };
        if (!json_is_object(o))
                return bad(err, errsz, "secrets[%zu] must be an object", i);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                bool found = false;
                for (size_t j = 0; j < ARRAY_SIZE(known) && !found; j++)
                        found = strcmp(k, known[j]) == 0;
                if (!found)
                        return bad(err, errsz, "secrets[%zu]: unknown field", i);
        }
        if (!name_ok(json_object_get(o, "name")))
                return bad(err, errsz, "secrets[%zu].name must be [a-z0-9_-]{1,64}", i);
        if (!placeholder_ok(json_object_get(o, "placeholder")))
                return bad(err, errsz, "secrets[%zu].placeholder must be airlock_ph_ and 32 hex digits", i);
        if (!str_ok(json_object_get(o, "value"), CREDCHECK_VALUE_MAX))
                return bad(err, errsz, "secrets[%zu].value must be 1-%d bytes without control characters", i,
                           CREDCHECK_VALUE_MAX);
        if (!list_ok(json_object_get(o, "hosts"), 1, CREDCHECK_HOSTS_MAX, host_ok))
                return bad(err, errsz, "secrets[%zu].hosts must be 1-%d lowercase host names", i, CREDCHECK_HOSTS_MAX);
        const json_t *ports = json_object_get(o, "ports");
        if (ports) {
                bool ok = json_is_array(ports) && json_array_size(ports) >= 1 &&
                          json_array_size(ports) <= CREDCHECK_PORTS_MAX;
                size_t j;
                json_t *p;
                json_array_foreach(ports, j, p) ok =
                        ok && json_is_integer(p) && json_integer_value(p) >= 1 && json_integer_value(p) <= 65535;
                if (!ok)
                        return bad(err, errsz, "secrets[%zu].ports must be 1-%d port numbers", i, CREDCHECK_PORTS_MAX);
        }
        if (!inject_ok(json_object_get(o, "inject")))
                return bad(err, errsz, "secrets[%zu].inject must be {\"header\",\"template\"} or {\"basic\"}", i);
        const json_t *m = json_object_get(o, "methods"), *p = json_object_get(o, "paths");
        if ((m && !list_ok(m, 0, CREDCHECK_LIST_MAX, NULL)) || (p && !list_ok(p, 0, CREDCHECK_LIST_MAX, NULL)))
                return bad(err, errsz, "secrets[%zu].methods and .paths must be at most %d strings", i,
                           CREDCHECK_LIST_MAX);
        const json_t *e = json_object_get(o, "expires_at"), *rate = json_object_get(o, "rate_per_min");
        if ((e && !uint_ok(e)) || (rate && !uint_ok(rate)))
                return bad(err, errsz, "secrets[%zu].expires_at and .rate_per_min must be integers >= 0", i);
        return 0;
}

int credcheck_set(const json_t *a, char *err, size_t errsz) {
        if (!json_is_array(a) || json_array_size(a) > CREDCHECK_SET_MAX)
                return bad(err, errsz, "secrets must be an array of at most %d credentials", CREDCHECK_SET_MAX);
        size_t i;
        json_t *o;
        json_array_foreach(a, i, o) {
                int r = check_one(o, i, err, errsz);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < i; j++) {
                        json_t *q = json_array_get(a, j);
                        if (json_equal(json_object_get(q, "name"), json_object_get(o, "name")) ||
                            json_equal(json_object_get(q, "placeholder"), json_object_get(o, "placeholder")))
                                return bad(err, errsz, "secrets[%zu] repeats the name or placeholder of secrets[%zu]",
                                           i, j);
                }
        }
        return 0;
}

json_t *credcheck_names(const json_t *a) {
        json_t *names = json_array();
        size_t i;
        json_t *o;
        json_array_foreach(a, i, o) if (names) json_array_append(names, json_object_get(o, "name"));
        return names;
}
