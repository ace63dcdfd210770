/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's own size within its template's (struct sandbox_limits): as
 * requests, records and parked markers carry it, and its check. */
#include "sandbox.h"

#include <errno.h>
#include <string.h>

#include "template.h"
#include "util.h"

int sandbox_limits_from_json(const json_t *o, struct sandbox_limits *ret) {
        const json_t *l = json_object_get(o, "limits");
        *ret = (struct sandbox_limits){ 0 };
        if (!l)
                return 0;
        const json_t *m = json_object_get(l, "memory_mib"), *c = json_object_get(l, "vcpus");
        if (!json_is_object(l) || json_object_size(l) > 2 || (m && !json_is_integer(m)) || (c && !json_is_integer(c)) ||
            (json_object_size(l) != (m ? 1u : 0u) + (c ? 1u : 0u)) ||
            (m && (json_integer_value(m) < SANDBOX_MEMORY_MIN_MIB || json_integer_value(m) > (1 << 20))) ||
            (c && (json_integer_value(c) < 1 || json_integer_value(c) > 256)))
                return -EBADMSG;
        ret->memory_mib = m ? (unsigned) json_integer_value(m) : 0;
        ret->vcpus = c ? (unsigned) json_integer_value(c) : 0;
        return 0;
}

void sandbox_limits_to_json(const struct sandbox *s, json_t *o) {
        if (!s->limits.memory_mib && !s->limits.vcpus)
                return;
        json_t *l = json_object();
        if (l && s->limits.memory_mib)
                json_object_set_new(l, "memory_mib", json_integer(s->limits.memory_mib));
        if (l && s->limits.vcpus)
                json_object_set_new(l, "vcpus", json_integer(s->limits.vcpus));
        if (l)
                json_object_set_new(o, "limits", l);
}

int sandbox_limits_check(const struct sandbox_limits *l, const struct template_info *t, char **ret_error) {
        if (l->memory_mib > t->memory_mib) {
                *ret_error = strdup_printf("memory_mib %u is more than template %s has (%u MiB)", l->memory_mib,
                                           t->name, t->memory_mib);
                return -EINVAL;
        }
        if (l->vcpus > t->vcpus) {
                *ret_error = strdup_printf("vcpus %u is more than template %s has (%u)", l->vcpus, t->name, t->vcpus);
                return -EINVAL;
        }
        return 0;
}
