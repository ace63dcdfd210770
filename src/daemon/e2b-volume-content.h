/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's volume content API (e2b-volume-content.c): a volume's files at
 * /volumecontent/VOLUME/..., with the volume's token. A request first
 * begins a use of the volume (the guest that has it mounted, a helper
 * sandbox made for it where none does), then runs its endpoint on it; the
 * use ends with the request (after a streamed body).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "api-reply.h"
#include "apireq.h"

struct node_conn;
struct e2b_volume_use;

/* A request's query: path (checked, from the volume's root), and the
 * others as given (NULL: absent); PATCH's JSON body. */
struct e2b_volume_query {
        const char *path;
        const char *depth;
        const char *uid, *gid, *mode; /* decimal, as E2B's SDK sends them */
        bool force;
        const json_t *body;
};

/* The volume's path of ?path= (a relative one is from its root) in out;
 * -EINVAL with the message in err. */
int e2b_volume_path(const char *raw, char out[APIREQ_PATH_MAX + 1], char *err);

/* The guest the volume's files are reached through, for reading or
 * writing: 409 where it cannot be (a writer that does not run, a write to
 * a volume others read). */
int e2b_volume_use_begin(struct api_ctx *ctx, const char *volume_id, bool write, struct e2b_volume_use **ret);
/* Ends it: a helper sandbox goes with the last use of it. NULL is fine. */
void e2b_volume_use_end(struct e2b_volume_use *u);

/* GET dir ?path&depth: the entries below, depth levels deep. */
int e2b_volume_dir_list(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                        struct api_reply *ret);
/* POST dir ?path&uid&gid&mode&force: 201 with its entry. */
int e2b_volume_dir_make(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                        struct api_reply *ret);
/* GET path ?path: its entry (a symlink's own). */
int e2b_volume_path_stat(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                         struct api_reply *ret);
/* PATCH path ?path {uid, gid, mode}: the entry after. */
int e2b_volume_path_update(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                           struct api_reply *ret);
/* DELETE path ?path: a file, or a directory with what is in it. */
int e2b_volume_path_remove(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                           struct api_reply *ret);
/* GET file ?path: its bytes, streamed. */
int e2b_volume_file_read(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                         struct api_reply *ret);
/* PUT file ?path&uid&gid&mode: the body streams into *ret (as PUT
 * /v1/sandboxes/ID/files does); the end answers with the file's entry. */
int e2b_volume_file_write_begin(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                                struct node_conn **ret);
int e2b_volume_file_write_end(struct api_ctx *ctx, struct e2b_volume_use *u, struct node_conn *c,
                              struct api_reply *ret);
