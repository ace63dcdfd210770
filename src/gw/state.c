/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's decisions on disk (docs/network.md, "When the gateway
 * fails"): the names the gateway resolved for it, to which addresses, and
 * its network log, so that a gateway that restarts keeps both. One file per
 * sandbox in AIRLOCK_GW_STATE_DIR, a journal of JSON lines appended as
 * bindings and log entries are made (a write each, no fsync: a crash of the
 * gateway loses nothing the kernel has), rewritten from memory when it has
 * grown to several times what it describes. At attach, the journal is read
 * back: the log whole, bindings only of the same execution (another one's
 * guest resolved anew). The node's "forget" (the sandbox is deleted)
 * removes the file.
 *
 * The journal is the gateway's own file (0600, its directory 0700), read
 * back defensively all the same: size bounded, every line parsed with
 * jansson and checked; a line that does not parse is skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "log.h"
#include "loop.h"
#include "macros.h"
#include "util.h"

#define STATE_FILE_MAX (16u << 20)
/* rewrite once the journal holds this many lines per live record (+ slack) */
#define COMPACT_FACTOR 3
#define COMPACT_SLACK 256

static char *state_dir;

int gw_state_init(const char *dir) {
        if (!dir || !*dir)
                return 0;
        if (dir[0] != '/')
                return log_error_errno(-EINVAL, "AIRLOCK_GW_STATE_DIR=%s is not an absolute path", dir);
        free(state_dir);
        state_dir = strdup(dir);
        if (!state_dir)
                return -ENOMEM;
        log_info("keeping each sandbox's bindings and network log in %s", state_dir);
        return 0;
}

static uint64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Sandbox ids are the node's ([A-Za-z0-9._-]), checked again: a name in our directory. */
static char *state_path(const char *id) {
        if (!state_dir || !id[0] || id[0] == '.' || strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                                 "0123456789._-") != strlen(id))
                return NULL;
        return strdup_printf("%s/%s.journal", state_dir, id);
}

static json_t *binding_json(const struct gw_sandbox *s, const struct gw_binding *b) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &b->addr, a, sizeof a);
        uint64_t now = loop_now_ms();
        uint64_t left = b->expires_ms > now ? b->expires_ms - now : 0;
        return json_pack("{s:s, s:s, s:I, s:I}", "b", b->name, "a", a, "x", (json_int_t) s->execution, "e",
                         (json_int_t) (wall_ms() + left));
}

static json_t *entry_json(const struct gw_log_entry *e) {
        char a[INET_ADDRSTRLEN] = "";
        if (e->addr.s_addr)
                inet_ntop(AF_INET, &e->addr, a, sizeof a);
        return json_pack("{s:I, s:b, s:b, s:s, s:s, s:i, s:s}", "l", (json_int_t) e->ts_ms, "d", e->dns, "ok",
                         e->allowed, "n", e->name, "a", a, "p", (int) e->port, "r", e->reason);
}

static int append(struct gw_sandbox *s, json_t *o) {
        if (!o)
                return -ENOMEM;
        char *line = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!line)
                return -ENOMEM;
        size_t n = strlen(line);
        line[n] = '\n'; /* replaces the NUL: written by length */
        ssize_t w = write(s->state_fd, line, n + 1);
        free(line);
        if (w != (ssize_t) (n + 1))
                return w < 0 ? negative_errno() : -EIO;
        s->state_lines++;
        return 0;
}

/* The journal anew, from memory: the live bindings, then the log, oldest first. */
static int rewrite(struct gw_sandbox *s) {
        _cleanup_free_ char *path = state_path(s->id);
        _cleanup_free_ char *tmp = path ? strdup_printf("%s.tmp", path) : NULL;
        if (!tmp)
                return -ENOMEM;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return negative_errno();
        int old = s->state_fd;
        s->state_fd = fd;
        s->state_lines = 0;
        int r = 0;
        uint64_t now = loop_now_ms();
        for (size_t i = 0; i < s->n_bindings && r >= 0; i++)
                if (s->bindings[i].expires_ms > now)
                        r = append(s, binding_json(s, &s->bindings[i]));
        for (size_t i = 0; i < s->n_log && r >= 0; i++) {
                size_t k = (s->next_log + GW_LOG_MAX - s->n_log + i) % GW_LOG_MAX;
                r = append(s, entry_json(&s->log[k]));
        }
        if (r >= 0 && rename(tmp, path) < 0)
                r = negative_errno();
        if (r < 0) {
                (void) unlink(tmp);
                close(fd);
                s->state_fd = old; /* the old journal goes on */
                return r;
        }
        safe_close(old);
        return 0;
}

static void journal(struct gw_sandbox *s, json_t *o) {
        if (s->state_fd < 0) {
                json_decref(o);
                return;
        }
        int r = append(s, o);
        if (r >= 0 && s->state_lines > COMPACT_FACTOR * (s->n_bindings + s->n_log) + COMPACT_SLACK)
                r = rewrite(s);
        if (r < 0) {
                log_warn_errno(r, "sandbox %s: cannot keep its journal, going on without: %m", s->id);
                s->state_fd = safe_close(s->state_fd);
        }
}

void gw_state_binding(struct gw_sandbox *s, const struct gw_binding *b) {
        if (s->state_fd >= 0)
                journal(s, binding_json(s, b));
}

void gw_state_log(struct gw_sandbox *s, const struct gw_log_entry *e) {
        if (s->state_fd >= 0)
                journal(s, entry_json(e));
}

/* One journal line back into memory; false when it is no record of ours. */
static bool replay(struct gw_sandbox *s, json_t *o, uint64_t now_wall) {
        struct in_addr addr = { 0 };
        const char *a = json_string_value(json_object_get(o, "a"));
        if (!a || (a[0] && inet_pton(AF_INET, a, &addr) != 1))
                return false;
        const char *name = json_string_value(json_object_get(o, "b"));
        if (name) {
                json_t *x = json_object_get(o, "x"), *e = json_object_get(o, "e");
                if (!json_is_integer(x) || !json_is_integer(e) || !name[0] || strlen(name) >= sizeof s->bindings->name)
                        return false;
                uint64_t expires = (uint64_t) json_integer_value(e);
                if ((unsigned) json_integer_value(x) != s->execution || expires <= now_wall)
                        return true; /* another execution's guest, or gone: not kept */
                (void) gw_binding_put(s, name, addr, loop_now_ms() + (expires - now_wall));
                return true;
        }
        json_t *ts = json_object_get(o, "l"), *port = json_object_get(o, "p");
        const char *n = json_string_value(json_object_get(o, "n")), *reason = json_string_value(json_object_get(o, "r"));
        if (!json_is_integer(ts) || !json_is_integer(port) || json_integer_value(port) < 0 ||
            json_integer_value(port) > UINT16_MAX || !n || !reason || !json_is_boolean(json_object_get(o, "d")) ||
            !json_is_boolean(json_object_get(o, "ok")))
                return false;
        (void) gw_log_push(s, (uint64_t) json_integer_value(ts), json_is_true(json_object_get(o, "d")),
                           json_is_true(json_object_get(o, "ok")), n, addr, (uint16_t) json_integer_value(port), reason);
        return true;
}

void gw_state_open(struct gw_sandbox *s) {
        s->state_fd = -1;
        _cleanup_free_ char *path = state_path(s->id);
        if (!path)
                return;
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = file_read_all(path, STATE_FILE_MAX, &text, &len);
        if (r < 0 && r != -ENOENT)
                log_warn_errno(r, "sandbox %s: cannot read its journal %s, starting afresh: %m", s->id, path);
        size_t kept = 0, skipped = 0;
        uint64_t now_wall = wall_ms();
        for (char *line = text, *end; line && line < text + len; line = end + 1) {
                end = memchr(line, '\n', (size_t) (text + len - line));
                if (!end)
                        break; /* a line cut short by a crash */
                json_t *o = json_loadb(line, (size_t) (end - line), JSON_REJECT_DUPLICATES, NULL);
                if (json_is_object(o) && replay(s, o, now_wall))
                        kept++;
                else
                        skipped++;
                json_decref(o);
        }
        if (kept || skipped)
                log_info("sandbox %s: %zu records of its journal read back (%zu bindings, %zu log entries kept)%s",
                         s->id, kept, s->n_bindings, s->n_log, skipped ? ", some lines skipped" : "");
        /* a fresh journal: only what is kept, the next appends after it */
        r = rewrite(s);
        if (r < 0)
                log_warn_errno(r, "sandbox %s: cannot write its journal in %s, going on without: %m", s->id, state_dir);
}

void gw_state_close(struct gw_sandbox *s) {
        if (s->state_fd >= 0)
                s->state_fd = safe_close(s->state_fd);
}

void gw_state_forget(const char *id) {
        _cleanup_free_ char *path = state_path(id);
        if (path && unlink(path) < 0 && errno != ENOENT)
                log_warn_errno(negative_errno(), "cannot remove the journal %s: %m", path);
}
