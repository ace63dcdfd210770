/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-gw, the egress gateway (docs/network.md). airlock-nodemgr starts
 * it as its own unprivileged user, with no capabilities, in the host's
 * network namespace (or AIRLOCK_EGRESS_NETNS's), and hands it its listening
 * socket; everything privileged (taps, rules, sockets inside a VM's
 * namespace) is done by airlock-nodemgr and reaches it as fds through the
 * node.
 *
 * Environment:
 *   AIRLOCK_GW_LISTEN_FD   the listening Unix socket of the node's requests
 *   AIRLOCK_GW_PEER_UID    the node's uid, the only one served
 *   AIRLOCK_DNS_UPSTREAM   the resolver (ADDR[:PORT]); default: the first
 *                          IPv4 nameserver of /etc/resolv.conf
 *   AIRLOCK_NETWORK_OPEN   ranges of the platform deny set the operator
 *                          opens ("10.1.0.0/16,203.0.113.0/24")
 *   AIRLOCK_LOG_LEVEL
 */
#include "gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"

static int parse_addr_port(const char *s, uint16_t default_port, struct sockaddr_in *ret) {
        char host[64];
        const char *colon = strchr(s, ':');
        size_t hl = colon ? (size_t) (colon - s) : strlen(s);
        if (hl == 0 || hl >= sizeof host)
                return -EINVAL;
        memcpy(host, s, hl);
        host[hl] = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(default_port) };
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -EINVAL;
        if (colon) {
                char *end;
                unsigned long p = strtoul(colon + 1, &end, 10);
                if (*end || p == 0 || p > 65535)
                        return -EINVAL;
                sa.sin_port = htons((uint16_t) p);
        }
        *ret = sa;
        return 0;
}

static int resolv_conf_upstream(struct sockaddr_in *ret) {
        FILE *f = fopen("/etc/resolv.conf", "re");
        if (!f)
                return -errno;
        char line[256];
        int r = -ENOENT;
        while (r < 0 && fgets(line, sizeof line, f)) {
                char addr[64];
                if (sscanf(line, " nameserver %63s", addr) == 1 && parse_addr_port(addr, 53, ret) == 0)
                        r = 0;
        }
        fclose(f);
        return r;
}

/* The host's own addresses are never a destination (EGRESS.md I5). */
static void add_own_addresses(struct netpolicy_platform *platform) {
        struct ifaddrs *ifs;
        if (getifaddrs(&ifs) < 0)
                return;
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                if (!i->ifa_addr)
                        continue;
                struct in6_addr a;
                if (netpolicy_addr_from_sockaddr(i->ifa_addr,
                                                 i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                                   : sizeof(struct sockaddr_in6),
                                                 &a, NULL) < 0)
                        continue;
                (void) netpolicy_platform_add_self(platform, &a, netpolicy_addr_is_v4(&a) ? 32 : 128);
        }
        freeifaddrs(ifs);
}

static void on_signal(int fd, uint32_t events, void *userdata) {
        struct signalfd_siginfo si;
        if (read(fd, &si, sizeof si) == sizeof si) {
                log_info("received %s; stopping", strsignal((int) si.ssi_signo));
                loop_stop(userdata);
        }
}

/* "0", "500K", "100M", "1G" (binary units) bytes a second. */
static int parse_bandwidth(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || s[0] == '-')
                return -EINVAL;
        unsigned shift = 0;
        if (*end == 'K' || *end == 'k')
                shift = 10, end++;
        else if (*end == 'M' || *end == 'm')
                shift = 20, end++;
        else if (*end == 'G' || *end == 'g')
                shift = 30, end++;
        if (*end || v > (UINT64_MAX >> shift) || (v != 0 && (v << shift) < 4096))
                return -EINVAL;
        *ret = (uint64_t) v << shift;
        return 0;
}

int main(void) {
        struct gw gw = {};
        setvbuf(stderr, NULL, _IOLBF, 0);
        enum log_level level = LOG_LEVEL_INFO;
        const char *lv = getenv("AIRLOCK_LOG_LEVEL");
        if (lv && *lv && log_level_from_string(lv, &level) < 0) {
                fprintf(stderr, "airlock-gw: bad AIRLOCK_LOG_LEVEL %s\n", lv);
                return 2;
        }
        log_setup("airlock-gw", level);
        signal(SIGPIPE, SIG_IGN);

        const char *lfd = getenv("AIRLOCK_GW_LISTEN_FD"), *peer = getenv("AIRLOCK_GW_PEER_UID");
        char *end;
        long listen_fd = lfd ? strtol(lfd, &end, 10) : -1;
        long peer_uid = peer ? strtol(peer, &end, 10) : -1;
        if (listen_fd < 3 || peer_uid < 0) {
                log_error("AIRLOCK_GW_LISTEN_FD and AIRLOCK_GW_PEER_UID must be set (airlock-nodemgr starts airlock-gw)");
                return 2;
        }
        const char *up = getenv("AIRLOCK_DNS_UPSTREAM");
        int r = up && *up ? parse_addr_port(up, 53, &gw.config.dns_upstream) : resolv_conf_upstream(&gw.config.dns_upstream);
        if (r < 0) {
                log_error("no upstream resolver: %s", up && *up ? "AIRLOCK_DNS_UPSTREAM is not ADDR[:PORT] (IPv4)"
                                                                : "no IPv4 nameserver in /etc/resolv.conf; set AIRLOCK_DNS_UPSTREAM");
                return 2;
        }
        char err[NETPOLICY_ERR_MAX];
        const char *open = getenv("AIRLOCK_NETWORK_OPEN");
        if (netpolicy_platform_parse(open ? open : "", &gw.config.platform, err, sizeof err) < 0) {
                log_error("AIRLOCK_NETWORK_OPEN: %s", err);
                return 2;
        }
        add_own_addresses(&gw.config.platform);
        const char *bw = getenv("AIRLOCK_EGRESS_BANDWIDTH");
        if (bw && *bw && parse_bandwidth(bw, &gw.config.bandwidth) < 0) {
                log_error("AIRLOCK_EGRESS_BANDWIDTH=%s is not a rate (bytes a second: 0, 500K, 100M, 1G)", bw);
                return 2;
        }

        const char *ca_dir = getenv("AIRLOCK_EGRESS_CA_DIR");
        if (!ca_dir || !*ca_dir) {
                log_error("AIRLOCK_EGRESS_CA_DIR must be set (airlock-nodemgr sets it)");
                return 2;
        }
        if ((r = gw_state_init(getenv("AIRLOCK_GW_STATE_DIR"))) < 0)
                return 2;
        const char *ca_fd = getenv("AIRLOCK_UPSTREAM_CA_FD");
        if ((r = gw_tlsterm_init(ca_dir, ca_fd && *ca_fd ? atoi(ca_fd) : -1)) < 0)
                return log_error_errno(r, "cannot set up TLS termination: %m"), 1;
        if ((r = loop_new(&gw.loop)) < 0 || (r = gw_relay_init()) < 0 ||
            (r = gw_control_start(&gw, (int) listen_fd, (uid_t) peer_uid)) < 0)
                return log_error_errno(r, "cannot start: %m"), 1;
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0 || loop_watch_add(gw.loop, sfd, EPOLLIN, on_signal, gw.loop, NULL) < 0)
                return log_error_errno(negative_errno(), "cannot watch signals: %m"), 1;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &gw.config.dns_upstream.sin_addr, a, sizeof a);
        log_info("serving the node's sandboxes (resolver %s:%u)", a, (unsigned) ntohs(gw.config.dns_upstream.sin_port));
        r = loop_run(gw.loop);
        loop_free(gw.loop);
        return r < 0 ? 1 : 0;
}
