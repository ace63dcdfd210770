/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* PID 1 set-up of the VM (boot.c). Each returns 0 or a negative errno after
 * logging what failed. */

#include <stdbool.h>

#include "macros.h"

#define BOOT_INITRAMFS_MARKER "/airlock-initramfs"
#define BOOT_RUN_DIR "/run/airlock"

/* Makes sure fds 0-2 are open (the console as PID 1, else /dev/null), so
 * that no channel or pipe fd ever lands on them. */
void boot_console_setup(bool pid1);
/* Initramfs stage: kernel file systems, modules, root device, switch_root. */
int boot_initramfs(void);
/* Real-root stage: devpts, tmpfs mounts, /run/airlock, hostname, PATH. */
int boot_setup_root(void);
/* eth0's address, default route and resolver (net.c); the sandbox runs
 * without a network if it fails. */
int boot_net_setup(void);
/* Logs why, then sleeps forever reaping children: PID 1 never exits. */
_noreturn_ void boot_halt(const char *why);
