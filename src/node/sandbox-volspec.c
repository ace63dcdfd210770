/* SPDX-License-Identifier: Apache-2.0 */
/* The volumes a sandbox holds (struct sandbox_volume) as requests and
 * records carry them: [{"id","path","read_only"}], slot by slot. */
#include "sandbox.h"

#include <errno.h>
#include <string.h>

#include "proto.h"
#include "util.h"

/* a under b, or b under a ("/data" and "/data/x"), or the same */
static bool paths_overlap(const char *a, const char *b) {
        size_t na = strlen(a), nb = strlen(b), n = na < nb ? na : nb;
        return strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/') && (b[n] == 0 || b[n] == '/');
}

int sandbox_volumes_from_json(const json_t *o, struct sandbox_volume ret[SANDBOX_VOLUMES_MAX],
                              char **ret_error) {
        memset(ret, 0, sizeof(struct sandbox_volume) * SANDBOX_VOLUMES_MAX);
        const json_t *list = json_object_get(o, "volumes");
        if (!list || json_is_null(list))
                return 0;
        if (!json_is_array(list) || json_array_size(list) > SANDBOX_VOLUMES_MAX) {
                *ret_error = strdup_printf("field \"volumes\" must be an array of at most %d volumes",
                                           SANDBOX_VOLUMES_MAX);
                return -EINVAL;
        }
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
                const char *id = json_string_value(json_object_get(e, "id"));
                const char *path = json_string_value(json_object_get(e, "path"));
                json_t *ro = json_object_get(e, "read_only");
                size_t known = 2 + (ro ? 1 : 0);
                if (!json_is_object(e) || json_object_size(e) != known || !id || !name_is_valid(id) ||
                    strlen(id) >= sizeof ret[i].id || !path || (ro && !json_is_boolean(ro))) {
                        *ret_error =
                                strdup_printf("volumes[%zu] must be {\"id\",\"path\",\"read_only\"?}", i);
                        return -EINVAL;
                }
                if (!proto_volume_path_is_allowed(path)) {
                        *ret_error =
                                strdup_printf("volumes[%zu]: %s is not a path a volume may be mounted at "
                                              "(absolute, plain, not / and not under /bin /boot /dev /etc "
                                              "/lib* /proc /run /sbin /sys /usr)",
                                              i, path);
                        return -EINVAL;
                }
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(ret[j].id, id) == 0) {
                                *ret_error = strdup_printf("volume %s is named twice", id);
                                return -EINVAL;
                        }
                        if (paths_overlap(ret[j].path, path)) {
                                *ret_error = strdup_printf("volumes at %s and %s: one would hide the other",
                                                           ret[j].path, path);
                                return -EINVAL;
                        }
                }
                snprintf(ret[i].id, sizeof ret[i].id, "%s", id);
                snprintf(ret[i].path, sizeof ret[i].path, "%s", path);
                ret[i].read_only = json_is_true(ro);
        }
        return 0;
}

void sandbox_volumes_to_json(const struct sandbox *s, json_t *o) {
        json_t *list = NULL;
        for (size_t i = 0; i < SANDBOX_VOLUMES_MAX; i++) {
                if (!s->volumes[i].id[0])
                        continue;
                if (!list && !(list = json_array()))
                        return;
                json_array_append_new(list,
                                      json_pack("{s:s,s:s,s:b}", "id", s->volumes[i].id, "path",
                                                s->volumes[i].path, "read_only", s->volumes[i].read_only));
        }
        if (list)
                json_object_set_new(o, "volumes", list);
}
