/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "airlock-config.h"
#include "cluster.h"
#include "jail.h"
#include "macros.h"
#include "objstore.h"
#include "util.h"

#define DEFAULT_DATA_DIR "/var/lib/airlock"
#define DEFAULT_PREBUILD "minimal,python"
/* E2B's code interpreter and MCP's run_code use it: ready without a wait
 * at their first use, without holding up the node's readiness */
#define DEFAULT_PREBUILD_BACKGROUND "code-interpreter"
/* AIRLOCK_POOL_MAX when not given (or the pool size, when that is larger) */
#define POOL_MAX_DEFAULT 16
#define POOL_MAX_UNSET UINT_MAX

static const char *const level_names[] = {
        [LOG_LEVEL_DEBUG] = "debug",
        [LOG_LEVEL_INFO] = "info",
        [LOG_LEVEL_WARN] = "warn",
        [LOG_LEVEL_ERROR] = "error",
};

enum {
        OPT_DATA_DIR = 0x100,
        OPT_SOCKET,
        OPT_TEMPLATES_DIR,
        OPT_IMAGES_DIR,
        OPT_GUEST_BINARY,
        OPT_QEMU,
        OPT_ACCEL,
        OPT_CPU_MODEL,
        OPT_PREBUILD,
        OPT_PREBUILD_BACKGROUND,
        OPT_STORAGE,
        OPT_VOLUME_GIB,
        OPT_LOG_LEVEL,
        OPT_MAX_SANDBOXES,
        OPT_EXEC_MAX_OUTPUT,
        OPT_MAX_FILE_SIZE,
        OPT_SESSION_BUFFER,
        OPT_EXEC_TIMEOUT_MAX,
        OPT_AGENT_UPGRADE_IDLE,
        OPT_MAX_CONNECTIONS,
        OPT_POOL_SIZE,
        OPT_POOL_MAX,
        OPT_VMM_UID_BASE,
        OPT_RECOVER,
        OPT_OBJSTORE_DIR,
        OPT_OBJSTORE,
        OPT_S3_ACCESS_KEY_FILE,
        OPT_S3_SECRET_KEY_FILE,
        OPT_NODE_NAME,
        OPT_CAP_KEYS_DIR,
        OPT_SOCKET_GROUP,
        OPT_JOIN,
        OPT_JOIN_TOKEN_FILE,
        OPT_CLUSTER_LISTEN,
        OPT_ADVERTISE,
        OPT_LABELS,
        OPT_PRINT_CONFIG,
        OPT_HELP,
        OPT_VERSION,
};

/* One setting: its flag, its environment variable and how to parse it. */
struct setting {
        int opt;
        const char *flag;
        const char *env;
};

static const struct setting settings[] = {
        { OPT_DATA_DIR, "data-dir", "AIRLOCK_DATA_DIR" },
        { OPT_SOCKET, "socket", "AIRLOCK_SOCKET" },
        { OPT_TEMPLATES_DIR, "templates-dir", "AIRLOCK_TEMPLATES_DIR" },
        { OPT_IMAGES_DIR, "images-dir", "AIRLOCK_IMAGES_DIR" },
        { OPT_GUEST_BINARY, "guest-binary", "AIRLOCK_GUEST_BINARY" },
        { OPT_QEMU, "qemu", "AIRLOCK_QEMU" },
        { OPT_ACCEL, "accel", "AIRLOCK_ACCEL" },
        { OPT_CPU_MODEL, "cpu-model", "AIRLOCK_CPU_MODEL" },
        { OPT_PREBUILD, "prebuild", "AIRLOCK_PREBUILD" },
        { OPT_PREBUILD_BACKGROUND, "prebuild-background", "AIRLOCK_PREBUILD_BACKGROUND" },
        { OPT_STORAGE, "storage", "AIRLOCK_STORAGE" },
        { OPT_VOLUME_GIB, "volume-gib", "AIRLOCK_VOLUME_GIB" },
        { OPT_LOG_LEVEL, "log-level", "AIRLOCK_LOG_LEVEL" },
        { OPT_MAX_SANDBOXES, "max-sandboxes", "AIRLOCK_MAX_SANDBOXES" },
        { OPT_EXEC_MAX_OUTPUT, "exec-max-output", "AIRLOCK_EXEC_MAX_OUTPUT" },
        { OPT_MAX_FILE_SIZE, "max-file-size", "AIRLOCK_MAX_FILE_SIZE" },
        { OPT_SESSION_BUFFER, "session-buffer", "AIRLOCK_SESSION_BUFFER" },
        { OPT_EXEC_TIMEOUT_MAX, "exec-timeout-max", "AIRLOCK_EXEC_TIMEOUT_MAX" },
        { OPT_AGENT_UPGRADE_IDLE, "agent-upgrade-idle", "AIRLOCK_AGENT_UPGRADE_IDLE" },
        { OPT_MAX_CONNECTIONS, "max-connections", "AIRLOCK_MAX_CONNECTIONS" },
        { OPT_POOL_SIZE, "pool-size", "AIRLOCK_POOL_SIZE" },
        { OPT_POOL_MAX, "pool-max", "AIRLOCK_POOL_MAX" },
        { OPT_VMM_UID_BASE, "vmm-uid-base", "AIRLOCK_VMM_UID_BASE" },
        { OPT_RECOVER, "recover", "AIRLOCK_RECOVER" },
        { OPT_OBJSTORE_DIR, "objstore-dir", "AIRLOCK_OBJSTORE_DIR" },
        { OPT_OBJSTORE, "objstore", "AIRLOCK_OBJSTORE" },
        { OPT_S3_ACCESS_KEY_FILE, "s3-access-key-file", "AIRLOCK_S3_ACCESS_KEY_FILE" },
        { OPT_S3_SECRET_KEY_FILE, "s3-secret-key-file", "AIRLOCK_S3_SECRET_KEY_FILE" },
        { OPT_NODE_NAME, "node-name", "AIRLOCK_NODE_NAME" },
        { OPT_CAP_KEYS_DIR, "cap-keys-dir", "AIRLOCK_CAP_KEYS_DIR" },
        { OPT_SOCKET_GROUP, "socket-group", "AIRLOCK_SOCKET_GROUP" },
        { OPT_JOIN, "join", "AIRLOCK_JOIN" },
        { OPT_JOIN_TOKEN_FILE, "join-token-file", "AIRLOCK_JOIN_TOKEN_FILE" },
        { OPT_CLUSTER_LISTEN, "cluster-listen", "AIRLOCK_CLUSTER_LISTEN" },
        { OPT_ADVERTISE, "advertise", "AIRLOCK_ADVERTISE" },
        { OPT_LABELS, "labels", "AIRLOCK_NODE_LABELS" },
};

static void free_list(char **list) {
        for (size_t i = 0; list && list[i]; i++)
                free(list[i]);
        free(list);
}

void node_config_free(struct node_config *c) {
        if (!c)
                return;
        free(c->data_dir);
        free(c->socket_path);
        free(c->templates_dir);
        free(c->objstore_dir);
        free(c->objstore_url);
        free(c->s3_access_key_file);
        free(c->s3_secret_key_file);
        free(c->node_name);
        free(c->cap_keys_dir);
        free(c->socket_group);
        free(c->join);
        free(c->join_token_file);
        free(c->cluster_listen);
        free(c->advertise);
        free(c->labels);
        free(c->images_dir);
        free(c->guest_binary);
        free(c->qemu_binary);
        free(c->accel);
        free(c->cpu_model);
        free_list(c->prebuild);
        free_list(c->prebuild_background);
        free(c);
}

int node_parse_size(const char *s, uint64_t max, uint64_t *ret) {
        if (!s || !*s || *s < '0' || *s > '9')
                return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno)
                return -ERANGE;
        unsigned shift = 0;
        if (*end) {
                switch (*end) {
                case 'K': shift = 10; break;
                case 'M': shift = 20; break;
                case 'G': shift = 30; break;
                case 'T': shift = 40; break;
                default: return -EINVAL;
                }
                end++;
                if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
                        return -EINVAL;
        }
        if (v > (UINT64_MAX >> shift))
                return -ERANGE;
        uint64_t bytes = (uint64_t) v << shift;
        if (bytes > max)
                return -ERANGE;
        *ret = bytes;
        return 0;
}

static int set_string(char **field, const char *value) {
        char *n = strdup(value);
        if (!n)
                return -ENOMEM;
        free(*field);
        *field = n;
        return 0;
}

/* Splits "a,b,c" into a NULL-terminated list of valid template names. */
static int parse_prebuild(const char *value, char ***ret, size_t *ret_n) {
        _cleanup_free_ char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        char **list = calloc(NODE_PREBUILD_MAX + 1, sizeof(char *));
        if (!list)
                return -ENOMEM;
        size_t n = 0;
        int r = 0;
        for (char *p = copy; p && *p;) {
                char *comma = strchr(p, ',');
                if (comma)
                        *comma = 0;
                if (*p) {
                        if (!name_is_valid(p) || n >= NODE_PREBUILD_MAX) {
                                r = -EINVAL;
                                break;
                        }
                        bool dup = false;
                        for (size_t i = 0; i < n; i++)
                                dup = dup || strcmp(list[i], p) == 0;
                        if (!dup) {
                                list[n] = strdup(p);
                                if (!list[n]) {
                                        r = -ENOMEM;
                                        break;
                                }
                                n++;
                        }
                }
                p = comma ? comma + 1 : NULL;
        }
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(list[i]);
                free(list);
                return r;
        }
        *ret = list;
        *ret_n = n;
        return 0;
}

/* Replaces *list (n entries) with the names of value. */
static int set_list(const char *value, char ***list, size_t *n) {
        char **l;
        size_t k;
        int r = parse_prebuild(value, &l, &k);
        if (r < 0)
                return r;
        free_list(*list);
        *list = l;
        *n = k;
        return 0;
}

static int parse_uint(const char *value, uint64_t min, uint64_t max, uint64_t *ret) {
        uint64_t v;
        int r = parse_u64(value, max, &v);
        if (r < 0)
                return r;
        if (v < min)
                return -ERANGE;
        *ret = v;
        return 0;
}

static int parse_size_range(const char *value, uint64_t min, uint64_t max, uint64_t *ret) {
        uint64_t v;
        int r = node_parse_size(value, max, &v);
        if (r < 0)
                return r;
        if (v < min)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* Applies one setting. origin names where it came from, for the log. */
static int apply(struct node_config *c, int opt, const char *value, const char *origin) {
        uint64_t v = 0;
        int r = 0;

        switch (opt) {
        case OPT_DATA_DIR:
        case OPT_SOCKET:
        case OPT_TEMPLATES_DIR:
        case OPT_IMAGES_DIR:
        case OPT_GUEST_BINARY:
        case OPT_OBJSTORE_DIR:
        case OPT_CAP_KEYS_DIR:
        case OPT_S3_ACCESS_KEY_FILE:
        case OPT_S3_SECRET_KEY_FILE:
                if (value[0] != '/' || strlen(value) >= 4096) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(opt == OPT_DATA_DIR        ? &c->data_dir
                               : opt == OPT_SOCKET        ? &c->socket_path
                               : opt == OPT_TEMPLATES_DIR ? &c->templates_dir
                               : opt == OPT_IMAGES_DIR    ? &c->images_dir
                               : opt == OPT_OBJSTORE_DIR  ? &c->objstore_dir
                               : opt == OPT_CAP_KEYS_DIR  ? &c->cap_keys_dir
                               : opt == OPT_S3_ACCESS_KEY_FILE ? &c->s3_access_key_file
                               : opt == OPT_S3_SECRET_KEY_FILE ? &c->s3_secret_key_file
                                                          : &c->guest_binary,
                               value);
                break;
        case OPT_QEMU:
                if (!*value || strlen(value) >= 4096) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(&c->qemu_binary, value);
                break;
        case OPT_OBJSTORE: {
                /* a directory, as --objstore-dir, or an s3:// URL */
                if (value[0] == '/') {
                        r = strlen(value) < 4096 ? set_string(&c->objstore_dir, value) : -EINVAL;
                        break;
                }
                struct objstore_s3_location l;
                char why[256];
                r = objstore_s3_parse_url(value, &l, why, sizeof why);
                if (r < 0) {
                        log_error("Invalid value for %s: %s (want an absolute directory or "
                                  "s3://BUCKET[/PREFIX]?endpoint=URL&region=R)", origin, why);
                        return -EINVAL;
                }
                r = set_string(&c->objstore_url, value);
                break;
        }
        case OPT_NODE_NAME:
        case OPT_SOCKET_GROUP:
                if (!name_is_valid(value)) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(opt == OPT_NODE_NAME ? &c->node_name : &c->socket_group, value);
                break;
        case OPT_JOIN: {
                /* every entry HOST:PORT; membership.c splits them */
                _cleanup_free_ char *copy = strdup(value);
                if (!copy) {
                        r = -ENOMEM;
                        break;
                }
                size_t n = 0;
                for (char *save = NULL, *a = strtok_r(copy, ",", &save); a; a = strtok_r(NULL, ",", &save), n++)
                        if (!cluster_address_valid(a))
                                r = -EINVAL;
                if (r >= 0 && (n == 0 || n > CLUSTER_CONTROL_MAX))
                        r = -EINVAL;
                if (r >= 0)
                        r = set_string(&c->join, value);
                break;
        }
        case OPT_JOIN_TOKEN_FILE:
                r = value[0] == '/' && strlen(value) < 4096 ? set_string(&c->join_token_file, value) : -EINVAL;
                break;
        case OPT_CLUSTER_LISTEN:
        case OPT_ADVERTISE:
                if (!cluster_address_valid(value)) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(opt == OPT_CLUSTER_LISTEN ? &c->cluster_listen : &c->advertise, value);
                break;
        case OPT_LABELS: {
                struct cluster_label l[CLUSTER_LABELS_MAX];
                size_t n;
                r = cluster_labels_parse(value, l, &n) < 0 ? -EINVAL : set_string(&c->labels, value);
                break;
        }
        case OPT_ACCEL:
                if (strcmp(value, "auto") != 0 && strcmp(value, "kvm") != 0 && strcmp(value, "tcg") != 0) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(&c->accel, value);
                break;
        case OPT_CPU_MODEL:
                /* a QEMU CPU model's name (qemu-system-x86_64 -cpu help): the
                 * node checks at start that its QEMU has it */
                if (!*value || strlen(value) > 63 || strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                                   "0123456789._-") != strlen(value)) {
                        r = -EINVAL;
                        break;
                }
                r = set_string(&c->cpu_model, value);
                break;
        case OPT_PREBUILD:
                r = set_list(value, &c->prebuild, &c->n_prebuild);
                break;
        case OPT_PREBUILD_BACKGROUND:
                r = set_list(value, &c->prebuild_background, &c->n_prebuild_background);
                break;
        case OPT_STORAGE:
                if (strcmp(value, "auto") == 0)
                        c->storage = NODE_STORAGE_AUTO;
                else if (strcmp(value, "copy") == 0)
                        c->storage = NODE_STORAGE_COPY;
                else
                        r = -EINVAL;
                break;
        case OPT_VOLUME_GIB:
                r = parse_uint(value, 1, 65536, &v);
                if (r >= 0)
                        c->volume_gib = (unsigned) v;
                break;
        case OPT_LOG_LEVEL:
                r = log_level_from_string(value, &c->log_level);
                break;
        case OPT_MAX_SANDBOXES:
                r = parse_uint(value, 1, 4096, &v);
                if (r >= 0)
                        c->max_sandboxes = (unsigned) v;
                break;
        case OPT_EXEC_MAX_OUTPUT:
                r = parse_size_range(value, 1024, 64ULL << 20, &v);
                if (r >= 0)
                        c->exec_max_output = (size_t) v;
                break;
        case OPT_MAX_FILE_SIZE:
                r = parse_size_range(value, 1, 1ULL << 40, &v);
                if (r >= 0)
                        c->max_file_size = v;
                break;
        case OPT_SESSION_BUFFER:
                r = parse_size_range(value, 64 << 10, 256ULL << 20, &v);
                if (r >= 0)
                        c->session_buffer = (size_t) v;
                break;
        case OPT_EXEC_TIMEOUT_MAX:
                r = parse_uint(value, 1, 7 * 86400, &v);
                if (r >= 0)
                        c->exec_timeout_max_s = (unsigned) v;
                break;
        case OPT_AGENT_UPGRADE_IDLE:
                r = parse_uint(value, 0, 30 * 86400, &v);
                if (r >= 0)
                        c->agent_upgrade_idle_s = (unsigned) v;
                break;
        case OPT_MAX_CONNECTIONS:
                r = parse_uint(value, 1, 65536, &v);
                if (r >= 0)
                        c->max_connections = (unsigned) v;
                break;
        case OPT_POOL_SIZE:
                r = parse_uint(value, 0, NODE_POOL_SIZE_MAX, &v);
                if (r >= 0)
                        c->pool_size = (unsigned) v;
                break;
        case OPT_POOL_MAX:
                r = parse_uint(value, 0, NODE_POOL_SIZE_MAX, &v);
                if (r >= 0)
                        c->pool_max = (unsigned) v;
                break;
        case OPT_VMM_UID_BASE:
                /* above every real account, and base + NODE_VMM_UIDS - 1 < 2^32 - 1 */
                r = parse_uint(value, 1000, UINT32_MAX - NODE_VMM_UIDS - 1, &v);
                if (r >= 0)
                        c->vmm_uid_base = (uint32_t) v;
                break;
        case OPT_RECOVER:
                r = parse_uint(value, 0, 1, &v);
                if (r >= 0)
                        c->recover = v == 1;
                break;
        default:
                r = -EINVAL;
        }
        if (r == -ENOMEM)
                return log_error_errno(r, "Out of memory while parsing the configuration");
        if (r < 0) {
                log_error("Invalid value for %s: \"%s\"", origin, value);
                return -EINVAL;
        }
        return 0;
}

static int set_defaults(struct node_config *c) {
        int r;
        if ((r = set_string(&c->data_dir, DEFAULT_DATA_DIR)) < 0 ||
            (r = set_string(&c->images_dir, AIRLOCK_IMAGES_PATH)) < 0 ||
            (r = set_string(&c->guest_binary, AIRLOCK_GUEST_PATH)) < 0 ||
            (r = set_string(&c->qemu_binary, "qemu-system-x86_64")) < 0 ||
            (r = set_string(&c->accel, "auto")) < 0 || (r = set_string(&c->cpu_model, "host")) < 0)
                return r;
        r = parse_prebuild(DEFAULT_PREBUILD, &c->prebuild, &c->n_prebuild);
        if (r >= 0)
                r = parse_prebuild(DEFAULT_PREBUILD_BACKGROUND, &c->prebuild_background, &c->n_prebuild_background);
        if (r < 0)
                return r;
        c->storage = NODE_STORAGE_AUTO;
        c->volume_gib = 64;
        c->log_level = LOG_LEVEL_INFO;
        c->max_sandboxes = 64;
        c->exec_max_output = 1 << 20;
        c->max_file_size = 1ULL << 30;
        c->session_buffer = 1 << 20;
        c->exec_timeout_max_s = 24 * 3600; /* the API's limit (docs/api.md): airlockd passes up to it */
        c->agent_upgrade_idle_s = 60;
        c->max_connections = 256;
        c->pool_size = 2;
        c->pool_max = POOL_MAX_UNSET;
        c->vmm_uid_base = JAIL_VM_UID_BASE_DEFAULT;
        c->recover = true;
        return 0;
}

static int default_node_name(char **ret) {
        char name[65];
        node_name_default(name);
        *ret = strdup(name);
        return *ret ? 0 : -ENOMEM;
}

int node_config_load(int argc, char *argv[], struct node_config **ret, enum node_config_action *ret_action) {
        _cleanup_(node_config_freep) struct node_config *c = calloc(1, sizeof *c);
        enum node_config_action action = NODE_CONFIG_RUN;
        int r;

        if (!c)
                return -ENOMEM;
        r = set_defaults(c);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
                const char *v = getenv(settings[i].env);
                if (!v)
                        continue;
                r = apply(c, settings[i].opt, v, settings[i].env);
                if (r < 0)
                        return r;
        }

        struct option longopts[ARRAY_SIZE(settings) + 4];
        for (size_t i = 0; i < ARRAY_SIZE(settings); i++)
                longopts[i] = (struct option){ settings[i].flag, required_argument, NULL, settings[i].opt };
        longopts[ARRAY_SIZE(settings)] = (struct option){ "print-config", no_argument, NULL, OPT_PRINT_CONFIG };
        longopts[ARRAY_SIZE(settings) + 1] = (struct option){ "help", no_argument, NULL, OPT_HELP };
        longopts[ARRAY_SIZE(settings) + 2] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
        longopts[ARRAY_SIZE(settings) + 3] = (struct option){ 0 };

        optind = 0; /* full re-initialisation: the loader may run more than once (tests) */
        opterr = 0;
        int opt;
        while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                if (opt == OPT_PRINT_CONFIG) {
                        action = NODE_CONFIG_PRINT;
                        continue;
                }
                if (opt == OPT_HELP || opt == 'h') {
                        action = NODE_CONFIG_HELP;
                        continue;
                }
                if (opt == OPT_VERSION) {
                        action = NODE_CONFIG_VERSION;
                        continue;
                }
                if (opt == '?' || opt == ':') {
                        log_error("Unknown or incomplete option: %s", argv[optind - 1]);
                        return -EINVAL;
                }
                char origin[64];
                for (size_t i = 0; i < ARRAY_SIZE(settings); i++)
                        if (settings[i].opt == opt)
                                snprintf(origin, sizeof origin, "--%s", settings[i].flag);
                r = apply(c, opt, optarg, origin);
                if (r < 0)
                        return r;
        }
        if (optind < argc) {
                log_error("Unexpected argument: %s", argv[optind]);
                return -EINVAL;
        }

        if (!c->socket_path) {
                size_t n = strlen(c->data_dir) + sizeof "/run/node.sock";
                c->socket_path = malloc(n);
                if (!c->socket_path)
                        return -ENOMEM;
                snprintf(c->socket_path, n, "%s/run/node.sock", c->data_dir);
        }
        /* a node of a cluster gets the capability keys from the replicas
         * (membership.c writes them) */
        if (!c->cap_keys_dir && !(c->cap_keys_dir = strdup_printf(c->join ? "%s/cluster/keys" : "%s/control/keys",
                                                                      c->data_dir)))
                return -ENOMEM;
        if (c->join && !c->cluster_listen && set_string(&c->cluster_listen, "0.0.0.0:7422") < 0)
                return -ENOMEM;
        if (c->objstore_url && (!c->s3_access_key_file || !c->s3_secret_key_file)) {
                log_error("An s3:// object store needs its keys in files: set AIRLOCK_S3_ACCESS_KEY_FILE and "
                          "AIRLOCK_S3_SECRET_KEY_FILE (never on a command line)");
                return -EINVAL;
        }
        if (c->objstore_url && c->objstore_dir) {
                log_error("AIRLOCK_OBJSTORE is an s3:// URL and AIRLOCK_OBJSTORE_DIR a directory: choose one");
                return -EINVAL;
        }
        if (c->pool_max == POOL_MAX_UNSET)
                c->pool_max = MAX(POOL_MAX_DEFAULT, c->pool_size);
        else if (c->pool_max < c->pool_size) {
                log_error("AIRLOCK_POOL_MAX (%u) is below AIRLOCK_POOL_SIZE (%u): a pool grows from its size up to "
                          "its max",
                          c->pool_max, c->pool_size);
                return -EINVAL;
        }
        if (!c->join && (c->join_token_file || c->cluster_listen || c->advertise || c->labels)) {
                log_error("--join-token-file, --cluster-listen, --advertise and --labels need --join");
                return -EINVAL;
        }
        if (!c->node_name && (r = default_node_name(&c->node_name)) < 0)
                return r;
        if (strlen(c->socket_path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
                log_error("Socket path too long for a Unix socket (max %zu bytes): %s",
                          sizeof(((struct sockaddr_un *) NULL)->sun_path) - 1, c->socket_path);
                return -EINVAL;
        }

        *ret = TAKE_PTR(c);
        if (ret_action)
                *ret_action = action;
        return 0;
}

int node_config_export(const struct node_config *c) {
        char gib[16], base[16];
        snprintf(gib, sizeof gib, "%u", c->volume_gib);
        snprintf(base, sizeof base, "%u", (unsigned) c->vmm_uid_base);
        const struct {
                const char *name, *value;
        } vars[] = {
                { "AIRLOCK_DATA_DIR", c->data_dir },
                { "AIRLOCK_SOCKET", c->socket_path },
                { "AIRLOCK_CAP_KEYS_DIR", c->cap_keys_dir },
                { "AIRLOCK_LOG_LEVEL", level_names[c->log_level] },
                { "AIRLOCK_STORAGE", c->storage == NODE_STORAGE_COPY ? "copy" : "auto" },
                { "AIRLOCK_VOLUME_GIB", gib },
                { "AIRLOCK_VMM_UID_BASE", base },
                { "AIRLOCK_QEMU", c->qemu_binary },
                { "AIRLOCK_IMAGES_DIR", c->images_dir },
                { "AIRLOCK_GUEST_BINARY", c->guest_binary },
                { "AIRLOCK_TEMPLATES_DIR", c->templates_dir },
                { "AIRLOCK_OBJSTORE_DIR", c->objstore_dir },
                { "AIRLOCK_OBJSTORE", c->objstore_url },
                { "AIRLOCK_S3_ACCESS_KEY_FILE", c->s3_access_key_file },
                { "AIRLOCK_S3_SECRET_KEY_FILE", c->s3_secret_key_file },
                { "AIRLOCK_JOIN_TOKEN_FILE", c->join_token_file },
        };
        for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
                if (vars[i].value && setenv(vars[i].name, vars[i].value, 1) < 0)
                        return -ENOMEM;
        return 0;
}

void node_config_print(const struct node_config *c, FILE *f) {
        fprintf(f, "data_dir=%s\n", c->data_dir);
        fprintf(f, "socket=%s\n", c->socket_path);
        fprintf(f, "templates_dir=%s\n", c->templates_dir ? c->templates_dir : "(storage root)/templates");
        fprintf(f, "images_dir=%s\n", c->images_dir);
        fprintf(f, "guest_binary=%s\n", c->guest_binary);
        fprintf(f, "qemu=%s\n", c->qemu_binary);
        fprintf(f, "accel=%s\n", c->accel);
        fprintf(f, "cpu_model=%s\n", c->cpu_model);
        fputs("prebuild=", f);
        for (size_t i = 0; i < c->n_prebuild; i++)
                fprintf(f, "%s%s", i ? "," : "", c->prebuild[i]);
        fputs("\nprebuild_background=", f);
        for (size_t i = 0; i < c->n_prebuild_background; i++)
                fprintf(f, "%s%s", i ? "," : "", c->prebuild_background[i]);
        fputc('\n', f);
        fprintf(f, "storage=%s\n", c->storage == NODE_STORAGE_COPY ? "copy" : "auto");
        fprintf(f, "volume_gib=%u\n", c->volume_gib);
        fprintf(f, "log_level=%s\n", level_names[c->log_level]);
        fprintf(f, "max_sandboxes=%u\n", c->max_sandboxes);
        fprintf(f, "exec_max_output=%zu\n", c->exec_max_output);
        fprintf(f, "max_file_size=%llu\n", (unsigned long long) c->max_file_size);
        fprintf(f, "session_buffer=%zu\n", c->session_buffer);
        fprintf(f, "exec_timeout_max_s=%u\n", c->exec_timeout_max_s);
        fprintf(f, "agent_upgrade_idle_s=%u\n", c->agent_upgrade_idle_s);
        fprintf(f, "max_connections=%u\n", c->max_connections);
        fprintf(f, "pool_size=%u\n", c->pool_size);
        fprintf(f, "pool_max=%u\n", c->pool_max);
        fprintf(f, "vmm_uid_base=%u\n", (unsigned) c->vmm_uid_base);
        fprintf(f, "recover=%d\n", c->recover ? 1 : 0);
        if (c->objstore_url)
                fprintf(f, "objstore=%s\n", c->objstore_url);
        else
                fprintf(f, "objstore_dir=%s\n", c->objstore_dir ? c->objstore_dir : "(STORAGE_ROOT/objstore)");
        fprintf(f, "node_name=%s\n", c->node_name);
        fprintf(f, "cap_keys_dir=%s\n", c->cap_keys_dir);
        fprintf(f, "socket_group=%s\n", c->socket_group ? c->socket_group : "(none)");
        fprintf(f, "join=%s\n", c->join ? c->join : "(none: one machine)");
        if (c->join) {
                fprintf(f, "join_token_file=%s\n", c->join_token_file ? c->join_token_file : "(none)");
                fprintf(f, "cluster_listen=%s\n", c->cluster_listen);
                fprintf(f, "advertise=%s\n", c->advertise ? c->advertise : "(the address a replica sees)");
                fprintf(f, "labels=%s\n", c->labels ? c->labels : "");
        }
}

void node_config_usage(FILE *f) {
        fputs("Usage: airlock-node [OPTIONS]\n"
              "\n"
              "The Airlock node agent: restores sandboxes from template snapshots and\n"
              "serves docs/node-protocol.md on a Unix socket.\n"
              "\n"
              "Every option can also be set with the environment variable in brackets;\n"
              "flags override the environment.\n"
              "\n"
              "  --data-dir DIR          state directory [AIRLOCK_DATA_DIR] (/var/lib/airlock)\n"
              "  --socket PATH           listening socket [AIRLOCK_SOCKET] (DATA_DIR/run/node.sock)\n"
              "  --templates-dir DIR     built templates [AIRLOCK_TEMPLATES_DIR] (STORAGE_ROOT/templates)\n"
              "  --images-dir DIR        image recipes [AIRLOCK_IMAGES_DIR]\n"
              "  --guest-binary PATH     static airlock-guest [AIRLOCK_GUEST_BINARY]\n"
              "  --qemu PATH             QEMU binary [AIRLOCK_QEMU] (qemu-system-x86_64)\n"
              "  --accel auto|kvm|tcg    accelerator [AIRLOCK_ACCEL] (auto)\n"
              "  --cpu-model MODEL       the VMs' CPU under KVM: host, or a QEMU model every node of a\n"
              "                          cluster runs [AIRLOCK_CPU_MODEL] (host)\n"
              "  --prebuild LIST         templates built at start [AIRLOCK_PREBUILD] (minimal,python)\n"
              "  --prebuild-background LIST  built after those, health ready without them\n"
              "                          [AIRLOCK_PREBUILD_BACKGROUND] (code-interpreter)\n"
              "  --storage auto|copy     reflink/loop volume or plain copies [AIRLOCK_STORAGE] (auto)\n"
              "  --volume-gib N          size of the btrfs loop volume [AIRLOCK_VOLUME_GIB] (64)\n"
              "  --log-level LEVEL       debug|info|warn|error [AIRLOCK_LOG_LEVEL] (info)\n"
              "  --max-sandboxes N       [AIRLOCK_MAX_SANDBOXES] (64)\n"
              "  --exec-max-output SIZE  bytes kept per exec stream [AIRLOCK_EXEC_MAX_OUTPUT] (1M)\n"
              "  --max-file-size SIZE    largest file.write [AIRLOCK_MAX_FILE_SIZE] (1G)\n"
              "  --session-buffer SIZE   session replay buffer [AIRLOCK_SESSION_BUFFER] (1M)\n"
              "  --exec-timeout-max S    cap on exec timeout_s [AIRLOCK_EXEC_TIMEOUT_MAX] (86400)\n"
              "  --agent-upgrade-idle S  upgrade a sandbox's older guest agent once it was idle\n"
              "                          this long, 0: only when asked [AIRLOCK_AGENT_UPGRADE_IDLE] (60)\n"
              "  --max-connections N     concurrent clients [AIRLOCK_MAX_CONNECTIONS] (256)\n"
              "  --pool-size N           warm VMs per prebuilt template, 0-32 [AIRLOCK_POOL_SIZE] (2)\n"
              "  --pool-max N            what a pool grows to while creates outrun it, pool-size-32\n"
              "                          [AIRLOCK_POOL_MAX] (16, or pool-size if larger)\n"
              "  --vmm-uid-base N        VM uids/gids are N..N+65535 [AIRLOCK_VMM_UID_BASE] (2000000)\n"
              "  --recover 0|1           boot a sandbox again when its VM dies [AIRLOCK_RECOVER] (1)\n"
              "  --objstore-dir DIR      object store for suspended sandboxes [AIRLOCK_OBJSTORE_DIR]\n"
              "                          (STORAGE_ROOT/objstore)\n"
              "  --objstore s3://BUCKET[/PREFIX]?endpoint=URL&region=R\n"
              "                          an S3-compatible object store instead [AIRLOCK_OBJSTORE];\n"
              "                          keys from [AIRLOCK_S3_ACCESS_KEY_FILE] [AIRLOCK_S3_SECRET_KEY_FILE]\n"
              "  --node-name NAME        this node in capabilities [AIRLOCK_NODE_NAME] (host name)\n"
              "  --cap-keys-dir DIR      capability keys; public/ is read [AIRLOCK_CAP_KEYS_DIR]\n"
              "                          (DATA_DIR/control/keys)\n"
              "  --socket-group GROUP    may connect to the socket too (mode 0660)\n"
              "                          [AIRLOCK_SOCKET_GROUP] (none: 0600)\n"
              "\n"
              "In a cluster (docs/cluster.md):\n"
              "  --join HOST:PORT[,...]  replicas' cluster ports to join and heartbeat to [AIRLOCK_JOIN]\n"
              "  --join-token-file FILE  the token of `airlock nodes token`, read at the first join\n"
              "                          [AIRLOCK_JOIN_TOKEN_FILE]\n"
              "  --cluster-listen H:P    this node's TLS port for the replicas [AIRLOCK_CLUSTER_LISTEN]\n"
              "                          (0.0.0.0:7422)\n"
              "  --advertise HOST:PORT   where replicas reach that port [AIRLOCK_ADVERTISE] (the\n"
              "                          address a replica sees this node connect from)\n"
              "  --labels K=V[,K=V]      for placement [AIRLOCK_NODE_LABELS]\n"
              "\n"
              "Started as root with --join, airlock-node becomes airlock-nodemgr --worker\n"
              "[AIRLOCK_NODEMGR_BINARY]: it keeps root for the VMs' jails and the storage,\n"
              "reads the join token file, and runs this node as the user airlock-node\n"
              "(AIRLOCK_NODE_USER) with the token in its environment; AIRLOCK_PRIVSEP=0\n"
              "keeps all of it root. Several nodes on one machine need their own --data-dir\n"
              "and --vmm-uid-base ranges (65536 apart), and --cluster-listen ports or\n"
              "network namespaces of their own.\n"
              "\n"
              "  --print-config          print the configuration as key=value and exit\n"
              "  -h, --help              show this help\n"
              "  --version               print the version\n",
              f);
}
