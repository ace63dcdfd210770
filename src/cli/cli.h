/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The airlock command line: global options, the command table and the
 * helpers every command uses. Commands live in builtin-*.c, one function per
 * command, and return the process exit status:
 *
 *   0 success, 1 failure (message on stderr as "airlock: ..."), 2 usage
 *   error; `exec` returns the remote command's status, 255 when the
 *   connection to it fails.
 *
 * Calls go one way: cli.c (main and the table) -> builtin-*.c (no builtin
 * calls another) -> cli-command.c (options, help, connect, GET-and-print
 * commands) -> cli-output.c (messages, JSON, tables), with client.c/sse.c
 * (HTTP) and cli-util.c/cli-net.c (pure) at the bottom.
 */

#include <getopt.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "client.h"
#include "macros.h"

enum {
        CLI_EXIT_OK = 0,
        CLI_EXIT_FAILURE = 1,
        CLI_EXIT_USAGE = 2,
        CLI_EXIT_TRANSPORT = 255,
        /* Returned by option parsers: no exit yet, go on with the command. */
        CLI_PROCEED = -1,
};

struct cli;

struct cli_command {
        const char *name;
        int (*run)(struct cli *cli, int argc, char **argv);
        const char *synopsis; /* arguments after the name */
        const char *summary;  /* one line for `airlock --help` */
        const char *options;  /* option lines for `airlock NAME --help`, may be NULL */
};

struct cli {
        /* From flags; NULL means environment, then default. */
        const char *url;
        const char *token;
        const char *data_dir;
        bool json;

        const struct cli_command *cmd; /* the command being run */
        /* The command table (cli.c), for the main --help. */
        const struct cli_command *commands;
        size_t n_commands;
        struct cli_client client;
        bool connected;
};

/* Global options, accepted before the command and by every command. */
enum {
        CLI_OPT_URL = 0x100,
        CLI_OPT_TOKEN,
        CLI_OPT_DATA_DIR,
        CLI_OPT_JSON,
        CLI_OPT_VERSION,
        CLI_OPT_FIRST_LOCAL, /* commands number their own long options from here */
};
/* clang-format off */
#define CLI_GLOBAL_OPTIONS                                                      \
        { "url", required_argument, NULL, CLI_OPT_URL },                        \
        { "token", required_argument, NULL, CLI_OPT_TOKEN },                    \
        { "data-dir", required_argument, NULL, CLI_OPT_DATA_DIR },              \
        { "json", no_argument, NULL, CLI_OPT_JSON },                            \
        { "help", no_argument, NULL, 'h' }
/* clang-format on */

/* cli.c */
/* Runs the whole program; main() is only this. */
int cli_main(int argc, char **argv);

/* cli-command.c */
/* "Usage: airlock ..." and the command list of cli->commands, to f. */
void cli_print_main_help(const struct cli *cli, FILE *f);
/* `airlock CMD --help`, to stdout. */
void cli_print_command_help(const struct cli_command *cmd);
/* Handles what a command's getopt loop did not: global options, --help
 * (prints the command's help, returns 0), and getopt's '?'/':' (prints a
 * usage error, returns 2). Returns CLI_PROCEED when the loop should go on. */
int cli_common_option(struct cli *cli, int c, char **argv);

/* Resolves URL and token once; prints the problem on failure. */
int cli_connect(struct cli *cli);
/* Connects and sends one request with a JSON body (may be NULL).
 * CLI_PROCEED with *ret set (NULL for an empty answer), or the exit code,
 * the failure printed as "airlock: <fmt ...>: <API or transport message>". */
int cli_request(struct cli *cli, const char *method, const char *path, const json_t *body, json_t **ret,
                const char *fmt, ...) _printf_(6, 7);
/* Sends one request and prints its answer: --json the whole of it, else
 * its string member print (NULL: echo, for a 204; not NULL then). name
 * prefixes the messages. Returns the exit code. */
int cli_call_and_print(struct cli *cli, const char *name, const char *method, const char *path, const json_t *body,
                       const char *print, const char *echo);
/* Prints resp: --json the whole of it, else its string member (or fails
 * with "NAME: airlockd answered without a WHAT"). Returns the exit code. */
int cli_print_member(struct cli *cli, const json_t *resp, const char *name, const char *member, const char *what);
/* With --json prints resp whole and returns the exit code; otherwise
 * CLI_PROCEED with *ret_list its array member key, or the exit code of
 * "NAME: airlockd answered without a KEY list". */
int cli_answer_list(struct cli *cli, const json_t *resp, const char *name, const char *key, const json_t **ret_list);
/* cli_answer_list(), then the list as a table. Returns the exit code. */
int cli_print_answer_list(struct cli *cli, const json_t *resp, const char *name, const char *key, size_t ncols,
                          const char *const *header, const char *const *fields);

/* The start of a command that GETs one resource: parses the options,
 * connects and fetches. With suffix NULL the command takes no argument and
 * fetches path; otherwise it takes one id (checked with cli_id_is_valid)
 * and fetches path + ID + suffix. CLI_PROCEED with *ret set (may be NULL
 * for an empty answer), or the exit code; name prefixes the messages. */
int cli_get_plain(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                  json_t **ret);
/* The whole of a command that GETs as cli_get_plain() does and prints the
 * array member key of the answer as a table (or the answer with --json).
 * Returns the exit code. */
int cli_list_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix,
                     const char *key, size_t ncols, const char *const *header, const char *const *fields);
/* The whole of a command that GETs path + ID + suffix and prints the
 * answer's fields (or the answer with --json). Returns the exit code. */
int cli_show_command(struct cli *cli, int argc, char **argv, const char *name, const char *path, const char *suffix);
/* The whole of a command that DELETEs path + NAME (one name, checked with
 * cli_id_is_valid) and echoes the name (nothing with --json). Returns the
 * exit code. */
int cli_delete_command(struct cli *cli, int argc, char **argv, const char *name, const char *path);

/* cli-output.c */
/* Prints "airlock: <message>" and "Try 'airlock CMD --help'."; returns 2. */
int cli_usage_error(struct cli *cli, const char *fmt, ...) _printf_(2, 3);
/* Prints "airlock: <message>" to stderr; returns 1. */
int cli_fail(const char *fmt, ...) _printf_(1, 2);
/* Prints "airlock: <context>: <API or transport message>"; returns 1. */
int cli_fail_error(const struct cli_error *err, const char *fmt, ...) _printf_(2, 3);
int cli_fail_errorv(const struct cli_error *err, const char *fmt, va_list ap) _printf_(2, 0);

/* Writes j indented, with a trailing newline, to stdout. */
int cli_print_json(const json_t *j);
/* Prints the scalar members of an object as aligned "key: value" lines;
 * nested objects and arrays as compact JSON. */
int cli_print_fields(const json_t *obj);
/* Renders a JSON value as one table cell: strings as-is, numbers as text,
 * null/missing as "-", anything else compact JSON. */
int cli_cell(const json_t *v, char **ret);
/* Prints field[c] of each object in list as a table; "created_at" given as
 * epoch seconds is shown as UTC RFC 3339. */
int cli_print_list(const json_t *list, size_t ncols, const char *const *header, const char *const *fields);
/* Prints rows of ncols cells as left-aligned columns under a header (a
 * column at most 64 wide but for its longest cell's overflow), to f. */
int cli_fprint_table(FILE *f, size_t ncols, const char *const *header, char *const *cells, size_t nrows);
/* The same to stdout. */
int cli_print_table(size_t ncols, const char *const *header, char *const *cells, size_t nrows);
