/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node agent's configuration: one immutable struct built from defaults,
 * then the environment (AIRLOCK_*), then command-line flags, validated once
 * at start. Nothing changes it afterwards.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

enum node_storage_mode {
        NODE_STORAGE_AUTO, /* reflink where possible, btrfs loop volume otherwise */
        NODE_STORAGE_COPY, /* plain copies, never a loop volume */
};

#define NODE_PREBUILD_MAX 32
#define NODE_POOL_SIZE_MAX 32
#define NODE_VMM_UIDS 65536u

struct node_config {
        char *data_dir;      /* --data-dir, AIRLOCK_DATA_DIR */
        char *socket_path;   /* --socket, AIRLOCK_SOCKET; default DATA_DIR/run/node.sock */
        char *templates_dir; /* AIRLOCK_TEMPLATES_DIR; NULL: STORAGE_ROOT/templates */
        char *images_dir;    /* AIRLOCK_IMAGES_DIR: kernel.sh, initramfs.sh, templates/<name>.sh */
        char *guest_binary;  /* AIRLOCK_GUEST_BINARY: the static airlock-guest */
        char *qemu_binary;   /* AIRLOCK_QEMU */
        char *accel;         /* AIRLOCK_ACCEL: auto|kvm|tcg */
        char *cpu_model;     /* AIRLOCK_CPU_MODEL: "host" or a QEMU CPU model (KVM; TCG's VMs get "max") */
        char **prebuild;     /* AIRLOCK_PREBUILD, NULL-terminated list of template names */
        size_t n_prebuild;
        char **prebuild_background; /* AIRLOCK_PREBUILD_BACKGROUND: built after those, not waited for */
        size_t n_prebuild_background;
        enum node_storage_mode storage; /* AIRLOCK_STORAGE */
        unsigned volume_gib;            /* AIRLOCK_VOLUME_GIB: size of the sparse btrfs loop volume */
        enum log_level log_level;       /* AIRLOCK_LOG_LEVEL */

        /* limits */
        unsigned max_sandboxes;      /* AIRLOCK_MAX_SANDBOXES */
        size_t exec_max_output;      /* AIRLOCK_EXEC_MAX_OUTPUT: bytes kept per stream of one exec */
        uint64_t max_file_size;      /* AIRLOCK_MAX_FILE_SIZE: largest file.write */
        size_t session_buffer;       /* AIRLOCK_SESSION_BUFFER: replay buffer per session */
        unsigned exec_timeout_max_s; /* AIRLOCK_EXEC_TIMEOUT_MAX: cap on exec timeout_s */
        unsigned agent_upgrade_idle_s; /* AIRLOCK_AGENT_UPGRADE_IDLE: idle before an older agent is upgraded;
                                          0 = never by itself */
        unsigned max_connections;    /* AIRLOCK_MAX_CONNECTIONS: concurrent client connections */
        unsigned pool_size;          /* AIRLOCK_POOL_SIZE: warm VMs per prebuilt template, 0 = none */
        unsigned pool_max;           /* AIRLOCK_POOL_MAX: what a pool may grow to under demand (>= pool_size) */
        uint32_t vmm_uid_base;       /* AIRLOCK_VMM_UID_BASE: VM uid/gid = base + slot, slot < NODE_VMM_UIDS */
        bool recover;                /* AIRLOCK_RECOVER: boot a sandbox again when its VM dies */
        char *objstore_dir;          /* AIRLOCK_OBJSTORE_DIR: local object store; NULL = STORAGE_ROOT/objstore */
        char *objstore_url;          /* AIRLOCK_OBJSTORE as s3://...: an S3 store instead (NULL: local) */
        char *s3_access_key_file;    /* AIRLOCK_S3_ACCESS_KEY_FILE */
        char *s3_secret_key_file;    /* AIRLOCK_S3_SECRET_KEY_FILE */
        char *node_name;             /* AIRLOCK_NODE_NAME: this node in capabilities; default the host name */
        char *cap_keys_dir;          /* AIRLOCK_CAP_KEYS_DIR: public/ holds the capability keys; DATA_DIR/control/keys */
        char *socket_group;          /* AIRLOCK_SOCKET_GROUP: the group that may connect too (airlockd's) */

        /* a cluster (membership.h): all NULL on one machine */
        char *join;            /* AIRLOCK_JOIN: replicas' cluster ports, HOST:PORT[,HOST:PORT...] */
        char *join_token_file; /* AIRLOCK_JOIN_TOKEN_FILE: read at the first join only */
        char *cluster_listen;  /* AIRLOCK_CLUSTER_LISTEN: this node's TLS port (0.0.0.0:7422) */
        char *advertise;       /* AIRLOCK_ADVERTISE: HOST:PORT replicas reach it at (default: found) */
        char *labels;          /* AIRLOCK_NODE_LABELS: k=v,k2=v2 for placement */
};

enum node_config_action {
        NODE_CONFIG_RUN,
        NODE_CONFIG_PRINT, /* --print-config */
        NODE_CONFIG_HELP,  /* --help */
        NODE_CONFIG_VERSION, /* --version */
};

/* Builds the configuration from defaults, the environment and argv (flags
 * win). Logs what is wrong and returns -EINVAL on an invalid value or flag.
 * ret_action says whether to run, print the config or print the usage. */
int node_config_load(int argc, char *argv[], struct node_config **ret, enum node_config_action *ret_action);

/* Puts what airlock-nodemgr reads to prepare this node into the
 * environment, resolved, under the node's own names: AIRLOCK_DATA_DIR,
 * AIRLOCK_SOCKET, AIRLOCK_CAP_KEYS_DIR, AIRLOCK_LOG_LEVEL, AIRLOCK_STORAGE,
 * AIRLOCK_VOLUME_GIB, AIRLOCK_VMM_UID_BASE, AIRLOCK_QEMU,
 * AIRLOCK_IMAGES_DIR, AIRLOCK_GUEST_BINARY, and AIRLOCK_TEMPLATES_DIR,
 * AIRLOCK_OBJSTORE_DIR, AIRLOCK_OBJSTORE, AIRLOCK_S3_ACCESS_KEY_FILE,
 * AIRLOCK_S3_SECRET_KEY_FILE, AIRLOCK_JOIN_TOKEN_FILE when set. A node loading
 * its configuration again (from this environment and the same flags) gets
 * the same one. What airlock-node started as root with --join does before
 * it becomes airlock-nodemgr --worker. */
int node_config_export(const struct node_config *c);

/* NULL-safe. */
void node_config_free(struct node_config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct node_config *, node_config_free);

/* Writes the configuration as key=value lines (the --print-config output). */
void node_config_print(const struct node_config *c, FILE *f);

/* Writes the --help text. */
void node_config_usage(FILE *f);

/* Parses a byte size: a decimal number with an optional K, M, G or T suffix
 * (powers of 1024, "KiB"/"MiB"... also accepted). -EINVAL / -ERANGE. */
int node_parse_size(const char *s, uint64_t max, uint64_t *ret);
