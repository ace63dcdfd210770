/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock port SBX PORT [PATH]: a GET to a server in the sandbox through
 * its service port (GET /v1/sandboxes/{id}/ports/{port}/{path}); the body
 * streams to stdout as curl hands it over. --print-url prints the two ways to
 * reach the port (by path and by host name) instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builtin.h"
#include "cli-util.h"
#include "util.h"

struct port_out {
        struct client_call *call;
        int error; /* a write to stdout that failed */
};

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct port_out *o = userdata;
        size_t n = size * nmemb;
        /* a refusal (the API's, or the server's own status) is collected
         * for the message; only a 2xx body is the output */
        if (client_call_status(o->call) / 100 != 2)
                return client_call_collect(o->call, data, n) < 0 ? 0 : n;
        int r = fd_write_all(STDOUT_FILENO, data, n);
        if (r < 0) {
                o->error = r;
                return 0;
        }
        return n;
}

/* The port by host name: http://HOST:P -> http://PORT-SBX.HOST:P, with
 * 127.0.0.1 as localhost (every *.localhost is this machine). */
static void print_host_form(const char *base, unsigned port, const char *sbx, const char *path) {
        const char *sep = strstr(base, "://");
        const char *host = sep ? sep + 3 : base;
        size_t hlen = strcspn(host, ":/");
        bool loopback = (hlen == 9 && strncmp(host, "127.0.0.1", 9) == 0);
        printf("%.*s%u-%s.%.*s%s%s\n", (int) (host - base), base, port, sbx, (int) (loopback ? 9 : hlen),
               loopback ? "localhost" : host, host + hlen, path);
}

static int parse_port(const char *s, unsigned *ret) {
        uint64_t v;
        if (parse_u64(s, 65535, &v) < 0 || v == 0)
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

int cmd_port(struct cli *cli, int argc, char **argv) {
        bool url_only = false;
        for (int i = 1; i < argc; i++) /* (the one flag of its own, before the common parse) */
                if (strcmp(argv[i], "--print-url") == 0) {
                        url_only = true;
                        memmove(&argv[i], &argv[i + 1], (size_t) (argc - i) * sizeof *argv);
                        argc--;
                        break;
                }
        int r = cli_parse_plain(cli, argc, argv, 2, 3);
        if (r != CLI_PROCEED)
                return r;
        const char *sbx = argv[optind], *path = optind + 2 < argc ? argv[optind + 2] : "/";
        unsigned port;
        if (parse_port(argv[optind + 1], &port) < 0)
                return cli_usage_error(cli, "port: '%s' is not a port (1..65535)", argv[optind + 1]);
        if (path[0] != '/')
                return cli_usage_error(cli, "port: the path must start with '/' (got '%s')", path);
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        _cleanup_free_ char *api_path = NULL;
        if (asprintf(&api_path, "/v1/sandboxes/%s/ports/%u%s", sbx, port, path) < 0)
                return cli_fail("out of memory");
        if (url_only) {
                printf("%s%s\n", cli->client.base_url, api_path);
                print_host_form(cli->client.base_url, port, sbx, path);
                return CLI_EXIT_OK;
        }
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        r = client_call_new(&cli->client, "GET", api_path, NULL, NULL, &call);
        if (r < 0)
                return cli_fail("port: failed to prepare the request: %s", strerror(-r));
        struct curl_slist *h = curl_slist_append(call->headers, "Accept: */*");
        if (!h)
                return cli_fail("out of memory");
        call->headers = h;
        struct port_out o = { .call = call };
        curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(call->easy, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(call->easy, CURLOPT_WRITEDATA, &o);
        CURLcode res = curl_easy_perform(call->easy);
        if (o.error < 0)
                return cli_fail("port: failed to write the body: %s", strerror(-o.error));
        struct cli_error err = {};
        if (client_call_finish(&cli->client, call, res, &err, NULL) < 0)
                return cli_fail_error(&err, "port %s %u", sbx, port);
        return CLI_EXIT_OK;
}
