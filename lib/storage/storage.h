/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Where a node keeps its state. Sandboxes' writable rootfs images are reflink
 * copies of their template's image, which needs btrfs or xfs. If the data dir
 * is on neither, the node creates DATA_DIR/volume.btrfs (sparse), formats it
 * and loop-mounts it at DATA_DIR/vol; state then lives there. Plain copies
 * are the logged last resort (--storage=copy, or when mounting fails).
 */

#include <stdbool.h>

struct storage {
        char *root;          /* directory holding templates/ and sandboxes/ */
        bool reflink;        /* FICLONE works under root */
        bool mounted_volume; /* we loop-mounted DATA_DIR/vol and must unmount it */
        char *volume_mount;
};

/* Probes data_dir for reflink support (a real FICLONE on two temp files);
 * sets up the btrfs loop volume when needed (volume_size_gib, sparse) and
 * allow_loop is true. */
int storage_open(const char *data_dir, unsigned volume_size_gib, bool allow_loop, struct storage **ret);
/* The storage root set up by someone else (airlock-nodemgr, which mounted
 * the volume and handed root to the node's user): no probe, no mount;
 * the layout (templates/, sandboxes/) is made if missing. */
int storage_open_given(const char *root, bool reflink, struct storage **ret);
/* Unmounts the loop volume if this process mounted it. NULL-safe. */
void storage_close(struct storage *s);
static inline void storage_closep(struct storage **s) {
        storage_close(*s);
}
