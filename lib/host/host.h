/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What this host offers VMs, read the same way by everyone who asks: the
 * node (which picks the accelerator), airlock-nodemgr (which probes KVM as
 * root for the node, since the node cannot open /dev/kvm itself) and
 * airlockd --check.
 */

#include <stdbool.h>
#include <stddef.h>

/* Finds the first "key<spaces>: value" line of /proc/cpuinfo text; returns
 * the value (leading blanks skipped) and its length through ret_*. */
bool host_cpuinfo_field(const char *text, const char *key, const char **ret_val, size_t *ret_len);

/* true if the whitespace-separated list line[0..len) holds word exactly. */
bool host_word_in(const char *line, size_t len, const char *word);

/* true if /proc/cpuinfo text has vmx or svm among its first "flags". */
bool host_cpu_has_virt(const char *cpuinfo);

/* Whether this process can run KVM guests: the cpu has vmx/svm and
 * /dev/kvm opens read-write. reason (n bytes) says why or why not. */
bool host_kvm_usable(char *reason, size_t n);

/* The host CPU as "VENDOR-FAMILY-MODEL-STEPPING" (/proc/cpuinfo's first
 * processor: "AuthenticAMD-25-1-1"): what a snapshot of a `-cpu host` VM
 * needs of the host it resumes on. -ENODATA when a field is missing. */
int host_cpu_signature(char *buf, size_t n);

/* How airlock-nodemgr hands its probe to the node: "1 REASON" or "0 REASON". */
#define HOST_KVM_ENV "AIRLOCK_HOST_KVM"
