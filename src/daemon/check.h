/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Host checks: what a fresh machine needs for Airlock, one item each
 * (`airlockd --check`, `airlock doctor`), and the few of them airlockd's
 * start refuses to go on without (check_startup()).
 *
 *   user     root or not (airlockd starts as root and drops privileges)
 *   accel    KVM or TCG and why, as the node will see it
 *   storage  reflinks on the data dir's file system, or the loop volume
 *   cgroups  v2 with cpu, memory, pids (or v1): the VMs' limits
 *   namespaces the ones the VMM jail makes; user namespaces (not needed)
 *   qemu     the binary and its version against CHECK_QEMU_MIN_*
 *   space    free space of the data dir's file system (and the volume's)
 *   format   the data dir's format (DATA_DIR/control/format)
 *   binaries airlock-node and airlock-nodemgr
 *   api      the API port free, or airlockd answering GET /v1/health
 *
 * Everything only looks: no file is created, nothing is mounted (the
 * reflink probe uses unnamed O_TMPFILE files of an existing data dir).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "config.h"
#include "macros.h"

/*
 * The oldest QEMU Airlock runs on: 7.2, Debian 12's. Older ones have what the
 * command line needs (microvm with memory-backend=, x-ignore-shared, -sandbox
 * spawn=deny), but the snapshot and restore paths were built and measured
 * against 7.2 only: its migration stream, the TCG save that must stop the VM
 * (docs/architecture.md) and the workaround for mem-path being opened
 * writable. Newer versions are accepted.
 */
#define CHECK_QEMU_MIN_MAJOR 7
#define CHECK_QEMU_MIN_MINOR 2

/* Free space of the data dir's file system: templates (a kernel, two
 * rootfs images and RAM files, ~1.5 GiB) plus the sandboxes' changes. */
#define CHECK_SPACE_WARN_BYTES (10ULL << 30)
#define CHECK_SPACE_ERROR_BYTES (2ULL << 30)

/* DATA_DIR/control/format: the layout version of a data dir. An airlockd
 * refuses a newer one; a data dir without the file is format 1 (what every
 * version before the file wrote). Bump it when older versions must not
 * touch a data dir any more. */
#define CHECK_DATA_FORMAT 1
#define CHECK_FORMAT_FILE "format"

enum check_status { CHECK_OK, CHECK_WARN, CHECK_ERROR };

#define CHECK_DETAIL_MAX 512
#define CHECK_FIX_MAX 384
#define CHECK_ITEMS_MAX 16

struct check_result {
        const char *item; /* a static name: "user", "accel", ... */
        enum check_status status;
        char detail[CHECK_DETAIL_MAX]; /* what was found */
        char fix[CHECK_FIX_MAX];       /* what to do; empty when ok */
};

struct check_report {
        struct check_result r[CHECK_ITEMS_MAX];
        size_t n;
};

/* "ok", "warn", "error". */
const char *check_status_name(enum check_status s);

/* Runs every check for configuration c into *ret (in the order above,
 * api last but one: user depends on it). */
void check_host(const struct daemon_config *c, struct check_report *ret);
/* `airlockd --check [--json]`: runs check_host(), prints the report on
 * stdout; 0 when no item is an error, 1 otherwise. */
int check_main(const struct daemon_config *c);

/* Whether any item has status error. */
bool check_report_has_error(const struct check_report *r);
/* One line per item: "STATUS  ITEM      detail; fix: ...". */
void check_report_print(const struct check_report *r, FILE *f);
/* [{item,status,detail,fix}] (fix null when ok). NULL on ENOMEM. */
json_t *check_report_json(const struct check_report *r);

/*
 * The start-up checks, before anything starts (also before airlockd
 * becomes airlock-nodemgr): not root (when it would spawn the node), a
 * data dir of a newer format, QEMU missing or too old, too little space,
 * the API port in use. Each failure is printed on err as
 * "airlockd: error: WHAT; FIX". Returns 0 or -EINVAL (something failed).
 */
int check_startup(const struct daemon_config *c, FILE *err);


/*
 * Reads CONTROL_DIR/format: *ret_format gets its number, or
 * CHECK_DATA_FORMAT when the file (or the directory) does not exist.
 * -EBADMSG when it holds anything but a number and a newline.
 */
int check_format_read(const char *control_dir, unsigned *ret_format);
/* Writes CONTROL_DIR/format (CHECK_DATA_FORMAT) unless it exists. */
int check_format_write(const char *control_dir);

/*
 * Why binding the listen address fails now: 0 when it is free (or port 0),
 * else the negative errno of bind (-EADDRINUSE: something listens there).
 */
int check_listen_probe(const struct sockaddr_storage *addr, socklen_t len);
/* The text of a failed listen for the user:
 * "cannot listen on ADDR: address in use (another airlockd?); stop it or use --listen HOST:PORT". */
void check_listen_message(const char *listen, int r, char *buf, size_t n);

/* ---- pure parts, exposed for the unit tests ---- */

/* "QEMU emulator version 7.2.22 (Debian ...)" -> 7, 2, 22. -EINVAL when
 * the line is not a QEMU version line. */
int check_qemu_version_parse(const char *line, unsigned *ret_major, unsigned *ret_minor,
                             unsigned *ret_micro);
/* Whether every one of the space-separated words of want is in the
 * space-separated list (cgroup.controllers, cgroup.subtree_control). */
bool check_words_have(const char *list, const char *want);
/* The cgroup v2 path of the "0::PATH" line of /proc/self/cgroup text, into
 * buf; -ENOENT without one. */
int check_cgroup_v2_path(const char *proc_self_cgroup, char *buf, size_t n);
/* The file system name for statfs f_type (btrfs, xfs, ext4, tmpfs, ...;
 * "unknown (0x...)" otherwise) into buf; returns whether it does reflinks
 * (btrfs, xfs: xfs only when made with reflink=1, probed separately). */
bool check_fs_type(long f_type, char *buf, size_t n);
/* The status for avail bytes free (CHECK_SPACE_*). */
enum check_status check_space_status(uint64_t avail);
/* 1.5 GiB, 300 MiB, ... into buf. */
void check_format_bytes(uint64_t bytes, char *buf, size_t n);
