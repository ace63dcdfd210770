/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "airlock";
static enum log_level log_min = LOG_LEVEL_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {
        [LOG_LEVEL_DEBUG] = "debug",
        [LOG_LEVEL_INFO] = "info",
        [LOG_LEVEL_WARN] = "warn",
        [LOG_LEVEL_ERROR] = "error",
};

void log_setup(const char *prog, enum log_level min_level) {
        log_prog = prog;
        log_min = min_level;
}

int log_level_from_string(const char *s, enum log_level *ret) {
        for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
                if (s && strcmp(s, level_names[i]) == 0) {
                        *ret = (enum log_level) i;
                        return 0;
                }
        return -EINVAL;
}

/* Writes msg as a double-quoted value, escaping quotes, backslashes and
 * control characters so that one event is always exactly one line. */
static void write_quoted(FILE *f, const char *msg) {
        fputc('"', f);
        for (const unsigned char *p = (const unsigned char *) msg; *p; p++) {
                if (*p == '"' || *p == '\\')
                        fprintf(f, "\\%c", *p);
                else if (*p == '\n')
                        fputs("\\n", f);
                else if (*p < 0x20 || *p == 0x7f)
                        fprintf(f, "\\x%02x", *p);
                else
                        fputc(*p, f);
        }
        fputc('"', f);
}

static void log_vemit(enum log_level level, const char *ctx, const char *fmt, va_list ap) {
        char msg[2048];
        struct timespec ts;
        struct tm tm;
        char tbuf[32];

        if (level < log_min)
                return;
        vsnprintf(msg, sizeof msg, fmt, ap);
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%S", &tm);

        /* The line is built first and written with one write(): airlockd,
         * nodemgr and the node share one stderr, and lines written in pieces
         * cut into each other (a pipe keeps writes up to PIPE_BUF whole). */
        char *line = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&line, &len);
        if (!f)
                return;
        fprintf(f, "ts=%s.%03ldZ level=%s prog=%s ", tbuf, ts.tv_nsec / 1000000L, level_names[level], log_prog);
        if (ctx && *ctx)
                fprintf(f, "%s ", ctx);
        fputs("msg=", f);
        write_quoted(f, msg);
        fputc('\n', f);
        if (fclose(f) != 0) {
                free(line);
                return;
        }
        pthread_mutex_lock(&log_lock);
        fflush(stderr); /* anything printed with stdio before, in order */
        for (size_t off = 0; off < len;) {
                ssize_t k = write(STDERR_FILENO, line + off, len - off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                off += (size_t) k;
        }
        pthread_mutex_unlock(&log_lock);
        free(line);
}

void log_emit(enum log_level level, const char *ctx, const char *fmt, ...) {
        int saved = errno;
        va_list ap;
        va_start(ap, fmt);
        log_vemit(level, ctx, fmt, ap);
        va_end(ap);
        errno = saved;
}

int log_errno(enum log_level level, int r, const char *ctx, const char *fmt, ...) {
        va_list ap;
        errno = r < 0 ? -r : r;
        va_start(ap, fmt);
        log_vemit(level, ctx, fmt, ap);
        va_end(ap);
        return r;
}

const char *log_redact(const char *s, char *buf, size_t n) {
        const size_t keep = 4;
        if (n == 0)
                return buf;
        if (!s) {
                snprintf(buf, n, "(null)");
                return buf;
        }
        size_t len = strlen(s);
        if (len <= keep * 2)
                snprintf(buf, n, "(redacted)");
        else
                snprintf(buf, n, "%.*s…(redacted)", (int) keep, s);
        return buf;
}
