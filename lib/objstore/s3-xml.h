/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * S3's XML replies, for the S3 backend (objstore-s3.c) and its fuzz
 * target: parsed with libxml2 (no network, no entity expansion, no DTD),
 * at most S3_XML_MAX bytes, elements matched by local name (replies come
 * with and without S3's namespace). The server is not trusted: each
 * function returns -EBADMSG when the reply is not the document it should
 * be, and texts are cut to the caller's buffers.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3_XML_MAX (8u << 20)

/* "Code: Message" of an <Error> reply into out; "" when it is not one. */
void s3_xml_error(const char *data, size_t len, char *out, size_t n);
/* The UploadId of an InitiateMultipartUploadResult (non-empty). */
int s3_xml_upload_id(const char *data, size_t len, char *out, size_t n);
/* Whether the reply is a CompleteMultipartUploadResult (S3 may answer 200
 * with an <Error> to a complete). */
bool s3_xml_is_complete(const char *data, size_t len);

/* Where the next page of a listing starts: next (NextContinuationToken,
 * NextKeyMarker or NextPartNumberMarker) and next_id (NextUploadIdMarker),
 * "" when the listing is not truncated. */
struct s3_xml_page {
        bool truncated;
        char next[1024];
        char next_id[256];
};

/* A ListBucketResult (v2): fn for each Contents/Key. A truncated page
 * must name its continuation token. fn's negative return stops and is
 * returned. */
int s3_xml_list(const char *data, size_t len, int (*fn)(void *userdata, const char *key), void *userdata,
                struct s3_xml_page *ret_page);
/* A ListMultipartUploadsResult: fn for each Upload (key, upload id, its
 * Initiated time as Unix seconds, or -1 when it does not parse). */
int s3_xml_uploads(const char *data, size_t len,
                   int (*fn)(void *userdata, const char *key, const char *upload_id, int64_t initiated),
                   void *userdata, struct s3_xml_page *ret_page);
/* A ListPartsResult: fn for each Part with a number 1..10000 (its ETag
 * without quotes, its size). */
int s3_xml_parts(const char *data, size_t len,
                 int (*fn)(void *userdata, uint32_t number, const char *etag, uint64_t size), void *userdata,
                 struct s3_xml_page *ret_page);
