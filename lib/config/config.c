/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "airlock-config.h"
#include "cluster.h"
#include "macros.h"
#include "util.h"

#define DEFAULT_DATA_DIR "/var/lib/airlock"
#define DEFAULT_LISTEN "127.0.0.1:7420"
#define DEFAULT_LOCAL_CLUSTER_LISTEN "127.0.0.1:7422" /* a replica with its node joined */
#define DEFAULT_LOCAL_NODE_LISTEN "127.0.0.1:7421"
#define DEFAULT_SNAPSHOT_TICK_MS 1000
#define DEFAULT_IDLE_TIMEOUT_S (6 * 3600)
#define DEFAULT_IDLE_CHECK_MS 30000
#define DEFAULT_E2B_TEMPLATES "base=python,code-interpreter-v1=code-interpreter"

static int fail(char *errbuf, size_t errlen, const char *fmt, ...) _printf_(3, 4);
static int fail(char *errbuf, size_t errlen, const char *fmt, ...) {
        if (errbuf && errlen > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(errbuf, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* Copies s into a fixed buffer; -ENAMETOOLONG when it does not fit. */
static int set_str(char *dst, size_t n, const char *s) {
        size_t l = strlen(s);
        if (l >= n)
                return -ENAMETOOLONG;
        memcpy(dst, s, l + 1);
        return 0;
}

int config_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len) {
        char host[64];
        const char *port_s;
        if (!s || !*s)
                return -EINVAL;
        if (s[0] == '[') {
                const char *end = strchr(s, ']');
                if (!end || end[1] != ':' || (size_t) (end - s - 1) >= sizeof host)
                        return -EINVAL;
                memcpy(host, s + 1, (size_t) (end - s - 1));
                host[end - s - 1] = 0;
                port_s = end + 2;
        } else {
                const char *colon = strrchr(s, ':');
                if (!colon || colon == s || (size_t) (colon - s) >= sizeof host || strchr(s, ':') != colon)
                        return -EINVAL;
                memcpy(host, s, (size_t) (colon - s));
                host[colon - s] = 0;
                port_s = colon + 1;
        }
        uint64_t port;
        if (parse_u64(port_s, 65535, &port) < 0)
                return -EINVAL;

        struct sockaddr_storage ss = { 0 };
        if (s[0] == '[') {
                struct sockaddr_in6 *a6 = (struct sockaddr_in6 *) &ss;
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t) port);
                if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
                        return -EINVAL;
                *ret_len = sizeof *a6;
        } else {
                struct sockaddr_in *a4 = (struct sockaddr_in *) &ss;
                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t) port);
                if (strcmp(host, "localhost") == 0)
                        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                else if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
                        return -EINVAL;
                *ret_len = sizeof *a4;
        }
        *ret = ss;
        return 0;
}

/* "base=python,code-interpreter-v1=code-interpreter": each E2B name once,
 * both sides template names ([A-Za-z0-9._-], not starting with '.') */
static int parse_e2b_templates(struct daemon_config *c, const char *val, const char *origin, char *errbuf,
                               size_t errlen) {
        c->n_e2b_templates = 0;
        for (const char *p = val; *p;) {
                size_t len = strcspn(p, ",");
                const char *eq = memchr(p, '=', len);
                size_t ln = eq ? (size_t) (eq - p) : 0, rn = eq ? len - ln - 1 : 0;
                if (c->n_e2b_templates == CONFIG_E2B_TEMPLATES_MAX)
                        return fail(errbuf, errlen, "%s: at most %d template names", origin, CONFIG_E2B_TEMPLATES_MAX);
                if (!eq || ln == 0 || rn == 0 || ln >= CONFIG_NAME_MAX || rn >= CONFIG_NAME_MAX)
                        return fail(errbuf, errlen, "%s: entries must be E2B_NAME=AIRLOCK_TEMPLATE, joined by ','",
                                    origin);
                char *e2b = c->e2b_templates[c->n_e2b_templates].e2b;
                char *airlock = c->e2b_templates[c->n_e2b_templates].airlock;
                memcpy(e2b, p, ln);
                e2b[ln] = 0;
                memcpy(airlock, eq + 1, rn);
                airlock[rn] = 0;
                if (!name_is_valid(e2b) || !name_is_valid(airlock))
                        return fail(errbuf, errlen, "%s: '%s=%s': template names are [A-Za-z0-9._-], not starting "
                                    "with '.'", origin, e2b, airlock);
                for (size_t i = 0; i < c->n_e2b_templates; i++)
                        if (strcmp(c->e2b_templates[i].e2b, e2b) == 0)
                                return fail(errbuf, errlen, "%s: '%s' is mapped twice", origin, e2b);
                c->n_e2b_templates++;
                p += len + (p[len] == ',');
        }
        return 0;
}

/* A DNS name of letters, digits, '-' and '.' labels (1-63 bytes each). */
static bool e2b_domain_is_valid(const char *s) {
        size_t label = 0;
        if (!*s || *s == '.')
                return false;
        for (const char *p = s; *p; p++) {
                bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
                if (*p == '.') {
                        if (label == 0)
                                return false;
                        label = 0;
                } else if (alnum || (*p == '-' && label > 0)) {
                        if (++label > 63)
                                return false;
                } else
                        return false;
        }
        return label > 0;
}

static const struct option long_options[] = {
        {"data-dir", required_argument, NULL, 'd'},
        {"listen", required_argument, NULL, 'l'},
        {"node-socket", required_argument, NULL, 's'},
        {"node-binary", required_argument, NULL, 'b'},
        {"no-spawn-node", no_argument, NULL, 'N'},
        {"database", required_argument, NULL, 'D'},
        {"store", required_argument, NULL, 'D'},
        {"cluster-listen", required_argument, NULL, 'c'},
        {"advertise", required_argument, NULL, 'a'},
        {"local-node", no_argument, NULL, 'o'},
        {"no-local-node", no_argument, NULL, 'O'},
        {"local-node-listen", required_argument, NULL, 'g'},
        {"local-node-name", required_argument, NULL, 'j'},
        {"node-lost-after-s", required_argument, NULL, 'x'},
        {"volume-quota-gib", required_argument, NULL, 'q'},
        {"volumes-max", required_argument, NULL, 'r'},
        {"webhook-open", required_argument, NULL, 'w'},
        {"log-level", required_argument, NULL, 'L'},
        {"snapshot-policy", required_argument, NULL, 'p'},
        {"snapshot-tick-ms", required_argument, NULL, 't'},
        {"idle-timeout-s", required_argument, NULL, 'i'},
        {"idle-check-ms", required_argument, NULL, 'k'},
        {"cap-keys-dir", required_argument, NULL, 'K'},
        {"kms-dir", required_argument, NULL, 'W'},
        {"console-dir", required_argument, NULL, 'G'},
        {"pkcs11-module", required_argument, NULL, 'Y'},
        {"pkcs11-token", required_argument, NULL, 'Z'},
        {"pkcs11-pin-file", required_argument, NULL, 'U'},
        {"network-default", required_argument, NULL, 'n'},
        {"e2b-templates", required_argument, NULL, 'E'},
        {"e2b-domain", required_argument, NULL, 'M'},
        {"print-config", no_argument, NULL, 'P'},
        {"check", no_argument, NULL, 'C'},
        {"json", no_argument, NULL, 'J'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
};

void config_help(FILE *f) {
        fputs("Usage: airlockd [OPTIONS]\n"
              "\n"
              "The Airlock control plane: serves the HTTP API and runs airlock-node.\n"
              "\n"
              "  --data-dir DIR       state directory (AIRLOCK_DATA_DIR, default " DEFAULT_DATA_DIR ")\n"
              "  --listen HOST:PORT   API address (AIRLOCK_LISTEN, default " DEFAULT_LISTEN ")\n"
              "  --node-socket PATH   node agent socket (AIRLOCK_NODE_SOCKET, default DIR/run/node.sock)\n"
              "  --node-binary PATH   airlock-node to spawn (AIRLOCK_NODE_BINARY)\n"
              "  --no-spawn-node      do not spawn airlock-node; connect to a running one\n"
              "  --store URL          store: sqlite:PATH, or postgres://USER@HOST/DB for a cluster of\n"
              "                       replicas (AIRLOCK_STORE; --database, AIRLOCK_DATABASE are the\n"
              "                       same; default sqlite:DIR/control/airlock.db)\n"
              "  --cluster-listen HOST:PORT\n"
              "                       serve nodes of a cluster here: joins and heartbeats, mutual\n"
              "                       TLS (AIRLOCK_CLUSTER_LISTEN; off by default; docs/cluster.md)\n"
              "  --advertise HOST:PORT\n"
              "                       the cluster address nodes reach this replica at\n"
              "                       (AIRLOCK_ADVERTISE, default the --cluster-listen address)\n"
              "  --local-node, --no-local-node\n"
              "                       run this machine's own airlock-node (AIRLOCK_LOCAL_NODE=1|0;\n"
              "                       default yes). With a shared store it joins the cluster like any\n"
              "                       worker (started as root); --no-local-node: a replica alone\n"
              "  --local-node-listen HOST:PORT\n"
              "                       where that joined node serves the replicas (AIRLOCK_LOCAL_NODE_LISTEN,\n"
              "                       default " DEFAULT_LOCAL_NODE_LISTEN "; the cluster port defaults to\n"
              "                       " DEFAULT_LOCAL_CLUSTER_LISTEN ")\n"
              "  --local-node-name NAME\n"
              "                       its name in the cluster (AIRLOCK_NODE_NAME, default the host name)\n"
              "  --node-lost-after-s S\n"
              "                       a node silent this long is lost, 3-3600 (AIRLOCK_NODE_LOST_AFTER_S,\n"
              "                       default 15)\n"
              "  --log-level LEVEL    debug|info|warn|error (AIRLOCK_LOG_LEVEL, default info)\n"
              "  --snapshot-policy JSON\n"
              "                       scheduled snapshots and their retention, applied over the\n"
              "                       built-in policy (AIRLOCK_SNAPSHOT_POLICY; keys disk_every,\n"
              "                       full_every, full_keep, tiers; see --print-config)\n"
              "  --snapshot-tick-ms MS how often the snapshot scheduler runs, 100-60000\n"
              "                       (AIRLOCK_SNAPSHOT_TICK_MS, default 1000)\n"
              "  --idle-timeout-s S   suspend a sandbox idle this long, 0 = never; a sandbox's\n"
              "                       own idle_timeout_s wins (AIRLOCK_IDLE_TIMEOUT_S, default 21600)\n"
              "  --idle-check-ms MS   how often idleness is checked, 100-600000\n"
              "                       (AIRLOCK_IDLE_CHECK_MS, default 30000)\n"
              "  --cap-keys-dir DIR   capability signing and public keys (AIRLOCK_CAP_KEYS_DIR,\n"
              "                       default DIR/control/keys; docs/security.md)\n"
              "  --kms-dir DIR        tenants' key-encryption keys, which wrap the data keys of\n"
              "                       sealed images (AIRLOCK_KMS_DIR, default DIR/control/kms; a\n"
              "                       cluster's replicas share one; docs/storage.md)\n"
              "  --console-dir DIR    the web console's files, served at / (AIRLOCK_CONSOLE_DIR,\n"
              "                       default the source tree's web/console; docs/console.md)\n"
              "  --pkcs11-module PATH, --pkcs11-token LABEL, --pkcs11-pin-file FILE\n"
              "                       a PKCS#11 token (an HSM, a cloud KMS's library) tenants may\n"
              "                       keep their key-encryption key on (AIRLOCK_PKCS11_MODULE,\n"
              "                       AIRLOCK_PKCS11_TOKEN, AIRLOCK_PKCS11_PIN_FILE; all or none)\n"
              "  --network-default MODE\n"
              "                       egress of a sandbox created without a policy whose tenant\n"
              "                       has no default: allow-all or deny-all\n"
              "                       (AIRLOCK_NETWORK_DEFAULT, default allow-all; docs/network.md)\n"
              "  --webhook-open RANGES\n"
              "                       ranges of the platform deny set webhooks may be delivered\n"
              "                       to (AIRLOCK_WEBHOOK_OPEN, CIDR,...; default none; never\n"
              "                       loopback, link-local or metadata; docs/webhooks.md)\n"
              "  --e2b-templates MAP  the Airlock template of each E2B template name, as\n"
              "                       E2B=AIRLOCK,... (AIRLOCK_E2B_TEMPLATES, default " DEFAULT_E2B_TEMPLATES ";\n"
              "                       docs/e2b.md)\n"
              "  --e2b-domain DOMAIN  the domain E2B clients build sandbox host names with, when a\n"
              "                       wildcard name points at this node (AIRLOCK_E2B_DOMAIN)\n"
              "  --print-config       print the effective configuration and exit\n"
              "  --check              check this host (root, KVM, storage, cgroups, QEMU, free\n"
              "                       space, the API port) and exit: 0 when no line says error\n"
              "  --json               with --check: print a JSON array of {item,status,detail,fix}\n"
              "  --help               show this help\n"
              "  --version            show the version\n",
              f);
}

/* A whole number of unit from min to max into *ret. */
static int apply_bounded(const char *val, unsigned min, unsigned max, const char *unit, const char *origin,
                         unsigned *ret, char *errbuf, size_t errlen) {
        uint64_t v;
        if (parse_u64(val, max, &v) < 0 || v < min)
                return fail(errbuf, errlen, "%s: must be a number of %s from %u to %u", origin, unit, min, max);
        *ret = (unsigned) v;
        return 0;
}

/* Applies one setting (from the environment or a flag) by option letter. */
static int apply(struct daemon_config *c, int opt, const char *val, const char *origin, char *errbuf,
                 size_t errlen, bool *explicit_socket, bool *explicit_db, int *local_node) {
        switch (opt) {
        case 'd':
                if (set_str(c->data_dir, sizeof c->data_dir, val) < 0)
                        return fail(errbuf, errlen, "%s: data dir too long", origin);
                return 0;
        case 'l':
                if (set_str(c->listen, sizeof c->listen, val) < 0)
                        return fail(errbuf, errlen, "%s: listen address too long", origin);
                return 0;
        case 's':
                if (set_str(c->node_socket, sizeof c->node_socket, val) < 0)
                        return fail(errbuf, errlen, "%s: node socket path longer than %zu bytes", origin,
                                    sizeof c->node_socket - 1);
                *explicit_socket = true;
                return 0;
        case 'b':
                if (set_str(c->node_binary, sizeof c->node_binary, val) < 0)
                        return fail(errbuf, errlen, "%s: node binary path too long", origin);
                return 0;
        case 'K':
                if (val[0] != '/' || set_str(c->cap_keys_dir, sizeof c->cap_keys_dir, val) < 0)
                        return fail(errbuf, errlen, "%s: must be an absolute path, at most %zu bytes", origin,
                                    sizeof c->cap_keys_dir - 1);
                return 0;
        case 'Y':
        case 'U':
                if (val[0] != '/' || set_str(opt == 'Y' ? c->pkcs11_module : c->pkcs11_pin_file,
                                             sizeof c->pkcs11_module, val) < 0)
                        return fail(errbuf, errlen, "%s: must be an absolute path, at most %zu bytes", origin,
                                    sizeof c->pkcs11_module - 1);
                return 0;
        case 'Z':
                if (!*val || set_str(c->pkcs11_token, sizeof c->pkcs11_token, val) < 0)
                        return fail(errbuf, errlen, "%s: a token label of 1-32 characters", origin);
                return 0;
        case 'G':
                if (val[0] != '/' || set_str(c->console_dir, sizeof c->console_dir, val) < 0)
                        return fail(errbuf, errlen, "%s: must be an absolute path, at most %zu bytes", origin,
                                    sizeof c->console_dir - 1);
                return 0;
        case 'W':
                if (val[0] != '/' || set_str(c->kms_dir, sizeof c->kms_dir, val) < 0)
                        return fail(errbuf, errlen, "%s: must be an absolute path, at most %zu bytes", origin,
                                    sizeof c->kms_dir - 1);
                return 0;
        case 'Q':
                if (set_str(c->qemu_binary, sizeof c->qemu_binary, val) < 0)
                        return fail(errbuf, errlen, "%s: QEMU binary path too long", origin);
                return 0;
        case 'A':
                if (strcmp(val, "auto") != 0 && strcmp(val, "kvm") != 0 && strcmp(val, "tcg") != 0)
                        return fail(errbuf, errlen, "%s: must be auto, kvm or tcg", origin);
                (void) set_str(c->accel, sizeof c->accel, val);
                return 0;
        case 'u':
                if (set_str(c->cpu_model, sizeof c->cpu_model, val) < 0 || !*val ||
                    strspn(val, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(val))
                        return fail(errbuf, errlen, "%s: must be host or a QEMU CPU model name", origin);
                return 0;
        case 'c':
                if (set_str(c->cluster_listen, sizeof c->cluster_listen, val) < 0 || !cluster_address_valid(val))
                        return fail(errbuf, errlen, "%s: must be HOST:PORT", origin);
                return 0;
        case 'a':
                if (set_str(c->advertise, sizeof c->advertise, val) < 0 || !cluster_address_valid(val))
                        return fail(errbuf, errlen, "%s: must be HOST:PORT (how nodes reach this replica)", origin);
                return 0;
        case 'o':
        case 'O':
                if (strcmp(val, "1") != 0 && strcmp(val, "0") != 0)
                        return fail(errbuf, errlen, "%s: must be 1 or 0", origin);
                *local_node = val[0] == '1';
                return 0;
        case 'g':
                if (set_str(c->local_node_listen, sizeof c->local_node_listen, val) < 0 ||
                    !cluster_address_valid(val))
                        return fail(errbuf, errlen, "%s: must be HOST:PORT", origin);
                return 0;
        case 'j':
                if (!name_is_valid(val))
                        return fail(errbuf, errlen, "%s: must be a name of [A-Za-z0-9._-], 64 at most", origin);
                (void) set_str(c->local_node_name, sizeof c->local_node_name, val);
                return 0;
        case 'x':
                return apply_bounded(val, 3, 3600, "seconds", origin, &c->node_lost_after_s, errbuf, errlen);
        case 'q':
                return apply_bounded(val, 1, 1u << 24, "GiB", origin, &c->volume_quota_gib, errbuf, errlen);
        case 'r':
                return apply_bounded(val, 1, 100000, "volumes", origin, &c->volumes_max, errbuf, errlen);
        case 'w': {
                char msg[NETPOLICY_ERR_MAX];
                if (netpolicy_platform_parse(val, &c->webhook_platform, msg, sizeof msg) < 0)
                        return fail(errbuf, errlen, "%s: %s", origin, msg);
                return 0;
        }
        case 'D':
                if (set_str(c->database, sizeof c->database, val) < 0)
                        return fail(errbuf, errlen, "%s: database URL too long", origin);
                *explicit_db = true;
                return 0;
        case 'L':
                if (log_level_from_string(val, &c->log_level) < 0)
                        return fail(errbuf, errlen, "%s: log level must be debug, info, warn or error", origin);
                return 0;
        case 'p': {
                /* over what is set so far: the built-in policy, or the
                 * environment's under a flag */
                _cleanup_free_ char *msg = NULL;
                int r = retention_policy_from_string(val, &c->snapshot_policy, &c->snapshot_policy, &msg);
                if (r == -ENOMEM)
                        return fail(errbuf, errlen, "%s: out of memory", origin);
                if (r < 0)
                        return fail(errbuf, errlen, "%s: %s", origin, msg ? msg : "invalid snapshot policy");
                return 0;
        }
        case 'n': {
                enum netpolicy_mode m;
                /* an allowlist needs rules: that is a tenant's default or a sandbox's own */
                if (netpolicy_mode_from_string(val, &m) < 0 || m == NETPOLICY_ALLOWLIST)
                        return fail(errbuf, errlen, "%s: must be allow-all or deny-all", origin);
                c->network_default = m;
                return 0;
        }
        case 'E':
                return parse_e2b_templates(c, val, origin, errbuf, errlen);
        case 'M':
                if (strlen(val) >= sizeof c->e2b_domain || !e2b_domain_is_valid(val))
                        return fail(errbuf, errlen, "%s: must be a DNS name (letters, digits, '-' and '.')", origin);
                (void) set_str(c->e2b_domain, sizeof c->e2b_domain, val);
                return 0;
        case 'i':
                return apply_bounded(val, 0, CONFIG_IDLE_TIMEOUT_S_MAX, "seconds", origin, &c->idle_timeout_s, errbuf,
                                     errlen);
        case 'k':
                return apply_bounded(val, CONFIG_IDLE_CHECK_MS_MIN, CONFIG_IDLE_CHECK_MS_MAX, "milliseconds", origin,
                                     &c->idle_check_ms, errbuf, errlen);
        case 't':
                return apply_bounded(val, CONFIG_SNAPSHOT_TICK_MS_MIN, CONFIG_SNAPSHOT_TICK_MS_MAX, "milliseconds",
                                     origin, &c->snapshot_tick_ms, errbuf, errlen);
        default:
                return fail(errbuf, errlen, "unknown option");
        }
}

int config_load(int argc, char **argv, struct daemon_config *ret, char *errbuf, size_t errlen) {
        struct daemon_config c = {
                .action = CONFIG_RUN,
                .spawn_node = true,
                .log_level = LOG_LEVEL_INFO,
                .max_json_body = 1u << 20,
                .max_upload = 1ull << 30,
                .max_connections = 256,
                .conn_timeout_s = 120,
                .exec_max_timeout_s = 24 * 3600,
                .exec_max_output = 256u << 10,
                .node_timeout_s = 60,
                .create_timeout_s = 15 * 60,
                .node_start_timeout_s = 60,
                .snapshot_policy = retention_policy_default,
                .snapshot_tick_ms = DEFAULT_SNAPSHOT_TICK_MS,
                .idle_timeout_s = DEFAULT_IDLE_TIMEOUT_S,
                .idle_check_ms = DEFAULT_IDLE_CHECK_MS,
                .network_default = NETPOLICY_ALLOW_ALL,
                .node_lost_after_s = 15,
                .heartbeat_ms = 2000,
                .volume_quota_gib = 1024,
                .volumes_max = 100,
        };
        bool explicit_socket = false, explicit_db = false;
        int local_node = -1; /* unset: decided from the store below */
        int r;

        (void) set_str(c.data_dir, sizeof c.data_dir, DEFAULT_DATA_DIR);
        (void) set_str(c.listen, sizeof c.listen, DEFAULT_LISTEN);
        (void) set_str(c.node_binary, sizeof c.node_binary, AIRLOCK_NODE_PATH);
        (void) set_str(c.qemu_binary, sizeof c.qemu_binary, "qemu-system-x86_64");
        (void) set_str(c.accel, sizeof c.accel, "auto");
        (void) set_str(c.cpu_model, sizeof c.cpu_model, "host");
        r = parse_e2b_templates(&c, DEFAULT_E2B_TEMPLATES, "default", errbuf, errlen);
        if (r < 0)
                return r;

        static const struct {
                const char *name;
                int opt;
        } envs[] = {
                {"AIRLOCK_DATA_DIR", 'd'},        {"AIRLOCK_LISTEN", 'l'},
                {"AIRLOCK_NODE_SOCKET", 's'},     {"AIRLOCK_NODE_BINARY", 'b'},
                {"AIRLOCK_DATABASE", 'D'},        {"AIRLOCK_LOG_LEVEL", 'L'},
                {"AIRLOCK_SNAPSHOT_POLICY", 'p'}, {"AIRLOCK_SNAPSHOT_TICK_MS", 't'},
                {"AIRLOCK_IDLE_TIMEOUT_S", 'i'},  {"AIRLOCK_IDLE_CHECK_MS", 'k'},
                {"AIRLOCK_CAP_KEYS_DIR", 'K'},    {"AIRLOCK_QEMU", 'Q'},
                {"AIRLOCK_ACCEL", 'A'},           {"AIRLOCK_NETWORK_DEFAULT", 'n'},
                {"AIRLOCK_E2B_TEMPLATES", 'E'},   {"AIRLOCK_E2B_DOMAIN", 'M'},
                {"AIRLOCK_STORE", 'D'},           {"AIRLOCK_CLUSTER_LISTEN", 'c'},
                {"AIRLOCK_ADVERTISE", 'a'},       {"AIRLOCK_LOCAL_NODE", 'o'},
                {"AIRLOCK_NODE_LOST_AFTER_S", 'x'}, {"AIRLOCK_KMS_DIR", 'W'},
                {"AIRLOCK_PKCS11_MODULE", 'Y'},   {"AIRLOCK_PKCS11_TOKEN", 'Z'},
                {"AIRLOCK_PKCS11_PIN_FILE", 'U'}, {"AIRLOCK_CONSOLE_DIR", 'G'},
                {"AIRLOCK_CPU_MODEL", 'u'},
                {"AIRLOCK_VOLUME_QUOTA_GIB", 'q'}, {"AIRLOCK_VOLUMES_MAX", 'r'},
                {"AIRLOCK_LOCAL_NODE_LISTEN", 'g'}, {"AIRLOCK_NODE_NAME", 'j'},
                {"AIRLOCK_WEBHOOK_OPEN", 'w'},
        };
        for (size_t i = 0; i < ARRAY_SIZE(envs); i++) {
                const char *v = getenv(envs[i].name);
                if (!v || !*v)
                        continue;
                r = apply(&c, envs[i].opt, v, envs[i].name, errbuf, errlen, &explicit_socket, &explicit_db, &local_node);
                if (r < 0)
                        return r;
        }

        optind = 0; /* full reset: config_load may run more than once (tests) */
        opterr = 0;
        for (;;) {
                int opt = getopt_long(argc, argv, "+", long_options, NULL);
                if (opt == -1)
                        break;
                switch (opt) {
                case 'N':
                        c.spawn_node = false;
                        break;
                case 'o':
                case 'O':
                        local_node = opt == 'o';
                        break;
                case 'P':
                        c.action = CONFIG_PRINT;
                        break;
                case 'h':
                        c.action = CONFIG_HELP;
                        break;
                case 'V':
                        c.action = CONFIG_VERSION;
                        break;
                case 'C': c.action = CONFIG_CHECK; break;
                case 'J': c.json = true; break;
                case '?':
                        return fail(errbuf, errlen, "unknown or incomplete option '%s'",
                                    optind > 0 && optind <= argc ? argv[optind - 1] : "?");
                default: {
                        const struct option *o = long_options;
                        while (o->name && o->val != opt)
                                o++;
                        char origin[64];
                        snprintf(origin, sizeof origin, "--%s", o->name ? o->name : "?");
                        r = apply(&c, opt, optarg, origin, errbuf, errlen, &explicit_socket, &explicit_db, &local_node);
                        if (r < 0)
                                return r;
                }
                }
        }
        if (optind < argc)
                return fail(errbuf, errlen, "unexpected argument '%s'", argv[optind]);
        if (c.json && c.action != CONFIG_CHECK)
                return fail(errbuf, errlen, "--json goes with --check");

        /* validation and derived values */
        if (c.data_dir[0] != '/')
                return fail(errbuf, errlen, "data dir '%s' must be an absolute path", c.data_dir);
        size_t dl = strlen(c.data_dir);
        while (dl > 1 && c.data_dir[dl - 1] == '/')
                c.data_dir[--dl] = 0;
        if (config_parse_listen(c.listen, &c.listen_addr, &c.listen_addr_len) < 0)
                return fail(errbuf, errlen, "listen address '%s' must be IPV4:PORT or [IPV6]:PORT", c.listen);
        if (!explicit_socket &&
            snprintf(c.node_socket, sizeof c.node_socket, "%s/run/node.sock", c.data_dir) >= (int) sizeof c.node_socket)
                return fail(errbuf, errlen, "data dir too long for a Unix socket path; set --node-socket");
        if (c.node_socket[0] != '/')
                return fail(errbuf, errlen, "node socket '%s' must be an absolute path", c.node_socket);
        if (snprintf(c.control_dir, sizeof c.control_dir, "%s/control", c.data_dir) >= (int) sizeof c.control_dir)
                return fail(errbuf, errlen, "data dir too long");
        if (!explicit_db &&
            snprintf(c.database, sizeof c.database, "sqlite:%s/airlock.db", c.control_dir) >= (int) sizeof c.database)
                return fail(errbuf, errlen, "data dir too long");
        if (!strchr(c.database, ':'))
                return fail(errbuf, errlen, "database '%s' must be a URL like sqlite:/path/airlock.db", c.database);
        if ((c.pkcs11_module[0] || c.pkcs11_token[0] || c.pkcs11_pin_file[0]) &&
            !(c.pkcs11_module[0] && c.pkcs11_token[0] && c.pkcs11_pin_file[0]))
                return fail(errbuf, errlen, "a PKCS#11 token needs all three of AIRLOCK_PKCS11_MODULE, "
                            "AIRLOCK_PKCS11_TOKEN and AIRLOCK_PKCS11_PIN_FILE");
        if (!c.console_dir[0])
                snprintf(c.console_dir, sizeof c.console_dir, "%s", AIRLOCK_CONSOLE_PATH);
        if (!c.kms_dir[0] &&
            snprintf(c.kms_dir, sizeof c.kms_dir, "%s/kms", c.control_dir) >= (int) sizeof c.kms_dir)
                return fail(errbuf, errlen, "the data directory's path is too long for DIR/control/kms");
        if (!c.cap_keys_dir[0] &&
            snprintf(c.cap_keys_dir, sizeof c.cap_keys_dir, "%s/keys", c.control_dir) >= (int) sizeof c.cap_keys_dir)
                return fail(errbuf, errlen, "data dir too long");
        if (c.spawn_node && c.node_binary[0] == 0)
                return fail(errbuf, errlen, "node binary must not be empty");
        /* a shared store's replicas place on joined nodes only: "the
         * local node" (a row without node) would be a different machine
         * for each replica. This machine's node joins like any other,
         * over the loopback unless told otherwise; SQLite keeps its own
         * node on the Unix socket */
        c.shared_store = strncmp(c.database, "sqlite:", 7) != 0;
        c.join_local = c.shared_store && local_node != 0;
        c.local_node = !c.shared_store && local_node != 0;
        if (!c.local_node)
                c.spawn_node = false;
        if (c.join_local && !c.cluster_listen[0] && !c.advertise[0])
                (void) set_str(c.cluster_listen, sizeof c.cluster_listen, DEFAULT_LOCAL_CLUSTER_LISTEN);
        if (!c.local_node_listen[0])
                (void) set_str(c.local_node_listen, sizeof c.local_node_listen, DEFAULT_LOCAL_NODE_LISTEN);
        if (!c.local_node_name[0])
                node_name_default(c.local_node_name);
        if (c.advertise[0] && !c.cluster_listen[0])
                return fail(errbuf, errlen, "--advertise goes with --cluster-listen");
        if (!c.advertise[0])
                snprintf(c.advertise, sizeof c.advertise, "%s", c.cluster_listen);

        *ret = c;
        return 0;
}

void config_print(const struct daemon_config *c, FILE *f) {
        static const char *const levels[] = { "debug", "info", "warn", "error" };
        _cleanup_(json_decrefp) json_t *policy = retention_policy_json(&c->snapshot_policy);
        _cleanup_free_ char *policy_s = policy ? json_dumps(policy, JSON_COMPACT) : NULL;
        fprintf(f,
                "data_dir=%s\nlisten=%s\ndatabase=%s\nnode_socket=%s\nnode_binary=%s\nspawn_node=%s\n"
                "log_level=%s\nmax_json_body=%llu\nmax_upload=%llu\nmax_connections=%u\n"
                "conn_timeout_s=%u\nexec_max_timeout_s=%u\nexec_max_output=%u\nnode_timeout_s=%u\n"
                "create_timeout_s=%u\nnode_start_timeout_s=%u\n",
                c->data_dir, c->listen, c->database, c->node_socket, c->node_binary, c->spawn_node ? "yes" : "no",
                levels[c->log_level], (unsigned long long) c->max_json_body, (unsigned long long) c->max_upload,
                c->max_connections, c->conn_timeout_s, c->exec_max_timeout_s, c->exec_max_output,
                c->node_timeout_s, c->create_timeout_s, c->node_start_timeout_s);
        fprintf(f, "snapshot_policy=%s\nsnapshot_tick_ms=%u\n", policy_s ? policy_s : "?", c->snapshot_tick_ms);
        fprintf(f, "idle_timeout_s=%u\nidle_check_ms=%u\n", c->idle_timeout_s, c->idle_check_ms);
        fprintf(f, "cap_keys_dir=%s\n", c->cap_keys_dir);
        fprintf(f, "kms_dir=%s\n", c->kms_dir);
        fprintf(f, "console_dir=%s\n", c->console_dir);
        fprintf(f, "pkcs11=%s%s%s\n", c->pkcs11_module[0] ? c->pkcs11_module : "(none)",
                c->pkcs11_token[0] ? " token " : "", c->pkcs11_token);
        fprintf(f, "qemu=%s\naccel=%s\ncpu_model=%s\n", c->qemu_binary, c->accel, c->cpu_model);
        fprintf(f, "network_default=%s\n", netpolicy_mode_to_string(c->network_default));
        fprintf(f, "e2b_templates=");
        for (size_t i = 0; i < c->n_e2b_templates; i++)
                fprintf(f, "%s%s=%s", i ? "," : "", c->e2b_templates[i].e2b, c->e2b_templates[i].airlock);
        fprintf(f, "\ne2b_domain=%s\n", c->e2b_domain);
        fprintf(f, "cluster_listen=%s\nadvertise=%s\nlocal_node=%s\nnode_lost_after_s=%u\nheartbeat_ms=%u\n",
                c->cluster_listen, c->advertise, c->local_node ? "yes" : c->join_local ? "joined" : "no",
                c->node_lost_after_s, c->heartbeat_ms);
        if (c->join_local)
                fprintf(f, "local_node_name=%s\nlocal_node_listen=%s\n", c->local_node_name, c->local_node_listen);
        fprintf(f, "volume_quota_gib=%u\nvolumes_max=%u\n", c->volume_quota_gib, c->volumes_max);
        _cleanup_free_ char *open = NULL;
        fprintf(f, "webhook_open=%s\n",
                netpolicy_platform_format(&c->webhook_platform, &open) >= 0 ? open : "?");
}

int config_start_failedv(const char *prog, bool check_hint, int r, const char *fmt, va_list ap) {
        char what[1024];
        errno = r < 0 ? -r : r;
        vsnprintf(what, sizeof what, fmt, ap);
        /* one fprintf: one write, also on an unbuffered stderr */
        fprintf(stderr, "%s: error: %s\n%s%s", prog, what, check_hint ? prog : "",
                check_hint ? ": the log lines above say more; `airlockd --check` checks this host\n" : "");
        fflush(stderr);
        return r;
}

int config_start_failed(int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        r = config_start_failedv("airlockd", true, r, fmt, ap);
        va_end(ap);
        return r;
}
