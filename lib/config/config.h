/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The one machine's configuration: airlockd's, which airlock-nodemgr (what
 * airlockd started as root becomes) reads the same way from the same
 * arguments. One immutable struct, built once at start from defaults, then
 * the environment (AIRLOCK_*), then command-line flags, and validated
 * before anything runs. `airlockd --print-config` shows it. It logs
 * nothing: config_load() says what is wrong in errbuf, and
 * config_start_failed() writes what a start that failed says on stderr.
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "log.h"
#include "macros.h"
#include "netpolicy.h"
#include "retention.h"

#define CONFIG_PATH_MAX 4096
#define CONFIG_SNAPSHOT_TICK_MS_MIN 100
#define CONFIG_SNAPSHOT_TICK_MS_MAX 60000
#define CONFIG_IDLE_TIMEOUT_S_MAX (365 * 24 * 3600)
#define CONFIG_IDLE_CHECK_MS_MIN 100
#define CONFIG_IDLE_CHECK_MS_MAX 600000
#define CONFIG_E2B_TEMPLATES_MAX 16 /* E2B template names mapped onto Airlock templates */
#define CONFIG_NAME_MAX 64

/* airlockd's exit status when its start failed before it served the API:
 * airlock-nodemgr then stops the node instead of handing VMs over (status
 * 2 is a configuration error, 1 a failure while serving). */
#define AIRLOCKD_EXIT_START_FAILED 3
/* One machine on a shared store (join_local): the join token airlockd
 * writes into CONTROL_DIR at each start, for the node airlock-nodemgr
 * starts; and the variable airlock-nodemgr sets for the airlockd it starts
 * in that mode (the only way such an airlockd runs unprivileged). */
#define CONFIG_LOCAL_NODE_TOKEN_FILE "local-node.token"
#define CONFIG_LOCAL_NODE_ENV "AIRLOCK_LOCAL_NODE_BY_NODEMGR"

enum config_action {
        CONFIG_RUN,
        CONFIG_PRINT,   /* --print-config */
        CONFIG_HELP,    /* --help */
        CONFIG_VERSION, /* --version */
        CONFIG_CHECK,   /* --check: the host checks of check.h, then exit */
};

struct daemon_config {
        enum config_action action;

        char data_dir[CONFIG_PATH_MAX];    /* absolute; root's: holds control/, run/ and the node's storage */
        char control_dir[CONFIG_PATH_MAX + 16]; /* DATA_DIR/control: airlockd's own (airlock.db, admin.token, keys/) */
        char listen[128];                  /* as given: "127.0.0.1:7420" or "[::1]:7420" */
        struct sockaddr_storage listen_addr; /* parsed form of listen */
        socklen_t listen_addr_len;
        char database[CONFIG_PATH_MAX + 16]; /* store URL, "sqlite:DATA_DIR/airlock.db" */
        char node_socket[108];               /* sun_path limit */
        char node_binary[CONFIG_PATH_MAX];
        char cap_keys_dir[CONFIG_PATH_MAX];  /* capability keys (cap-keydir.h), default CONTROL_DIR/keys */
        char kms_dir[CONFIG_PATH_MAX];       /* tenants' KEKs (datakey.h), default CONTROL_DIR/kms */
        char console_dir[CONFIG_PATH_MAX];   /* the web console's static files (console.h) */
        /* a PKCS#11 token tenants may keep their KEK on (all empty: none) */
        char pkcs11_module[CONFIG_PATH_MAX];
        char pkcs11_token[33];
        char pkcs11_pin_file[CONFIG_PATH_MAX];
        bool spawn_node;
        bool json; /* --json: --check prints a JSON array */
        enum log_level log_level;
        /* the node's settings airlockd's checks look at (check.h); the node
         * reads them from the environment itself */
        char qemu_binary[CONFIG_PATH_MAX]; /* AIRLOCK_QEMU, default qemu-system-x86_64 (on PATH) */
        char accel[16];                    /* AIRLOCK_ACCEL: auto, kvm or tcg */
        char cpu_model[64];                /* AIRLOCK_CPU_MODEL: host or a QEMU CPU model (KVM) */

        /* limits */
        uint64_t max_json_body;   /* bytes of one JSON request body */
        uint64_t max_upload;      /* bytes of one file upload */
        unsigned max_connections; /* concurrent HTTP connections */
        unsigned conn_timeout_s;  /* idle HTTP connection timeout */
        unsigned exec_max_timeout_s; /* largest timeout_s an exec may ask for */
        uint32_t exec_max_output;    /* bytes of stdout / stderr kept per exec */
        unsigned node_timeout_s;     /* default wait for a node reply */
        unsigned create_timeout_s;   /* wait for sandbox.create (template builds) */
        unsigned node_start_timeout_s; /* wait for a spawned node's socket */

        /* the snapshot scheduler (scheduler.h) */
        struct retention_policy snapshot_policy; /* global; a sandbox's own policy applies over it */
        unsigned snapshot_tick_ms;               /* how often it looks at the sandboxes */

        /* idle suspend (idle.h) */
        unsigned idle_timeout_s; /* default for sandboxes without their own; 0: never */
        unsigned idle_check_ms;  /* how often idleness is checked */

        /* egress: the policy of a sandbox created without one whose tenant
         * has no default either (allow-all or deny-all) */
        enum netpolicy_mode network_default;

        /* the E2B front door (docs/e2b.md): the Airlock template each E2B
         * template name stands for (a name without an entry is taken as an
         * Airlock template's own), and the domain E2B's host names use
         * (empty: the SDK's own default) */
        struct {
                char e2b[CONFIG_NAME_MAX];
                char airlock[CONFIG_NAME_MAX];
        } e2b_templates[CONFIG_E2B_TEMPLATES_MAX];
        size_t n_e2b_templates;
        char e2b_domain[254];

        /* a cluster (docs/cluster.md): where this replica serves nodes
         * (HOST:PORT; empty: no cluster port, the local node only), the
         * address nodes are told to reach it at (default: cluster_listen),
         * whether sandboxes may be placed on this machine's own node (off
         * by default when cluster_listen is set and the store is not
         * SQLite), and how long a node may stay silent before it is lost */
        bool shared_store; /* the store is not SQLite: other replicas may share it */
        char cluster_listen[128];
        char advertise[128];
        bool local_node;
        /* one machine on a shared store: this machine's node runs too,
         * joined to the cluster like any worker's (airlock-nodemgr starts
         * it with a join token this replica writes), named local_node_name
         * and serving replicas at local_node_listen */
        bool join_local;
        char local_node_listen[128];
        char local_node_name[65];
        unsigned node_lost_after_s;
        unsigned heartbeat_ms; /* how often nodes are asked to beat */
        /* volumes (docs/volumes.md): what one owner (a tenant, or the
         * admin) may have, in all and in number */
        unsigned volume_quota_gib;
        unsigned volumes_max;
        /* webhooks (docs/webhooks.md): the ranges of the platform deny
         * set their targets may be in (AIRLOCK_WEBHOOK_OPEN; nothing by
         * default), apart from what sandboxes may reach */
        struct netpolicy_platform webhook_platform;
};

/*
 * Builds the configuration from defaults, the environment and argv (argv[0]
 * is skipped). On error, writes a one-line reason to errbuf and returns
 * -EINVAL; *ret is written only on success.
 */
int config_load(int argc, char **argv, struct daemon_config *ret, char *errbuf, size_t errlen);
/* Writes the configuration as KEY=VALUE lines (what --print-config shows). */
void config_print(const struct daemon_config *c, FILE *f);
/* Writes the --help text. */
void config_help(FILE *f);
/*
 * Parses "HOST:PORT" (IPv4 dotted quad, "localhost", or "[IPv6]") into a
 * socket address. Port 0 means "any free port". -EINVAL when malformed.
 */
int config_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/*
 * Says on stderr why a start failed, for whoever started the program:
 * "PROG: error: WHAT" (errno is set from r, so %m in fmt names it) and,
 * with check_hint, a line on where to look (the log lines before it,
 * `airlockd --check`). Returns r.
 */
int config_start_failedv(const char *prog, bool check_hint, int r, const char *fmt, va_list ap) _printf_(4, 0);
/* airlockd's (airlock-nodemgr speaks for it): "airlockd", with the hint. */
int config_start_failed(int r, const char *fmt, ...) _printf_(2, 3);
