/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock cp: copy one file between this machine and a sandbox over
 * PUT/GET /v1/sandboxes/{id}/files?path=. Data streams through curl's read
 * and write callbacks in curl-sized pieces; nothing holds a whole file.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"
#include "util.h"

struct cp_local {
        const char *path; /* "-" for stdin/stdout */
        int fd;
        int error; /* negative errno of a local read/write failure */
        struct client_call *call;
        bool opened;
        uint64_t transferred;
        int64_t expected; /* X-Airlock-Size of a download, -1 if not sent */
};

/* mode < 0: none; otherwise sent as the new file's permission bits. */
static int files_path(const char *sandbox, const char *remote, int mode, char **ret) {
        _cleanup_free_ char *q = NULL;
        char mode_param[16] = "";
        int r = cli_url_escape(remote, true, &q);
        if (r < 0)
                return r;
        if (mode >= 0)
                snprintf(mode_param, sizeof(mode_param), "&mode=%o", (unsigned)mode & 07777u);
        return asprintf(ret, "/v1/sandboxes/%s/files?path=%s%s", sandbox, q, mode_param) < 0 ? -ENOMEM : 0;
}

/* The request on the file remote of sandbox (files_path()), connected:
 * CLI_PROCEED with *ret, or the exit code. */
static int files_call(struct cli *cli, const char *method, const char *sandbox, const char *remote, int mode,
                      struct client_call **ret) {
        _cleanup_free_ char *path = NULL;
        if (files_path(sandbox, remote, mode, &path) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        int r = client_call_new(&cli->client, method, path, NULL, NULL, ret);
        if (r < 0)
                return cli_fail("cp: failed to prepare the request: %s", strerror(-r));
        return CLI_PROCEED;
}

/* "dir/" + basename(src): where a copy into a directory lands. */
static int join_basename(const char *dir, const char *src, char **ret) {
        _cleanup_free_ char *copy = strdup(src);
        if (!copy)
                return -ENOMEM;
        const char *base = basename(copy);
        if (!*base || strcmp(base, "/") == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
                return -EINVAL;
        size_t n = strlen(dir);
        return asprintf(ret, "%s%s%s", dir, n > 0 && dir[n - 1] == '/' ? "" : "/", base) < 0 ? -ENOMEM : 0;
}

static size_t upload_read_cb(char *buf, size_t size, size_t nitems, void *userdata) {
        struct cp_local *l = userdata;
        for (;;) {
                ssize_t n = read(l->fd, buf, size * nitems);
                if (n >= 0)
                        return (size_t)n;
                if (errno != EINTR) {
                        l->error = negative_errno();
                        return CURL_READFUNC_ABORT;
                }
        }
}

static int cp_upload(struct cli *cli, const char *local, const struct cli_endpoint *dst) {
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        _cleanup_(json_decrefp) json_t *resp = NULL;
        _cleanup_free_ char *remote = NULL;
        _cleanup_close_ int fd = -1;
        struct cli_error err = {};
        struct stat st;
        bool is_stdin = strcmp(local, "-") == 0;
        int r;

        if (dst->path[strlen(dst->path) - 1] == '/') {
                if (is_stdin)
                        return cli_usage_error(cli,
                                               "cp: copying stdin needs a file name, not the directory '%s'",
                                               dst->path);
                if (join_basename(dst->path, local, &remote) < 0)
                        return cli_usage_error(cli, "cp: cannot derive a file name from '%s'", local);
        } else if (!(remote = strdup(dst->path)))
                return cli_fail("out of memory");

        if (!is_stdin) {
                fd = open(local, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (fd < 0)
                        return cli_fail("cp: cannot open '%s': %m", local);
        }
        int in = is_stdin ? STDIN_FILENO : fd;
        if (fstat(in, &st) < 0)
                return cli_fail("cp: cannot stat '%s': %m", local);
        if (S_ISDIR(st.st_mode))
                return cli_fail("cp: '%s' is a directory; only files can be copied", local);

        /* Like cp(1), a new file gets the source's permissions. */
        r = files_call(cli, "PUT", dst->sandbox, remote, S_ISREG(st.st_mode) ? (int)(st.st_mode & 0777) : -1, &call);
        if (r != CLI_PROCEED)
                return r;

        struct cp_local l = {.path = local, .fd = in, .call = call};
        struct curl_slist *h = curl_slist_append(call->headers, "Content-Type: application/octet-stream");
        if (!h)
                return cli_fail("out of memory");
        call->headers = h;
        curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(call->easy, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(call->easy, CURLOPT_READFUNCTION, upload_read_cb);
        curl_easy_setopt(call->easy, CURLOPT_READDATA, &l);
        /* Known size for regular files; pipes go chunked. */
        if (S_ISREG(st.st_mode))
                curl_easy_setopt(call->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);

        CURLcode res = curl_easy_perform(call->easy);
        if (l.error < 0)
                return cli_fail("cp: failed to read '%s': %s", local, strerror(-l.error));
        if (client_call_finish(&cli->client, call, res, &err, &resp) < 0)
                return cli_fail_error(&err, "cp %s:%s", dst->sandbox, remote);
        if (cli->json && resp)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        return CLI_EXIT_OK;
}

/* The destination is opened only once the server says 2xx, so a failed
 * request (no such sandbox or file) leaves an existing local file alone. */
static int download_open(struct cp_local *l) {
        if (l->opened)
                return 0;
        if (strcmp(l->path, "-") == 0)
                l->fd = STDOUT_FILENO;
        else {
                l->fd = open(l->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
                if (l->fd < 0)
                        return (l->error = negative_errno());
        }
        l->opened = true;
        return 0;
}

static size_t download_write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct cp_local *l = userdata;
        size_t n = size * nmemb;

        if (client_call_status(l->call) / 100 != 2)
                return client_call_collect(l->call, data, n) < 0 ? 0 : n;
        if (download_open(l) < 0)
                return 0;
        int r = fd_write_all(l->fd, data, n);
        if (r < 0) {
                l->error = r;
                return 0;
        }
        l->transferred += n;
        return n;
}

/* The server streams without Content-Length and reports a mid-transfer
 * failure by closing early; X-Airlock-Size is how we notice. */
static size_t download_header_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        static const char name[] = "x-airlock-size:";
        struct cp_local *l = userdata;
        size_t n = size * nmemb;
        char value[32];
        uint64_t v;

        if (n <= sizeof(name) - 1 || strncasecmp(data, name, sizeof(name) - 1) != 0)
                return n;
        size_t vlen = n - (sizeof(name) - 1);
        if (vlen >= sizeof(value))
                return n;
        memcpy(value, data + sizeof(name) - 1, vlen);
        value[vlen] = '\0';
        /* Trim the header's spaces and line end for parse_u64(). */
        char *s = value + strspn(value, " \t");
        s[strcspn(s, " \t\r\n")] = '\0';
        if (parse_u64(s, INT64_MAX, &v) == 0)
                l->expected = (int64_t)v;
        return n;
}

static int cp_download(struct cli *cli, const struct cli_endpoint *src, const char *local) {
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        _cleanup_free_ char *target = NULL;
        struct cli_error err = {};
        struct stat st;
        int r;

        if (src->path[strlen(src->path) - 1] == '/')
                return cli_fail("cp: '%s' names a directory; only files can be copied", src->path);
        if (strcmp(local, "-") != 0 && stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
                if (join_basename(local, src->path, &target) < 0)
                        return cli_usage_error(cli, "cp: cannot derive a file name from '%s'", src->path);
        } else if (!(target = strdup(local)))
                return cli_fail("out of memory");

        r = files_call(cli, "GET", src->sandbox, src->path, -1, &call);
        if (r != CLI_PROCEED)
                return r;

        _cleanup_close_ int fd_guard = -1;
        struct cp_local l = {.path = target, .fd = -1, .call = call, .expected = -1};
        /* Replace "Accept: application/json": the body is the file. */
        struct curl_slist *h = curl_slist_append(call->headers, "Accept: */*");
        if (!h)
                return cli_fail("out of memory");
        call->headers = h;
        curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(call->easy, CURLOPT_WRITEFUNCTION, download_write_cb);
        curl_easy_setopt(call->easy, CURLOPT_WRITEDATA, &l);
        curl_easy_setopt(call->easy, CURLOPT_HEADERFUNCTION, download_header_cb);
        curl_easy_setopt(call->easy, CURLOPT_HEADERDATA, &l);

        CURLcode res = curl_easy_perform(call->easy);
        if (l.opened && l.fd != STDOUT_FILENO)
                fd_guard = l.fd;
        if (l.error < 0)
                return cli_fail("cp: failed to write '%s': %s", target, strerror(-l.error));
        if (client_call_finish(&cli->client, call, res, &err, NULL) < 0)
                return cli_fail_error(&err, "cp %s:%s", src->sandbox, src->path);
        if (l.expected >= 0 && l.transferred < (uint64_t)l.expected)
                return cli_fail("cp %s:%s: the transfer ended early (%llu of %lld bytes)", src->sandbox,
                                src->path, (unsigned long long)l.transferred, (long long)l.expected);
        /* An empty file never reached the write callback. */
        if (download_open(&l) < 0)
                return cli_fail("cp: failed to write '%s': %s", target, strerror(-l.error));
        if (l.fd != STDOUT_FILENO) {
                fd_guard = TAKE_FD(l.fd);
                if (close(TAKE_FD(fd_guard)) < 0)
                        return cli_fail("cp: failed to write '%s': %m", target);
        }
        return CLI_EXIT_OK;
}

int cmd_cp(struct cli *cli, int argc, char **argv) {
        _cleanup_(cli_endpoint_done) struct cli_endpoint src = {}, dst = {};

        int r = cli_parse_plain(cli, argc, argv, 2, 2);
        if (r != CLI_PROCEED)
                return r;
        if (cli_endpoint_parse(argv[optind], &src) < 0)
                return cli_usage_error(cli, "cp: invalid source '%s' (a sandbox path is SBX:/absolute/path)",
                                       argv[optind]);
        if (cli_endpoint_parse(argv[optind + 1], &dst) < 0)
                return cli_usage_error(cli,
                                       "cp: invalid destination '%s' (a sandbox path is SBX:/absolute/path)",
                                       argv[optind + 1]);
        if (src.sandbox && dst.sandbox)
                return cli_usage_error(cli, "cp: copying between two sandboxes is not supported");
        if (!src.sandbox && !dst.sandbox)
                return cli_usage_error(cli, "cp: one side must be a sandbox path, SBX:/absolute/path");
        return dst.sandbox ? cp_upload(cli, src.path, &dst) : cp_download(cli, &src, dst.path);
}
