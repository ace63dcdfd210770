/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doctor: what is wrong, one line per item. The host lines are airlockd's
 * own checks (`airlockd --check --json`, run from the build tree or PATH:
 * one implementation of them, in src/daemon/check.c); the API lines are
 * the CLI's view through the public API: GET /v1/health (airlockd, its
 * node, the default templates) and GET /v1/templates with the token.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "builtin.h"
#include "cli-util.h"

#define CHECK_TIMEOUT_MS 60000
#define CHECK_OUTPUT_MAX (1u << 20)

static const char *const status_names[] = {"ok", "warn", "error"};

static struct doctor_item *item_add(struct doctor_report *rep, const char *name) {
        if (rep->n == ARRAY_SIZE(rep->items))
                return &rep->items[rep->n - 1];
        struct doctor_item *it = &rep->items[rep->n++];
        *it = (struct doctor_item){};
        snprintf(it->item, sizeof(it->item), "%s", name);
        return it;
}

static void item_set(struct doctor_item *it, enum doctor_status s, const char *fix, const char *fmt, ...)
        _printf_(4, 5);
static void item_set(struct doctor_item *it, enum doctor_status s, const char *fix, const char *fmt, ...) {
        va_list ap;
        it->status = s;
        va_start(ap, fmt);
        vsnprintf(it->detail, sizeof(it->detail), fmt, ap);
        va_end(ap);
        snprintf(it->fix, sizeof(it->fix), "%s", fix ? fix : "");
}

int doctor_listen_from_url(const char *url, char *buf, size_t n) {
        const char *p = NULL;
        unsigned default_port = 0;
        if (strncmp(url, "http://", 7) == 0) {
                p = url + 7;
                default_port = 80;
        } else if (strncmp(url, "https://", 8) == 0) {
                p = url + 8;
                default_port = 443;
        }
        if (!p || !*p)
                return -EINVAL;
        size_t hl = strcspn(p, "/?#");
        char hostport[300];
        if (hl == 0 || hl >= sizeof(hostport))
                return -EINVAL;
        memcpy(hostport, p, hl);
        hostport[hl] = '\0';
        /* [v6]:port, host:port or host */
        const char *colon = hostport[0] == '[' ? strstr(hostport, "]:") : strrchr(hostport, ':');
        if (hostport[0] == '[' && !colon && hostport[hl - 1] != ']')
                return -EINVAL;
        if (colon && hostport[0] == '[')
                colon++;
        char host[sizeof(hostport)];
        unsigned long port = default_port;
        if (colon) {
                char *end;
                port = strtoul(colon + 1, &end, 10);
                if (*end || colon[1] == '\0' || port == 0 || port > 65535)
                        return -EINVAL;
                snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
        } else
                snprintf(host, sizeof(host), "%s", hostport);
        /* airlockd's --listen takes addresses (and localhost), no names */
        bool v6 = host[0] == '[';
        bool v4 = true;
        for (const char *c = host; *c; c++)
                if (!(*c == '.' || (*c >= '0' && *c <= '9')))
                        v4 = false;
        if (!v6 && !v4 && strcmp(host, "localhost") != 0)
                return -EADDRNOTAVAIL;
        if ((size_t)snprintf(buf, n, "%s:%lu", host, port) >= n)
                return -ENAMETOOLONG;
        return 0;
}

/* A template of a health report in words, as airlockd's progress says it. */
static void describe_template(const json_t *t, char *buf, size_t n) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *state = json_string_value(json_object_get(t, "state"));
        const char *log = json_string_value(json_object_get(t, "log"));
        if (!name)
                name = "?";
        if (!state)
                state = "unknown";
        if (strcmp(state, "building") == 0) {
                const char *step = json_string_value(json_object_get(t, "step"));
                json_t *num = json_object_get(t, "step_number"), *steps = json_object_get(t, "steps");
                json_t *ms = json_object_get(t, "elapsed_ms");
                char at[96] = "", took[48] = "";
                if (step && json_is_integer(num) && json_is_integer(steps))
                        snprintf(at, sizeof(at), ": step %lld/%lld %s", (long long)json_integer_value(num),
                                 (long long)json_integer_value(steps), step);
                if (json_is_integer(ms)) {
                        long long s = json_integer_value(ms) / 1000;
                        snprintf(took, sizeof(took), " (%lldm%02llds elapsed%s%s)", s / 60, s % 60,
                                 log ? "; log " : "", log ? log : "");
                }
                snprintf(buf, n, "%s building%s%s", name, at, took);
        } else if (strcmp(state, "failed") == 0) {
                const char *error = json_string_value(json_object_get(t, "error"));
                if (!error)
                        error = "build failed";
                bool say_log = log && !strstr(error, log);
                snprintf(buf, n, "%s failed: %s%s%s", name, error, say_log ? "; build log " : "",
                         say_log ? log : "");
        } else
                snprintf(buf, n, "%s %s", name, state);
}

void doctor_health_items(long status, const json_t *body, struct doctor_report *rep) {
        struct doctor_item *node = item_add(rep, "node");
        const json_t *err = json_object_get(body, "error");
        const char *code = json_string_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        const json_t *templates = json_object_get(body, "templates");
        if (status == 200 && json_is_object(body)) {
                const char *accel = json_string_value(json_object_get(body, "accel"));
                const char *why = json_string_value(json_object_get(body, "accel_reason"));
                const char *cpu = json_string_value(json_object_get(body, "cpu"));
                /* TCG is the accel line's business: it says why and what to do */
                item_set(node, DOCTOR_OK, NULL, "reachable; accel %s%s%s%s%s%s", accel ? accel : "?",
                         why ? " (" : "", why ? why : "", why ? ")" : "", cpu ? "; VM CPU " : "", cpu ? cpu : "");
        } else if (status == 503 && json_is_array(templates))
                item_set(node, DOCTOR_OK, NULL, "reachable (its default templates are not ready yet)");
        else if (status == 503)
                item_set(node, DOCTOR_ERROR,
                         "read airlockd's log (the prog=airlock-node lines say why); restarting airlockd "
                         "starts it "
                         "again",
                         "airlockd answers, its node agent does not: %s",
                         msg    ? msg
                         : code ? code
                                : "unavailable");
        else
                item_set(node, DOCTOR_ERROR, "point --url (AIRLOCK_URL) at airlockd",
                         "GET /v1/health answered HTTP %ld%s%s: is this airlockd?", status, msg ? ": " : "",
                         msg ? msg : "");
        if (!json_is_array(templates))
                return;

        struct doctor_item *tpl = item_add(rep, "templates");
        char ready[512] = "", busy[1024] = "", failed[1024] = "";
        size_t i;
        json_t *t;
        json_array_foreach(templates, i, t) {
                const char *state = json_string_value(json_object_get(t, "state"));
                char d[600];
                describe_template(t, d, sizeof(d));
                char *into = state && strcmp(state, "ready") == 0    ? ready
                             : state && strcmp(state, "failed") == 0 ? failed
                                                                     : busy;
                size_t cap = into == ready ? sizeof(ready) : sizeof(busy);
                size_t len = strlen(into);
                snprintf(into + len, cap - len, "%s%s", len ? (into == ready ? ", " : "; ") : "",
                         into == ready ? json_string_value(json_object_get(t, "name")) ?: "?" : d);
        }
        if (failed[0] || (code && strcmp(code, "template_failed") == 0))
                item_set(tpl, DOCTOR_ERROR,
                         "read the build log and fix the cause; then restart airlockd, or create a sandbox "
                         "of it, "
                         "to build it again",
                         "%s%s%s",
                         failed[0] ? failed
                         : msg     ? msg
                                   : "a default template failed",
                         ready[0] ? "; ready: " : "", ready);
        else if (busy[0])
                item_set(tpl, DOCTOR_WARN,
                         "wait: the build goes on by itself (airlockd's output shows its steps)", "%s%s%s",
                         busy, ready[0] ? "; ready: " : "", ready);
        else
                item_set(tpl, DOCTOR_OK, NULL, "ready: %s", ready[0] ? ready : "(no default templates)");
}

/* Where airlockd is: AIRLOCK_DAEMON_BINARY, the build tree this CLI came
 * from, next to this binary, then PATH. */
static int find_airlockd(char *buf, size_t n) {
        const char *env = getenv("AIRLOCK_DAEMON_BINARY");
        if (env && *env) {
                snprintf(buf, n, "%s", env);
                return access(buf, X_OK) == 0 ? 0 : -errno;
        }
        snprintf(buf, n, "%s", AIRLOCK_DAEMON_PATH);
        if (access(buf, X_OK) == 0)
                return 0;
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (k > 0) {
                self[k] = '\0';
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        if ((size_t)snprintf(buf, n, "%s/airlockd", self) < n && access(buf, X_OK) == 0)
                                return 0;
                }
        }
        const char *path = getenv("PATH");
        for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
                size_t len = strcspn(d, ":");
                if (len > 0 && (size_t)snprintf(buf, n, "%.*s/airlockd", (int)len, d) < n &&
                    access(buf, X_OK) == 0)
                        return 0;
                d += len + (d[len] == ':');
        }
        return -ENOENT;
}

/* Runs argv, its stdout into *ret_out (bounded), the first line of its
 * stderr into err; killed after CHECK_TIMEOUT_MS. Returns the exit status
 * or a negative errno. */
static int run_check(char *const argv[], char **ret_out, char *err, size_t errlen) {
        int out[2], er[2];
        err[0] = '\0';
        if (pipe2(out, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(er, O_CLOEXEC) < 0) {
                close(out[0]);
                close(out[1]);
                return -errno;
        }
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(out[0]);
                close(out[1]);
                close(er[0]);
                close(er[1]);
                return r;
        }
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        close(out[1]);
        close(er[1]);
        size_t cap = 64 << 10, len = 0, elen = 0;
        char *buf = malloc(cap + 1);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long deadline = now.tv_sec * 1000LL + now.tv_nsec / 1000000 + CHECK_TIMEOUT_MS;
        bool out_open = true, err_open = true, timed_out = false, too_big = !buf;
        while ((out_open || err_open) && !too_big) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                long long left = deadline - (now.tv_sec * 1000LL + now.tv_nsec / 1000000);
                if (left <= 0) {
                        timed_out = true;
                        break;
                }
                struct pollfd p[2] = {{.fd = out_open ? out[0] : -1, .events = POLLIN},
                                      {.fd = err_open ? er[0] : -1, .events = POLLIN}};
                if (poll(p, 2, (int)left) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[0].revents) {
                        if (len == cap) {
                                char *nb = cap < CHECK_OUTPUT_MAX ? realloc(buf, cap * 2 + 1) : NULL;
                                if (!nb) {
                                        too_big = true;
                                        break;
                                }
                                buf = nb;
                                cap *= 2;
                        }
                        ssize_t k = read(out[0], buf + len, cap - len);
                        if (k <= 0 && !(k < 0 && errno == EINTR))
                                out_open = false;
                        else if (k > 0)
                                len += (size_t)k;
                }
                if (p[1].revents) {
                        char chunk[512];
                        ssize_t k = read(er[0], chunk, sizeof(chunk));
                        if (k <= 0 && !(k < 0 && errno == EINTR))
                                err_open = false;
                        else if (k > 0 && elen + 1 < errlen) {
                                size_t take = MIN((size_t)k, errlen - 1 - elen);
                                memcpy(err + elen, chunk, take);
                                elen += take;
                                err[elen] = '\0';
                        }
                }
        }
        close(out[0]);
        close(er[0]);
        if (timed_out || too_big)
                kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        free(buf);
                        return -errno;
                }
        err[strcspn(err, "\n")] = '\0';
        if (timed_out || too_big) {
                free(buf);
                return timed_out ? -ETIMEDOUT : -EFBIG;
        }
        buf[len] = '\0';
        *ret_out = buf;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The host lines: airlockd --check --json, for this CLI's data dir and
 * (when the URL names an address) its API address. */
static void host_items(const char *data_dir, const char *url, struct doctor_report *rep) {
        char bin[PATH_MAX], listen[320], err[512];
        if (find_airlockd(bin, sizeof(bin)) < 0) {
                item_set(
                        item_add(rep, "host"), DOCTOR_ERROR,
                        "build it (ninja -C build; ./run.sh builds too) or put airlockd on PATH",
                        "airlockd not found (%s, next to airlock, PATH): the host is not checked",
                        AIRLOCK_DAEMON_PATH);
                return;
        }
        char *argv[10] = {bin, (char *)"--check", (char *)"--json", (char *)"--data-dir", (char *)data_dir};
        int argc = 5;
        if (doctor_listen_from_url(url, listen, sizeof(listen)) == 0) {
                argv[argc++] = (char *)"--listen";
                argv[argc++] = listen;
        }
        argv[argc] = NULL;
        _cleanup_free_ char *out = NULL;
        int r = run_check(argv, &out, err, sizeof(err));
        _cleanup_(json_decrefp) json_t *arr = r == 0 || r == 1 ? json_loads(out, 0, NULL) : NULL;
        if (!json_is_array(arr)) {
                errno = r < 0 ? -r : 0;
                item_set(item_add(rep, "host"), DOCTOR_ERROR, "run it by hand: airlockd --check",
                         "%s --check %s%s%s", bin,
                         r == -ETIMEDOUT ? "did not finish within 60 s"
                         : r < 0         ? strerror(-r)
                                         : "printed no report",
                         err[0] ? ": " : "", err);
                return;
        }
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
                const char *name = json_string_value(json_object_get(e, "item"));
                const char *status = json_string_value(json_object_get(e, "status"));
                const char *detail = json_string_value(json_object_get(e, "detail"));
                const char *fix = json_string_value(json_object_get(e, "fix"));
                /* the API is this command's own line, from the URL's view */
                if (!name || !status || strcmp(name, "api") == 0)
                        continue;
                enum doctor_status s = strcmp(status, "ok") == 0     ? DOCTOR_OK
                                       : strcmp(status, "warn") == 0 ? DOCTOR_WARN
                                                                     : DOCTOR_ERROR;
                item_set(item_add(rep, name), s, fix, "%s", detail ? detail : "");
        }
}

/* The API lines: GET /v1/health, then GET /v1/templates with the token. */
static void api_items(struct cli *cli, struct doctor_report *rep) {
        struct doctor_item *api = item_add(rep, "api");
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        if (client_call_new(&cli->client, "GET", "/v1/health", NULL, NULL, &call) < 0) {
                item_set(api, DOCTOR_ERROR, NULL, "out of memory");
                return;
        }
        curl_easy_setopt(call->easy, CURLOPT_TIMEOUT, 15L);
        CURLcode res = curl_easy_perform(call->easy);
        long status = client_call_status(call);
        if (res != CURLE_OK || status == 0) {
                item_set(api, DOCTOR_ERROR,
                         "start airlockd (sudo ./run.sh), or point --url (AIRLOCK_URL) at the one that runs",
                         "cannot reach airlockd at %s: %s", cli->client.base_url,
                         call->errbuf[0] ? call->errbuf : curl_easy_strerror(res));
                return;
        }
        _cleanup_(json_decrefp) json_t *body =
                call->resp_len ? json_loadb(call->resp, call->resp_len, 0, NULL) : NULL;
        bool airlock = json_is_object(body) &&
                       (json_object_get(body, "status") || json_is_object(json_object_get(body, "error")));
        if (!airlock) {
                item_set(api, DOCTOR_ERROR, "point --url (AIRLOCK_URL) at airlockd",
                         "%s answers GET /v1/health with HTTP %ld and no Airlock reply: is this airlockd?",
                         cli->client.base_url, status);
                return;
        }
        item_set(api, DOCTOR_OK, NULL, "airlockd answers at %s (GET /v1/health: %ld)", cli->client.base_url,
                 status);
        doctor_health_items(status, body, rep);

        struct doctor_item *tok = item_add(rep, "token");
        if (!cli->client.token) {
                item_set(tok, DOCTOR_WARN,
                         "run as root (the token file is airlockd's), or pass --token (AIRLOCK_TOKEN)", "%s",
                         cli->client.token_problem ? cli->client.token_problem : "no API token");
                return;
        }
        struct cli_error err = {};
        _cleanup_(json_decrefp) json_t *list = NULL;
        if (client_json(&cli->client, "GET", "/v1/templates", NULL, &err, &list) < 0) {
                item_set(tok, err.status == 401 || err.status == 403 ? DOCTOR_ERROR : DOCTOR_WARN,
                         err.status == 401 ? "pass the admin token or an API key (--token, AIRLOCK_TOKEN)"
                                           : NULL,
                         "GET /v1/templates: %s", err.message);
                return;
        }
        char names[1024] = "";
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(list, "templates"), i, t) {
                size_t len = strlen(names);
                const char *name = json_string_value(json_object_get(t, "name"));
                const char *state = json_string_value(json_object_get(t, "state"));
                snprintf(names + len, sizeof(names) - len, "%s%s %s", len ? ", " : "", name ? name : "?",
                         state ? state : "?");
        }
        item_set(tok, DOCTOR_OK, NULL, "accepted; GET /v1/templates: %s", names[0] ? names : "(none)");
}

void doctor_report_print(const struct doctor_report *rep, FILE *f) {
        for (size_t i = 0; i < rep->n; i++) {
                const struct doctor_item *it = &rep->items[i];
                fprintf(f, "%-5s  %-10s %s", status_names[it->status], it->item, it->detail);
                if (it->status != DOCTOR_OK && it->fix[0])
                        fprintf(f, "; fix: %s", it->fix);
                fputc('\n', f);
        }
}

json_t *doctor_report_json(const struct doctor_report *rep) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < rep->n; i++) {
                const struct doctor_item *it = &rep->items[i];
                json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "item", it->item, "status",
                                      status_names[it->status], "detail", it->detail, "fix",
                                      it->status != DOCTOR_OK && it->fix[0] ? json_string(it->fix)
                                                                            : json_null());
                if (!o || json_array_append_new(a, o) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

int cmd_doctor(struct cli *cli, int argc, char **argv) {
        int r = cli_parse_plain(cli, argc, argv, 0, 0);
        if (r != CLI_PROCEED)
                return r;
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        const char *data_dir = cli->data_dir ? cli->data_dir : getenv("AIRLOCK_DATA_DIR");
        if (!data_dir || !*data_dir)
                data_dir = CLIENT_DEFAULT_DATA_DIR;

        _cleanup_free_ struct doctor_report *rep = calloc(1, sizeof(*rep));
        if (!rep)
                return cli_fail("out of memory");
        host_items(data_dir, cli->client.base_url, rep);
        api_items(cli, rep);

        if (cli->json) {
                _cleanup_(json_decrefp) json_t *j = doctor_report_json(rep);
                if (!j || cli_print_json(j) < 0)
                        return cli_fail("doctor: cannot write the report");
        } else
                doctor_report_print(rep, stdout);
        for (size_t i = 0; i < rep->n; i++)
                if (rep->items[i].status == DOCTOR_ERROR)
                        return CLI_EXIT_FAILURE;
        return CLI_EXIT_OK;
}
