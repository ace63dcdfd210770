/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the commands print: "airlock: ..." failures on stderr, and JSON,
 * "key: value" fields and tables on stdout. The bottom of the CLI beside
 * cli-util.c, cli-net.c and client.c: it calls nothing of the commands.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_fail(const char *fmt, ...) {
        va_list ap;
        fputs("airlock: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return CLI_EXIT_FAILURE;
}

int cli_fail_errorv(const struct cli_error *err, const char *fmt, va_list ap) {
        fputs("airlock: ", stderr);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, ": %s\n", err->message);
        return CLI_EXIT_FAILURE;
}

int cli_fail_error(const struct cli_error *err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = cli_fail_errorv(err, fmt, ap);
        va_end(ap);
        return r;
}

int cli_usage_error(struct cli *cli, const char *fmt, ...) {
        va_list ap;
        fputs("airlock: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        if (cli && cli->cmd)
                fprintf(stderr, "\nTry 'airlock %s --help'.\n", cli->cmd->name);
        else
                fprintf(stderr, "\nTry 'airlock --help'.\n");
        return CLI_EXIT_USAGE;
}

int cli_print_json(const json_t *j) {
        if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY) < 0 || fputc('\n', stdout) == EOF)
                return -EIO;
        return 0;
}

int cli_cell(const json_t *v, char **ret) {
        char *s;
        if (!v || json_is_null(v))
                s = strdup("-");
        else if (json_is_string(v))
                s = strdup(json_string_value(v));
        else
                s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int cli_print_fields(const json_t *obj) {
        const char *key;
        json_t *v;
        int width = 0;

        if (!json_is_object(obj))
                return cli_print_json(obj);
        json_object_foreach((json_t *)obj, key, v) width = MAX(width, (int)MIN(strlen(key), (size_t)32));
        json_object_foreach((json_t *)obj, key, v) {
                _cleanup_free_ char *cell = NULL;
                int r = cli_cell(v, &cell);
                if (r < 0)
                        return r;
                printf("%-*s  %s\n", width + 1, key, cell);
        }
        return 0;
}

int cli_fprint_table(FILE *f, size_t ncols, const char *const *header, char *const *cells, size_t nrows) {
        _cleanup_free_ int *width = calloc(ncols, sizeof(int));
        if (!width)
                return -ENOMEM;
        for (size_t c = 0; c < ncols; c++) {
                width[c] = (int)strlen(header[c]);
                for (size_t r = 0; r < nrows; r++)
                        width[c] = MAX(width[c], (int)MIN(strlen(cells[r * ncols + c]), (size_t)64));
        }
        for (size_t r = 0; r <= nrows; r++)
                for (size_t c = 0; c < ncols; c++) {
                        const char *s = r == 0 ? header[c] : cells[(r - 1) * ncols + c];
                        if (c + 1 == ncols)
                                fprintf(f, "%s\n", s);
                        else
                                fprintf(f, "%-*s  ", width[c], s);
                }
        return 0;
}

int cli_print_table(size_t ncols, const char *const *header, char *const *cells, size_t nrows) {
        return cli_fprint_table(stdout, ncols, header, cells, nrows);
}

/* created_at may come as RFC 3339 text or as seconds since the epoch. */
static int created_cell(const json_t *v, char **ret) {
        if (json_is_integer(v) || json_is_real(v)) {
                time_t t = json_is_integer(v) ? (time_t)json_integer_value(v) : (time_t)json_real_value(v);
                struct tm tm;
                char buf[32];
                if (gmtime_r(&t, &tm) && strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) > 0) {
                        char *s = strdup(buf);
                        if (!s)
                                return -ENOMEM;
                        *ret = s;
                        return 0;
                }
        }
        return cli_cell(v, ret);
}

/* Frees a table of n cells. */
static void cells_free(char **cells, size_t n) {
        if (!cells)
                return;
        for (size_t i = 0; i < n; i++)
                free(cells[i]);
        free(cells);
}

/* obj's member field; "a.b" is member b of member a. */
static const json_t *field_get(const json_t *obj, const char *field) {
        const char *dot = strchr(field, '.');
        if (!dot)
                return json_object_get(obj, field);
        char first[64];
        snprintf(first, sizeof first, "%.*s", (int) MIN((size_t) (dot - field), sizeof first - 1), field);
        return field_get(json_object_get(obj, first), dot + 1);
}

int cli_print_list(const json_t *list, size_t ncols, const char *const *header, const char *const *fields) {
        size_t nrows = json_array_size(list);
        char **cells = calloc(nrows * ncols + 1, sizeof(char *));
        int r = 0;

        if (!cells)
                return -ENOMEM;
        for (size_t i = 0; i < nrows && r >= 0; i++)
                for (size_t c = 0; c < ncols && r >= 0; c++) {
                        const json_t *v = field_get(json_array_get(list, i), fields[c]);
                        r = strcmp(fields[c], "created_at") == 0 ? created_cell(v, &cells[i * ncols + c])
                                                                 : cli_cell(v, &cells[i * ncols + c]);
                }
        if (r >= 0)
                r = cli_print_table(ncols, header, cells, nrows);
        cells_free(cells, nrows * ncols);
        return r;
}
