/* SPDX-License-Identifier: Apache-2.0 */
/*
 * template: build a template from a spec (JSON) or a Dockerfile and follow
 * the build live (POST /v1/templates, then its log's event stream); list,
 * show, follow the log of, and remove built templates. The spec is checked
 * here first (lib/tplspec), so a bad one fails before anything is sent,
 * and the build context holds only what COPY names.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"
#include "sse.h"
#include "tplspec.h"

/* ---- following a build ---- */

struct follow {
        struct cli *cli;
        bool ended, ok;
        char error[1024];
};

static int on_build_event(const struct sse_event *ev, void *userdata) {
        struct follow *f = userdata;
        _cleanup_(json_decrefp) json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
        if (strcmp(ev->type, "error") == 0) {
                snprintf(f->error, sizeof f->error, "%s",
                         json_string_value(json_object_get(d, "message")) ?: ev->data);
                f->ended = true;
                return -ECANCELED;
        }
        if (!json_is_object(d))
                return 0;
        if (f->cli->json) {
                _cleanup_free_ char *line = json_dumps(d, JSON_COMPACT);
                if (line)
                        printf("{\"event\":\"%s\",\"data\":%s}\n", ev->type, line);
        } else if (strcmp(ev->type, "log") == 0) {
                const char *text = json_string_value(json_object_get(d, "text")) ?: "";
                fputs(text, stdout);
        } else if (strcmp(ev->type, "progress") == 0) {
                /* the log carries the step's own header; this line is the
                 * progress a terminal reader looks for */
                fprintf(stderr, "airlock: step %lld of %lld (%.1f s): %s\n",
                        (long long) json_integer_value(json_object_get(d, "step")),
                        (long long) json_integer_value(json_object_get(d, "steps")),
                        (double) json_integer_value(json_object_get(d, "elapsed_ms")) / 1000.0,
                        json_string_value(json_object_get(d, "step_text")) ?: "");
        }
        if (strcmp(ev->type, "end") == 0) {
                const char *state = json_string_value(json_object_get(d, "state")) ?: "failed";
                f->ok = strcmp(state, "ready") == 0;
                snprintf(f->error, sizeof f->error, "%s", json_string_value(json_object_get(d, "error")) ?: state);
                f->ended = true;
                if (!f->cli->json)
                        fprintf(stderr, f->ok ? "airlock: built in %.1f s\n" : "airlock: the build failed after %.1f s\n",
                                (double) json_integer_value(json_object_get(d, "elapsed_ms")) / 1000.0);
        }
        fflush(stdout);
        return 0;
}

/* Follows the build's log to its end: CLI_EXIT_OK when it was built. */
static int follow_build(struct cli *cli, const char *name, const char *build_id) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/templates/%s/builds/%s/logs", name, build_id) < 0)
                return cli_fail("out of memory");
        struct follow f = { .cli = cli };
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        CURLcode res = CURLE_OK;
        (void) client_sse(&cli->client, path, on_build_event, &f, &call, &res);
        if (!call)
                return cli_fail("out of memory");
        if (!f.ended) {
                struct cli_error err = {};
                if (client_call_finish(&cli->client, call, res, &err, NULL) < 0)
                        return cli_fail_error(&err, "template %s", name);
                return cli_fail("template %s: the log stream ended before the build did", name);
        }
        if (!f.ok)
                return cli_fail("template %s: %s", name, f.error);
        return CLI_EXIT_OK;
}

/* ---- build ---- */

static int read_file(const char *path, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        if (st.st_size > TPLSPEC_INPUT_MAX)
                return -EFBIG;
        char *buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        ssize_t k = read(fd, buf, (size_t) st.st_size);
        if (k < 0) {
                free(buf);
                return -errno;
        }
        buf[k] = 0;
        *ret = buf;
        *ret_len = (size_t) k;
        return 0;
}

/* The build context: a tar of the COPY sources under dir, owned by root
 * (COPY's files are root's), in an unnamed temporary file. */
static int make_context(const char *dir, const char **srcs, int *ret_fd, off_t *ret_size) {
        char tmpl[] = "/tmp/airlock-context-XXXXXX";
        int fd = mkstemp(tmpl);
        if (fd < 0)
                return -errno;
        (void) unlink(tmpl);
        size_t n = 0;
        while (srcs[n])
                n++;
        char **argv = calloc(n + 12, sizeof *argv);
        if (!argv) {
                close(fd);
                return -ENOMEM;
        }
        size_t a = 0;
        argv[a++] = (char *) "tar";
        argv[a++] = (char *) "-c";
        argv[a++] = (char *) "--owner=0";
        argv[a++] = (char *) "--group=0";
        argv[a++] = (char *) "--numeric-owner";
        argv[a++] = (char *) "-f";
        argv[a++] = (char *) "-";
        argv[a++] = (char *) "-C";
        argv[a++] = (char *) dir;
        argv[a++] = (char *) "--";
        for (size_t i = 0; i < n; i++)
                argv[a++] = (char *) srcs[i];
        pid_t pid = fork();
        if (pid == 0) {
                if (dup2(fd, 1) < 0)
                        _exit(127);
                execvp("tar", argv);
                _exit(127);
        }
        free(argv);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                close(fd);
                return -EIO;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
                close(fd);
                return -errno;
        }
        *ret_fd = fd;
        *ret_size = st.st_size;
        return 0;
}

static int parse_size(struct cli *cli, const char *opt, const char *arg, json_int_t *ret) {
        char *end = NULL;
        unsigned long v = strtoul(arg, &end, 10);
        if (!*arg || *end || v == 0 || v > (1ul << 20))
                return cli_usage_error(cli, "template build: %s takes a positive number", opt);
        *ret = (json_int_t) v;
        return CLI_PROCEED;
}

/* The name a build gets from --name, or docker's -t and E2B's -n, which
 * mean the same: a name, without docker's :TAG (templates have none). */
static int build_name(struct cli *cli, const char *opt, const char *arg, const char **ret) {
        const char *colon = strchr(arg, ':');
        if (colon)
                return cli_usage_error(
                        cli, "template build: %s %s: a template has a name, no tag (%s); use %s %.*s", opt,
                        arg, colon + 1, opt, (int) (colon - arg), arg);
        *ret = arg;
        return CLI_PROCEED;
}

static int template_build(struct cli *cli, int argc, char **argv) {
        enum { OPT_MEMORY = CLI_OPT_FIRST_LOCAL, OPT_VCPUS, OPT_DISK, OPT_NO_FOLLOW };
        /* docker build's -t/--tag and E2B's template build flags (-n,
         * -p/--path, --dockerfile, --cpu-count, --memory-mb) as aliases */
        static const struct option options[] = {
                CLI_GLOBAL_OPTIONS,
                {"file", required_argument, NULL, 'f'},
                {"dockerfile", required_argument, NULL, 'f'},
                {"name", required_argument, NULL, 'n'},
                {"tag", required_argument, NULL, 't'},
                {"path", required_argument, NULL, 'p'},
                {"memory-mib", required_argument, NULL, OPT_MEMORY},
                {"memory-mb", required_argument, NULL, OPT_MEMORY},
                {"vcpus", required_argument, NULL, OPT_VCPUS},
                {"cpu-count", required_argument, NULL, OPT_VCPUS},
                {"disk-mib", required_argument, NULL, OPT_DISK},
                {"no-follow", no_argument, NULL, OPT_NO_FOLLOW},
                {},
        };
        const char *file = NULL, *name = NULL, *path = NULL;
        json_int_t sizes[3] = { 0 };
        static const char *const size_keys[] = { "memory_mib", "vcpus", "disk_mib" };
        bool follow = true;
        int c, r;
        while ((c = getopt_long(argc, argv, ":hf:n:t:p:", options, NULL)) >= 0) {
                switch (c) {
                case 'f': file = optarg; break;
                case 'n':
                        if ((r = build_name(cli, "--name", optarg, &name)) != CLI_PROCEED)
                                return r;
                        break;
                case 't':
                        if ((r = build_name(cli, "-t", optarg, &name)) != CLI_PROCEED)
                                return r;
                        break;
                case 'p': path = optarg; break;
                case OPT_MEMORY: if ((r = parse_size(cli, "--memory-mib", optarg, &sizes[0])) != CLI_PROCEED) return r; break;
                case OPT_VCPUS: if ((r = parse_size(cli, "--vcpus", optarg, &sizes[1])) != CLI_PROCEED) return r; break;
                case OPT_DISK: if ((r = parse_size(cli, "--disk-mib", optarg, &sizes[2])) != CLI_PROCEED) return r; break;
                case OPT_NO_FOLLOW: follow = false; break;
                default:
                        if ((r = cli_common_option(cli, c, argv)) != CLI_PROCEED)
                                return r;
                }
        }
        if (argc - optind > 1 || (path && argc - optind > 0))
                return cli_usage_error(cli, "template build: one context directory only");
        const char *dir = path ?: optind < argc ? argv[optind] : ".";
        /* as docker build: DIR/Dockerfile unless -f names another */
        _cleanup_free_ char *default_file = NULL;
        if (!file) {
                if (asprintf(&default_file, "%s/Dockerfile", dir) < 0)
                        return cli_fail("out of memory");
                if (access(default_file, F_OK) < 0)
                        return cli_usage_error(
                                cli,
                                "template build: no -f FILE (a spec .json or a Dockerfile) and no "
                                "%s",
                                default_file);
                file = default_file;
        }

        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        if ((r = read_file(file, &text, &len)) < 0)
                return cli_fail("template build: cannot read %s: %s", file, strerror(-r));
        size_t fl = strlen(file);
        bool is_json = fl > 5 && strcmp(file + fl - 5, ".json") == 0;
        char err[TPLSPEC_ERR_MAX] = "";
        _cleanup_(tplspec_freep) struct tplspec *spec = NULL;
        _cleanup_(json_decrefp) json_t *req = NULL;
        if (is_json) {
                json_error_t jerr;
                _cleanup_(json_decrefp) json_t *j = json_loadb(text, len, 0, &jerr);
                if (!j)
                        return cli_fail("template build: %s: line %d: %s", file, jerr.line, jerr.text);
                if (name)
                        json_object_set_new(j, "name", json_string(name));
                for (size_t i = 0; i < 3; i++)
                        if (sizes[i])
                                json_object_set_new(j, size_keys[i], json_integer(sizes[i]));
                if (tplspec_parse_json(j, &spec, err) < 0)
                        return cli_fail("template build: %s: %s", file, err);
                req = json_pack("{s:O}", "spec", j);
        } else {
                if (!name)
                        return cli_usage_error(
                                cli, "template build: a Dockerfile needs a name: -t NAME (or --name NAME)");
                if (tplspec_parse_dockerfile(text, len, name, &spec, err) < 0)
                        return cli_fail("template build: %s: %s", file, err);
                req = json_pack("{s:s%, s:s}", "dockerfile", text, len, "name", name);
                for (size_t i = 0; req && i < 3; i++)
                        if (sizes[i])
                                json_object_set_new(req, size_keys[i], json_integer(sizes[i]));
        }
        if (!req)
                return cli_fail("template build: %s is not UTF-8 text", file);

        _cleanup_free_ const char **srcs = tplspec_context_paths(spec);
        if (!srcs)
                return cli_fail("out of memory");
        _cleanup_close_ int ctx_fd = -1;
        off_t ctx_size = 0;
        if (srcs[0]) {
                for (size_t i = 0; srcs[i]; i++) {
                        _cleanup_free_ char *p = NULL;
                        if (asprintf(&p, "%s/%s", dir, srcs[i]) < 0)
                                return cli_fail("out of memory");
                        if (access(p, F_OK) < 0)
                                return cli_fail("template build: COPY source %s: %s", p, strerror(errno));
                }
                if ((r = make_context(dir, srcs, &ctx_fd, &ctx_size)) < 0)
                        return cli_fail("template build: cannot pack the build context in %s: %s", dir, strerror(-r));
        }
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;

        _cleanup_free_ char *req_text = json_dumps(req, JSON_COMPACT);
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        if (!req_text || client_call_new(&cli->client, "POST", "/v1/templates", NULL, NULL, &call) < 0)
                return cli_fail("out of memory");
        curl_mime *mime = curl_mime_init(call->easy);
        curl_mimepart *part = mime ? curl_mime_addpart(mime) : NULL;
        if (!part) {
                curl_mime_free(mime);
                return cli_fail("out of memory");
        }
        curl_mime_name(part, "request");
        curl_mime_type(part, "application/json");
        curl_mime_data(part, req_text, CURL_ZERO_TERMINATED);
        FILE *ctx_file = NULL; /* closed after the request */
        if (ctx_fd >= 0) {
                ctx_file = fdopen(TAKE_FD(ctx_fd), "rb");
                part = ctx_file ? curl_mime_addpart(mime) : NULL;
                if (!part) {
                        if (ctx_file)
                                fclose(ctx_file);
                        curl_mime_free(mime);
                        return cli_fail("out of memory");
                }
                curl_mime_name(part, "context");
                curl_mime_filename(part, "context.tar");
                curl_mime_type(part, "application/x-tar");
                curl_mime_data_cb(part, (curl_off_t) ctx_size, (curl_read_callback) fread, NULL, NULL, ctx_file);
                if (!cli->json)
                        fprintf(stderr, "airlock: sending the build context (%lld bytes)\n", (long long) ctx_size);
        }
        curl_easy_setopt(call->easy, CURLOPT_MIMEPOST, mime);
        CURLcode res = curl_easy_perform(call->easy);
        struct cli_error cerr = {};
        _cleanup_(json_decrefp) json_t *resp = NULL;
        r = client_call_finish(&cli->client, call, res, &cerr, &resp);
        curl_mime_free(mime);
        if (ctx_file)
                fclose(ctx_file);
        if (r < 0)
                return cli_fail_error(&cerr, "template build");
        const char *state = json_string_value(json_object_get(resp, "state")) ?: "";
        const char *build_id = json_string_value(json_object_get(resp, "build_id"));
        if (!follow || strcmp(state, "ready") == 0 || !build_id) {
                if (cli->json)
                        return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
                printf("%s %s (build %s)\n", spec->name, state, build_id ?: "-");
                return CLI_EXIT_OK;
        }
        if (!cli->json)
                fprintf(stderr, "airlock: building %s (build %s)\n", spec->name, build_id);
        return follow_build(cli, spec->name, build_id);
}

/* ---- the others ---- */

static int template_logs(struct cli *cli, const char *name) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/templates/%s", name) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};
        if (client_json(&cli->client, "GET", path, NULL, &err, &resp) < 0)
                return cli_fail_error(&err, "template logs");
        const char *build_id = json_string_value(json_object_get(resp, "build_id"));
        if (!build_id)
                return cli_fail("template logs: %s has no build", name);
        return follow_build(cli, name, build_id);
}

int cmd_templates(struct cli *cli, int argc, char **argv) {
        static const char *const header[] = {"NAME", "STATE", "KIND"};
        static const char *const fields[] = {"name", "state", "kind"};
        return cli_list_command(cli, argc, argv, "templates", "/v1/templates", NULL, "templates", ARRAY_SIZE(header),
                                header, fields);
}

int cmd_template(struct cli *cli, int argc, char **argv) {
        const char *verb = argc > 1 ? argv[1] : NULL;
        if (!verb || strcmp(verb, "ls") == 0)
                return cmd_templates(cli, argc - (verb ? 1 : 0), argv + (verb ? 1 : 0));
        /* the subcommand's own options, from a fresh getopt state */
        argc--;
        argv++;
        if (strcmp(verb, "build") == 0)
                return template_build(cli, argc, argv);
        int r = cli_parse_plain(cli, argc, argv, 0, -1); /* the count is checked here */
        if (r != CLI_PROCEED)
                return r;
        if (argc - optind != 1)
                return cli_usage_error(cli, "template %s: give one template NAME", verb);
        const char *name = argv[optind];
        if (!cli_id_is_valid(name))
                return cli_usage_error(cli, "template %s: '%s' is no template name", verb, name);
        if (strcmp(verb, "show") != 0 && strcmp(verb, "rm") != 0 && strcmp(verb, "logs") != 0)
                return cli_usage_error(cli, "template: unknown subcommand '%s' (build, ls, show, logs, rm)", verb);
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        if (strcmp(verb, "logs") == 0)
                return template_logs(cli, name);
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "/v1/templates/%s", name) < 0)
                return cli_fail("out of memory");
        _cleanup_(json_decrefp) json_t *resp = NULL;
        struct cli_error err = {};
        if (client_json(&cli->client, strcmp(verb, "rm") == 0 ? "DELETE" : "GET", path, NULL, &err, &resp) < 0)
                return cli_fail_error(&err, "template %s", verb);
        if (strcmp(verb, "rm") == 0)
                return CLI_EXIT_OK;
        if (cli->json)
                return cli_print_json(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        json_object_del(resp, "spec");
        return cli_print_fields(resp) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
