/* SPDX-License-Identifier: Apache-2.0 */
/*
 * S3 backend: key K is the object PREFIX/K in one bucket of an
 * S3-compatible service (AWS S3, MinIO, Ceph RGW, Swift's s3api), spoken
 * with libcurl, signed with its SigV4 (CURLOPT_AWS_SIGV4), the replies
 * parsed with libxml2 (no network, no entities, bounded sizes).
 *
 * Debian 12's curl (7.88) signs what it is given and no more, so:
 *   - every request carries x-amz-content-sha256 with the payload's real
 *     hash (curl signs the header's value; it cannot hash a body it reads
 *     through a callback);
 *   - query strings are built canonical here: parameters sorted, every one
 *     with '=', values escaped as RFC 3986 (curl 7.88 signs the query as it
 *     is written);
 *   - the access key and the secret are set as user and password apart
 *     (CURLOPT_USERNAME, CURLOPT_PASSWORD): a secret may hold a ':'.
 *
 * Uploads up to one part go in one PUT; larger ones as a multipart upload
 * whose parts go up in parallel, each read into its own buffer (memory is
 * parts in flight times part size, never the artifact), sent with
 * Content-MD5 and its SHA-256, and retried alone. A put of a key that has
 * an unfinished multipart upload resumes it: parts whose size and MD5
 * match what is there are not sent again. The object appears only when the
 * upload completes, so readers see all of it or nothing; gc_tmp aborts
 * uploads a crash left. Failed requests that may succeed later (no
 * connection, 5xx, 429, a dropped transfer) are retried a bounded number of
 * times with backoff; a GET goes on from the byte it had reached.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <curl/curl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "objstore.h"
#include "s3-xml.h"
#include "util.h"

#define S3_TRIES 5                        /* attempts of one request */
#define S3_BACKOFF_MS 200                 /* before the second; doubles */
#define S3_PART_MIN (8ull << 20)          /* S3 wants >= 5 MiB but for the last */
#define S3_PARTS_MAX 10000                /* S3's limit per upload */
#define S3_PART_MAX (512ull << 20)        /* so S3_PARTS_MAX parts reach 5 TiB */
#define S3_PARALLEL 4                     /* parts in flight per put */
#define S3_REPLY_MAX S3_XML_MAX           /* replies held in memory */
#define S3_ERROR_TEXT 256
#define S3_STALL_S 30L                    /* no byte moved for that long: failed */
#define S3_CONNECT_S 10L

struct s3 {
        char *endpoint; /* scheme://host[:port], no trailing '/' */
        char *bucket;
        char *prefix;   /* "" or "some/prefix/" */
        char *region;
        char *sigv4;    /* "aws:amz:REGION:s3" */
        char *access_key;
        char *secret_key;
        bool path_style;
        objstore_s3_part_fn part_hook;
        void *part_hook_userdata;
        char ctx[96];   /* for logs: "objstore=s3://BUCKET" */
};

static struct s3 *s3_of(struct objstore *o) {
        return objstore_backend_data(o);
}

/* ---- one HTTP request ---- */

struct s3_req {
        const char *method;
        const char *key;   /* object key (without the store's prefix); NULL: the bucket */
        const char *query; /* canonical (see s3_query), or NULL */
        /* body: bytes in memory */
        const void *body;
        size_t body_len;
        const char *range;       /* "bytes=A-B", or NULL */
        /* reply body: to sink, else into reply (at most S3_REPLY_MAX) */
        int (*sink)(void *userdata, const void *buf, size_t n);
        void *userdata;
        uint64_t sunk;   /* bytes the sink took, across tries */
        uint64_t expect; /* the whole body's length, from the first reply that said */
        bool resumed;    /* this try asked for the rest (a 206 must answer) */
        CURL *handle;
        char *reply;
        size_t reply_len;
        /* out */
        long status;
        uint64_t content_length;
        bool have_length;
        long mtime;
        char etag[80];
        char error[S3_ERROR_TEXT]; /* "Code: Message" of an S3 error reply */
        size_t body_off;           /* upload position within the try */
        int sink_error;
};

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata) {
        struct s3_req *q = userdata;
        size_t n = size * nmemb;
        /* the status is known before the body: an error reply is kept
         * for its message, never given to the sink */
        if (q->status == 0)
                curl_easy_getinfo(q->handle, CURLINFO_RESPONSE_CODE, &q->status);
        if (q->sink && q->status / 100 == 2) {
                if (q->resumed && q->status != 206) {
                        q->sink_error = -EIO; /* the server ignored the range: bytes would repeat */
                        return 0;
                }
                int r = q->sink(q->userdata, ptr, n);
                if (r < 0) {
                        q->sink_error = r;
                        return 0; /* aborts the transfer */
                }
                q->sunk += n;
                return n;
        }
        if (q->reply_len + n > S3_REPLY_MAX)
                return 0;
        char *p = realloc(q->reply, q->reply_len + n + 1);
        if (!p)
                return 0;
        memcpy(p + q->reply_len, ptr, n);
        q->reply = p;
        q->reply_len += n;
        q->reply[q->reply_len] = 0;
        return n;
}

static size_t read_cb(char *buf, size_t size, size_t nitems, void *userdata) {
        struct s3_req *q = userdata;
        size_t n = size * nitems, left = q->body_len - q->body_off;
        if (n > left)
                n = left;
        memcpy(buf, (const char *) q->body + q->body_off, n);
        q->body_off += n;
        return n;
}

static int seek_cb(void *userdata, curl_off_t offset, int origin) {
        struct s3_req *q = userdata;
        if (origin != SEEK_SET || offset < 0 || (uint64_t) offset > q->body_len)
                return CURL_SEEKFUNC_FAIL;
        q->body_off = (size_t) offset;
        return CURL_SEEKFUNC_OK;
}

static size_t header_cb(char *buf, size_t size, size_t nitems, void *userdata) {
        struct s3_req *q = userdata;
        size_t n = size * nitems;
        static const char etag[] = "etag:";
        if (n > sizeof etag && strncasecmp(buf, etag, sizeof etag - 1) == 0) {
                const char *v = buf + sizeof etag - 1;
                size_t len = n - (sizeof etag - 1);
                while (len && (*v == ' ' || *v == '\t'))
                        v++, len--;
                while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
                        len--;
                if (len >= 2 && v[0] == '"' && v[len - 1] == '"')
                        v++, len -= 2;
                if (len < sizeof q->etag)
                        snprintf(q->etag, sizeof q->etag, "%.*s", (int) len, v);
        }
        return n;
}

/* The URL of key (or of the bucket) with query. */
static char *s3_url(struct s3 *s, const char *key, const char *query) {
        const char *q = query ? "?" : "", *qs = query ?: "";
        if (s->path_style)
                return strdup_printf("%s/%s/%s%s%s%s", s->endpoint, s->bucket, key ? s->prefix : "", key ?: "", q, qs);
        /* virtual-hosted: https://BUCKET.s3.REGION.amazonaws.com/KEY */
        const char *host = strstr(s->endpoint, "://");
        size_t scheme = host ? (size_t) (host - s->endpoint) + 3 : 0;
        return strdup_printf("%.*s%s.%s/%s%s%s%s", (int) scheme, s->endpoint, s->bucket, s->endpoint + scheme,
                             key ? s->prefix : "", key ?: "", q, qs);
}

static int hex_sha256(const void *data, size_t n, char out[65]) {
        uint8_t md[32];
        unsigned len = 0;
        if (EVP_Digest(data, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32)
                return -EIO;
        sodium_bin2hex(out, 65, md, 32);
        return 0;
}

static bool retryable(CURLcode c, long status, const char *error) {
        switch (c) {
        case CURLE_OK:
                return status >= 500 || status == 429 || (status == 400 && strncmp(error, "RequestTimeout", 14) == 0);
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR:
                return true;
        default:
                return false;
        }
}

static int status_errno(long status, const char *error) {
        if (status == 404)
                return -ENOENT;
        if (status == 401 || status == 403)
                return -EACCES;
        if (status == 400 && (strncmp(error, "BadDigest", 9) == 0 || strncmp(error, "InvalidDigest", 13) == 0 ||
                              strncmp(error, "XAmzContentSHA256Mismatch", 25) == 0))
                return -EBADMSG;
        if (status == 416)
                return -ERANGE;
        if (status == 412 || status == 409)
                return -EAGAIN;
        return -EIO;
}

/* Handles are kept per thread: their connections are reused. */
static pthread_key_t handle_key;
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;
static void handle_free(void *h) {
        curl_easy_cleanup(h);
}
static void handle_key_make(void) {
        (void) pthread_key_create(&handle_key, handle_free);
}
static CURL *thread_handle(void) {
        (void) pthread_once(&handle_once, handle_key_make);
        CURL *h = pthread_getspecific(handle_key);
        if (h) {
                curl_easy_reset(h);
                return h;
        }
        h = curl_easy_init();
        if (h && pthread_setspecific(handle_key, h) != 0) {
                curl_easy_cleanup(h);
                return NULL;
        }
        return h;
}

/* One try of q. */
static CURLcode s3_try(struct s3 *s, CURL *h, struct s3_req *q, const char *url, const char *sha256) {
        struct curl_slist *hdr = NULL, *t;
        char line[160];
        CURLcode c = CURLE_OUT_OF_MEMORY;
        snprintf(line, sizeof line, "x-amz-content-sha256: %s", sha256);
        if (!(t = curl_slist_append(hdr, line)))
                goto out;
        hdr = t;
        char range[64];
        const char *rg = q->range;
        q->resumed = q->sink && q->sunk;
        if (q->resumed) { /* a retried GET goes on where it was */
                uint64_t from = q->sunk;
                if (q->range) {
                        unsigned long long a = 0, b = 0;
                        if (sscanf(q->range, "bytes=%llu-%llu", &a, &b) == 2)
                                snprintf(range, sizeof range, "bytes=%llu-%llu", a + from, b);
                        else
                                snprintf(range, sizeof range, "bytes=%llu-", a + from);
                } else
                        snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long) from);
                rg = range;
        }

        free(q->reply);
        q->reply = NULL;
        q->reply_len = 0;
        q->status = 0;
        q->etag[0] = 0;
        q->body_off = 0;
        q->handle = h;
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
        curl_easy_setopt(h, CURLOPT_USERNAME, s->access_key);
        curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret_key);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        /* not "Expect:" to turn 100-continue off: curl 7.88 would sign the
         * header it then does not send; a short wait for the 100 instead */
        curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, S3_CONNECT_S);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, S3_STALL_S);
        curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
        if (rg)
                curl_easy_setopt(h, CURLOPT_RANGE, rg + strlen("bytes="));
        if (strcmp(q->method, "HEAD") == 0)
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        else if (strcmp(q->method, "PUT") == 0) {
                curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
                curl_easy_setopt(h, CURLOPT_READDATA, q);
                curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_cb);
                curl_easy_setopt(h, CURLOPT_SEEKDATA, q);
                curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t) q->body_len);
        } else if (strcmp(q->method, "POST") == 0) {
                curl_easy_setopt(h, CURLOPT_POST, 1L);
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ?: "");
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) q->body_len);
        } else if (strcmp(q->method, "GET") != 0)
                curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);

        c = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &q->status);
        curl_off_t len = -1;
        if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) == CURLE_OK && len >= 0) {
                q->content_length = (uint64_t) len;
                q->have_length = true;
                if (!q->resumed && q->status == 200 && q->sink)
                        q->expect = q->content_length;
        } else
                q->have_length = false;
        long ft = -1;
        if (curl_easy_getinfo(h, CURLINFO_FILETIME, &ft) == CURLE_OK)
                q->mtime = ft;
out:
        curl_slist_free_all(hdr);
        return c;
}

/* Performs q with retries; 0 on a 2xx reply, else a negative errno with
 * what S3 said logged. */
static int s3_do(struct s3 *s, struct s3_req *q, const char *what) {
        char sha[65];
        int r = hex_sha256(q->body ?: "", q->body_len, sha);
        if (r < 0)
                return r;
        _cleanup_free_ char *url = s3_url(s, q->key, q->query);
        CURL *h = thread_handle();
        if (!url || !h)
                return -ENOMEM;
        CURLcode c = CURLE_OK;
        for (unsigned i = 0;; i++) {
                q->error[0] = 0;
                q->sink_error = 0;
                c = s3_try(s, h, q, url, sha);
                if (q->sink_error < 0)
                        return q->sink_error;
                if (c == CURLE_OK && q->status / 100 == 2) {
                        if (q->sink && q->expect && q->sunk != q->expect)
                                return -EIO;
                        return 0;
                }
                if (c == CURLE_OK)
                        s3_xml_error(q->reply, q->reply_len, q->error, sizeof q->error);
                if (i + 1 >= S3_TRIES || !retryable(c, q->status, q->error))
                        break;
                unsigned ms = (S3_BACKOFF_MS << i) + randombytes_uniform(S3_BACKOFF_MS);
                log_emit(LOG_LEVEL_INFO, s->ctx, "%s %s: %s; retrying in %u ms", q->method, what,
                         c != CURLE_OK ? curl_easy_strerror(c) : q->error[0] ? q->error : "server error", ms);
                struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000 };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        if (c != CURLE_OK) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "%s %s failed: %s", q->method, what, curl_easy_strerror(c));
                return c == CURLE_COULDNT_CONNECT ? -ECONNREFUSED
                       : c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                       : c == CURLE_OUT_OF_MEMORY     ? -ENOMEM
                                                      : -EIO;
        }
        r = status_errno(q->status, q->error);
        if (r != -ENOENT) /* absence is an answer, not a failure */
                log_emit(LOG_LEVEL_WARN, s->ctx, "%s %s refused: HTTP %ld %s", q->method, what, q->status,
                         q->error[0] ? q->error : "");
        return r;
}

/* A request into a fresh q; free with req_done(). */
#define S3_REQ(m, k, qs) ((struct s3_req){ .method = (m), .key = (k), .query = (qs), .mtime = -1 })
static void req_done(struct s3_req *q) {
        free(q->reply);
        q->reply = NULL;
}

/* ---- query strings ---- */

/* RFC 3986 escaping, as SigV4 wants it (unreserved kept, '/' escaped). */
static char *escape(const char *s) {
        size_t n = strlen(s);
        char *out = malloc(3 * n + 1), *p = out;
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '.' || c == '_' || c == '~')
                        *p++ = (char) c;
                else
                        p += snprintf(p, 4, "%%%02X", c);
        }
        *p = 0;
        return out;
}

/* "k1=v1&k2=v2..." from pairs already in sorted order (callers write them
 * so), NULL values being "". */
static char *s3_query(size_t n, const char *const kv[]) {
        _cleanup_free_ char *q = strdup("");
        for (size_t i = 0; q && i < n; i++) {
                _cleanup_free_ char *v = escape(kv[2 * i + 1] ?: "");
                if (!v)
                        return NULL;
                char *next = strdup_printf("%s%s%s=%s", q, i ? "&" : "", kv[2 * i], v);
                free(q);
                q = next;
        }
        return TAKE_PTR(q);
}

/* ---- the ops ---- */

/* The object's key under the store's prefix, checked again here. */
static int key_ok(const char *key) {
        return objstore_key_check(key);
}

static int s3_exists_full(struct s3 *s, const char *key, uint64_t *ret_size, long *ret_mtime) {
        int r = key_ok(key);
        if (r < 0)
                return r;
        struct s3_req q = S3_REQ("HEAD", key, NULL);
        r = s3_do(s, &q, key);
        if (r >= 0 && !q.have_length)
                r = -EIO;
        if (r >= 0) {
                if (ret_size)
                        *ret_size = q.content_length;
                if (ret_mtime)
                        *ret_mtime = q.mtime;
        }
        req_done(&q);
        return r;
}

static int s3_exists(struct objstore *o, const char *key, uint64_t *ret_size) {
        return s3_exists_full(s3_of(o), key, ret_size, NULL);
}

static int s3_mtime(struct objstore *o, const char *key, uint64_t *ret_s) {
        long t = -1;
        int r = s3_exists_full(s3_of(o), key, NULL, &t);
        if (r < 0)
                return r;
        if (t < 0)
                return -EIO;
        *ret_s = (uint64_t) t;
        return 0;
}

static int s3_remove(struct objstore *o, const char *key) {
        struct s3 *s = s3_of(o);
        /* S3 deletes absent keys happily; the interface says -ENOENT */
        int r = s3_exists_full(s, key, NULL, NULL);
        if (r < 0)
                return r;
        struct s3_req q = S3_REQ("DELETE", key, NULL);
        r = s3_do(s, &q, key);
        req_done(&q);
        return r;
}

static void md5_b64(const void *data, size_t n, char b64[32], char hex[33]) {
        uint8_t md[16];
        unsigned len = 0;
        (void) EVP_Digest(data, n, md, &len, EVP_md5(), NULL);
        sodium_bin2base64(b64, 32, md, 16, sodium_base64_VARIANT_ORIGINAL);
        sodium_bin2hex(hex, 33, md, 16);
}

/* pread until n bytes or EOF; -EIO when the file got shorter. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
        size_t done = 0;
        while (done < n) {
                ssize_t k = pread(fd, (char *) buf + done, n - done, (off_t) (off + done));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return negative_errno();
                if (k == 0)
                        return -EIO; /* the file shrank while we sent it */
                done += (size_t) k;
        }
        return 0;
}

/* What a put sends: a file (read with pread), or the caller's bytes at
 * any offset (objstore_ops.put_source: sealed as they are read). */
struct source {
        int fd;
        objstore_read_at_fn read_at;
        void *userdata;
};

static int source_read(const struct source *src, void *buf, size_t n, uint64_t off) {
        return src->read_at ? src->read_at(src->userdata, off, buf, n) : pread_all(src->fd, buf, n, off);
}

static uint64_t part_size_for(uint64_t size) {
        uint64_t p = S3_PART_MIN;
        while (p < S3_PART_MAX && (size + p - 1) / p > S3_PARTS_MAX)
                p *= 2;
        return p;
}

/* Every PUT is checked by the server against the SHA-256 of its body,
 * which the signature covers (x-amz-content-sha256): a body damaged on
 * the way is refused. No Content-MD5 beside it: MD5 runs at a third of
 * SHA-256's speed here, and would check the same thing again. */
static int put_single(struct s3 *s, const char *key, const struct source *src, uint64_t size) {
        _cleanup_free_ uint8_t *buf = malloc(size ? size : 1);
        if (!buf)
                return -ENOMEM;
        int r = source_read(src, buf, size, 0);
        if (r < 0)
                return r;
        struct s3_req q = S3_REQ("PUT", key, NULL);
        q.body = buf;
        q.body_len = size;
        r = s3_do(s, &q, key);
        req_done(&q);
        return r;
}

/* ---- multipart ---- */

struct part {
        char etag[80]; /* "" until it landed */
        uint64_t size;
};

struct mpu {
        struct s3 *s;
        const char *key;
        char upload_id[256];
        const struct source *src;
        uint64_t size, part_size;
        uint32_t n_parts;
        struct part *parts;    /* [n_parts]; resumed ones pre-filled */
        struct part *existing; /* what S3 has of a resumed upload, [n_parts] */
        pthread_mutex_t lock;
        uint32_t next;         /* next part to take */
        int error;             /* first failure */
        uint32_t sent, skipped;
        void *part_hook_userdata;
};

static void *part_worker(void *arg) {
        struct mpu *m = arg;
        _cleanup_free_ uint8_t *buf = malloc(m->part_size);
        for (;;) {
                pthread_mutex_lock(&m->lock);
                uint32_t i = m->next;
                bool stop = m->error < 0 || i >= m->n_parts || !buf;
                if (!stop)
                        m->next++;
                if (!buf && m->error == 0)
                        m->error = -ENOMEM;
                pthread_mutex_unlock(&m->lock);
                if (stop)
                        break;
                uint64_t off = (uint64_t) i * m->part_size;
                size_t len = (size_t) (off + m->part_size > m->size ? m->size - off : m->part_size);
                int r = source_read(m->src, buf, len, off);
                /* a part a resumed upload has already: kept when its ETag
                 * is the MD5 of ours (S3's ETag of a part) */
                if (r >= 0 && m->existing[i].etag[0] && m->existing[i].size == len) {
                        char b64[32], hex[33];
                        md5_b64(buf, len, b64, hex);
                        if (strcasecmp(m->existing[i].etag, hex) == 0) {
                                snprintf(m->parts[i].etag, sizeof m->parts[i].etag, "%s", hex);
                                pthread_mutex_lock(&m->lock);
                                m->skipped++;
                                pthread_mutex_unlock(&m->lock);
                                continue;
                        }
                }
                if (r >= 0 && m->s->part_hook)
                        r = m->s->part_hook(m->key, i + 1, m->part_hook_userdata);
                char num[16];
                snprintf(num, sizeof num, "%u", i + 1);
                const char *kv[] = { "partNumber", num, "uploadId", m->upload_id };
                _cleanup_free_ char *qs = r >= 0 ? s3_query(2, kv) : NULL;
                struct s3_req q = S3_REQ("PUT", m->key, qs);
                q.body = buf;
                q.body_len = len;
                if (r >= 0)
                        r = qs ? s3_do(m->s, &q, m->key) : -ENOMEM;
                if (r >= 0 && !q.etag[0]) {
                        log_emit(LOG_LEVEL_WARN, m->s->ctx, "part %u of %s: the reply has no ETag", i + 1, m->key);
                        r = -EBADMSG;
                }
                if (r >= 0)
                        snprintf(m->parts[i].etag, sizeof m->parts[i].etag, "%s", q.etag);
                req_done(&q);
                pthread_mutex_lock(&m->lock);
                if (r < 0 && m->error == 0)
                        m->error = r;
                if (r >= 0)
                        m->sent++;
                pthread_mutex_unlock(&m->lock);
        }
        if (buf)
                sodium_memzero(buf, m->part_size);
        return NULL;
}

/* The newest unfinished upload of exactly key, if any. */
struct newest {
        const char *key;
        char *id; /* [256] */
        int64_t when;
};

static int newest_upload(void *userdata, const char *key, const char *upload_id, int64_t initiated) {
        struct newest *n = userdata;
        if (strcmp(key, n->key) == 0 && initiated >= n->when) {
                snprintf(n->id, 256, "%s", upload_id);
                n->when = initiated;
        }
        return 0;
}

static int mpu_find(struct s3 *s, const char *key, char id[256]) {
        _cleanup_free_ char *full = strdup_printf("%s%s", s->prefix, key);
        const char *kv[] = { "prefix", full, "uploads", NULL };
        _cleanup_free_ char *qs = full ? s3_query(2, kv) : NULL;
        if (!qs)
                return -ENOMEM;
        id[0] = 0;
        struct newest n = { .key = full, .id = id, .when = INT64_MIN };
        struct s3_xml_page page;
        struct s3_req q = S3_REQ("GET", NULL, qs);
        /* one page: uploads of one key beyond a thousand are not ours */
        int r = s3_do(s, &q, "list multipart uploads");
        if (r >= 0)
                r = s3_xml_uploads(q.reply, q.reply_len, newest_upload, &n, &page);
        req_done(&q);
        return r;
}

/* What S3 has of upload m->upload_id, into m->existing. */
static int existing_part(void *userdata, uint32_t number, const char *etag, uint64_t size) {
        struct mpu *m = userdata;
        if (number <= m->n_parts) {
                snprintf(m->existing[number - 1].etag, sizeof m->existing[number - 1].etag, "%s", etag);
                m->existing[number - 1].size = size;
        }
        return 0;
}

static int mpu_list_parts(struct mpu *m) {
        char marker[24] = "0";
        for (unsigned pages = 0; pages <= S3_PARTS_MAX / 1000; pages++) {
                const char *kv[] = { "part-number-marker", marker, "uploadId", m->upload_id };
                _cleanup_free_ char *qs = s3_query(2, kv);
                if (!qs)
                        return -ENOMEM;
                struct s3_xml_page page;
                struct s3_req q = S3_REQ("GET", m->key, qs);
                int r = s3_do(m->s, &q, "list parts");
                if (r >= 0)
                        r = s3_xml_parts(q.reply, q.reply_len, existing_part, m, &page);
                req_done(&q);
                if (r < 0)
                        return r;
                if (!page.truncated || strcmp(page.next, marker) == 0)
                        return 0;
                snprintf(marker, sizeof marker, "%.20s", page.next);
        }
        return -EBADMSG; /* more pages than parts can fill */
}

static int mpu_start(struct mpu *m) {
        const char *kv[] = { "uploads", NULL };
        _cleanup_free_ char *qs = s3_query(1, kv);
        if (!qs)
                return -ENOMEM;
        struct s3_req q = S3_REQ("POST", m->key, qs);
        int r = s3_do(m->s, &q, m->key);
        if (r >= 0)
                r = s3_xml_upload_id(q.reply, q.reply_len, m->upload_id, sizeof m->upload_id);
        req_done(&q);
        return r;
}

static int mpu_complete(struct mpu *m) {
        size_t cap = 64 + (size_t) m->n_parts * 128, len = 0;
        _cleanup_free_ char *body = malloc(cap);
        if (!body)
                return -ENOMEM;
        len += (size_t) snprintf(body + len, cap - len, "<CompleteMultipartUpload>");
        for (uint32_t i = 0; i < m->n_parts; i++)
                len += (size_t) snprintf(body + len, cap - len, "<Part><PartNumber>%u</PartNumber><ETag>\"%s\"</ETag></Part>",
                                         i + 1, m->parts[i].etag);
        len += (size_t) snprintf(body + len, cap - len, "</CompleteMultipartUpload>");
        const char *kv[] = { "uploadId", m->upload_id };
        _cleanup_free_ char *qs = s3_query(1, kv);
        if (!qs)
                return -ENOMEM;
        struct s3_req q = S3_REQ("POST", m->key, qs);
        q.body = body;
        q.body_len = len;
        int r = s3_do(m->s, &q, m->key);
        /* S3 may answer 200 and still fail: the body says which */
        if (r >= 0 && !s3_xml_is_complete(q.reply, q.reply_len)) {
                s3_xml_error(q.reply, q.reply_len, q.error, sizeof q.error);
                log_emit(LOG_LEVEL_WARN, m->s->ctx, "completing the upload of %s failed: %s", m->key,
                         q.error[0] ? q.error : "unexpected reply");
                r = -EIO;
        }
        req_done(&q);
        return r;
}

static int put_multipart(struct s3 *s, const char *key, const struct source *src, uint64_t size) {
        struct mpu m = { .s = s, .key = key, .src = src, .size = size, .part_size = part_size_for(size),
                         .part_hook_userdata = s->part_hook_userdata };
        m.n_parts = (uint32_t) ((size + m.part_size - 1) / m.part_size);
        if (m.n_parts > S3_PARTS_MAX)
                return -EFBIG;
        _cleanup_free_ struct part *parts = calloc(m.n_parts, sizeof *parts);
        _cleanup_free_ struct part *existing = calloc(m.n_parts, sizeof *existing);
        if (!parts || !existing)
                return -ENOMEM;
        m.parts = parts;
        m.existing = existing;

        int r = mpu_find(s, key, m.upload_id);
        if (r >= 0 && m.upload_id[0])
                r = mpu_list_parts(&m);
        if (r < 0 || !m.upload_id[0]) {
                memset(existing, 0, m.n_parts * sizeof *existing);
                m.upload_id[0] = 0;
                r = mpu_start(&m);
                if (r < 0)
                        return r;
        }
        pthread_mutex_init(&m.lock, NULL);
        pthread_t t[S3_PARALLEL];
        size_t n_threads = 0;
        for (size_t i = 0; i < S3_PARALLEL && i < m.n_parts; i++) {
                if (pthread_create(&t[n_threads], NULL, part_worker, &m) != 0)
                        break;
                n_threads++;
        }
        if (n_threads == 0)
                part_worker(&m);
        for (size_t i = 0; i < n_threads; i++)
                pthread_join(t[i], NULL);
        pthread_mutex_destroy(&m.lock);
        if (m.error < 0)
                return m.error; /* the upload stays for the next put to resume, or gc */
        if (m.skipped)
                log_emit(LOG_LEVEL_INFO, s->ctx, "resumed the upload of %s: %u of %u parts were there", key,
                         m.skipped, m.n_parts);
        r = mpu_complete(&m);
        if (r < 0)
                return r;
        uint64_t got = 0;
        r = s3_exists_full(s, key, &got, NULL);
        if (r >= 0 && got != size)
                r = -EBADMSG;
        return r;
}

static int s3_put(struct objstore *o, const char *key, int fd) {
        struct s3 *s = s3_of(o);
        int r = key_ok(key);
        if (r < 0)
                return r;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        uint64_t size = (uint64_t) st.st_size;
        struct source src = { .fd = fd };
        return size <= part_size_for(size) ? put_single(s, key, &src, size) : put_multipart(s, key, &src, size);
}

static int s3_put_source(struct objstore *o, const char *key, uint64_t size, objstore_read_at_fn read_at,
                         void *userdata) {
        struct s3 *s = s3_of(o);
        int r = key_ok(key);
        if (r < 0)
                return r;
        struct source src = { .fd = -1, .read_at = read_at, .userdata = userdata };
        return size <= part_size_for(size) ? put_single(s, key, &src, size) : put_multipart(s, key, &src, size);
}

/* Where a GET's bytes go: a file, written sparse (4 KiB blocks of zeros
 * are skipped: images are mostly holes), and an MD5 to check against a
 * single PUT's ETag. */
struct file_sink {
        int fd;
        uint64_t off;
        EVP_MD_CTX *md5;
};

static bool zero_block(const uint8_t *p, size_t n) {
        return n > 0 && p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

static int file_sink_write(void *userdata, const void *buf, size_t n) {
        struct file_sink *f = userdata;
        const uint8_t *p = buf;
        if (EVP_DigestUpdate(f->md5, buf, n) != 1)
                return -EIO;
        while (n > 0) {
                /* up to the next 4 KiB boundary of the file */
                size_t chunk = 4096 - (size_t) (f->off % 4096);
                if (chunk > n)
                        chunk = n;
                if (!(chunk == 4096 && zero_block(p, chunk))) {
                        size_t done = 0;
                        while (done < chunk) {
                                ssize_t k = pwrite(f->fd, p + done, chunk - done, (off_t) (f->off + done));
                                if (k < 0 && errno == EINTR)
                                        continue;
                                if (k < 0)
                                        return negative_errno();
                                done += (size_t) k;
                        }
                }
                f->off += chunk;
                p += chunk;
                n -= chunk;
        }
        return 0;
}

static int s3_get(struct objstore *o, const char *key, const char *dst_path) {
        struct s3 *s = s3_of(o);
        int r = key_ok(key);
        if (r < 0)
                return r;
        _cleanup_free_ char *tmp = strdup_printf("%s.XXXXXX", dst_path);
        if (!tmp)
                return -ENOMEM;
        _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        struct file_sink f = { .fd = fd, .md5 = EVP_MD_CTX_new() };
        struct s3_req q = S3_REQ("GET", key, NULL);
        q.sink = file_sink_write;
        q.userdata = &f;
        r = f.md5 && EVP_DigestInit_ex(f.md5, EVP_md5(), NULL) == 1 ? 0 : -ENOMEM;
        if (r >= 0)
                r = s3_do(s, &q, key);
        if (r >= 0 && ftruncate(fd, (off_t) f.off) < 0) /* trailing holes */
                r = negative_errno();
        if (r >= 0 && q.etag[0] && strlen(q.etag) == 32 && q.sunk == f.off) {
                /* one PUT's ETag is the MD5 of the whole object (a resumed GET
                 * was hashed in order all the same) */
                uint8_t md[16];
                char hex[33];
                unsigned len = 0;
                if (EVP_DigestFinal_ex(f.md5, md, &len) == 1 && len == 16) {
                        sodium_bin2hex(hex, sizeof hex, md, 16);
                        if (strcasecmp(hex, q.etag) != 0) {
                                log_emit(LOG_LEVEL_WARN, s->ctx, "GET %s: the bytes do not match their ETag", key);
                                r = -EBADMSG;
                        }
                }
        }
        EVP_MD_CTX_free(f.md5);
        req_done(&q);
        if (r >= 0 && fsync(fd) < 0)
                r = negative_errno();
        if (r >= 0 && rename(tmp, dst_path) < 0)
                r = negative_errno();
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

/* The object's bytes in order to sink; a broken transfer resumes where it
 * stopped (a ranged GET that must answer 206), so the sink sees each byte
 * once. */
static int s3_get_stream(struct objstore *o, const char *key, objstore_sink_fn sink, void *userdata) {
        struct s3 *s = s3_of(o);
        int r = key_ok(key);
        if (r < 0)
                return r;
        struct s3_req q = S3_REQ("GET", key, NULL);
        q.sink = sink;
        q.userdata = userdata;
        r = s3_do(s, &q, key);
        req_done(&q);
        return r;
}

struct list_state {
        struct objstore_keylist kl;
        const char *prefix; /* the store's */
        size_t skip;
};

static int list_one(void *userdata, const char *key) {
        struct list_state *l = userdata;
        /* what is not a valid key of ours (written by others) is not listed */
        if (strncmp(key, l->prefix, l->skip) != 0 || objstore_key_check(key + l->skip) < 0)
                return 0;
        return objstore_keylist_add(&l->kl, key + l->skip);
}

static int s3_list(struct objstore *o, const char *prefix, char ***ret_keys) {
        struct s3 *s = s3_of(o);
        _cleanup_free_ char *full = strdup_printf("%s%s", s->prefix, prefix);
        if (!full)
                return -ENOMEM;
        struct list_state l = { .prefix = s->prefix, .skip = strlen(s->prefix) };
        struct s3_xml_page page = { 0 };
        int r = 0;
        do {
                const char *kv[] = { "continuation-token", page.next, "list-type", "2", "prefix", full };
                _cleanup_free_ char *qs = page.truncated ? s3_query(3, kv) : s3_query(2, kv + 2);
                if (!qs) {
                        r = -ENOMEM;
                        break;
                }
                struct s3_req q = S3_REQ("GET", NULL, qs);
                r = s3_do(s, &q, "list");
                if (r >= 0)
                        r = s3_xml_list(q.reply, q.reply_len, list_one, &l, &page);
                req_done(&q);
        } while (r >= 0 && page.truncated);
        if (r >= 0)
                r = objstore_keylist_finish(&l.kl, ret_keys);
        objstore_keylist_release(&l.kl);
        return r;
}

static int abort_upload(struct s3 *s, const char *full_key, const char *upload_id) {
        const char *kv[] = { "uploadId", upload_id };
        _cleanup_free_ char *qs = s3_query(1, kv);
        if (!qs)
                return -ENOMEM;
        size_t skip = strlen(s->prefix);
        struct s3_req q = S3_REQ("DELETE", full_key + skip, qs);
        int r = s3_do(s, &q, full_key + skip);
        req_done(&q);
        return r;
}

/* Aborts the multipart uploads under the store's prefix started at least
 * min_age_s ago: what a crash or a failed put left. */
struct gc_state {
        struct s3 *s;
        unsigned min_age_s;
        int64_t now;
        int removed;
};

static int gc_one(void *userdata, const char *key, const char *upload_id, int64_t initiated) {
        struct gc_state *g = userdata;
        /* (the server's clock may run ahead, or round up: age 0) */
        if (strncmp(key, g->s->prefix, strlen(g->s->prefix)) != 0 ||
            (g->min_age_s > 0 && (initiated < 0 || g->now - initiated < (int64_t) g->min_age_s)))
                return 0;
        if (abort_upload(g->s, key, upload_id) >= 0)
                g->removed++;
        return 0;
}

static int s3_gc_tmp(struct objstore *o, unsigned min_age_s) {
        struct s3 *s = s3_of(o);
        struct gc_state g = { .s = s, .min_age_s = min_age_s, .now = (int64_t) time(NULL) };
        struct s3_xml_page page = { 0 };
        int r;
        do {
                const char *kv[] = { "key-marker", page.next, "prefix", s->prefix, "upload-id-marker", page.next_id,
                                     "uploads", NULL };
                _cleanup_free_ char *qs = s3_query(4, kv);
                if (!qs)
                        return -ENOMEM;
                struct s3_req q = S3_REQ("GET", NULL, qs);
                r = s3_do(s, &q, "list multipart uploads");
                if (r >= 0)
                        r = s3_xml_uploads(q.reply, q.reply_len, gc_one, &g, &page);
                req_done(&q);
        } while (r >= 0 && page.truncated);
        return r < 0 ? r : g.removed;
}

static void s3_data_free(struct s3 *s) {
        if (!s)
                return;
        free(s->endpoint);
        free(s->bucket);
        free(s->prefix);
        free(s->region);
        free(s->sigv4);
        if (s->access_key)
                sodium_memzero(s->access_key, strlen(s->access_key));
        if (s->secret_key)
                sodium_memzero(s->secret_key, strlen(s->secret_key));
        free(s->access_key);
        free(s->secret_key);
        free(s);
}

static void s3_free(struct objstore *o) {
        s3_data_free(s3_of(o));
}

const struct objstore_ops objstore_s3_ops = {
        .name = "s3",
        .put = s3_put,
        .get = s3_get,
        .exists = s3_exists,
        .remove = s3_remove,
        .list = s3_list,
        .free = s3_free,
        .mtime = s3_mtime,
        .gc_tmp = s3_gc_tmp,
        .put_source = s3_put_source,
        .get_stream = s3_get_stream,
};

void objstore_s3_set_part_hook(struct objstore *o, objstore_s3_part_fn fn, void *userdata) {
        struct s3 *s = s3_of(o);
        s->part_hook = fn;
        s->part_hook_userdata = userdata;
}

/* ---- opening ---- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init(void) {
        (void) curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool bucket_is_valid(const char *b, size_t n) {
        if (n < 3 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.'))
                        return false;
        return b[0] != '-' && b[0] != '.' && b[n - 1] != '-' && b[n - 1] != '.';
}

/* Decodes %XX in place; false on a malformed escape or a NUL. */
static bool url_decode(char *s) {
        char *w = s;
        for (char *p = s; *p; p++) {
                if (*p != '%') {
                        *w++ = *p;
                        continue;
                }
                unsigned v;
                if (!p[1] || !p[2] || sscanf(p + 1, "%2x", &v) != 1 || v == 0)
                        return false;
                *w++ = (char) v;
                p += 2;
        }
        *w = 0;
        return true;
}

int objstore_s3_parse_url(const char *url, struct objstore_s3_location *ret, char *err, size_t err_size) {
        static const char scheme[] = "s3://";
        if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
                return snprintf(err, err_size, "not an s3:// URL"), -EINVAL;
        if (strlen(url) > 2048)
                return snprintf(err, err_size, "the URL is longer than 2048 bytes"), -EINVAL;
        const char *b = url + sizeof scheme - 1;
        size_t bn = strcspn(b, "/?");
        if (!bucket_is_valid(b, bn))
                return snprintf(err, err_size, "'%.*s' is not a valid bucket name (3-63 of a-z 0-9 . -)", (int) bn, b),
                       -EINVAL;
        struct objstore_s3_location l = { 0 };
        snprintf(l.bucket, sizeof l.bucket, "%.*s", (int) bn, b);
        const char *p = b + bn;
        if (*p == '/') {
                size_t pn = strcspn(++p, "?");
                char prefix[OBJSTORE_KEY_MAX + 1];
                if (pn > 0) {
                        if (pn >= sizeof prefix)
                                return snprintf(err, err_size, "the key prefix is too long"), -EINVAL;
                        snprintf(prefix, sizeof prefix, "%.*s", (int) pn, p);
                        size_t len = strlen(prefix);
                        if (prefix[len - 1] == '/')
                                prefix[len - 1] = 0;
                        if (objstore_key_check(prefix) < 0)
                                return snprintf(err, err_size, "'%.*s' is not a valid key prefix", (int) pn, p),
                                       -EINVAL;
                        snprintf(l.prefix, sizeof l.prefix, "%s/", prefix);
                }
                p += pn;
        }
        if (*p == '?') {
                char params[2048];
                snprintf(params, sizeof params, "%s", p + 1);
                char *save = NULL;
                for (char *kv = strtok_r(params, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
                        char *eq = strchr(kv, '=');
                        if (!eq)
                                return snprintf(err, err_size, "parameter '%.64s' has no value", kv), -EINVAL;
                        *eq = 0;
                        char *v = eq + 1;
                        if (!url_decode(v))
                                return snprintf(err, err_size, "parameter '%.64s' is badly escaped", kv), -EINVAL;
                        if (strcmp(kv, "endpoint") == 0) {
                                if ((strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) ||
                                    strlen(v) >= sizeof l.endpoint || strpbrk(v, "?#@ \t\r\n"))
                                        return snprintf(err, err_size,
                                                        "endpoint must be an http:// or https:// URL with no query"),
                                               -EINVAL;
                                snprintf(l.endpoint, sizeof l.endpoint, "%s", v);
                                size_t n = strlen(l.endpoint);
                                while (n > 0 && l.endpoint[n - 1] == '/')
                                        l.endpoint[--n] = 0;
                                if (strchr(strstr(l.endpoint, "://") + 3, '/'))
                                        return snprintf(err, err_size, "endpoint must have no path"), -EINVAL;
                        } else if (strcmp(kv, "region") == 0) {
                                size_t n = strlen(v);
                                if (n == 0 || n >= sizeof l.region || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
                                        return snprintf(err, err_size, "region must be 1-63 of a-z 0-9 -"), -EINVAL;
                                snprintf(l.region, sizeof l.region, "%s", v);
                        } else
                                return snprintf(err, err_size,
                                                "unknown parameter '%.64s' (known: endpoint, region)", kv),
                                       -EINVAL;
                }
        }
        if (!*l.region)
                snprintf(l.region, sizeof l.region, "us-east-1");
        if (!*l.endpoint) { /* AWS itself, addressed by bucket host name */
                snprintf(l.endpoint, sizeof l.endpoint, "https://s3.%s.amazonaws.com", l.region);
                l.path_style = strchr(l.bucket, '.') != NULL; /* dotted names break TLS host names */
        } else
                l.path_style = true; /* MinIO, Ceph, Swift: host names are not per bucket */
        *ret = l;
        return 0;
}

int objstore_open_s3(const struct objstore_s3_location *l, const char *access_key, const char *secret_key,
                     struct objstore **ret) {
        if (!l || !access_key || !*access_key || !secret_key || !*secret_key || !ret)
                return -EINVAL;
        (void) pthread_once(&global_once, global_init);
        struct s3 *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->endpoint = strdup(l->endpoint);
        s->bucket = strdup(l->bucket);
        s->prefix = strdup(l->prefix);
        s->region = strdup(l->region);
        s->sigv4 = strdup_printf("aws:amz:%s:s3", l->region);
        s->access_key = strdup(access_key);
        s->secret_key = strdup(secret_key);
        s->path_style = l->path_style;
        snprintf(s->ctx, sizeof s->ctx, "objstore=s3://%s", l->bucket);
        struct objstore *o = NULL;
        int r = s->endpoint && s->bucket && s->prefix && s->region && s->sigv4 && s->access_key && s->secret_key
                        ? objstore_new(&objstore_s3_ops, s, &o)
                        : -ENOMEM;
        if (r < 0) {
                s3_data_free(s);
                return r;
        }
        /* the bucket must be there and take our signature: a wrong secret
         * shows at start, not at the first suspend */
        struct s3_req q = S3_REQ("HEAD", NULL, NULL);
        r = s3_do(s, &q, "bucket");
        long status = q.status;
        req_done(&q);
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, s->ctx, "the S3 store at %s %s", l->endpoint,
                         status == 404                   ? "has no such bucket"
                         : status == 403 || status == 401 ? "refuses these credentials (wrong access key or secret?)"
                         : status                         ? "answered with an error"
                                                          : "cannot be reached");
                objstore_free(o);
                return r;
        }
        *ret = o;
        return 0;
}
