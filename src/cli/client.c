/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "airlock-config.h"
#include "cli-util.h"
#include "client.h"
#include "sse.h"
#include "util.h"

int cli_error_set(struct cli_error *err, int r, const char *fmt, ...) {
        if (!err)
                return r;
        *err = (struct cli_error){};
        va_list ap;
        va_start(ap, fmt);
        errno = r < 0 ? -r : r;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        return r;
}

/* A token goes into an HTTP header: anything but visible ASCII would either
 * break the request or smuggle in another header. */
static bool token_is_valid(const char *t) {
        if (!*t)
                return false;
        for (; *t; t++)
                if (*t < 0x21 || *t > 0x7e)
                        return false;
        return true;
}

static int token_from_file(const char *data_dir, char **ret, char **ret_problem) {
        _cleanup_free_ char *path = NULL, *buf = NULL;
        size_t len = 0;

        /* DATA_DIR/control since airlockd runs unprivileged; DATA_DIR
         * before that */
        if (asprintf(&path, "%s/control/admin.token", data_dir) < 0)
                return -ENOMEM;
        int r = file_read_all(path, CLIENT_MAX_TOKEN, &buf, &len);
        if (r == -ENOENT) {
                _cleanup_free_ char *old = NULL;
                if (asprintf(&old, "%s/admin.token", data_dir) < 0)
                        return -ENOMEM;
                if (file_read_all(old, CLIENT_MAX_TOKEN, &buf, &len) >= 0) {
                        free(path);
                        path = TAKE_PTR(old);
                        r = 0;
                }
        }
        if (r < 0) {
                char *problem = NULL;
                errno = -r;
                if (asprintf(&problem,
                             "no API token (pass --token, set AIRLOCK_TOKEN, or make %s readable: %m)",
                             path) < 0)
                        return -ENOMEM;
                *ret_problem = problem;
                *ret = NULL;
                return 0;
        }
        /* The file is written by airlockd, usually with a trailing newline. */
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
                buf[--len] = '\0';
        if (strlen(buf) != len || !token_is_valid(buf))
                return -EINVAL;
        *ret = TAKE_PTR(buf);
        *ret_problem = NULL;
        return 0;
}

int client_init(struct cli_client *c, const char *url, const char *token, const char *data_dir,
                struct cli_error *err) {
        if (!url)
                url = getenv("AIRLOCK_URL");
        if (!url || !*url)
                url = CLIENT_DEFAULT_URL;
        if (!token) {
                token = getenv("AIRLOCK_TOKEN");
                if (token && !*token)
                        token = NULL;
        }
        if (!data_dir)
                data_dir = getenv("AIRLOCK_DATA_DIR");
        if (!data_dir || !*data_dir)
                data_dir = CLIENT_DEFAULT_DATA_DIR;

        if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
                return cli_error_set(err, -EINVAL, "invalid URL '%s': must start with http:// or https://",
                                     url);

        _cleanup_free_ char *base = strdup(url), *tok = NULL, *problem = NULL;
        if (!base)
                return cli_error_set(err, -ENOMEM, "out of memory");
        size_t n = strlen(base);
        while (n > 0 && base[n - 1] == '/')
                base[--n] = '\0';

        if (token) {
                if (!token_is_valid(token))
                        return cli_error_set(err, -EINVAL, "the API token contains invalid characters");
                tok = strdup(token);
                if (!tok)
                        return cli_error_set(err, -ENOMEM, "out of memory");
        } else {
                int r = token_from_file(data_dir, &tok, &problem);
                if (r == -EINVAL)
                        return cli_error_set(
                                err, r, "the token in %s/admin.token contains invalid characters", data_dir);
                if (r < 0)
                        return cli_error_set(err, r, "failed to read the API token: %m");
        }

        *c = (struct cli_client){
                .base_url = TAKE_PTR(base),
                .token = TAKE_PTR(tok),
                .token_problem = TAKE_PTR(problem),
        };
        return 0;
}

void client_done(struct cli_client *c) {
        if (!c)
                return;
        free(c->base_url);
        if (c->token) {
                /* Do not leave the secret lying around in freed heap. */
                explicit_bzero(c->token, strlen(c->token));
                free(c->token);
        }
        free(c->token_problem);
        *c = (struct cli_client){};
}

int client_call_collect(struct client_call *call, const void *data, size_t n) {
        if (n > call->resp_max || call->resp_len > call->resp_max - n)
                return -EFBIG;
        if (cli_buf_reserve(&call->resp, &call->resp_cap, call->resp_len + n + 1, 4096) < 0)
                return -ENOMEM;
        memcpy(call->resp + call->resp_len, data, n);
        call->resp_len += n;
        call->resp[call->resp_len] = '\0';
        return 0;
}

static size_t collect_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        size_t n = size * nmemb;
        return client_call_collect(userdata, data, n) < 0 ? 0 : n;
}

long client_call_status(struct client_call *call) {
        long status = 0;
        if (curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
                return 0;
        return status;
}

struct client_call *client_call_free(struct client_call *call) {
        if (!call)
                return NULL;
        curl_easy_cleanup(call->easy);
        curl_slist_free_all(call->headers);
        free(call->body);
        free(call->resp);
        free(call);
        return NULL;
}

static int add_header(struct curl_slist **list, const char *h) {
        struct curl_slist *n = curl_slist_append(*list, h);
        if (!n)
                return -ENOMEM;
        *list = n;
        return 0;
}

int client_call_new(const struct cli_client *c, const char *method, const char *path, const char *bearer,
                    const json_t *body, struct client_call **ret) {
        _cleanup_(client_call_freep) struct client_call *call = calloc(1, sizeof(*call));
        _cleanup_free_ char *url = NULL;
        int r;

        if (!call)
                return -ENOMEM;
        call->resp_max = CLIENT_MAX_RESPONSE;
        call->easy = curl_easy_init();
        if (!call->easy)
                return -ENOMEM;
        if (asprintf(&url, "%s%s", c->base_url, path) < 0)
                return -ENOMEM;

        const char *tok = bearer ? bearer : c->token;
        if (tok) {
                _cleanup_free_ char *auth = NULL;
                if (asprintf(&auth, "Authorization: Bearer %s", tok) < 0)
                        return -ENOMEM;
                r = add_header(&call->headers, auth);
                explicit_bzero(auth, strlen(auth));
                if (r < 0)
                        return r;
        }
        if (body) {
                call->body = json_dumps(body, JSON_COMPACT);
                if (!call->body)
                        return -ENOMEM;
                if ((r = add_header(&call->headers, "Content-Type: application/json")) < 0)
                        return r;
                curl_easy_setopt(call->easy, CURLOPT_POSTFIELDS, call->body);
                curl_easy_setopt(call->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(call->body));
        }
        if ((r = add_header(&call->headers, "Accept: application/json")) < 0)
                return r;

        CURL *e = call->easy;
        if (curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK)
                return -EINVAL;
        /* Never follow a redirect: the Authorization header would go along. */
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(e, CURLOPT_USERAGENT, "airlock/" AIRLOCK_VERSION);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->headers);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect_cb);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
        /* Sandbox ids are validated, but keep "/./" and "/../" literal anyway:
         * a request must reach exactly the resource the user named. */
        curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
        if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
                curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
        else if (strcmp(method, "POST") == 0 && !body) {
                curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
                curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        }

        *ret = TAKE_PTR(call);
        return 0;
}

int client_call_header(struct client_call *call, const char *name, const char *value) {
        size_t n = strlen(name);
        struct curl_slist *list = NULL;
        for (struct curl_slist *h = call->headers; h; h = h->next)
                if (!(strncasecmp(h->data, name, n) == 0 && h->data[n] == ':') &&
                    add_header(&list, h->data) < 0)
                        goto oom;
        _cleanup_free_ char *line = NULL;
        if (asprintf(&line, "%s: %s", name, value) < 0 || add_header(&list, line) < 0)
                goto oom;
        curl_slist_free_all(call->headers);
        call->headers = list;
        curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, list);
        return 0;
oom:
        curl_slist_free_all(list);
        return -ENOMEM;
}

static int status_to_errno(long status) {
        switch (status) {
        case 400:
        case 422: return -EINVAL;
        case 401:
        case 403: return -EACCES;
        case 404: return -ENOENT;
        case 409: return -EBUSY;
        case 413: return -EFBIG;
        case 429:
        case 503: return -EAGAIN;
        case 504: return -ETIMEDOUT;
        default: return -EIO;
        }
}

static int curl_to_errno(CURLcode res) {
        switch (res) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST: return -ECONNREFUSED;
        case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
        case CURLE_OUT_OF_MEMORY: return -ENOMEM;
        case CURLE_WRITE_ERROR: return -EFBIG; /* our collector refused the body */
        default: return -EIO;
        }
}

int client_call_finish(const struct cli_client *c, struct client_call *call, CURLcode res,
                       struct cli_error *err, json_t **ret_json) {
        long status = client_call_status(call);

        if (res != CURLE_OK && status / 100 == 2) {
                int r = curl_to_errno(res);
                return cli_error_set(err, r, "request to %s failed: %s", c->base_url,
                                     call->errbuf[0] ? call->errbuf : curl_easy_strerror(res));
        }
        if (res != CURLE_OK && status == 0)
                return cli_error_set(err, curl_to_errno(res), "cannot reach airlockd at %s: %s", c->base_url,
                                     call->errbuf[0] ? call->errbuf : curl_easy_strerror(res));

        if (status / 100 != 2) {
                int r = status_to_errno(status);
                _cleanup_(json_decrefp) json_t *doc =
                        call->resp_len > 0 ? json_loadb(call->resp, call->resp_len, 0, NULL) : NULL;
                json_t *e = json_object_get(doc, "error");
                if (!json_is_object(e))
                        e = NULL;

                cli_error_set(err, r, "HTTP %ld", status);
                if (err) {
                        err->status = status;
                        if (e) {
                                const char *code = json_string_value(json_object_get(e, "code"));
                                const char *msg = json_string_value(json_object_get(e, "message"));
                                snprintf(err->code, sizeof(err->code), "%s", code ? code : "");
                                snprintf(err->message, sizeof(err->message), "%s", msg ? msg : "HTTP error");
                        }
                        if (status == 401 && c->token_problem) {
                                size_t n = strlen(err->message);
                                snprintf(err->message + n, sizeof(err->message) - n, "; %s",
                                         c->token_problem);
                        }
                }
                return r;
        }

        if (ret_json) {
                json_t *doc = NULL;
                if (call->resp_len > 0) {
                        json_error_t jerr;
                        doc = json_loadb(call->resp, call->resp_len, 0, &jerr);
                        if (!doc)
                                return cli_error_set(err, -EBADMSG, "malformed JSON from airlockd: %s",
                                                     jerr.text);
                }
                *ret_json = doc;
        }
        return 0;
}

int client_json(const struct cli_client *c, const char *method, const char *path, const json_t *body,
                struct cli_error *err, json_t **ret_json) {
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        int r = client_call_new(c, method, path, NULL, body, &call);
        if (r < 0)
                return cli_error_set(err, r, "failed to prepare the request: %m");
        CURLcode res = curl_easy_perform(call->easy);
        return client_call_finish(c, call, res, err, ret_json);
}

struct sse_follow {
        struct client_call *call;
        struct sse_parser *parser;
        int error;
};

static size_t sse_write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct sse_follow *f = userdata;
        size_t n = size * nmemb;
        if (client_call_status(f->call) != 200)
                return client_call_collect(f->call, data, n) < 0 ? 0 : n;
        int r = sse_parser_feed(f->parser, data, n);
        if (r < 0)
                f->error = r;
        return r < 0 ? 0 : n;
}

int client_sse(const struct cli_client *c, const char *path, int (*cb)(const struct sse_event *ev, void *userdata),
               void *userdata, struct client_call **ret_call, CURLcode *ret_res) {
        struct client_call *call = NULL;
        struct sse_follow f = { 0 };
        int r = client_call_new(c, "GET", path, NULL, NULL, &call);
        if (r >= 0)
                r = sse_parser_new(SSE_MAX_EVENT_DEFAULT, cb, userdata, &f.parser);
        struct curl_slist *h = r >= 0 ? curl_slist_append(call->headers, "Accept: text/event-stream") : NULL;
        if (!h) {
                sse_parser_free(f.parser);
                client_call_free(call);
                return r < 0 ? r : -ENOMEM;
        }
        call->headers = h;
        f.call = call;
        curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(call->easy, CURLOPT_WRITEFUNCTION, sse_write_cb);
        curl_easy_setopt(call->easy, CURLOPT_WRITEDATA, &f);
        *ret_res = curl_easy_perform(call->easy);
        sse_parser_free(f.parser);
        *ret_call = call;
        return f.error;
}
