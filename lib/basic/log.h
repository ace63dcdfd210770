/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One log module for every program. Lines are key=value, one event per line:
 *
 *   ts=2026-11-29T19:40:00.123Z level=info prog=airlock-node sandbox=sbx-1 msg="restored" ms=31
 *
 * Callers pass a context string ("sandbox=sbx-1 req=42") that is prepended to
 * the message. Never pass secrets: log_redact() exists for values that might
 * carry one (tokens, Authorization headers).
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "macros.h"

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

/* Sets the program name and minimum level; safe to call once at start. */
void log_setup(const char *prog, enum log_level min_level);
/* Parses "debug|info|warn|error"; returns -EINVAL on anything else. */
int log_level_from_string(const char *s, enum log_level *ret);

/* Writes one line to stderr. The message is quoted; %m works as in glibc. */
void log_emit(enum log_level level, const char *ctx, const char *fmt, ...) _printf_(3, 4);

/* Logs at error level and returns r (a negative errno), so that
 * `return log_error_errno(r, "Failed to open %s", path);` reads naturally.
 * errno is set from r first, so %m prints the right text. */
int log_errno(enum log_level level, int r, const char *ctx, const char *fmt, ...) _printf_(4, 5);

#define log_debug(...) log_emit(LOG_LEVEL_DEBUG, NULL, __VA_ARGS__)
#define log_info(...) log_emit(LOG_LEVEL_INFO, NULL, __VA_ARGS__)
#define log_warn(...) log_emit(LOG_LEVEL_WARN, NULL, __VA_ARGS__)
#define log_error(...) log_emit(LOG_LEVEL_ERROR, NULL, __VA_ARGS__)
#define log_error_errno(r, ...) log_errno(LOG_LEVEL_ERROR, (r), NULL, __VA_ARGS__)
#define log_warn_errno(r, ...) log_errno(LOG_LEVEL_WARN, (r), NULL, __VA_ARGS__)

/* Copies s into buf (size n) with everything but a short prefix replaced by
 * "…(redacted)", so a token can be correlated in logs but not reused.
 * Returns buf. */
const char *log_redact(const char *s, char *buf, size_t n);
