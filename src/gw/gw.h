/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * airlock-gw's shared state (docs/network.md): the sandboxes it serves,
 * each with its sockets (made in the VM's namespace by airlock-nodemgr and
 * handed over by the node), its policy, the names the gateway resolved for
 * it and its network log. One thread, one event loop (loop.h).
 *
 * No globals: main.c owns one struct gw (the configuration, the loop, the
 * sandboxes) and hands it down; every sandbox points back to it. Calls go
 * one way, top to bottom:
 *   main.c        environment, start-up, signals
 *   control.c     the node's requests
 *   attach.c      the registry: attach (wires the sockets into the loop),
 *                 policy, detach
 *   relay.c       the guest's TCP connections; decides by lib/netpolicy
 *   dns.c tlsterm.c   the guest's resolver; terminated TLS (ca.c)
 *   sandbox.c     one sandbox: references, bindings, log, bandwidth
 *   state.c       its bindings and log on disk
 *   rings.c       its bindings and log in memory
 * with secrets.c, loop.c and the parsers (gwname.c, dnsmsg.c, tlshello.c,
 * http1.c, h2front.c) below. The loop calls relay.c and dns.c back for the
 * sockets attach.c registers: callbacks a file above hands down, never a
 * call up.
 */

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "credset.h"
#include "loop.h"
#include "netpolicy.h"

#define GW_ID_MAX 64
#define GW_LOG_MAX 1000             /* entries kept per sandbox */
#define GW_BINDINGS_MAX 4096        /* (name, address) pairs remembered per sandbox */
#define GW_BINDING_MIN_TTL_S 300    /* a short TTL does not end a binding before this */
#define GW_CONNS_MAX 512            /* open TCP connections per sandbox */
#define GW_DNS_QPS 200              /* DNS queries per second per sandbox (burst twice that) */
#define GW_DNS_PENDING_MAX 64       /* upstream queries in flight per sandbox */

struct gw_config {
        struct sockaddr_in dns_upstream; /* AIRLOCK_DNS_UPSTREAM, default the host's first resolver */
        struct netpolicy_platform platform; /* the deny set, with the operator's opens (AIRLOCK_NETWORK_OPEN) */
        uint64_t bandwidth; /* AIRLOCK_EGRESS_BANDWIDTH: bytes a second per sandbox and direction; 0: no limit */
};

/* A sandbox's bandwidth in one direction (sandbox.c): a token bucket of
 * gw_config.bandwidth bytes a second, a quarter second deep. */
struct gw_bucket {
        double tokens;
        uint64_t at_ms;
};

struct gw_binding {
        char name[254];
        struct in_addr addr;
        uint64_t expires_ms;
};

struct gw_log_entry {
        uint64_t ts_ms; /* wall clock */
        bool dns;
        bool allowed;
        char name[254];  /* "" when none */
        struct in_addr addr; /* 0 when none */
        uint16_t port;
        char reason[96];
};

#define GW_SECRETS_MAX CREDSET_MAX /* credentials per sandbox (lib/credset's limits throughout) */

/* A credential the sandbox may use (secrets.c): its value goes into
 * requests to its hosts as header: header_value, replacing the guest's. */
struct gw_secret {
        char name[65];
        char placeholder[64]; /* what the guest holds instead of the value */
        char *value;          /* wiped when freed */
        size_t value_len;
        char *encoded;        /* basic auth: base64 of user:value, also redacted from responses */
        char header[CREDSET_HEADER_NAME_MAX + 1];
        char *header_value;
        struct {
                char name[254]; /* canonical; "*.x" is stored as x with wildcard */
                bool wildcard;
        } hosts[CREDSET_HOSTS_MAX];
        size_t n_hosts;
        uint16_t ports[CREDSET_PORTS_MAX];
        size_t n_ports;
        char methods[CREDSET_METHODS_MAX][CREDSET_METHOD_MAX + 1];
        size_t n_methods;
        char paths[CREDSET_PATHS_MAX][CREDSET_PATH_MAX + 1];
        size_t n_paths;
        uint64_t expires_at_ms; /* wall clock; 0: never */
        unsigned rate_per_min;  /* 0: unlimited */
        double tokens;
        uint64_t tokens_at_ms;
};

/* What an audit event records: a credential put into a request or
 * refused (the credential audit log), or a connection or query the policy
 * denied (a sandbox.policy_denied event for webhooks). */
enum gw_audit_action {
        GW_AUDIT_INJECTED,
        GW_AUDIT_REFUSED,
        GW_AUDIT_DENIED,
};

struct gw_audit_event {
        uint64_t seq, ts_ms;
        char sandbox[GW_ID_MAX + 1];
        char secret[65];
        char host[254];
        uint16_t port;
        char method[16];
        char path[256];
        enum gw_audit_action action;
        unsigned suppressed; /* DENIED: denials of the sandbox not recorded since the last one */
        char reason[96];
};

/* A sandbox's denials become audit events at most this often; those in
 * between are counted into the next one's "suppressed". */
#define GW_DENIED_EVERY_MS 1000

/* A sandbox's open connections, relayed (struct conn, relay.c) or
 * terminated (struct term, tlsterm.c): lists linked through prev and next,
 * newest first. */
#define GW_LIST_PUSH(head, item)                \
        do {                                    \
                (item)->prev = NULL;            \
                (item)->next = (head);          \
                if (head)                       \
                        (head)->prev = (item);  \
                (head) = (item);                \
        } while (0)
#define GW_LIST_UNLINK(head, item)                              \
        do {                                                    \
                if ((item)->prev)                               \
                        (item)->prev->next = (item)->next;      \
                else                                            \
                        (head) = (item)->next;                  \
                if ((item)->next)                               \
                        (item)->next->prev = (item)->prev;      \
        } while (0)

/* The gateway: main.c's, alive until it exits. */
struct gw {
        struct gw_config config; /* set at start-up, read-only while serving */
        struct loop *loop;
        struct gw_sandbox *sandboxes; /* the attached ones (attach.c) */
};

struct conn;
struct term;

struct gw_sandbox {
        struct gw *gw; /* the gateway serving it */
        char id[GW_ID_MAX + 1];
        unsigned execution;
        unsigned refs; /* the registry's, and one per connection or query */
        bool detached;
        struct netpolicy *policy;
        int tcp_fd, dns_fd;
        struct loop_watch *tcp_watch, *dns_watch;
        unsigned n_conns, n_pending;
        struct conn *conns; /* open TCP connections (relay.c): they end with the attachment */
        struct term *terms; /* the terminated TLS ones (tlsterm.c) */
        struct gw_bucket up, down; /* guest -> internet, and back */
        double dns_tokens;
        uint64_t dns_tokens_at;
        struct gw_binding *bindings; /* a ring of GW_BINDINGS_MAX */
        size_t n_bindings, next_binding;
        struct gw_log_entry *log; /* a ring of GW_LOG_MAX */
        size_t n_log, next_log;
        int state_fd;       /* its journal (state.c), or -1 */
        size_t state_lines; /* in the journal */
        struct gw_secret *secrets;
        size_t n_secrets;
        uint64_t denied_at_ms;      /* its last denial recorded as an audit event */
        unsigned denied_suppressed; /* denials since, not recorded */
        struct gw_sandbox *next;
};

/* Makes the close of a TCP socket a reset (SO_LINGER 0), so the guest
 * sees a refusal at once. */
static inline void gw_socket_reset_on_close(int fd) {
        struct linger l = { 1, 0 };
        (void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

/* An IPv4 address as lib/netpolicy takes addresses (IPv4-mapped). */
static inline struct in6_addr gw_addr_v4(struct in_addr a) {
        struct in6_addr m = { .s6_addr = { [10] = 0xff, [11] = 0xff } };
        memcpy(&m.s6_addr[12], &a, 4);
        return m;
}

/* ---- attach.c: the registry ---- */
struct gw_sandbox *gw_sandbox_find(struct gw *gw, const char *id);
size_t gw_sandbox_count(const struct gw *gw);
/* Replaces an attachment of the same id (its connections end). Takes the fds. */
int gw_sandbox_attach(struct gw *gw, const char *id, unsigned execution, struct netpolicy *policy, int tcp_fd,
                      int dns_fd);
void gw_sandbox_set_policy(struct gw_sandbox *s, struct netpolicy *policy);
void gw_sandbox_detach(struct gw_sandbox *s);

/* ---- sandbox.c: one sandbox ---- */
void gw_sandbox_ref(struct gw_sandbox *s);
/* A connection (relayed or terminated) begins and ends: it holds a
 * reference and counts against GW_CONNS_MAX. */
void gw_sandbox_conn_open(struct gw_sandbox *s);
void gw_sandbox_conn_close(struct gw_sandbox *s);
/* The last reference frees it (its journal closed, its policy and credentials freed). */
void gw_sandbox_unref(struct gw_sandbox *s);
void gw_sandbox_bind(struct gw_sandbox *s, const char *name, struct in_addr addr, uint32_t ttl_s);
bool gw_sandbox_bound(struct gw_sandbox *s, const char *name, struct in_addr addr);
void gw_sandbox_log(struct gw_sandbox *s, bool dns, bool allowed, const char *name, struct in_addr addr,
                    uint16_t port, const char *reason);
/* How many of want bytes may be read now in that direction (up: from the
 * guest), and taking what was read; ms until some may be read again. */
size_t gw_bandwidth_allow(struct gw_sandbox *s, bool up, size_t want);
void gw_bandwidth_take(struct gw_sandbox *s, bool up, size_t n);
uint64_t gw_bandwidth_wait_ms(struct gw_sandbox *s, bool up);
/* Whether that side may be read now; if not, and *timer is free, arms it
 * to call fn(userdata) when the bandwidth allows (its callback clears
 * *timer and looks again). */
bool gw_bandwidth_may_read(struct gw_sandbox *s, bool up, struct loop_timer **timer, loop_timer_fn fn, void *userdata);

/* ---- rings.c: a sandbox's bindings and log in memory ---- */
/* The binding of (name, addr), made (the oldest gives way) or lengthened
 * to expires_ms (loop time); NULL when it already lasted as long. */
struct gw_binding *gw_binding_put(struct gw_sandbox *s, const char *name, struct in_addr addr, uint64_t expires_ms);
/* Appends an entry to the log (the oldest gives way); name and reason
 * NULL: "". Returns the entry as stored. */
const struct gw_log_entry *gw_log_push(struct gw_sandbox *s, uint64_t ts_ms, bool dns, bool allowed, const char *name,
                                       struct in_addr addr, uint16_t port, const char *reason);

/* ---- state.c: a sandbox's bindings and log on disk, for the next gateway ---- */
/* The journals' directory (AIRLOCK_GW_STATE_DIR); NULL or "": none kept. */
int gw_state_init(const char *dir);
/* At attach: reads the sandbox's journal back (the log, and the bindings
 * of its execution), then goes on appending to a fresh one. */
void gw_state_open(struct gw_sandbox *s);
void gw_state_close(struct gw_sandbox *s);
void gw_state_binding(struct gw_sandbox *s, const struct gw_binding *b);
void gw_state_log(struct gw_sandbox *s, const struct gw_log_entry *e);
/* The sandbox is gone for good (deleted): its journal too. */
void gw_state_forget(const char *id);

/* ---- dns.c: the guest's resolver ---- */
void gw_dns_readable(int fd, uint32_t events, void *userdata);
/* A query that came over TCP (to the gateway's port 53; msg without its
 * length prefix); takes fd, answers on it and closes it. */
void gw_dns_tcp(struct gw_sandbox *s, int fd, const uint8_t *msg, size_t len);

/* ---- relay.c: the guest's TCP connections ---- */
void gw_relay_accept(int fd, uint32_t events, void *userdata);
/* Ends every connection of s (its VM is gone, or replaced). */
void gw_relay_close_all(struct gw_sandbox *s);
/* Once, at start-up. */
int gw_relay_init(void);

/* ---- tlsterm.c: terminated TLS ---- */
struct sockaddr_in;
/* Makes or loads the egress CA (ca_dir) and the TLS contexts; the
 * upstream's are verified with the system's trust store and the PEM
 * certificates read from upstream_ca_fd (-1: none). */
int gw_tlsterm_init(const char *ca_dir, int upstream_ca_fd);
/* Takes the guest's connection g_fd to dst over, for name, with the
 * ClientHello bytes already read from it. */
int gw_tlsterm_start(struct gw_sandbox *sb, int g_fd, const struct sockaddr_in *dst, const char *name,
                     const uint8_t *hello, size_t hello_len);
void gw_tlsterm_close_all(struct gw_sandbox *s);

/* ---- secrets.c: credentials and their audit ---- */
#include <jansson.h>
int gw_secrets_parse(json_t *a, struct gw_secret **ret, size_t *ret_n, char *msg, size_t n);
void gw_secrets_free(struct gw_secret *v, size_t n);
bool gw_secret_binds(const struct gw_secret *s, const char *host, uint16_t port);
/* Whether a credential is bound to some host on port. */
bool gw_secrets_on_port(const struct gw_sandbox *sb, uint16_t port);
/* Whether a credential is bound to host:port (the connection is terminated for it). */
bool gw_secrets_for_host(const struct gw_sandbox *sb, const char *host, uint16_t port);
/* Whether a credential bound to host:port is scoped to paths: its
 * requests' paths are decided on, and forwarded, canonical. */
bool gw_secrets_path_scoped(const struct gw_sandbox *sb, const char *host, uint16_t port);
/* The credential for this request, or NULL (*ret_refusal says why when
 * one was bound to the host but may not be used: audited). */
struct gw_secret *gw_secrets_pick(struct gw_sandbox *sb, const char *host, uint16_t port, const char *method,
                                  const char *path, const char **ret_refusal);
void gw_audit(const struct gw_sandbox *sb, const struct gw_secret *s, const char *host, uint16_t port,
              const char *method, const char *path, bool injected, const char *reason);
/* Records a denial (host: the name, else the address) as an audit event,
 * at most one per GW_DENIED_EVERY_MS of the sandbox. */
void gw_audit_denied(struct gw_sandbox *sb, const char *host, uint16_t port, const char *reason);
/* {"events": [...], "next": N}: the events after seq `after`. */
json_t *gw_audit_read(uint64_t after, size_t limit);

/* ---- control.c: the node's requests ---- */
/* Serves the node's requests on listen_fd from gw's loop. */
int gw_control_start(struct gw *gw, int listen_fd, uid_t peer_uid);
