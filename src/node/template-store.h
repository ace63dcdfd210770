/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Templates shared through the object store (docs/storage.md,
 * "Templates"). In a cluster whose nodes share an object store, a
 * template is built once per content hash: the node that builds it
 * publishes it, sealed with the cluster's templates key, as the snapshot
 * t-HASH-NAME (its vmlinux, initramfs, rootfs, RAM, device state and
 * manifest); a node that lacks it fetches that instead of building. A node
 * about to build puts a claim (claims/t-HASH-NAME: its name and the time,
 * renewed while it builds); the others wait for the template while the
 * claim is fresh, and take over a claim left stale by a builder that died.
 *
 * The templates key comes from the control plane with a heartbeat, is held
 * in locked memory only, and expires TEMPLATE_STORE_KEY_TTL_S after the
 * last one: without a key, a node builds for itself and publishes nothing.
 */

#include <stdbool.h>
#include <stdint.h>

#include "objstore.h"

#define TEMPLATE_STORE_KEY_TTL_S 600

struct template_claim;

/* Sharing is on when enabled (a cluster member with a configured store). */
void template_store_init(struct objstore *o, bool enabled, const char *node_name);
bool template_store_enabled(void);
/* Stops waits in progress (node shutdown). */
void template_store_shutdown(void);

/* Whether the next heartbeat should ask for the key (none, or one near its
 * expiry), and the key it brought. */
bool template_store_wants_key(void);
void template_store_set_key(const uint8_t key[OBJSTORE_DATA_KEY_SIZE], const char *wrapped);

/* Before building template name (content hash hash): 1 when the store had
 * it and it now lies in dst_dir (vmlinux moved into kernel_dir), 0 when the
 * caller builds it (*ret_claim, when set, is this node's claim: pass it to
 * template_store_publish() or template_store_release()), or <0 when sharing
 * failed (the caller builds for itself). Waits while another node's fresh
 * claim stands. */
int template_store_fetch_or_claim(const char *name, const char *hash, const char *kernel_dir, const char *dst_dir,
                                  const char *ctx, struct template_claim **ret_claim);
/* Publishes the built template in dir (its kernel in kernel_dir), then
 * releases the claim. Failures are logged: the template is ready here all
 * the same. */
void template_store_publish(struct template_claim *c, const char *dir, const char *kernel_dir, const char *ctx);
/* Gives the claim up (a failed build): another node may try. */
void template_store_release(struct template_claim *c);
