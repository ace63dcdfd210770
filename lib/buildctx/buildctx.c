/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Build contexts and OCI layers, checked as a stream (buildctx.h). One
 * table remembers every path seen (its kind, and the layer that made it)
 * so that a later entry can be checked against the earlier ones: an entry
 * under a symbolic link, a hard link to what is no file seen before, a
 * directory that becomes a link. Nothing is ever removed from the table
 * (a whiteout marks its path gone), so its memory is bounded by the
 * limits' names_bytes.
 */
#include "buildctx.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
/* One component of a path: NAME_MAX. */
#define COMPONENT_MAX 255
/* The bytes a name is shown with in a message, at most (escaped). */
#define SHOW_MAX 64
/* The stream may exceed the files' sizes by its headers: this much. */
#define HEADERS_SLACK (64 * MiB)
#define READ_BLOCK 65536

const struct buildctx_limits buildctx_context_limits = {
        .entries = 200000,
        .total_bytes = 2 * GiB,
        .file_bytes = 1 * GiB,
        .names_bytes = 64 * MiB,
        .ratio = 100,
        .ratio_from = 16 * MiB,
        .path_bytes = 1024,
        .depth = 64,
};

const struct buildctx_limits buildctx_layer_limits = {
        .entries = 1000000,
        .total_bytes = 16 * GiB,
        .file_bytes = 8 * GiB,
        .names_bytes = 256 * MiB,
        .ratio = 200,
        .ratio_from = 256 * MiB,
        .path_bytes = 4096,
        .depth = 256,
};

enum kind {
        K_NONE, /* a free slot */
        K_GONE, /* whited out by a later layer */
        K_DIR,  /* an entry, or made for the entries under it */
        K_FILE, /* a regular file or a hard link to one */
        K_LINK, /* a symbolic link */
        K_FIFO, /* a FIFO (layers only) */
};

static const char *const kind_names[] = {
        [K_NONE] = "nothing", [K_GONE] = "nothing", [K_DIR] = "directory",
        [K_FILE] = "file",    [K_LINK] = "symbolic link", [K_FIFO] = "FIFO",
};

struct slot {
        char *path; /* NULL: free */
        uint64_t hash;
        uint32_t layer;
        uint8_t kind;
};

struct buildctx {
        enum buildctx_kind type;
        struct buildctx_limits lim;
        struct slot *slots;
        size_t cap, used;
        uint64_t entries, total, names;
        uint32_t layer; /* archives fed so far */
        bool refused;
        char *norm, *target; /* path_bytes + 1 each */
};

int buildctx_new(enum buildctx_kind type, const struct buildctx_limits *limits, struct buildctx **ret) {
        if (type != BUILDCTX_CONTEXT && type != BUILDCTX_LAYERS)
                return -EINVAL;
        struct buildctx *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->type = type;
        c->lim = limits ? *limits : type == BUILDCTX_CONTEXT ? buildctx_context_limits : buildctx_layer_limits;
        c->cap = 1024;
        c->slots = calloc(c->cap, sizeof *c->slots);
        c->norm = malloc((size_t) c->lim.path_bytes + 1);
        c->target = malloc((size_t) c->lim.path_bytes + 1);
        if (!c->slots || !c->norm || !c->target || c->lim.path_bytes == 0 || c->lim.depth == 0) {
                int r = c->slots && c->norm && c->target ? -EINVAL : -ENOMEM;
                buildctx_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

void buildctx_free(struct buildctx *c) {
        if (!c)
                return;
        for (size_t i = 0; c->slots && i < c->cap; i++)
                free(c->slots[i].path);
        free(c->slots);
        free(c->norm);
        free(c->target);
        free(c);
}

uint64_t buildctx_entries(const struct buildctx *c) {
        return c->entries;
}

uint64_t buildctx_total_bytes(const struct buildctx *c) {
        return c->total;
}

/* ---- the table of paths ---- */

static uint64_t hash_of(const char *s, size_t n) {
        uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */
        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t) s[i]) * UINT64_C(1099511628211);
        return h;
}

/* The slot of path[0..n): its own, or the free one it would take. */
static struct slot *slot_of(const struct buildctx *c, const char *path, size_t n, uint64_t h) {
        size_t mask = c->cap - 1;
        for (size_t i = (size_t) h & mask;; i = (i + 1) & mask) {
                struct slot *s = &c->slots[i];
                if (!s->path || (s->hash == h && strncmp(s->path, path, n) == 0 && s->path[n] == 0))
                        return s;
        }
}

static const struct slot *lookup(const struct buildctx *c, const char *path, size_t n) {
        const struct slot *s = slot_of(c, path, n, hash_of(path, n));
        return s->path && s->kind != K_GONE ? s : NULL;
}

static int grow(struct buildctx *c) {
        size_t cap = c->cap * 2;
        struct slot *slots = calloc(cap, sizeof *slots);
        if (!slots)
                return -ENOMEM;
        struct buildctx bigger = { .slots = slots, .cap = cap };
        for (size_t i = 0; i < c->cap; i++)
                if (c->slots[i].path)
                        *slot_of(&bigger, c->slots[i].path, strlen(c->slots[i].path), c->slots[i].hash) = c->slots[i];
        free(c->slots);
        c->slots = slots;
        c->cap = cap;
        return 0;
}

/* Records path[0..n) as kind, made by the current layer. */
static int record(struct buildctx *c, const char *path, size_t n, enum kind kind, char *err);

/* ---- messages ---- */

/* s as a message shows it: printable ASCII, the rest as \xNN, cut at
 * SHOW_MAX bytes (an API error has room for two names). */
static const char *show(const char *s, char out[SHOW_MAX + 8]) {
        size_t o = 0;
        for (size_t i = 0; s[i]; i++) {
                uint8_t ch = (uint8_t) s[i];
                bool plain = ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'';
                if (o + (plain ? 1 : 4) > SHOW_MAX) {
                        memcpy(out + o, "...", 3);
                        o += 3;
                        break;
                }
                if (plain)
                        out[o++] = (char) ch;
                else
                        o += (size_t) snprintf(out + o, 5, "\\x%02x", ch);
        }
        out[o] = 0;
        return out;
}

static const char *human(uint64_t v, char out[32]) {
        static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        size_t u = 0;
        uint64_t scale = 1;
        while (u + 1 < sizeof units / sizeof *units && v >= scale * 1024) {
                scale *= 1024;
                u++;
        }
        if (v % scale == 0)
                snprintf(out, 32, "%" PRIu64 " %s", v / scale, units[u]);
        else
                snprintf(out, 32, "%.1f %s", (double) v / (double) scale, units[u]);
        return out;
}

static int refuse(struct buildctx *c, int r, char *err, const char *fmt, ...) _printf_(4, 5);
static int refuse(struct buildctx *c, int r, char *err, const char *fmt, ...) {
        char what[BUILDCTX_ERR_MAX - 96];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        /* a limit says where the limits are written */
        const char *docs = r == -EFBIG ? " (limits: docs/templates.md)" : "";
        if (c->type == BUILDCTX_CONTEXT)
                snprintf(err, BUILDCTX_ERR_MAX, "build context: %s%s", what, docs);
        else
                snprintf(err, BUILDCTX_ERR_MAX, "image layer %" PRIu32 ": %s%s", c->layer, what, docs);
        c->refused = true;
        return r;
}

static int record(struct buildctx *c, const char *path, size_t n, enum kind kind, char *err) {
        uint64_t h = hash_of(path, n);
        struct slot *s = slot_of(c, path, n, h);
        if (!s->path) {
                char a[32];
                if (c->names + n + 1 > c->lim.names_bytes)
                        return refuse(c, -EFBIG, err, "more than %s of paths", human(c->lim.names_bytes, a));
                if ((c->used + 1) * 10 > c->cap * 7) {
                        int r = grow(c);
                        if (r < 0)
                                return r;
                        s = slot_of(c, path, n, h);
                }
                if (!(s->path = strndup(path, n)))
                        return -ENOMEM;
                s->hash = h;
                c->used++;
                c->names += n + 1;
        }
        s->kind = (uint8_t) kind;
        s->layer = c->layer;
        return 0;
}

/* ---- paths ---- */

/* Whether path has a ".." component. */
static bool climbs(const char *path) {
        for (const char *p = path; *p;) {
                size_t k = strcspn(p, "/");
                if (k == 2 && p[0] == '.' && p[1] == '.')
                        return true;
                p += k;
                while (*p == '/')
                        p++;
        }
        return false;
}

/* Puts in into c->norm as "a/b/c" ("" for the root): no "." or empty
 * components, none "..", relative, within the limits. *ret_depth: its
 * components. what: how the message calls it ("" or ending in a blank). */
static int normalize(struct buildctx *c, const char *in, const char *what, char *out, unsigned *ret_depth,
                     char *err) {
        char sa[SHOW_MAX + 8];
        size_t len = strlen(in);
        if (len > c->lim.path_bytes)
                return refuse(c, -EFBIG, err, "%s'%s' is %zu bytes long: at most %u", what, show(in, sa), len,
                              c->lim.path_bytes);
        if (in[0] == '/')
                return refuse(c, -EBADMSG, err, "%s'%s' is an absolute path", what, show(in, sa));
        size_t o = 0;
        unsigned depth = 0;
        for (const char *p = in; *p;) {
                size_t k = strcspn(p, "/");
                if (k == 2 && p[0] == '.' && p[1] == '.')
                        return refuse(c, -EBADMSG, err, "%s'%s' climbs out ('..')", what, show(in, sa));
                if (k > COMPONENT_MAX)
                        return refuse(c, -EFBIG, err, "%s'%s' has a component of %zu bytes: at most %d", what,
                                      show(in, sa), k, COMPONENT_MAX);
                if (k > 0 && !(k == 1 && p[0] == '.')) {
                        if (++depth > c->lim.depth)
                                return refuse(c, -EFBIG, err, "%s'%s' is more than %u components deep", what,
                                              show(in, sa), c->lim.depth);
                        if (o)
                                out[o++] = '/';
                        memcpy(out + o, p, k);
                        o += k;
                }
                p += k;
                while (*p == '/')
                        p++;
        }
        out[o] = 0;
        *ret_depth = depth;
        return 0;
}

/* A build context's symbolic link at path (depth components) to target:
 * relative, climbing only at its start and no higher than the context. */
static int check_link_target(struct buildctx *c, const char *path, unsigned depth, const char *target, char *err) {
        char sa[SHOW_MAX + 8], sb[SHOW_MAX + 8];
        size_t len = strlen(target);
        if (len == 0)
                return refuse(c, -EBADMSG, err, "'%s' is a symbolic link to nothing", show(path, sa));
        if (len > c->lim.path_bytes)
                return refuse(c, -EFBIG, err, "'%s' is a symbolic link of %zu bytes: at most %u", show(path, sa), len,
                              c->lim.path_bytes);
        if (c->type != BUILDCTX_CONTEXT)
                return 0; /* an image's links resolve inside its root */
        if (target[0] == '/')
                return refuse(c, -EBADMSG, err,
                              "'%s' is a symbolic link to '%s', an absolute path (links must stay inside)",
                              show(path, sa), show(target, sb));
        unsigned up = 0;
        bool named = false;
        for (const char *p = target; *p;) {
                size_t k = strcspn(p, "/");
                if (k == 2 && p[0] == '.' && p[1] == '.') {
                        if (named)
                                return refuse(c, -EBADMSG, err,
                                              "'%s' is a symbolic link to '%s', which climbs ('..') after a name",
                                              show(path, sa), show(target, sb));
                        up++;
                } else if (k > 0 && !(k == 1 && p[0] == '.'))
                        named = true;
                p += k;
                while (*p == '/')
                        p++;
        }
        if (up > depth - 1)
                return refuse(c, -EBADMSG, err, "'%s' is a symbolic link to '%s', which climbs out of the context",
                              show(path, sa), show(target, sb));
        return 0;
}

/* Every directory above norm (depth components) must be one: recorded as
 * made when not seen, refused when a link or a file. */
static int check_parents(struct buildctx *c, const char *norm, char *err) {
        char sa[SHOW_MAX + 8], sb[SHOW_MAX + 8];
        for (const char *p = strchr(norm, '/'); p; p = strchr(p + 1, '/')) {
                size_t n = (size_t) (p - norm);
                const struct slot *s = lookup(c, norm, n);
                if (!s) {
                        int r = record(c, norm, n, K_DIR, err);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (s->kind == K_DIR)
                        continue;
                char *prefix = strndup(norm, n);
                if (!prefix)
                        return -ENOMEM;
                int r = s->kind == K_LINK
                                ? refuse(c, -EBADMSG, err, "'%s' goes through the symbolic link '%s'", show(norm, sa),
                                         show(prefix, sb))
                                : refuse(c, -EBADMSG, err, "'%s' lies under '%s', which is a %s", show(norm, sa),
                                         show(prefix, sb), kind_names[s->kind]);
                free(prefix);
                return r;
        }
        return 0;
}

/* ---- entries ---- */

static int ratio_check(struct buildctx *c, struct archive *a, const char *name, char *err) {
        la_int64_t out = archive_filter_bytes(a, 0), in = archive_filter_bytes(a, -1);
        char sa[SHOW_MAX + 8], h[32];
        if (out < 0 || in < 0)
                return 0;
        if ((uint64_t) out > c->lim.total_bytes + HEADERS_SLACK)
                return refuse(c, -EFBIG, err, "unpacks to more than %s (at '%s')", human(c->lim.total_bytes, h),
                              show(name, sa));
        if ((uint64_t) out > c->lim.ratio_from && (uint64_t) out / ((uint64_t) in + 1) >= c->lim.ratio)
                return refuse(c, -EFBIG, err,
                              "unpacks to more than %" PRIu64 " times its compressed size past %s (at '%s'): a "
                              "decompression bomb?",
                              c->lim.ratio, human(c->lim.ratio_from, h), show(name, sa));
        return 0;
}

static int kind_of(struct buildctx *c, struct archive_entry *e, const char *path, enum kind *ret, char *err) {
        char sa[SHOW_MAX + 8];
        switch (archive_entry_filetype(e)) {
        case AE_IFREG:
                *ret = K_FILE;
                return 0;
        case AE_IFDIR:
                *ret = K_DIR;
                return 0;
        case AE_IFLNK:
                *ret = K_LINK;
                return 0;
        case AE_IFCHR:
                return refuse(c, -EBADMSG, err, "'%s' is a character device (devices are refused)", show(path, sa));
        case AE_IFBLK:
                return refuse(c, -EBADMSG, err, "'%s' is a block device (devices are refused)", show(path, sa));
        case AE_IFIFO:
                if (c->type == BUILDCTX_LAYERS) {
                        *ret = K_FIFO;
                        return 0;
                }
                return refuse(c, -EBADMSG, err, "'%s' is a FIFO (only files, directories and links are taken)",
                              show(path, sa));
        case AE_IFSOCK:
                return refuse(c, -EBADMSG, err, "'%s' is a socket (only files, directories and links are taken)",
                              show(path, sa));
        default:
                return refuse(c, -EBADMSG, err, "'%s' is an entry of an unknown type", show(path, sa));
        }
}

/* A whiteout (".wh.NAME" in a layer) of norm's directory's NAME: that
 * path is gone. 1: norm is a whiteout (or the opaque marker), 0: it is
 * none. */
static int whiteout(struct buildctx *c, const char *norm, enum kind kind, char *err) {
        char sa[SHOW_MAX + 8];
        const char *slash = strrchr(norm, '/'), *base = slash ? slash + 1 : norm;
        if (c->type != BUILDCTX_LAYERS || strncmp(base, ".wh.", 4) != 0)
                return 0;
        if (kind != K_FILE)
                return refuse(c, -EBADMSG, err, "'%s' is a whiteout that is a %s, not a file", show(norm, sa),
                              kind_names[kind]);
        if (strcmp(base, ".wh..wh..opq") == 0)
                return 1; /* the directory's earlier contents are hidden: nothing above it changes */
        const char *name = base + 4;
        if (strncmp(base, ".wh..wh.", 8) == 0)
                return refuse(c, -EBADMSG, err, "'%s' is an unknown whiteout marker", show(norm, sa));
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return refuse(c, -EBADMSG, err, "'%s' whites out '%s', which is no name in its directory",
                              show(norm, sa), *name ? name : "");
        size_t dir = slash ? (size_t) (slash - norm) + 1 : 0, n = dir + strlen(name);
        char *gone = malloc(n + 1);
        if (!gone)
                return -ENOMEM;
        memcpy(gone, norm, dir);
        memcpy(gone + dir, name, strlen(name) + 1);
        const struct slot *s = lookup(c, gone, n);
        int r = s ? record(c, gone, n, K_GONE, err) : 0;
        free(gone);
        return r < 0 ? r : 1;
}

static int check_entry(struct buildctx *c, struct archive *a, struct archive_entry *e, char *err) {
        char sa[SHOW_MAX + 8], sb[SHOW_MAX + 8], h[32], h2[32];
        const char *name = archive_entry_pathname(e);
        if (!name)
                name = archive_entry_pathname_utf8(e);
        if (!name)
                return refuse(c, -EBADMSG, err, "entry %" PRIu64 " has no name", c->entries + 1);
        if (++c->entries > c->lim.entries)
                return refuse(c, -EFBIG, err, "more than %" PRIu64 " entries", c->lim.entries);
        unsigned depth = 0;
        int r = normalize(c, name, "", c->norm, &depth, err);
        if (r < 0)
                return r;
        const char *norm = c->norm;
        const char *hardlink = archive_entry_hardlink(e);
        if (!hardlink)
                hardlink = archive_entry_hardlink_utf8(e);
        enum kind kind = K_FILE;
        if (!hardlink && (r = kind_of(c, e, name, &kind, err)) < 0)
                return r;
        mode_t mode = archive_entry_mode(e);
        if (c->type == BUILDCTX_CONTEXT && (mode & S_ISUID))
                return refuse(c, -EBADMSG, err, "'%s' is set-user-ID (setuid and setgid bits are refused)",
                              show(norm, sa));
        if (c->type == BUILDCTX_CONTEXT && (mode & S_ISGID) && kind != K_DIR)
                return refuse(c, -EBADMSG, err, "'%s' is set-group-ID (setuid and setgid bits are refused)",
                              show(norm, sa));
        if (depth == 0) { /* "." or "./": the root */
                if (kind != K_DIR || hardlink)
                        return refuse(c, -EBADMSG, err, "'%s' names the root but is no directory", show(name, sa));
                return 0;
        }
        if ((r = check_parents(c, norm, err)) < 0)
                return r;
        /* a whiteout is no entry of its own (its size still counts) */
        int wh = whiteout(c, norm, kind, err);
        if (wh < 0)
                return wh;
        if (!wh && hardlink) {
                unsigned tdepth;
                if (hardlink[0] == '/' || climbs(hardlink))
                        return refuse(c, -EBADMSG, err, "'%s' is a hard link to '%s', outside the %s", show(norm, sa),
                                      show(hardlink, sb), c->type == BUILDCTX_CONTEXT ? "context" : "image");
                if ((r = normalize(c, hardlink, "a hard link's target ", c->target, &tdepth, err)) < 0)
                        return r;
                const struct slot *t = lookup(c, c->target, strlen(c->target));
                if (!t || t->kind != K_FILE)
                        return refuse(c, -EBADMSG, err, "'%s' is a hard link to '%s', which is %s", show(norm, sa),
                                      show(hardlink, sb),
                                      !t                 ? "no file among the entries before it"
                                      : t->kind == K_DIR ? "a directory"
                                                         : "not a regular file");
        }
        if (!wh && kind == K_LINK) {
                const char *target = archive_entry_symlink(e);
                if (!target)
                        target = archive_entry_symlink_utf8(e);
                if ((r = check_link_target(c, norm, depth, target ? target : "", err)) < 0)
                        return r;
        }
        const struct slot *old = wh ? NULL : lookup(c, norm, strlen(norm));
        if (old && (c->type == BUILDCTX_CONTEXT || old->layer == c->layer) &&
            !(old->kind == kind && (kind == K_DIR || kind == K_FILE)))
                return refuse(c, -EBADMSG, err, "'%s' appears twice: as a %s, then as a %s", show(norm, sa),
                              kind_names[old->kind], kind_names[kind]);
        if (kind == K_FILE) {
                la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
                bool sparse = archive_entry_sparse_count(e) > 0;
                if (size < 0)
                        return refuse(c, -EBADMSG, err, "'%s' has a negative size", show(norm, sa));
                if ((uint64_t) size > c->lim.file_bytes)
                        return refuse(c, -EFBIG, err, "'%s' is %s%s: one file may have at most %s", show(norm, sa),
                                      human((uint64_t) size, h), sparse ? " (a sparse file's apparent size)" : "",
                                      human(c->lim.file_bytes, h2));
                c->total += (uint64_t) size;
                if (c->total > c->lim.total_bytes)
                        return refuse(c, -EFBIG, err, "the files add up to more than %s (at '%s')",
                                      human(c->lim.total_bytes, h), show(norm, sa));
        }
        if (!wh && (r = record(c, norm, strlen(norm), kind, err)) < 0)
                return r;
        /* the data: read, for the ratio of what it unpacks to */
        for (;;) {
                const void *buf;
                size_t n;
                la_int64_t off;
                int k = archive_read_data_block(a, &buf, &n, &off);
                if (k == ARCHIVE_EOF)
                        break;
                if (k < ARCHIVE_WARN)
                        return refuse(c, -EBADMSG, err, "cannot read '%s': %s", show(norm, sa),
                                      show(archive_error_string(a) ?: "a damaged archive", sb));
                if ((r = ratio_check(c, a, norm, err)) < 0)
                        return r;
        }
        return ratio_check(c, a, norm, err);
}

static struct archive *reader(void) {
        struct archive *a = archive_read_new();
        if (!a)
                return NULL;
        /* only what is built in: a filter that would run an external
         * program is not asked for */
        if (archive_read_support_format_tar(a) != ARCHIVE_OK || archive_read_support_format_empty(a) != ARCHIVE_OK ||
            (archive_zlib_version() && archive_read_support_filter_gzip(a) != ARCHIVE_OK) ||
            (archive_bzlib_version() && archive_read_support_filter_bzip2(a) != ARCHIVE_OK) ||
            (archive_liblzma_version() && archive_read_support_filter_xz(a) != ARCHIVE_OK) ||
            (archive_libzstd_version() && archive_read_support_filter_zstd(a) != ARCHIVE_OK)) {
                archive_read_free(a);
                return NULL;
        }
        return a;
}

static int feed(struct buildctx *c, struct archive *a, char *err) {
        char sa[SHOW_MAX + 8];
        c->layer++;
        int r = 0;
        for (bool first = true;; first = false) {
                struct archive_entry *e;
                int k = archive_read_next_header(a, &e);
                if (k == ARCHIVE_EOF)
                        break;
                if (k < ARCHIVE_WARN) {
                        const char *why = archive_error_string(a) ?: "unreadable";
                        r = first ? refuse(c, -EBADMSG, err, "not a tar archive (%s)", show(why, sa))
                                  : refuse(c, -EBADMSG, err, "a damaged archive after %" PRIu64 " entries (%s)",
                                           c->entries, show(why, sa));
                        break;
                }
                if ((r = check_entry(c, a, e, err)) < 0)
                        break;
        }
        archive_read_free(a);
        if (r < 0 && r != -ENOMEM && r != -EIO)
                c->refused = true;
        return r;
}

static int start(struct buildctx *c, char *err) {
        err[0] = 0;
        if (c->refused) {
                snprintf(err, BUILDCTX_ERR_MAX, "an earlier archive was refused");
                return -EBADMSG;
        }
        return 0;
}

/* A reader for c's next archive: -EBADMSG once one was refused. */
static int begin(struct buildctx *c, char *err, struct archive **ret) {
        int r = start(c, err);
        if (r < 0)
                return r;
        *ret = reader();
        return *ret ? 0 : -ENOMEM;
}

/* Feeds what a reads, open_rc being what opening it said. */
static int feed_opened(struct buildctx *c, struct archive *a, int open_rc, char *err) {
        if (open_rc != ARCHIVE_OK) {
                char sa[SHOW_MAX + 8];
                int r = refuse(c, -EBADMSG, err, "not a tar archive (%s)",
                               show(archive_error_string(a) ?: "unreadable", sa));
                archive_read_free(a);
                return r;
        }
        return feed(c, a, err);
}

int buildctx_feed_fd(struct buildctx *c, int fd, char *err) {
        struct archive *a;
        int r = begin(c, err, &a);
        return r < 0 ? r : feed_opened(c, a, archive_read_open_fd(a, fd, READ_BLOCK), err);
}

int buildctx_feed_mem(struct buildctx *c, const void *data, size_t size, char *err) {
        struct archive *a;
        int r = begin(c, err, &a);
        return r < 0 ? r : feed_opened(c, a, archive_read_open_memory(a, data, size), err);
}

bool buildctx_has(const struct buildctx *c, const char *path) {
        /* the path as the table keeps it: no "." or empty components */
        char *norm = malloc(strlen(path) + 1);
        if (!norm)
                return false;
        size_t o = 0;
        for (const char *p = path; *p;) {
                size_t k = strcspn(p, "/");
                if (k > 0 && !(k == 1 && p[0] == '.')) {
                        if (o)
                                norm[o++] = '/';
                        memcpy(norm + o, p, k);
                        o += k;
                }
                p += k;
                while (*p == '/')
                        p++;
        }
        bool found = o == 0 ? c->entries > 0 : lookup(c, norm, o) != NULL;
        free(norm);
        return found;
}
