/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Capability keys on disk. One directory, shared by the control plane (which
 * signs) and the nodes of one machine (which verify); on other machines the
 * operator copies public/ to the nodes:
 *
 *   DIR/signing/current      the kid that signs now (one line)
 *   DIR/signing/KID.key      its secret key, hex, 0600 (only the current one)
 *   DIR/public/KID.pub       public keys, hex: the current one and the one
 *                            before it, so tokens signed just before a
 *                            rotation still verify
 *
 * A rotation writes the new public key first, then the secret key, then
 * switches `current`, then retires everything older than the previous key:
 * a node that reloads public/ at any point accepts every token a running
 * control plane can have issued (docs/security.md, "Key rotation").
 */

#include <stdint.h>
#include <sys/types.h>

#include "cap.h"

/* Loads every DIR/public/KID.pub into a new keyring. A directory without
 * keys gives an empty keyring; a file with a bad name or content is
 * skipped (-EBADMSG would lock every caller out for one stray file) and
 * counted in *ret_skipped (may be NULL). */
int cap_keydir_load_public(const char *dir, struct cap_keyring **ret, unsigned *ret_skipped);

/* Loads the current signing key into a new keyring and its kid into ret_kid;
 * creates the first key pair when DIR has none. */
int cap_keydir_load_signer(const char *dir, struct cap_keyring **ret, char ret_kid[CAP_KID_MAX + 1]);

/* Makes a new key pair the signing one (see above). ret_kid gets its kid,
 * ret_previous (may be NULL) the kid it replaced ("" when there was none). */
int cap_keydir_rotate(const char *dir, char ret_kid[CAP_KID_MAX + 1], char ret_previous[CAP_KID_MAX + 1]);

/* A change stamp of DIR/public (its mtime in ns): a node reloads its
 * keyring when the stamp moved. 0 when the directory cannot be read. */
uint64_t cap_keydir_public_stamp(const char *dir);
