/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's requests (src/node/gwclient.h): one per connection, lib/mgr
 * framing, from the node's uid only (SO_PEERCRED). Small and local, so
 * they are served right in the loop, with short socket timeouts.
 *
 *   hello                               -> {"boot_id"}
 *   attach {sandbox, execution, policy} + fds [TCP listener, DNS socket]
 *   policy {sandbox, policy}
 *   detach {sandbox}
 *   forget {sandbox}: detached, and its journal (state.c) removed
 *   log    {sandbox, limit}             -> {"entries": [...]}
 *   secrets {sandbox, secrets: [...]}   (secrets.c; replaces the sandbox's)
 *   audit  {after, limit}               -> {"boot_id", "events": [...], "next"}
 */
#include "gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "proto.h"

#define CONTROL_TIMEOUT_MS 2000
#define CONTROL_REQUEST_MAX (512u << 10) /* 16 credentials of 8 KiB fit */
#define AUDIT_READ_MAX 1000
#define LOG_LIMIT_MAX GW_LOG_MAX

static uid_t control_peer_uid;
static char boot_id[33];

static int bad(char *msg, size_t n, const char *what) {
        snprintf(msg, n, "%s", what);
        return -EINVAL;
}

static int get_policy(json_t *req, struct netpolicy **ret, char *msg, size_t n) {
        json_t *p = json_object_get(req, "policy");
        if (!json_is_object(p))
                return bad(msg, n, "policy must be an object");
        int r = netpolicy_parse(p, "policy", ret, msg, n);
        if (r == 0) { /* {}: nothing given */
                *ret = NULL;
                return bad(msg, n, "policy is empty");
        }
        return r < 0 ? r : 0;
}

static json_t *log_entries(const struct gw_sandbox *s, size_t limit) {
        json_t *a = json_array();
        size_t n = MIN(limit, s->n_log);
        /* oldest first: the last n of the ring */
        size_t first = (s->next_log + GW_LOG_MAX - n) % GW_LOG_MAX;
        for (size_t i = 0; a && i < n; i++) {
                const struct gw_log_entry *e = &s->log[(first + i) % GW_LOG_MAX];
                json_t *o = json_pack("{sIssssss}", "ts_ms", (json_int_t) e->ts_ms, "kind", e->dns ? "dns" : "tcp",
                                      "action", e->allowed ? "allow" : "deny", "reason", e->reason);
                if (!o)
                        continue;
                if (e->name[0])
                        json_object_set_new(o, "name", json_string(e->name));
                if (e->addr.s_addr) {
                        char b[INET_ADDRSTRLEN];
                        inet_ntop(AF_INET, &e->addr, b, sizeof b);
                        json_object_set_new(o, "addr", json_string(b));
                }
                if (e->port)
                        json_object_set_new(o, "port", json_integer(e->port));
                json_array_append_new(a, o);
        }
        return a;
}

static int serve(struct gw *gw, json_t *req, int *fds, size_t n_fds, json_t **ret_extra, char *msg, size_t n) {
        const char *op = json_string_value(json_object_get(req, "op"));
        if (!op)
                return bad(msg, n, "op missing");
        if (strcmp(op, "hello") == 0) {
                *ret_extra = json_pack("{sssi}", "boot_id", boot_id, "sandboxes", (json_int_t) gw_sandbox_count(gw));
                return 0;
        }
        if (strcmp(op, "audit") == 0) {
                json_t *a = json_object_get(req, "after"), *l = json_object_get(req, "limit");
                if (!json_is_integer(a) || json_integer_value(a) < 0 || !json_is_integer(l) ||
                    json_integer_value(l) < 1 || json_integer_value(l) > AUDIT_READ_MAX)
                        return bad(msg, n, "after and limit (1..1000) must be numbers");
                *ret_extra = gw_audit_read((uint64_t) json_integer_value(a), (size_t) json_integer_value(l));
                if (*ret_extra)
                        json_object_set_new(*ret_extra, "boot_id", json_string(boot_id));
                return *ret_extra ? 0 : -ENOMEM;
        }
        const char *id = json_string_value(json_object_get(req, "sandbox"));
        if (!id || !*id || strlen(id) > GW_ID_MAX)
                return bad(msg, n, "sandbox missing or too long");
        struct gw_sandbox *s = gw_sandbox_find(gw, id);
        if (strcmp(op, "forget") == 0) { /* deleted: its attachment and its journal go */
                if (s)
                        gw_sandbox_detach(s);
                gw_state_forget(id);
                return 0;
        }
        if (strcmp(op, "attach") == 0) {
                json_t *e = json_object_get(req, "execution");
                if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > UINT32_MAX)
                        return bad(msg, n, "execution must be a number");
                if (n_fds != 2)
                        return bad(msg, n, "attach takes 2 fds");
                struct netpolicy *p;
                int r = get_policy(req, &p, msg, n);
                if (r < 0)
                        return r;
                r = gw_sandbox_attach(gw, id, (unsigned) json_integer_value(e), p, fds[0], fds[1]);
                if (r < 0) {
                        netpolicy_free(p);
                        snprintf(msg, n, "cannot attach: %s", strerror(-r));
                        return r;
                }
                fds[0] = fds[1] = -1; /* the sandbox's now */
                return 0;
        }
        if (!s) {
                snprintf(msg, n, "no sandbox %s", id);
                return -ENOENT;
        }
        if (strcmp(op, "policy") == 0) {
                struct netpolicy *p;
                int r = get_policy(req, &p, msg, n);
                if (r < 0)
                        return r;
                gw_sandbox_set_policy(s, p);
                return 0;
        }
        if (strcmp(op, "secrets") == 0) {
                struct gw_secret *v;
                size_t count;
                int r = gw_secrets_parse(json_object_get(req, "secrets"), &v, &count, msg, n);
                if (r < 0)
                        return r;
                gw_secrets_free(s->secrets, s->n_secrets);
                s->secrets = v;
                s->n_secrets = count;
                return 0;
        }
        if (strcmp(op, "detach") == 0) {
                gw_sandbox_detach(s);
                return 0;
        }
        if (strcmp(op, "log") == 0) {
                json_t *l = json_object_get(req, "limit");
                json_int_t limit = json_is_integer(l) ? json_integer_value(l) : 100;
                if (limit < 1 || limit > LOG_LIMIT_MAX)
                        return bad(msg, n, "limit out of range");
                *ret_extra = json_pack("{so}", "entries", log_entries(s, (size_t) limit));
                return 0;
        }
        return bad(msg, n, "unknown op");
}

static void control_readable(int lfd, uint32_t events, void *userdata) {
        _cleanup_close_ int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
            (cred.uid != control_peer_uid && cred.uid != 0)) {
                log_warn("refusing a request from pid %d uid %u: only the node (uid %u) may ask", (int) cred.pid,
                         (unsigned) cred.uid, (unsigned) control_peer_uid);
                return;
        }
        struct timeval tv = { CONTROL_TIMEOUT_MS / 1000, (CONTROL_TIMEOUT_MS % 1000) * 1000 };
        (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        _cleanup_free_ char *text = NULL;
        size_t n = 0, n_fds = 0;
        int fds[MGR_FDS_MAX];
        if (mgr_recv(fd, PROTO_GW_REQUEST, CONTROL_REQUEST_MAX, &text, &n, fds, &n_fds) < 0)
                return;
        char msg[NETPOLICY_ERR_MAX + 64] = "";
        json_t *extra = NULL;
        json_t *req = json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL);
        int r = json_is_object(req) ? serve(userdata, req, fds, n_fds, &extra, msg, sizeof msg) : bad(msg, sizeof msg, "not JSON");
        json_decref(req);
        for (size_t i = 0; i < n_fds; i++)
                safe_close(fds[i]);
        json_t *o = r < 0 ? json_pack("{s{siss}}", "error", "errno", -r, "message", msg) : json_pack("{sb}", "ok", 1);
        if (o && extra)
                json_object_update(o, extra);
        json_decref(extra);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
                (void) mgr_send(fd, PROTO_GW_REPLY, s, strlen(s), NULL, 0);
        free(s);
        json_decref(o);
}

int gw_control_start(struct gw *gw, int listen_fd, uid_t peer_uid) {
        control_peer_uid = peer_uid;
        uint8_t b[16];
        if (getrandom(b, sizeof b, 0) != sizeof b)
                return -EIO;
        for (size_t i = 0; i < sizeof b; i++)
                snprintf(boot_id + 2 * i, 3, "%02x", b[i]);
        return loop_watch_add(gw->loop, listen_fd, EPOLLIN, control_readable, gw, NULL);
}
