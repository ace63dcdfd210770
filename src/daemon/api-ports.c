/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Service ports (docs/network.md): a request of the sandbox's owner to a
 * server in the guest, by path (/v1/sandboxes/ID/ports/PORT/...) or by host
 * name (PORT-ID.DOMAIN). airlockd authenticates it like any API request,
 * then hands the node the request with a capability for exactly that
 * sandbox, execution, port and protocol, which the node checks again
 * before it connects (src/node/portproxy.c).
 */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "log.h"
#include "macros.h"
#include "util.h"

#define PORT_PREFIX "/v1/sandboxes/"

static int parse_port(const char *s, size_t n, unsigned *ret) {
        if (n == 0 || n > 5 || strspn(s, "0123456789") < n)
                return -EINVAL;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++)
                v = v * 10 + (unsigned) (s[i] - '0');
        if (v == 0 || v > 65535 || (n > 1 && s[0] == '0'))
                return -EINVAL;
        *ret = v;
        return 0;
}

static bool id_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int api_port_target(const char *raw_uri, const char *host, char *id, size_t id_size, unsigned *ret_port,
                    const char **ret_target, char *err, size_t err_size) {
        if (!raw_uri || raw_uri[0] != '/')
                return 0;
        size_t pre = strlen(PORT_PREFIX);
        if (strncmp(raw_uri, PORT_PREFIX, pre) == 0) {
                const char *s = raw_uri + pre;
                size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_");
                if (n == 0 || n >= id_size || strncmp(s + n, "/ports/", 7) != 0)
                        return 0;
                const char *p = s + n + 7;
                size_t k = strcspn(p, "/?");
                if (parse_port(p, k, ret_port) < 0) {
                        snprintf(err, err_size, "'%.*s' is not a port (1..65535)", (int) MIN(k, (size_t) 16), p);
                        return -EINVAL;
                }
                memcpy(id, s, n);
                id[n] = '\0';
                /* "/ports/8000" is the server's "/"; "/ports/8000?q" leaves
                 * "?q", which api_port_begin() makes "/?q" */
                *ret_target = p[k] ? p + k : "/";
                return 1;
        }
        if (!host)
                return 0;
        /* the first label: PORT-ID */
        size_t label = strcspn(host, ".:");
        size_t k = strspn(host, "0123456789");
        if (k == 0 || k >= label || host[k] != '-' || host[label] != '.')
                return 0;
        size_t n = label - k - 1;
        if (n == 0 || n >= id_size)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (!id_char(host[k + 1 + i]))
                        return 0;
        if (parse_port(host, k, ret_port) < 0) {
                snprintf(err, err_size, "'%.*s' is not a port (1..65535)", (int) MIN(k, (size_t) 16), host);
                return -EINVAL;
        }
        memcpy(id, host + k + 1, n);
        id[n] = '\0';
        *ret_target = raw_uri;
        return 1;
}

int api_port_begin(struct api_ctx *ctx, const char *id, unsigned port, const char *method, const char *target,
                   json_t *headers, int64_t length, struct node_conn **ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        /* a "?" right after "/ports/N" leaves the target "?...": the server's "/?..." */
        _cleanup_free_ char *fixed = target[0] == '?' ? strdup_printf("/%s", target) : NULL;
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:i, s:s, s:s, s:O, s:I}", "op", "port.http", "id", id, "port", (int) port,
                          "method", method, "target", fixed ? fixed : target, "headers", headers, "length",
                          (json_int_t) length);
        if (!req)
                return -ENOMEM;
        return dataplane_open_port(ctx->config, sb.tenant_id, id, (uint16_t) port, req, ret, ctx->err);
}

int api_port_reply(struct api_ctx *ctx, struct node_conn *c, unsigned *ret_status, json_t **ret_rep) {
        /* a failed send usually means the node answered already (and hung up) */
        (void) node_conn_send_end(c, false);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = node_conn_read_reply(c, &rep, ctx->err);
        if (r < 0)
                return r;
        json_t *st = json_object_get(rep, "status");
        json_int_t status = json_integer_value(st);
        if (!json_is_integer(st) || status < 200 || status > 599) {
                snprintf(ctx->err, sizeof ctx->err, "the node agent sent no response status");
                return -EIO;
        }
        *ret_status = (unsigned) status;
        if (ret_rep)
                *ret_rep = TAKE_PTR(rep);
        return 0;
}

int api_port_finish(struct api_ctx *ctx, struct node_conn **c, struct api_reply *ret) {
        _cleanup_(json_decrefp) json_t *rep = NULL;
        unsigned status;
        int r = api_port_reply(ctx, *c, &status, &rep);
        if (r < 0)
                return r;
        json_t *len = json_object_get(rep, "length");
        uint64_t size = json_is_integer(len) && json_integer_value(len) >= 0 ? (uint64_t) json_integer_value(len)
                                                                            : MHD_SIZE_UNKNOWN;
        struct MHD_Response *resp = api_stream_response(c, size, ctx->log_ctx);
        if (!resp)
                return -ENOMEM;
        size_t i;
        json_t *h;
        json_array_foreach(json_object_get(rep, "headers"), i, h) {
                const char *name = json_string_value(json_array_get(h, 0));
                const char *value = json_string_value(json_array_get(h, 1));
                /* MHD refuses what it frames itself, and names or values
                 * with CR or LF (the node sends none) */
                if (name && value)
                        (void) MHD_add_response_header(resp, name, value);
        }
        *ret = (struct api_reply){.status = status, .response = resp};
        return 0;
}
