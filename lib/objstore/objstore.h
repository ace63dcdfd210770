/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The object store behind suspend and wake: a flat key -> bytes store with
 * several backends behind `struct objstore_ops` (a local directory, or a
 * bucket of an S3-compatible service), and on top of it, independent of the backend, snapshots made of
 * content-addressed artifacts:
 *
 *   blobs/<sha256>                       one artifact's bytes, shared by every
 *                                        snapshot that has the same content
 *   snapshots/<id>/manifest.json         written last: a snapshot is
 *                                        restorable exactly when it exists
 *
 * Rules every backend follows:
 *   - keys are checked with objstore_key_check() before a backend sees them
 *     (they are built partly from API ids: this is a security boundary), and
 *     backends check them again before they touch anything;
 *   - a put lands atomically: a reader sees the whole object or none;
 *   - functions return 0 or a negative errno (-ENOENT: no such object,
 *     -EINVAL: bad key); ret_ out-parameters are written only on success and
 *     what they receive belongs to the caller.
 *
 * A handle is safe to use from many threads. Within one handle, delete and
 * gc exclude every other call (so they never remove a blob that an upload in
 * progress is about to reference); across processes only gc's min_age_s
 * protects uploads, so one process should own a store's deletions.
 */

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define OBJSTORE_KEY_MAX 512                /* bytes of a key, without the NUL */
#define OBJSTORE_MANIFEST_MAX (64u << 10)   /* bytes of a manifest */
#define OBJSTORE_ARTIFACTS_MAX 16           /* artifacts of one snapshot */
#define OBJSTORE_LIST_MAX (1u << 20)        /* keys one list call returns */
#define OBJSTORE_SHA256_HEX 65              /* 64 lowercase hex digits + NUL */

struct objstore; /* opaque */

/* A source of bytes at any offset (0 or a negative errno), and a sink of
 * bytes in order. */
typedef int (*objstore_read_at_fn)(void *userdata, uint64_t off, void *buf, size_t len);
typedef int (*objstore_sink_fn)(void *userdata, const void *buf, size_t len);

/* A backend. put/get/exists/remove/list/free are required; the others are
 * optional (NULL) and only make the generic layer do more. */
struct objstore_ops {
        const char *name; /* "local" */
        /* Stores the whole regular file behind fd (from offset 0, whatever
         * fd's offset) under key, replacing what was there, atomically. */
        int (*put)(struct objstore *o, const char *key, int fd);
        /* Writes the object to dst_path (created 0600, atomically through a
         * temporary file and rename). -ENOENT when absent. */
        int (*get)(struct objstore *o, const char *key, const char *dst_path);
        /* 0 and the object's size, or -ENOENT. */
        int (*exists)(struct objstore *o, const char *key, uint64_t *ret_size);
        /* -ENOENT if absent. */
        int (*remove)(struct objstore *o, const char *key);
        /* Every key starting with prefix ("" for all): a NULL-terminated,
         * sorted array (free with objstore_keys_free()). */
        int (*list)(struct objstore *o, const char *prefix, char ***ret_keys);
        /* Frees the backend's state (objstore_backend_data()). */
        void (*free)(struct objstore *o);

        /* Optional: the file that holds key, for backends that are plain
         * files, so uploads re-hash what actually landed. */
        int (*local_path)(struct objstore *o, const char *key, char **ret_path);
        /* Optional: when the object was last written (Unix seconds); without
         * it gc removes orphan blobs only when min_age_s is 0. */
        int (*mtime)(struct objstore *o, const char *key, uint64_t *ret_s);
        /* Optional: removes leftovers of interrupted puts at least min_age_s
         * old; returns how many. */
        int (*gc_tmp)(struct objstore *o, unsigned min_age_s);
        /* Optional: as put, of size bytes that read_at gives (any range,
         * from several threads at once): sealed artifacts are sealed as
         * they are sent, never written out first. */
        int (*put_source)(struct objstore *o, const char *key, uint64_t size, objstore_read_at_fn read_at,
                          void *userdata);
        /* Optional: the object's bytes to sink, in order, each once (a
         * broken transfer resumes where it stopped); -ENOENT when absent.
         * A sink's error stops it and is returned. */
        int (*get_stream)(struct objstore *o, const char *key, objstore_sink_fn sink, void *userdata);
};

/* The local directory backend (lib/objstore/objstore-local.c). */
extern const struct objstore_ops objstore_local_ops;

/* Opens (creating it like mkdir -p, mode 0700) a store kept in root_dir: key
 * K is the file root_dir/K, and root_dir/.tmp holds puts in progress. */
int objstore_open_local(const char *root_dir, struct objstore **ret);
/* The S3 backend (lib/objstore/objstore-s3.c). */
extern const struct objstore_ops objstore_s3_ops;

/* Where an S3 store is: s3://BUCKET[/PREFIX][?endpoint=URL&region=R]. No
 * endpoint: AWS itself (https://s3.REGION.amazonaws.com, the bucket in the
 * host name); with one (MinIO, Ceph, Swift): path-style requests to it.
 * Region defaults to us-east-1. */
struct objstore_s3_location {
        char bucket[64];
        char prefix[OBJSTORE_KEY_MAX + 2]; /* "" or "p/q/" */
        char endpoint[512];                /* scheme://host[:port] */
        char region[64];
        bool path_style;
};
/* Parses url; -EINVAL with what is wrong in err. */
int objstore_s3_parse_url(const char *url, struct objstore_s3_location *ret, char *err, size_t err_size);
/* Opens the store at l with these credentials, after checking (one HEAD of
 * the bucket) that the bucket is there and takes them: -EACCES for wrong
 * credentials, -ENOENT for no such bucket, each logged with S3's words. */
int objstore_open_s3(const struct objstore_s3_location *l, const char *access_key, const char *secret_key,
                     struct objstore **ret);

/* For tests: called before each part of a multipart upload is sent (not
 * for parts a resumed upload already has); a negative return fails that
 * part as a failed request would. Set it before any put runs. */
typedef int (*objstore_s3_part_fn)(const char *key, uint32_t part, void *userdata);
void objstore_s3_set_part_hook(struct objstore *o, objstore_s3_part_fn fn, void *userdata);

/* Closes the store; NULL is fine. */
void objstore_free(struct objstore *o);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct objstore *, objstore_free);

/* For backends: wraps the backend's state (data) into a handle that
 * dispatches to ops. On failure data is still the caller's to free. */
int objstore_new(const struct objstore_ops *ops, void *data, struct objstore **ret);
/* For backends' list(): keys gathered one by one into a NULL-terminated
 * array, at most OBJSTORE_LIST_MAX (-E2BIG past it). finish sorts it and
 * hands it over (an empty array when nothing was added); release frees
 * what was not handed over. */
struct objstore_keylist {
        char **v;
        size_t n, cap;
};
int objstore_keylist_add(struct objstore_keylist *kl, const char *key);
int objstore_keylist_finish(struct objstore_keylist *kl, char ***ret_keys);
void objstore_keylist_release(struct objstore_keylist *kl);
/* For backends: the data given to objstore_new(). */
void *objstore_backend_data(struct objstore *o);
/* The backend's name ("local"). */
const char *objstore_backend_name(struct objstore *o);

/* 0 when key is a valid key: segments of [A-Za-z0-9._-]+ joined by single
 * '/', none of them "." or "..", no leading or trailing '/', at most
 * OBJSTORE_KEY_MAX bytes. -EINVAL otherwise (NULL included). */
int objstore_key_check(const char *key);

/* The ops, with the key checked first; see struct objstore_ops. A prefix for
 * list is "" or a valid key, optionally with a trailing '/'. */
int objstore_put(struct objstore *o, const char *key, int fd);
int objstore_get(struct objstore *o, const char *key, const char *dst_path);
int objstore_exists(struct objstore *o, const char *key, uint64_t *ret_size);
int objstore_remove(struct objstore *o, const char *key);
int objstore_list(struct objstore *o, const char *prefix, char ***ret_keys);
/* Frees a key array from objstore_list(); NULL is fine. */
void objstore_keys_free(char **keys);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, objstore_keys_free);

/* SHA-256 of a file's content as 64 lowercase hex digits + NUL. Sparse-aware:
 * holes (SEEK_DATA/SEEK_HOLE) are hashed as the zeros they read as, without
 * reading them, so the result equals the hash of the full byte content. */
int objstore_file_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]);
/* SHA-256 of a file's sparse form, which names blobs (manifest version 2):
 * its size as 8 bytes little-endian, then for each 4 KiB block (offsets
 * multiples of 4096, the last one maybe shorter) that is not all zeros, its
 * offset as 8 bytes little-endian and its bytes. Where the holes are does
 * not change it; holes cost nothing to hash. */
int objstore_file_sparse_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]);

/* One file of a snapshot. name: [A-Za-z0-9._-]{1,64}, not "." or ".." ("state",
 * "rootfs.img", "mem"); it is the file name download gives it. shared: a
 * file many snapshots have (the template a suspended sandbox's delta is
 * against): sealed under a key from its own content, not the snapshot's,
 * so that it is stored once for all of them (in the clear every blob is
 * named by its content anyway). */
struct objstore_artifact {
        const char *name;
        const char *path;
        bool shared;
        /* its objstore_file_sparse_sha256() when the caller knows it (a
         * template's files, hashed once): trusted, not hashed again; NULL:
         * the upload hashes it */
        const char *sparse_sha256;
};

/*
 * Uploads a snapshot: every artifact to blobs/<sha256> (skipped when a blob
 * of the right size is there already), then verifies each landed blob (size;
 * with local_path also a re-hash of the stored file, and a corrupt existing
 * blob is replaced once), then writes snapshots/<snapshot_id>/manifest.json
 * LAST:
 *
 *   {"version":2,"snapshot":ID,"created_at":UNIX_MS,"meta":META,
 *    "artifacts":[{"name":N,"sparse_sha256":HEX,"size":BYTES},...]}
 *
 * (blobs/<HEX> by objstore_file_sparse_sha256(); version 1, still read,
 * had "sha256", of the plain bytes: objstore_file_sha256())
 *
 * snapshot_id: 1..64 of [A-Za-z0-9._-], not starting with '.'; 1..16
 * artifacts with distinct names; meta a JSON object or NULL ({}). Returns 0
 * only once the manifest has landed. -EEXIST when the snapshot exists,
 * -E2BIG when the manifest would exceed OBJSTORE_MANIFEST_MAX, -EINVAL when
 * it would not parse back (meta with a NUL in a string), -EBADMSG when
 * a blob does not verify. A failed upload leaves blobs that gc removes.
 */
/* Called by objstore_snapshot_upload() after artifact i of n has landed
 * (before the manifest): progress, and a place for tests to stop an upload
 * half done. Set it before any upload runs. */
typedef void (*objstore_blob_landed_fn)(const char *snapshot_id, const char *artifact, size_t i, size_t n,
                                        void *userdata);
void objstore_set_blob_landed(struct objstore *o, objstore_blob_landed_fn fn, void *userdata);

/*
 * Sealed snapshots (manifest version 3): every artifact stored encrypted
 * and authenticated (lib/seal: XChaCha20-Poly1305 in 64 KiB chunks, holes
 * not stored) under its own key derived from the snapshot's data key, and
 * the caller's meta and each artifact's digest sealed in the manifest:
 *
 *   {"version":3,"snapshot":ID,"created_at":UNIX_MS,"key":WRAPPED,
 *    "sealed":BASE64,"artifacts":[{"name":N,"blob":HEX,"size":SEALED_BYTES},...]}
 *
 * WRAPPED is the data key as the caller's KMS wrapped it (opaque here: the
 * store keeps no key that opens anything). A wrong or missing data key
 * opens nothing: -EBADMSG / -ENOKEY.
 */
#define OBJSTORE_DATA_KEY_SIZE 32
#define OBJSTORE_WRAPPED_KEY_MAX 512
struct objstore_data_key {
        uint8_t key[OBJSTORE_DATA_KEY_SIZE];
        const char *wrapped; /* 1..OBJSTORE_WRAPPED_KEY_MAX bytes */
};

/* How objstore_snapshot_upload() (above: what it does, what it returns)
 * uploads; opts NULL: all as zero. */
struct objstore_upload_opts {
        json_t *meta;                        /* the caller's, a JSON object; NULL: {} */
        const struct objstore_data_key *key; /* sealed with it (version 3); NULL: in the clear (version 2) */
        const atomic_bool *cancel;           /* gives up with -ECANCELED (before the manifest, so nothing
                                              * restorable lands) once true: checked for every MiB hashed
                                              * and before each blob; NULL: never */
};
int objstore_snapshot_upload(struct objstore *o, const char *snapshot_id, const struct objstore_artifact *a,
                             size_t n, const struct objstore_upload_opts *opts);

/* Whether a parsed manifest is sealed; its wrapped data key (NULL if not
 * sealed); its meta (a new reference): as stored in the clear, or opened
 * with data_key (-ENOKEY without, -EBADMSG with another). */
bool objstore_manifest_is_sealed(json_t *manifest);
const char *objstore_manifest_wrapped_key(json_t *manifest);
int objstore_manifest_meta(json_t *manifest, const uint8_t *data_key, json_t **ret_meta);
/* Artifact i of a parsed manifest: its name, its blob's name (the digest of
 * versions 1 and 2) and its stored size. */
void objstore_manifest_artifact(json_t *manifest, size_t i, const char **ret_name, const char **ret_blob,
                                uint64_t *ret_size);

/* Reads and validates a snapshot's manifest (see objstore_manifest_parse()).
 * -ENOENT when there is none (the snapshot is not restorable), -EBADMSG when
 * it is malformed. */
int objstore_snapshot_manifest(struct objstore *o, const char *snapshot_id, json_t **ret_manifest);
/* How objstore_snapshot_download() downloads; opts NULL: all as zero. */
struct objstore_download_opts {
        const uint8_t *data_key; /* a sealed snapshot's; NULL for one in the clear */
        const char *const *only; /* NULL-terminated artifact names: only these; NULL: all */
};
/* Downloads every artifact of a restorable snapshot (or opts->only's) into
 * dst_dir/<name> (dst_dir is created 0700 if missing), verifying size and
 * sha256 of each before any lands under its name. On any failure nothing
 * of it is left in dst_dir; -EBADMSG when the data does not match the
 * manifest (a blob corrupt or missing). A sealed snapshot opens with its
 * data key (a sealed one without it is -ENOKEY); a tampered, swapped,
 * truncated or foreign artifact is -EBADMSG. */
int objstore_snapshot_download(struct objstore *o, const char *snapshot_id, const char *dst_dir,
                               const struct objstore_download_opts *opts);
/* Deletes the manifest first (so the snapshot stops being restorable), then
 * its blobs that no other manifest references. -ENOENT when there is no
 * manifest. If any manifest cannot be read, blobs are left to objstore_gc(). */
int objstore_snapshot_delete(struct objstore *o, const char *snapshot_id);
/* objstore_snapshot_delete() in two steps, for a caller that must not wait
 * for the blobs: withdraw removes the manifest (the snapshot is no longer
 * restorable when it returns) and gives it back (NULL when it did not
 * parse); release, later, removes its blobs that no other manifest
 * references (and does not free the manifest). */
int objstore_snapshot_withdraw(struct objstore *o, const char *snapshot_id, json_t **ret_manifest);
void objstore_snapshot_release(struct objstore *o, json_t *manifest);
/* Garbage collection after a crash: removes leftovers of interrupted puts
 * and blobs that no manifest references, both only when at least min_age_s
 * old (so an upload in progress in another process is not raced; 0 in
 * tests). Removes no blob while any manifest is unreadable. Returns the
 * number of objects removed. */
int objstore_gc(struct objstore *o, unsigned min_age_s);

/* Parses a manifest from memory: at most OBJSTORE_MANIFEST_MAX bytes, exactly
 * the fields above (no others, no duplicate keys), version 1, snapshot id as
 * for upload, created_at and sizes non-negative integers, meta an object,
 * 1..16 artifacts with distinct names and sha256 64 lowercase hex digits.
 * -EBADMSG on anything else. */
int objstore_manifest_parse(const char *data, size_t len, json_t **ret);
