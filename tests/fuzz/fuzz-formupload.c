/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes a multipart/form-data body of POST /v1/templates as airlockd takes
 * it (src/daemon/formupload.c on libmicrohttpd's post processor). The post
 * processor reads the Content-Type from a live connection, so the request
 * goes to an in-process MHD daemon over a socketpair and its handler does
 * what http.c does with the form. The input's first line is the request's
 * Content-Type; the rest is the body.
 * Every body is sent twice: in one write and cut into small writes (the
 * size taken from the input). Invariants: both give the same outcome (the
 * refusal, or the same JSON part and file), a refusal says why, the JSON
 * part is NUL-terminated within its limit, and the file holds what was
 * hashed, within its limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "formupload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define JSON_MAX 1024
#define FILE_MAX 2048
#define ROUNDS_MAX 100000 /* MHD_run()s without the connection ending: it hangs */

struct outcome {
        bool is_form;   /* formupload_is_multipart() */
        int error;      /* formupload_new() or formupload_data() refused */
        bool finished;  /* the whole body went through */
        char *json;     /* the JSON part (malloc'd), NULL when absent */
        size_t json_len;
        bool has_file;
        char sha[65];
        uint64_t file_len;
};

/* the request under way (one at a time) */
static struct {
        struct outcome *out;
        struct formupload *form;
        bool answered;
} cur;

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status) {
        cur.answered = true;
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
        if (!resp)
                abort();
        enum MHD_Result m = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return m;
}

/* The file part as the node would read it: by its path. */
static void check_file(const char *path, const char sha[65]) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                abort();
        uint8_t buf[FILE_MAX + 1];
        ssize_t n = pread(fd, buf, sizeof buf, 0);
        close(fd);
        if (n < 0 || n > FILE_MAX || (uint64_t) n != cur.out->file_len)
                abort();
        uint8_t h[crypto_hash_sha256_BYTES];
        char hex[65];
        crypto_hash_sha256(h, buf, (size_t) n);
        sodium_bin2hex(hex, sizeof hex, h, sizeof h);
        if (strcmp(hex, sha) != 0)
                abort();
}

/* http.c's on_access() for a form: request_begin, request_data, request_finish */
static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
        (void) cls, (void) url, (void) method, (void) version;
        struct outcome *out = cur.out;
        if (!*con_cls) {
                *con_cls = out;
                out->is_form = formupload_is_multipart(conn);
                if (!out->is_form)
                        return answer(conn, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE);
                int r = formupload_new(conn, "request", "context", getenv("TMPDIR") ?: "/tmp", JSON_MAX, FILE_MAX,
                                       &cur.form);
                if (r == -EINVAL) { /* no boundary */
                        out->error = r;
                        return answer(conn, MHD_HTTP_BAD_REQUEST);
                }
                if (r < 0)
                        abort(); /* the harness' temporary file */
                return MHD_YES;
        }
        if (cur.answered) {
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                char err[256] = "";
                int r = formupload_data(cur.form, upload_data, n, err, sizeof err);
                if (r < 0) {
                        if (!err[0] || (r != -EINVAL && r != -EFBIG))
                                abort(); /* a refusal says why */
                        out->error = r;
                        return answer(conn, r == -EFBIG ? 413 : MHD_HTTP_BAD_REQUEST);
                }
                return MHD_YES;
        }
        char err[256] = "";
        int r = formupload_finish(cur.form, err, sizeof err);
        if (r < 0) {
                if (!err[0] || r != -EINVAL)
                        abort(); /* a refusal says why */
                out->error = r;
                return answer(conn, MHD_HTTP_BAD_REQUEST);
        }
        out->finished = true;
        const char *json = formupload_json(cur.form, &out->json_len);
        if (json) {
                if (out->json_len > JSON_MAX || json[out->json_len] != 0)
                        abort();
                if (!(out->json = malloc(out->json_len + 1)))
                        abort();
                memcpy(out->json, json, out->json_len + 1);
        }
        const char *path = formupload_file(cur.form, out->sha);
        if (path) {
                out->has_file = true;
                /* formupload.c keeps the length to itself: what the file holds is checked */
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
                if (fd >= 0)
                        close(fd);
                if (end < 0)
                        abort();
                out->file_len = (uint64_t) end;
                check_file(path, out->sha);
        }
        return answer(conn, MHD_HTTP_OK);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void) cls, (void) conn, (void) toe;
        formupload_free(cur.form);
        cur.form = NULL;
        *con_cls = NULL;
}

static struct MHD_Daemon *mhd(void) {
        static struct MHD_Daemon *d;
        if (!d) {
                /* no listening socket, no thread: MHD_run() below does the work */
                d = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_access, NULL,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (128u << 10),
                                     MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
                if (!d)
                        abort();
        }
        return d;
}

static unsigned connections(struct MHD_Daemon *d) {
        const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        return i ? i->num_connections : 0;
}

/* Sends the request in writes of at most piece bytes, then reads the answer
 * until MHD closes the connection. */
static void run(const char *type, const uint8_t *body, size_t len, size_t piece, struct outcome *out) {
        struct MHD_Daemon *d = mhd();
        memset(out, 0, sizeof *out);
        memset(&cur, 0, sizeof cur);
        cur.out = out;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || fcntl(sv[1], F_SETFL, O_NONBLOCK) < 0)
                abort();
        struct sockaddr_in peer = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (MHD_add_connection(d, sv[0], (const struct sockaddr *) &peer, sizeof peer) != MHD_YES)
                abort();

        char head[1024];
        int hlen = snprintf(head, sizeof head,
                            "POST /v1/templates HTTP/1.1\r\nHost: airlock\r\nConnection: close\r\n"
                            "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                            type, len);
        if (hlen < 0 || (size_t) hlen >= sizeof head)
                abort();
        size_t total = (size_t) hlen + len, sent = 0;
        unsigned rounds = 0;
        bool closed = false;
        while (!closed) {
                if (sent < total) {
                        size_t n = total - sent < piece ? total - sent : piece;
                        const void *p = sent < (size_t) hlen ? (const void *) (head + sent) : body + (sent - hlen);
                        if (sent < (size_t) hlen && n > (size_t) hlen - sent)
                                n = (size_t) hlen - sent;
                        ssize_t k = send(sv[1], p, n, MSG_NOSIGNAL);
                        if (k > 0)
                                sent += (size_t) k;
                        else if (k < 0 && errno != EAGAIN)
                                sent = total; /* MHD hung up: it answered early */
                }
                MHD_run(d);
                char buf[4096];
                ssize_t k;
                while ((k = recv(sv[1], buf, sizeof buf, 0)) > 0)
                        ;
                if (k == 0 || (k < 0 && errno != EAGAIN))
                        closed = true;
                if (++rounds > ROUNDS_MAX)
                        abort(); /* the connection never ended */
        }
        close(sv[1]);
        for (rounds = 0; connections(d) > 0; rounds++) {
                if (rounds > ROUNDS_MAX)
                        abort();
                MHD_run(d);
        }
        if (cur.form)
                abort(); /* on_completed() did not run */
}

static void outcome_release(struct outcome *o) {
        free(o->json);
        o->json = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (sodium_init() < 0)
                abort();
        const uint8_t *nl = memchr(data, '\n', size);
        if (!nl || nl - data > 512)
                return 0;
        char type[513];
        size_t tlen = (size_t) (nl - data);
        for (size_t i = 0; i < tlen; i++)
                if ((data[i] < 0x20 && data[i] != '\t') || data[i] == 0x7f)
                        return 0; /* not a header value */
        memcpy(type, data, tlen);
        type[tlen] = 0;
        const uint8_t *body = nl + 1;
        size_t len = size - tlen - 1;

        struct outcome whole, cut;
        run(type, body, len, SIZE_MAX, &whole);
        run(type, body, len, 1 + (len * 31 + tlen) % 53, &cut);
        if (whole.is_form != cut.is_form || !whole.error != !cut.error || whole.finished != cut.finished)
                abort();
        if (whole.error && cut.error && whole.error != cut.error)
                abort();
        if (whole.is_form && !whole.error && !whole.finished)
                abort(); /* neither refused nor taken */
        if (whole.finished) {
                if (!whole.json != !cut.json || whole.json_len != cut.json_len ||
                    (whole.json && memcmp(whole.json, cut.json, whole.json_len) != 0))
                        abort();
                if (whole.has_file != cut.has_file || whole.file_len != cut.file_len ||
                    (whole.has_file && strcmp(whole.sha, cut.sha) != 0))
                        abort();
        }
        outcome_release(&whole);
        outcome_release(&cut);
        return 0;
}
