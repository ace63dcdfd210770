/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The credential set of sandbox.secrets.set (docs/node-protocol.md), checked
 * before the node keeps it or hands it on: the node trusts no peer, so the
 * shape and every size is bounded here (the gateway checks again). No I/O:
 * the fuzzer drives it (tests/fuzz/fuzz-credcheck.c).
 */

#include <jansson.h>
#include <stddef.h>

#define CREDCHECK_SET_MAX 16
#define CREDCHECK_VALUE_MAX 8192
#define CREDCHECK_HOSTS_MAX 16
#define CREDCHECK_PORTS_MAX 8
#define CREDCHECK_LIST_MAX 16     /* methods, paths */
#define CREDCHECK_STRING_MAX 1024 /* a host, method, path, header name, template or user */

/* 0 when a is a valid set (an array of at most CREDCHECK_SET_MAX credential
 * objects with distinct names and placeholders), else -EINVAL with a
 * message naming the entry and field in err (errsz bytes). The message
 * never quotes a value. */
int credcheck_set(const json_t *a, char *err, size_t errsz);

/* The names of a valid set, as a new JSON array (NULL: out of memory). */
json_t *credcheck_names(const json_t *a);
