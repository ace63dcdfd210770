/* SPDX-License-Identifier: Apache-2.0 */
#include "gwclient.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "proto.h"
#include "unixsock.h"
#include "util.h"

#define GW_REPLY_MAX (1u << 20) /* a network log of 1000 entries fits */
#define GW_TIMEOUT_MS 2000 /* the gateway answers at once; a stuck one must not hold a create */
#define GW_TICK_MS 1000

static char *gw_socket;
static int (*gw_reattach_all)(void);
static pthread_mutex_t gw_lock = PTHREAD_MUTEX_INITIALIZER;
static char gw_boot_id[64]; /* of the gateway last seen (gw_lock) */

static void *tick_thread(void *userdata) {
        for (;;) {
                gwclient_tick();
                struct timespec ts = { GW_TICK_MS / 1000, (GW_TICK_MS % 1000) * 1000000L };
                nanosleep(&ts, NULL);
        }
        return NULL;
}

void gwclient_setup(const char *socket_path, int (*reattach_all)(void)) {
        free(gw_socket);
        gw_socket = socket_path && *socket_path ? strdup(socket_path) : NULL;
        gw_reattach_all = reattach_all;
        /* its own thread: a gateway that does not answer (restarting, or
         * given up) never holds the node's requests */
        pthread_t t;
        if (gw_socket && pthread_create(&t, NULL, tick_thread, NULL) == 0)
                (void) pthread_detach(t);
}

bool gwclient_enabled(void) {
        return gw_socket != NULL;
}

/* One request: req (stolen) with fds; the reply object on success. */
static int gw_call(json_t *req, const int *fds, size_t n_fds, json_t **ret_reply, char *err, size_t n) {
        _cleanup_(json_decrefp) json_t *q = req;
        err[0] = 0;
        if (!gw_socket)
                return -ENOTCONN;
        _cleanup_free_ char *text = q ? json_dumps(q, JSON_COMPACT) : NULL;
        if (!text)
                return -ENOMEM;
        _cleanup_close_ int fd = -EBADF;
        int r = unix_connect(gw_socket, GW_TIMEOUT_MS, &fd);
        if (r < 0)
                return r == -ENOENT || r == -ECONNREFUSED ? -ENOTCONN : r;
        r = mgr_send(fd, PROTO_GW_REQUEST, text, strlen(text), fds, n_fds);
        if (r < 0)
                return r;
        _cleanup_free_ char *reply = NULL;
        size_t len = 0, n_got = 0;
        int got[MGR_FDS_MAX];
        r = mgr_recv(fd, PROTO_GW_REPLY, GW_REPLY_MAX, &reply, &len, got, &n_got);
        for (size_t i = 0; i < n_got; i++)
                close(got[i]); /* the gateway passes none */
        if (r < 0)
                return r == -ECONNRESET ? -ENOTCONN : r;
        json_t *o = json_loadb(reply, len, 0, NULL);
        if (!json_is_object(o)) {
                json_decref(o);
                return -EBADMSG;
        }
        json_t *e = json_object_get(o, "error");
        if (e) {
                json_int_t no = json_integer_value(json_object_get(e, "errno"));
                snprintf(err, n, "%s", json_string_value(json_object_get(e, "message")) ?: "");
                json_decref(o);
                return no > 0 && no < 4096 ? (int) -no : -EPROTO;
        }
        if (!json_is_true(json_object_get(o, "ok"))) {
                json_decref(o);
                return -EBADMSG;
        }
        if (ret_reply)
                *ret_reply = o;
        else
                json_decref(o);
        return 0;
}

static int policy_object(const char *policy_json, json_t **ret) {
        json_t *p = json_loads(policy_json ? policy_json : "{\"mode\":\"allow-all\"}", 0, NULL);
        if (!json_is_object(p)) {
                json_decref(p);
                return -EINVAL;
        }
        *ret = p;
        return 0;
}

static int logged(int r, const char *what, const char *id, const char *err, const char *ctx) {
        if (r < 0 && r != -ENOTCONN)
                log_errno(LOG_LEVEL_ERROR, r, ctx, "the gateway refused %s of %s: %s: %m", what, id,
                          err[0] ? err : "no answer");
        return r;
}

int gwclient_attach(const char *sandbox_id, unsigned execution, const char *policy_json, int tcp_fd, int dns_fd,
                    const char *ctx) {
        json_t *p;
        char err[256] = "";
        int r = policy_object(policy_json, &p);
        if (r < 0)
                return r;
        int fds[2] = { tcp_fd, dns_fd };
        r = gw_call(json_pack("{sssssiso}", "op", "attach", "sandbox", sandbox_id, "execution", (json_int_t) execution,
                              "policy", p),
                    fds, 2, NULL, err, sizeof err);
        if (r == -ENOTCONN)
                log_emit(LOG_LEVEL_WARN, ctx, "no egress gateway answers on %s: the sandbox has no network until it does",
                         gw_socket ?: "(none configured)");
        return logged(r, "the attachment", sandbox_id, err, ctx);
}

int gwclient_set_policy(const char *sandbox_id, const char *policy_json, const char *ctx) {
        json_t *p;
        char err[256] = "";
        int r = policy_object(policy_json, &p);
        if (r < 0)
                return r;
        r = gw_call(json_pack("{sssssO}", "op", "policy", "sandbox", sandbox_id, "policy", p), NULL, 0, NULL, err,
                    sizeof err);
        json_decref(p);
        return logged(r, "the policy", sandbox_id, err, ctx);
}

int gwclient_detach(const char *sandbox_id, const char *ctx) {
        char err[256] = "";
        int r = gw_call(json_pack("{ssss}", "op", "detach", "sandbox", sandbox_id), NULL, 0, NULL, err, sizeof err);
        return r == -ENOENT ? 0 : logged(r, "the detachment", sandbox_id, err, ctx);
}

int gwclient_forget(const char *sandbox_id, const char *ctx) {
        char err[256] = "";
        int r = gw_call(json_pack("{ssss}", "op", "forget", "sandbox", sandbox_id), NULL, 0, NULL, err, sizeof err);
        return logged(r, "forgetting", sandbox_id, err, ctx);
}

int gwclient_log(const char *sandbox_id, unsigned limit, json_t **ret_entries, const char *ctx) {
        char err[256] = "";
        json_t *reply = NULL;
        int r = gw_call(json_pack("{sssssi}", "op", "log", "sandbox", sandbox_id, "limit", (json_int_t) limit), NULL, 0,
                        &reply, err, sizeof err);
        if (r < 0)
                return logged(r, "the log", sandbox_id, err, ctx);
        json_t *e = json_object_get(reply, "entries");
        if (!json_is_array(e)) {
                json_decref(reply);
                return -EBADMSG;
        }
        *ret_entries = json_incref(e);
        json_decref(reply);
        return 0;
}

int gwclient_set_secrets(const char *sandbox_id, const char *secrets_json, const char *ctx) {
        json_t *a = json_loads(secrets_json ? secrets_json : "[]", 0, NULL);
        if (!json_is_array(a)) {
                json_decref(a);
                return -EINVAL;
        }
        char err[256] = "";
        int r = gw_call(json_pack("{ss ss so}", "op", "secrets", "sandbox", sandbox_id, "secrets", a), NULL, 0, NULL, err,
                        sizeof err);
        return logged(r, "the credentials", sandbox_id, err, ctx);
}

int gwclient_audit_read(uint64_t after, unsigned limit, json_t **ret_reply, const char *ctx) {
        char err[256] = "";
        json_t *reply = NULL;
        int r = gw_call(json_pack("{sssIsi}", "op", "audit", "after", (json_int_t) after, "limit", (json_int_t) limit),
                        NULL, 0, &reply, err, sizeof err);
        if (r < 0)
                return logged(r, "the audit read", "the node", err, ctx);
        if (!json_is_array(json_object_get(reply, "events"))) {
                json_decref(reply);
                return -EBADMSG;
        }
        json_object_del(reply, "ok");
        *ret_reply = reply;
        return 0;
}

void gwclient_tick(void) {
        if (!gw_socket)
                return;
        char err[256] = "";
        json_t *reply = NULL;
        if (gw_call(json_pack("{ss}", "op", "hello"), NULL, 0, &reply, err, sizeof err) < 0)
                return; /* not up (yet): the next tick asks again */
        const char *boot = json_string_value(json_object_get(reply, "boot_id")) ?: "";
        pthread_mutex_lock(&gw_lock);
        bool changed = strcmp(boot, gw_boot_id) != 0;
        bool first = gw_boot_id[0] == 0;
        snprintf(gw_boot_id, sizeof gw_boot_id, "%s", boot);
        pthread_mutex_unlock(&gw_lock);
        json_decref(reply);
        /* a gateway that (re)started knows no sandbox: hand it all again
         * (the first one seen may have met the node's attachments already;
         * attaching again replaces them and costs nothing) */
        if (changed && gw_reattach_all) {
                if (!first)
                        log_warn("the egress gateway restarted (boot %s): attaching every sandbox again", boot);
                (void) gw_reattach_all();
        }
}
