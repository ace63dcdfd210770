/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock exec: run a command in a sandbox.
 *
 * Default mode creates a session and attaches to its event stream, so output
 * shows up as the command produces it. Everything runs in one curl multi loop
 * on this thread: the SSE stream, the stdin uploads (one chunk in flight at a
 * time, which bounds memory), signal forwarding, and a self-pipe that turns
 * SIGINT into something the loop can poll.
 *
 * --json mode uses the synchronous /exec endpoint and prints its result.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"
#include "sse.h"
#include "util.h"

#define EXEC_STDIN_CHUNK (64u * 1024u)
/* --json mode sends stdin inline in one request. */
#define EXEC_JSON_STDIN_MAX (16u * 1024u * 1024u)
/* After a --timeout kill, how long to wait for the exit event. */
#define EXEC_KILL_GRACE_NS (5ull * 1000 * 1000 * 1000)
#define EXEC_MAX_SIGNAL_CALLS 4

void exec_opts_done(struct exec_opts *o) {
        if (!o)
                return;
        json_decref(o->env);
        *o = (struct exec_opts){};
}

int exec_parse_args(struct cli *cli, int argc, char **argv, struct exec_opts *ret) {
        enum { OPT_TIMEOUT = CLI_OPT_FIRST_LOCAL };
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"env", required_argument, NULL, 'e'},
                {"cwd", required_argument, NULL, 'w'},
                {"interactive", no_argument, NULL, 'i'},
                {"tty", no_argument, NULL, 't'},
                {"timeout", required_argument, NULL, OPT_TIMEOUT},
                {},
        };
        _cleanup_(exec_opts_done) struct exec_opts o = {.env = json_object()};
        int c, r;

        if (!o.env)
                return cli_fail("out of memory");
        /* '+': options end at SBX, so the command's own flags stay its own. */
        while ((c = getopt_long(argc, argv, "+:he:w:it", options, NULL)) >= 0) {
                switch (c) {
                case 'e':
                        if (cli_kv_add(o.env, optarg) < 0)
                                return cli_usage_error(cli, "--env: expected KEY=VALUE in UTF-8, got '%s'",
                                                       optarg);
                        break;
                case 'w':
                        if (optarg[0] != '/')
                                return cli_usage_error(cli, "--cwd: '%s' is not an absolute path", optarg);
                        o.cwd = optarg;
                        break;
                case 'i': o.interactive = true; break;
                case 't': o.tty = true; break;
                case OPT_TIMEOUT:
                        if (parse_u64(optarg, 365ull * 24 * 3600, &o.timeout_s) < 0 || o.timeout_s == 0)
                                return cli_usage_error(
                                        cli, "--timeout: expected a positive number of seconds, got '%s'",
                                        optarg);
                        o.has_timeout = true;
                        break;
                default:
                        r = cli_common_option(cli, c, argv);
                        if (r != CLI_PROCEED)
                                return r;
                }
        }

        if (optind >= argc)
                return cli_usage_error(cli, "exec: missing sandbox id");
        o.sandbox = argv[optind++];
        if (!cli_id_is_valid(o.sandbox))
                return cli_usage_error(cli, "exec: invalid sandbox id '%s'", o.sandbox);
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(cli, "exec: missing command (airlock exec SBX -- CMD [ARGS...])");
        o.cmd = argv + optind;
        o.ncmd = argc - optind;
        if (o.tty && cli->json)
                return cli_usage_error(cli, "exec: -t cannot be combined with --json");

        *ret = o;
        o = (struct exec_opts){};
        return CLI_PROCEED;
}

static int cmd_to_json(const struct exec_opts *o, json_t **ret) {
        _cleanup_(json_decrefp) json_t *arr = json_array();
        if (!arr)
                return -ENOMEM;
        for (int i = 0; i < o->ncmd; i++) {
                json_t *s = json_string(o->cmd[i]);
                if (!s)
                        return -EILSEQ;
                if (json_array_append_new(arr, s) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(arr);
        return 0;
}

/* Reads all of stdin, bounded, for --json mode. */
static int read_stdin_bounded(char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        for (;;) {
                if (cap - len < EXEC_STDIN_CHUNK) {
                        if (cap >= EXEC_JSON_STDIN_MAX + EXEC_STDIN_CHUNK)
                                return -EFBIG;
                        char *p = realloc(buf, cap + EXEC_STDIN_CHUNK);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                        cap += EXEC_STDIN_CHUNK;
                }
                ssize_t n = read(STDIN_FILENO, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > EXEC_JSON_STDIN_MAX)
                        return -EFBIG;
        }
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

static int exec_json(struct cli *cli, const struct exec_opts *o) {
        _cleanup_(json_decrefp) json_t *body = NULL, *cmd = NULL, *resp = NULL;
        _cleanup_free_ char *path = NULL;
        struct cli_error err = {};
        int r;

        if (cmd_to_json(o, &cmd) < 0)
                return cli_usage_error(cli, "exec: the command must be UTF-8");
        body = json_pack("{s:O, s:O}", "cmd", cmd, "env", o->env);
        if (!body)
                return cli_fail("out of memory");
        if (o->cwd && json_object_set_new(body, "cwd", json_string(o->cwd)) < 0)
                return cli_usage_error(cli, "exec: --cwd must be UTF-8");
        if (o->has_timeout &&
            json_object_set_new(body, "timeout_s", json_integer((json_int_t)o->timeout_s)) < 0)
                return cli_fail("out of memory");
        if (o->interactive) {
                _cleanup_free_ char *in = NULL;
                size_t len = 0;
                r = read_stdin_bounded(&in, &len);
                if (r == -EFBIG)
                        return cli_fail(
                                "exec: stdin is larger than %u bytes; use exec without --json to stream it",
                                EXEC_JSON_STDIN_MAX);
                if (r < 0)
                        return cli_fail("exec: failed to read stdin: %s", strerror(-r));
                /* The endpoint takes stdin as a JSON string, so it must be text. */
                json_t *s = json_stringn(in, len);
                if (!s)
                        return cli_fail(
                                "exec: stdin is not UTF-8 text; use exec without --json to send bytes");
                if (json_object_set_new(body, "stdin", s) < 0)
                        return cli_fail("out of memory");
        }

        if (asprintf(&path, "/v1/sandboxes/%s/exec", o->sandbox) < 0)
                return cli_fail("out of memory");
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (client_json(&cli->client, "POST", path, body, &err, &resp) < 0)
                return cli_fail_error(&err, "exec %s", o->sandbox);
        if (cli_print_json(resp) < 0)
                return CLI_EXIT_FAILURE;
        return cli_exit_status(resp);
}

/* ---- streaming mode ---- */

static volatile sig_atomic_t sigint_count;
static int sig_pipe_write = -1;

static void on_sigint(int sig) {
        int saved = errno;
        sigint_count++;
        if (sig_pipe_write >= 0)
                (void)!write(sig_pipe_write, "", 1);
        errno = saved;
}

static struct termios saved_termios;
static bool termios_saved;

static void terminal_restore(void) {
        if (termios_saved) {
                tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_termios);
                termios_saved = false;
        }
}

/* With -it on a terminal, keys (Ctrl-C included) go to the remote pty as
 * bytes, the way `docker exec -it` and ssh behave; the remote line
 * discipline turns ^C into SIGINT there. */
static void terminal_make_raw(void) {
        struct termios t;
        if (tcgetattr(STDIN_FILENO, &saved_termios) < 0)
                return;
        t = saved_termios;
        cfmakeraw(&t);
        if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) < 0)
                return;
        termios_saved = true;
        atexit(terminal_restore);
}

struct exec_run {
        struct cli *cli;
        const struct exec_opts *opts;
        CURLM *multi;

        char *bearer; /* the session's attach token, or NULL for the client token */
        char *stdin_path, *signal_path;

        struct client_call *events;
        struct sse_parser *sse;
        bool attached;    /* the event stream answered 200 */
        bool events_done; /* ... and has ended */
        CURLcode events_res;
        int stream_error; /* a malformed event or a local write failure */
        char stream_message[256];

        bool exited;
        int exit_status;

        bool stdin_started, stdin_done, stdin_eof_sent;
        struct client_call *stdin_call;

        struct client_call *signal_calls[EXEC_MAX_SIGNAL_CALLS];
        bool sigint_forwarded;
        bool stdout_gone, sigpipe_sent; /* set by the event callback, sent by the loop */

        uint64_t deadline_ns, kill_deadline_ns;
        bool timed_out;

        int sig_pipe[2];
};

static void exec_run_done(struct exec_run *x) {
        if (x->stdin_call) {
                curl_multi_remove_handle(x->multi, x->stdin_call->easy);
                client_call_free(x->stdin_call);
        }
        for (size_t i = 0; i < EXEC_MAX_SIGNAL_CALLS; i++)
                if (x->signal_calls[i]) {
                        curl_multi_remove_handle(x->multi, x->signal_calls[i]->easy);
                        client_call_free(x->signal_calls[i]);
                }
        if (x->events) {
                curl_multi_remove_handle(x->multi, x->events->easy);
                client_call_free(x->events);
        }
        if (x->multi)
                curl_multi_cleanup(x->multi);
        sse_parser_free(x->sse);
        if (x->bearer) {
                explicit_bzero(x->bearer, strlen(x->bearer));
                free(x->bearer);
        }
        free(x->stdin_path);
        free(x->signal_path);
        if (x->sig_pipe[0] >= 0) {
                sig_pipe_write = -1;
                close(x->sig_pipe[0]);
                close(x->sig_pipe[1]);
        }
        signal(SIGINT, SIG_DFL);
        terminal_restore();
}

static int post_json(struct exec_run *x, const char *path, json_t *body, struct client_call **ret) {
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        int r = client_call_new(&x->cli->client, "POST", path, x->bearer, body, &call);
        if (r < 0)
                return r;
        if (curl_multi_add_handle(x->multi, call->easy) != CURLM_OK)
                return -ENOMEM;
        *ret = TAKE_PTR(call);
        return 0;
}

static void forward_signal(struct exec_run *x, int sig) {
        for (size_t i = 0; i < EXEC_MAX_SIGNAL_CALLS; i++) {
                if (x->signal_calls[i])
                        continue;
                _cleanup_(json_decrefp) json_t *body = json_pack("{s:i}", "signal", sig);
                if (!body || post_json(x, x->signal_path, body, &x->signal_calls[i]) < 0)
                        fprintf(stderr, "airlock: warning: failed to forward signal %d\n", sig);
                return;
        }
        fprintf(stderr, "airlock: warning: too many signals in flight, dropped signal %d\n", sig);
}

/* Sends one stdin chunk, or the close when len == 0 at EOF. */
static int send_stdin(struct exec_run *x, const void *data, size_t len, bool close) {
        _cleanup_free_ char *b64 = NULL;
        int r = cli_b64_encode(data, len, &b64);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s, s:b}", "data", b64, "close", close);
        if (!body)
                return -ENOMEM;
        return post_json(x, x->stdin_path, body, &x->stdin_call);
}

static void stream_fail(struct exec_run *x, int r, const char *msg) {
        if (x->stream_error < 0)
                return;
        x->stream_error = r;
        snprintf(x->stream_message, sizeof(x->stream_message), "%s", msg);
}

static int on_event(const struct sse_event *ev, void *userdata) {
        struct exec_run *x = userdata;
        bool is_stdout = strcmp(ev->type, "stdout") == 0;

        if (x->exited)
                return 0; /* nothing after the exit event matters */

        if (is_stdout || strcmp(ev->type, "stderr") == 0) {
                _cleanup_(json_decrefp) json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
                const char *b64 = json_string_value(json_object_get(j, "data"));
                _cleanup_free_ char *bytes = NULL;
                size_t n = 0;
                if (!b64 || cli_b64_decode(b64, strlen(b64), &bytes, &n) < 0) {
                        stream_fail(x, -EBADMSG, "malformed output event from airlockd");
                        return -EBADMSG;
                }
                if (is_stdout && x->stdout_gone)
                        return 0; /* our reader is gone; drop output */
                /* Our stdout reader went away (`| head`): the loop tells the
                 * command the way a local pipe would, then waits for it.
                 * (No new requests from inside a curl callback.) */
                if (fd_write_all(is_stdout ? STDOUT_FILENO : STDERR_FILENO, bytes, n) < 0 && is_stdout)
                        x->stdout_gone = true;
                return 0;
        }
        if (strcmp(ev->type, "exit") == 0) {
                _cleanup_(json_decrefp) json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
                if (!json_is_object(j)) {
                        stream_fail(x, -EBADMSG, "malformed exit event from airlockd");
                        return -EBADMSG;
                }
                x->exited = true;
                x->exit_status = cli_exit_status(j);
                return 0;
        }
        if (strcmp(ev->type, "dropped") == 0) {
                /* The server's buffer overflowed before we attached or kept up. */
                _cleanup_(json_decrefp) json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
                json_int_t bytes = json_integer_value(json_object_get(j, "bytes"));
                fprintf(stderr, "\r\nairlock: warning: %lld bytes of output were lost\r\n",
                        (long long)bytes);
                return 0;
        }
        if (strcmp(ev->type, "error") == 0) {
                _cleanup_(json_decrefp) json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
                const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
                if (!msg)
                        msg = json_string_value(json_object_get(j, "message"));
                stream_fail(x, -EIO, msg ? msg : "airlockd reported an error on the event stream");
                return -EIO;
        }
        return 0; /* unknown event types are for newer clients */
}

static size_t events_header_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct exec_run *x = userdata;
        size_t n = size * nmemb;
        /* The blank line ends the header block: the stream is live. */
        if ((n == 2 && data[0] == '\r' && data[1] == '\n') || (n == 1 && data[0] == '\n'))
                if (client_call_status(x->events) == 200)
                        x->attached = true;
        return n;
}

static size_t events_write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct exec_run *x = userdata;
        size_t n = size * nmemb;

        if (client_call_status(x->events) != 200)
                return client_call_collect(x->events, data, n) < 0 ? 0 : n;
        int r = sse_parser_feed(x->sse, data, n);
        if (r == -EMSGSIZE)
                stream_fail(x, r, "an event from airlockd exceeded the size limit");
        else if (r < 0)
                stream_fail(x, r, "failed to process the event stream");
        return r < 0 ? 0 : n;
}

static int start_session(struct exec_run *x, struct cli_error *err) {
        _cleanup_(json_decrefp) json_t *body = NULL, *cmd = NULL, *resp = NULL;
        _cleanup_free_ char *path = NULL, *sid = NULL, *events_path = NULL;
        const struct exec_opts *o = x->opts;
        int r;

        if ((r = cmd_to_json(o, &cmd)) < 0)
                return cli_error_set(err, r, "the command must be UTF-8");
        body = json_pack("{s:O, s:b, s:O}", "cmd", cmd, "pty", o->tty, "env", o->env);
        if (!body)
                return cli_error_set(err, -ENOMEM, "out of memory");
        if (o->cwd && json_object_set_new(body, "cwd", json_string(o->cwd)) < 0)
                return cli_error_set(err, -EILSEQ, "--cwd must be UTF-8");
        /* Sessions have no server-side timeout; --timeout is enforced by the
         * loop. A pty starts with our window size so full-screen programs
         * draw right. */
        struct winsize ws;
        if (o->tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0 &&
            (json_object_set_new(body, "rows", json_integer(ws.ws_row)) < 0 ||
             json_object_set_new(body, "cols", json_integer(ws.ws_col)) < 0))
                return cli_error_set(err, -ENOMEM, "out of memory");
        /* Like ssh and docker: a pty program wants to know the terminal. */
        const char *term = getenv("TERM");
        if (o->tty && term && !json_object_get(o->env, "TERM")) {
                json_t *env = json_object_get(body, "env");
                if (json_object_set_new(env, "TERM", json_string(term)) < 0)
                        return cli_error_set(err, -ENOMEM, "out of memory");
        }

        if (asprintf(&path, "/v1/sandboxes/%s/sessions", o->sandbox) < 0)
                return cli_error_set(err, -ENOMEM, "out of memory");
        r = client_json(&x->cli->client, "POST", path, body, err, &resp);
        if (r < 0)
                return r;

        const char *id = json_string_value(json_object_get(resp, "id"));
        const char *token = json_string_value(json_object_get(resp, "attach_token"));
        if (!id || !*id)
                return cli_error_set(err, -EBADMSG, "airlockd answered without a session id");
        if (token) {
                x->bearer = strdup(token);
                if (!x->bearer)
                        return cli_error_set(err, -ENOMEM, "out of memory");
        }
        if (cli_url_escape(id, false, &sid) < 0 ||
            asprintf(&events_path, "/v1/sessions/%s/events", sid) < 0 ||
            asprintf(&x->stdin_path, "/v1/sessions/%s/stdin", sid) < 0 ||
            asprintf(&x->signal_path, "/v1/sessions/%s/signal", sid) < 0)
                return cli_error_set(err, -ENOMEM, "out of memory");

        r = client_call_new(&x->cli->client, "GET", events_path, x->bearer, NULL, &x->events);
        if (r < 0)
                return cli_error_set(err, r, "failed to prepare the request: %m");
        CURL *e = x->events->easy;
        /* Replace the JSON Accept header client_call_new set. */
        struct curl_slist *h = curl_slist_append(x->events->headers, "Accept: text/event-stream");
        if (!h)
                return cli_error_set(err, -ENOMEM, "out of memory");
        x->events->headers = h;
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, events_write_cb);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, events_header_cb);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
        if (curl_multi_add_handle(x->multi, e) != CURLM_OK)
                return cli_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

/* A stdin or signal request finished. Failures are mostly races with the
 * command exiting, so they only get a warning when they are not that. */
static void aux_done(struct exec_run *x, struct client_call **slot, CURLcode res, const char *what) {
        struct cli_error err = {};
        int r = client_call_finish(&x->cli->client, *slot, res, &err, NULL);
        if (r < 0 && err.status != 404 && err.status != 409 && !x->exited)
                fprintf(stderr, "\r\nairlock: warning: %s: %s\r\n", what, err.message);
        curl_multi_remove_handle(x->multi, (*slot)->easy);
        *slot = client_call_free(*slot);
        if (r < 0 && slot == &x->stdin_call)
                x->stdin_done = true;
}

static void read_stdin_chunk(struct exec_run *x) {
        char buf[EXEC_STDIN_CHUNK];
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return;
        /* A read error ends our stdin just like EOF does. */
        bool eof = n <= 0;
        int r = send_stdin(x, buf, eof ? 0 : (size_t)n, eof);
        if (r < 0) {
                fprintf(stderr, "airlock: warning: failed to send stdin: %s\n", strerror(-r));
                x->stdin_done = true;
        } else if (eof)
                x->stdin_done = x->stdin_eof_sent = true;
}

static int exec_internal_error(void) {
        terminal_restore();
        cli_fail("exec: internal curl error");
        return CLI_EXIT_TRANSPORT;
}

static int exec_loop(struct exec_run *x) {
        for (;;) {
                int running = 0;
                if (curl_multi_perform(x->multi, &running) != CURLM_OK)
                        return exec_internal_error();

                CURLMsg *msg;
                int queued;
                while ((msg = curl_multi_info_read(x->multi, &queued))) {
                        if (msg->msg != CURLMSG_DONE)
                                continue;
                        CURL *e = msg->easy_handle;
                        if (e == x->events->easy) {
                                x->events_done = true;
                                x->events_res = msg->data.result;
                        } else if (x->stdin_call && e == x->stdin_call->easy)
                                aux_done(x, &x->stdin_call, msg->data.result, "failed to send stdin");
                        else
                                for (size_t i = 0; i < EXEC_MAX_SIGNAL_CALLS; i++)
                                        if (x->signal_calls[i] && e == x->signal_calls[i]->easy) {
                                                aux_done(x, &x->signal_calls[i], msg->data.result,
                                                         "failed to forward a signal");
                                                break;
                                        }
                }

                if (x->exited)
                        return x->timed_out ? 124 : x->exit_status;
                if (x->stream_error < 0) {
                        terminal_restore();
                        cli_fail("exec: %s", x->stream_message);
                        return CLI_EXIT_TRANSPORT;
                }
                if (x->events_done) {
                        struct cli_error err = {};
                        terminal_restore();
                        if (client_call_finish(&x->cli->client, x->events, x->events_res, &err, NULL) < 0)
                                cli_fail_error(&err, "exec: event stream");
                        else
                                cli_fail("exec: the event stream ended before the command exited");
                        return CLI_EXIT_TRANSPORT;
                }

                /* Signals: the first Ctrl-C goes to the command, the second
                 * one is for us. */
                char drain[64];
                while (read(x->sig_pipe[0], drain, sizeof(drain)) > 0)
                        ;
                if (sigint_count >= 2) {
                        terminal_restore();
                        fputs("\n", stderr);
                        return 128 + SIGINT;
                }
                if (x->stdout_gone && !x->sigpipe_sent) {
                        x->sigpipe_sent = true;
                        forward_signal(x, SIGPIPE);
                }
                if (sigint_count == 1 && !x->sigint_forwarded) {
                        x->sigint_forwarded = true;
                        forward_signal(x, SIGINT);
                }

                uint64_t now = now_monotonic_ns();
                if (x->deadline_ns && !x->timed_out && now >= x->deadline_ns) {
                        x->timed_out = true;
                        x->kill_deadline_ns = now + EXEC_KILL_GRACE_NS;
                        forward_signal(x, SIGKILL);
                }
                if (x->timed_out && now >= x->kill_deadline_ns) {
                        terminal_restore();
                        cli_fail("exec: timed out after %llu s, and the command did not report its exit",
                                 (unsigned long long)x->opts->timeout_s);
                        return 124;
                }

                /* Send stdin only once the output stream is attached, so
                 * nothing the command prints in response can be missed. */
                if (x->attached && !x->stdin_started) {
                        x->stdin_started = true;
                        if (!x->opts->interactive) {
                                if (send_stdin(x, NULL, 0, true) < 0)
                                        fprintf(stderr,
                                                "airlock: warning: failed to close the command's stdin\n");
                                x->stdin_done = true;
                        }
                }

                struct curl_waitfd extra[2] = {
                        {.fd = x->sig_pipe[0], .events = CURL_WAIT_POLLIN},
                };
                unsigned nextra = 1;
                bool want_stdin = x->stdin_started && !x->stdin_done && !x->stdin_call;
                if (want_stdin)
                        extra[nextra++] =
                                (struct curl_waitfd){.fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN};

                int timeout_ms = 1000;
                if (x->deadline_ns && !x->timed_out)
                        timeout_ms = (int)MIN((uint64_t)timeout_ms, (x->deadline_ns - now) / 1000000 + 1);
                if (curl_multi_poll(x->multi, extra, nextra, timeout_ms, NULL) != CURLM_OK)
                        return exec_internal_error();
                if (want_stdin && (extra[1].revents & (CURL_WAIT_POLLIN | CURL_WAIT_POLLPRI)))
                        read_stdin_chunk(x);
                else if (want_stdin && extra[1].revents)
                        read_stdin_chunk(x); /* POLLHUP/POLLERR: read() reports EOF or the error */
        }
}

static int exec_stream(struct cli *cli, const struct exec_opts *o) {
        _cleanup_(exec_run_done) struct exec_run x = {
                .cli = cli,
                .opts = o,
                .sig_pipe = {-1, -1},
        };
        struct cli_error err = {};
        int r;

        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        x.multi = curl_multi_init();
        if (!x.multi || sse_parser_new(SSE_MAX_EVENT_DEFAULT, on_event, &x, &x.sse) < 0)
                return cli_fail("out of memory");
        if (pipe2(x.sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return cli_fail("exec: failed to create a pipe: %m");

        r = start_session(&x, &err);
        if (r < 0)
                return cli_fail_error(&err, "exec %s", o->sandbox);

        /* Install the handler only now: a Ctrl-C before the session exists
         * should just stop us. */
        sig_pipe_write = x.sig_pipe[1];
        struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        /* A closed stdout must be an EPIPE we can forward, not our death. */
        signal(SIGPIPE, SIG_IGN);

        if (o->has_timeout)
                x.deadline_ns = now_monotonic_ns() + o->timeout_s * 1000000000ull;
        if (o->tty && o->interactive && isatty(STDIN_FILENO))
                terminal_make_raw();

        r = exec_loop(&x);
        if (!x.exited && (r == CLI_EXIT_TRANSPORT || r == 128 + SIGINT)) {
                /* We are leaving without the command's exit: do not leave it
                 * running (a `cat` would wait on its stdin forever). Best
                 * effort; the server may be what failed. */
                _cleanup_(json_decrefp) json_t *body = json_pack("{s:i}", "signal", SIGKILL);
                struct cli_error ignored = {};
                if (body)
                        (void) client_json(&cli->client, "POST", x.signal_path, body, &ignored, NULL);
        }
        if (r == 124 && x.timed_out && x.exited)
                cli_fail("exec: timed out after %llu s", (unsigned long long)o->timeout_s);
        return r;
}

int cmd_exec(struct cli *cli, int argc, char **argv) {
        _cleanup_(exec_opts_done) struct exec_opts o = {};
        int r = exec_parse_args(cli, argc, argv, &o);
        if (r != CLI_PROCEED)
                return r;
        return cli->json ? exec_json(cli, &o) : exec_stream(cli, &o);
}
