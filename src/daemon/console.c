/* SPDX-License-Identifier: Apache-2.0 */
#include "console.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"

/* Debian's libjs-term.js: the terminal emulator (term.js) */
#define TERMJS_DIR "/usr/share/javascript/term.js"
#define VENDOR_TERMJS "/console/vendor/term.js/"
#define FILE_MAX (16u << 20)
#define DEPTH_MAX 6

/* Inline styles only: term.js adds its own; no inline script, nothing from
 * elsewhere, never in a frame. */
#define CSP "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " \
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

static const struct {
        const char *ext, *type;
} types[] = {
        { ".html", "text/html; charset=utf-8" }, { ".js", "text/javascript; charset=utf-8" },
        { ".css", "text/css; charset=utf-8" },   { ".svg", "image/svg+xml" },
        { ".png", "image/png" },                 { ".json", "application/json" },
        { ".ico", "image/x-icon" },
};

bool console_is_path(const char *url) {
        return strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0 || strncmp(url, "/console/", 9) == 0;
}

/* A relative name of segments of [A-Za-z0-9._-], none starting with '.'. */
static bool name_ok(const char *rel) {
        unsigned depth = 0;
        if (!*rel)
                return false;
        for (const char *p = rel; *p;) {
                size_t n = strcspn(p, "/");
                if (n == 0 || p[0] == '.' || ++depth > DEPTH_MAX)
                        return false;
                for (size_t i = 0; i < n; i++) {
                        char c = p[i];
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                              c == '_' || c == '-'))
                                return false;
                }
                p += n;
                if (*p == '/')
                        p++;
        }
        return rel[strlen(rel) - 1] != '/';
}

static const char *type_of(const char *name) {
        size_t l = strlen(name);
        for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
                size_t e = strlen(types[i].ext);
                if (l > e && strcmp(name + l - e, types[i].ext) == 0)
                        return types[i].type;
        }
        return NULL;
}

static void add_headers(struct MHD_Response *r) {
        MHD_add_response_header(r, "Content-Security-Policy", CSP);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(r, "X-Frame-Options", "DENY");
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
        /* a new version is seen at once: the files are small */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

static struct MHD_Response *not_found(unsigned *ret_status, const char *why) {
        static const char fmt[] = "{\"error\":{\"code\":\"not_found\",\"message\":\"%s\"}}";
        char body[256];
        int n = snprintf(body, sizeof body, fmt, why);
        struct MHD_Response *r = MHD_create_response_from_buffer((size_t) n, body, MHD_RESPMEM_MUST_COPY);
        if (r) {
                MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
                add_headers(r);
        }
        *ret_status = MHD_HTTP_NOT_FOUND;
        return r;
}

struct MHD_Response *console_response(const struct daemon_config *cfg, const char *url, unsigned *ret_status) {
        const char *dir = cfg->console_dir, *rel;
        if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
                rel = "index.html";
        else if (strncmp(url, VENDOR_TERMJS, strlen(VENDOR_TERMJS)) == 0) {
                dir = TERMJS_DIR;
                rel = url + strlen(VENDOR_TERMJS);
        } else
                rel = url + strlen("/console/");
        const char *type = type_of(rel);
        if (!name_ok(rel) || !type)
                return not_found(ret_status, "no such file of the console");
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return not_found(ret_status, "the console's files are not installed (--console-dir)");
        /* no link anywhere on the way: what the directory holds, only */
        int fd = -1;
        _cleanup_close_ int cur = dup(dfd);
        char part[256];
        for (const char *p = rel; cur >= 0;) {
                size_t n = strcspn(p, "/");
                snprintf(part, sizeof part, "%.*s", (int) n, p);
                bool last = p[n] == 0;
                int next = openat(cur, part, (last ? O_RDONLY : O_RDONLY | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
                close(cur);
                cur = -1;
                if (next < 0)
                        break;
                if (last) {
                        fd = next;
                        break;
                }
                cur = next;
                p += n + 1;
        }
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
                if (fd >= 0)
                        close(fd);
                return not_found(ret_status, "no such file of the console");
        }
        struct MHD_Response *r = MHD_create_response_from_fd((uint64_t) st.st_size, fd);
        if (!r) {
                close(fd);
                return NULL;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        add_headers(r);
        *ret_status = MHD_HTTP_OK;
        return r;
}
