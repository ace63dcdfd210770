/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * HTTP client for the airlockd public API, on libcurl. It knows the base URL
 * and the bearer token, builds requests, collects (bounded) response bodies
 * and turns failures into a negative errno plus a one-line message for the
 * user. The token never appears in any message.
 *
 * A request is a `struct client_call`: create it, optionally replace its
 * write/read callbacks to stream, run it (curl_easy_perform or a multi
 * handle), then hand the CURLcode to client_call_finish().
 */

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "macros.h"

#define CLIENT_DEFAULT_URL "http://127.0.0.1:7420"
#define CLIENT_DEFAULT_DATA_DIR "/var/lib/airlock"
/* The largest JSON body we accept: /exec returns output inline, which the
 * server truncates well below this. */
#define CLIENT_MAX_RESPONSE (64u * 1024u * 1024u)
#define CLIENT_MAX_TOKEN 4096u

struct cli_client {
        char *base_url;      /* no trailing '/' */
        char *token;         /* NULL when none was found */
        char *token_problem; /* why there is no token, shown on 401 */
};

/* What went wrong, for the user. status is the HTTP status, 0 for transport
 * failures and local errors. */
struct cli_error {
        long status;
        char code[64];
        char message[512];
};

/* Resolves the settings: url (NULL: AIRLOCK_URL, then the default), token
 * (NULL: AIRLOCK_TOKEN, then <data_dir>/admin.token, where data_dir NULL
 * means AIRLOCK_DATA_DIR, then the default). A missing token file is not an
 * error (health needs none); an unusable URL or a malformed token is. */
int client_init(struct cli_client *c, const char *url, const char *token, const char *data_dir,
                struct cli_error *err);
void client_done(struct cli_client *c);

struct client_call {
        CURL *easy;
        struct curl_slist *headers;
        char *body; /* request body, kept alive for curl */
        char *resp; /* collected response body, NUL-terminated */
        size_t resp_len, resp_cap, resp_max;
        char errbuf[CURL_ERROR_SIZE];
};

/* Prepares METHOD base_url+path (path starts with '/', already escaped).
 * bearer overrides the client's token (session attach tokens); body, if not
 * NULL, is sent as JSON. The response is collected up to CLIENT_MAX_RESPONSE. */
int client_call_new(const struct cli_client *c, const char *method, const char *path, const char *bearer,
                    const json_t *body, struct client_call **ret);
struct client_call *client_call_free(struct client_call *call);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct client_call *, client_call_free);

/* Sets header name (e.g. "Accept") to value, replacing the one it had. */
int client_call_header(struct client_call *call, const char *name, const char *value);
/* Appends to the collected response (for streaming callbacks that got an
 * error status and want its message). -EFBIG past resp_max. */
int client_call_collect(struct client_call *call, const void *data, size_t n);
/* The HTTP status received so far, 0 before the headers. */
long client_call_status(struct client_call *call);

/* Interprets a finished call: 0 for a 2xx answer, with *ret_json (may be
 * NULL) set to the parsed body or NULL when it was empty; otherwise a
 * negative errno and *err filled from the curl error or the API's
 * {"error":{...}} body. */
int client_call_finish(const struct cli_client *c, struct client_call *call, CURLcode res,
                       struct cli_error *err, json_t **ret_json);

/* GET path as Server-Sent Events, each event to cb until the server ends
 * the stream or cb (or the parser: -EMSGSIZE) returns < 0. Returns that
 * negative value, or 0; *ret_call and *ret_res are for client_call_finish()
 * (a status other than 200 collects the body: the API's error). */
struct sse_event;
int client_sse(const struct cli_client *c, const char *path, int (*cb)(const struct sse_event *ev, void *userdata),
               void *userdata, struct client_call **ret_call, CURLcode *ret_res);

/* One JSON request, start to end. */
int client_json(const struct cli_client *c, const char *method, const char *path, const json_t *body,
                struct cli_error *err, json_t **ret_json);

/* Fills err with a local error ("%m"-style text for r plus context). Returns r. */
int cli_error_set(struct cli_error *err, int r, const char *fmt, ...) _printf_(3, 4);
