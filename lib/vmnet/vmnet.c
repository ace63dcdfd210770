/* SPDX-License-Identifier: Apache-2.0 */
#include "vmnet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

/* The tap is the only way in or out. Its prerouting filter (before
 * conntrack) drops what no guest may send: another MAC or source address,
 * IPv6, anything but TCP and DNS to the gateway. TCP, whatever its
 * destination, is redirected to the gateway's listener, which learns the
 * destination from conntrack (SO_ORIGINAL_DST). No forwarding at all; ARP
 * only for the gateway's address from the guest's own pair. */
static const char ruleset[] =
        "table inet airlock {\n"
        "  chain tap_in {\n"
        "    type filter hook prerouting priority raw; policy accept;\n"
        "    iifname != \"" VMNET_TAP "\" accept\n"
        "    ether saddr != " VMNET_GUEST_MAC " drop\n"
        "    meta nfproto ipv6 drop\n"
        "    ip saddr != " VMNET_GUEST_ADDR " drop\n"
        "    ip daddr " VMNET_GATEWAY_ADDR " udp dport 53 accept\n"
        "    meta l4proto tcp accept\n"
        "    drop\n"
        "  }\n"
        "  chain to_gateway {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        "    iifname \"" VMNET_TAP "\" meta l4proto tcp redirect to :" STRINGIFY(VMNET_REDIRECT_PORT) "\n"
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy drop;\n"
        "    iifname \"lo\" accept\n"
        "    iifname \"" VMNET_TAP "\" tcp dport " STRINGIFY(VMNET_REDIRECT_PORT) " ct status dnat accept\n"
        "    iifname \"" VMNET_TAP "\" ip daddr " VMNET_GATEWAY_ADDR " udp dport 53 accept\n"
        /* the guest's side of a connection the node made to one of its
         * service ports (vmnet_connect); the guest can open none itself */
        "    iifname \"" VMNET_TAP "\" meta l4proto tcp ct direction reply accept\n"
        /* what else the guest aims at the gateway's address (its listener
         * itself: a redirect to where it went already is no DNAT) is
         * refused at once, not left to time out */
        "    iifname \"" VMNET_TAP "\" meta l4proto tcp reject with tcp reset\n"
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy drop;\n"
        "  }\n"
        "}\n"
        "table arp airlock {\n"
        "  chain in {\n"
        "    type filter hook input priority filter; policy accept;\n"
        "    iifname \"" VMNET_TAP "\" arp saddr ether != " VMNET_GUEST_MAC " drop\n"
        "    iifname \"" VMNET_TAP "\" arp saddr ip != " VMNET_GUEST_ADDR " drop\n"
        "    iifname \"" VMNET_TAP "\" arp daddr ip != " VMNET_GATEWAY_ADDR " drop\n"
        "  }\n"
        "}\n";

const char *vmnet_ruleset(void) {
        return ruleset;
}

static int parse_mac(const char *s, unsigned char out[6]) {
        unsigned b[6];
        if (sscanf(s, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
                return -EINVAL;
        for (size_t i = 0; i < 6; i++)
                out[i] = (unsigned char) b[i];
        return 0;
}

static void set_in_addr(struct sockaddr *sa, const char *addr) {
        struct sockaddr_in *in = (struct sockaddr_in *) sa;
        memset(in, 0, sizeof *in);
        in->sin_family = AF_INET;
        (void) inet_pton(AF_INET, addr, &in->sin_addr);
}

static int write_sysctl(const char *path, const char *value) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        size_t len = strlen(value);
        return write(fd, value, len) == (ssize_t) len ? 0 : -EIO;
}

static int link_up(int sock, const char *name) {
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
        if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
                return negative_errno();
        ifr.ifr_flags |= IFF_UP;
        return ioctl(sock, SIOCSIFFLAGS, &ifr) < 0 ? negative_errno() : 0;
}

/* ---- the work, in a thread that enters the namespace ---- */

struct job {
        enum { JOB_CREATE, JOB_LISTEN, JOB_CONNECT } kind;
        int netns_fd;       /* listen, connect: the namespace; create: made */
        int tap_fd;         /* create */
        int tcp_fd, dns_fd; /* listen; connect: tcp_fd */
        uint16_t port;      /* connect */
        int r;
        char err[256];
};

static int fail(struct job *j, int r, const char *what) {
        snprintf(j->err, sizeof j->err, "%s: %s", what, strerror(-r));
        return r;
}

static int do_create(struct job *j) {
        int r;
        if (unshare(CLONE_NEWNET) < 0)
                return fail(j, negative_errno(), "unshare(CLONE_NEWNET)");
        j->netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (j->netns_fd < 0)
                return fail(j, negative_errno(), "opening the new namespace");
        /* no IPv6 in the namespace: no link-local address, no router
         * solicitation or advertisement, nothing to reach over it */
        if ((r = write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1")) < 0 ||
            (r = write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")) < 0)
                if (r != -ENOENT) /* a kernel without IPv6 */
                        return fail(j, r, "disabling IPv6");

        _cleanup_close_ int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (sock < 0)
                return fail(j, negative_errno(), "socket");
        if ((r = link_up(sock, "lo")) < 0)
                return fail(j, r, "bringing up lo");

        j->tap_fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
        if (j->tap_fd < 0)
                return fail(j, negative_errno(), "opening /dev/net/tun");
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", VMNET_TAP);
        /* vnet headers: QEMU passes the guest's offloads (large segments,
         * checksums) through instead of cutting every packet to the MTU */
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
        if (ioctl(j->tap_fd, TUNSETIFF, &ifr) < 0)
                return fail(j, negative_errno(), "creating " VMNET_TAP);

        memset(&ifr, 0, sizeof ifr);
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", VMNET_TAP);
        ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
        (void) parse_mac(VMNET_GATEWAY_MAC, (unsigned char *) ifr.ifr_hwaddr.sa_data);
        if (ioctl(sock, SIOCSIFHWADDR, &ifr) < 0)
                return fail(j, negative_errno(), "setting the tap's MAC");
        set_in_addr(&ifr.ifr_addr, VMNET_GATEWAY_ADDR);
        if (ioctl(sock, SIOCSIFADDR, &ifr) < 0)
                return fail(j, negative_errno(), "setting the tap's address");
        struct in_addr mask = { htonl(~0u << (32 - VMNET_PREFIX_LEN)) };
        set_in_addr(&ifr.ifr_netmask, "0.0.0.0");
        ((struct sockaddr_in *) &ifr.ifr_netmask)->sin_addr = mask;
        if (ioctl(sock, SIOCSIFNETMASK, &ifr) < 0)
                return fail(j, negative_errno(), "setting the tap's netmask");
        if ((r = link_up(sock, VMNET_TAP)) < 0)
                return fail(j, r, "bringing up " VMNET_TAP);

        /* the guest's MAC for its address, fixed: no ARP answer from the
         * guest changes where the gateway's replies go */
        struct arpreq arp = { 0 };
        set_in_addr(&arp.arp_pa, VMNET_GUEST_ADDR);
        arp.arp_ha.sa_family = ARPHRD_ETHER;
        (void) parse_mac(VMNET_GUEST_MAC, (unsigned char *) arp.arp_ha.sa_data);
        arp.arp_flags = ATF_PERM | ATF_COM;
        snprintf(arp.arp_dev, sizeof arp.arp_dev, "%s", VMNET_TAP);
        if (ioctl(sock, SIOCSARP, &arp) < 0)
                return fail(j, negative_errno(), "adding the guest's neighbour entry");

        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!nft)
                return fail(j, -ENOMEM, "nft_ctx_new");
        (void) nft_ctx_buffer_error(nft);
        r = nft_run_cmd_from_buffer(nft, ruleset);
        if (r != 0) {
                const char *e = nft_ctx_get_error_buffer(nft);
                snprintf(j->err, sizeof j->err, "loading the namespace's nftables rules: %.200s", e ? e : "failed");
                nft_ctx_free(nft);
                return -EIO;
        }
        nft_ctx_free(nft);
        return 0;
}

static int bound_socket(int type, int port, int *ret) {
        _cleanup_close_ int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        int one = 1;
        if (type == SOCK_STREAM && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
                return negative_errno();
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        (void) inet_pton(AF_INET, VMNET_GATEWAY_ADDR, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return negative_errno();
        if (type == SOCK_STREAM && listen(fd, 256) < 0)
                return negative_errno();
        *ret = TAKE_FD(fd);
        return 0;
}

static int do_listen(struct job *j) {
        int r;
        if (setns(j->netns_fd, CLONE_NEWNET) < 0)
                return fail(j, negative_errno(), "entering the VM's namespace");
        if ((r = bound_socket(SOCK_STREAM, VMNET_REDIRECT_PORT, &j->tcp_fd)) < 0)
                return fail(j, r, "the gateway's TCP listener");
        if ((r = bound_socket(SOCK_DGRAM, VMNET_DNS_PORT, &j->dns_fd)) < 0)
                return fail(j, r, "the gateway's DNS socket");
        return 0;
}

static int do_connect(struct job *j) {
        if (setns(j->netns_fd, CLONE_NEWNET) < 0)
                return fail(j, negative_errno(), "entering the VM's namespace");
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return fail(j, negative_errno(), "socket");
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(j->port) };
        (void) inet_pton(AF_INET, VMNET_GUEST_ADDR, &sa.sin_addr);
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0 && errno != EINPROGRESS)
                return fail(j, negative_errno(), "connecting to the guest");
        j->tcp_fd = TAKE_FD(fd);
        return 0;
}

static void *job_thread(void *userdata) {
        struct job *j = userdata;
        j->r = j->kind == JOB_CREATE ? do_create(j) : j->kind == JOB_LISTEN ? do_listen(j) : do_connect(j);
        return NULL; /* the thread ends, and its namespace with it */
}

static int run_job(struct job *j, char *err, size_t n) {
        pthread_t t;
        int r = pthread_create(&t, NULL, job_thread, j);
        if (r != 0) {
                snprintf(err, n, "cannot start a thread: %s", strerror(r));
                return -r;
        }
        (void) pthread_join(t, NULL);
        if (j->r < 0)
                snprintf(err, n, "%s", j->err);
        return j->r;
}

int vmnet_create(struct vmnet *ret, char *err, size_t n) {
        struct job j = { .kind = JOB_CREATE, .netns_fd = -1, .tap_fd = -1, .tcp_fd = -1, .dns_fd = -1 };
        int r = run_job(&j, err, n);
        if (r < 0) {
                safe_close(j.netns_fd);
                safe_close(j.tap_fd);
                return r;
        }
        *ret = (struct vmnet){ .netns_fd = j.netns_fd, .tap_fd = j.tap_fd };
        return 0;
}

void vmnet_release(struct vmnet *v) {
        if (!v)
                return;
        v->netns_fd = safe_close(v->netns_fd);
        v->tap_fd = safe_close(v->tap_fd);
}

int vmnet_listen(int netns_fd, int *ret_tcp_fd, int *ret_dns_fd, char *err, size_t n) {
        struct job j = { .kind = JOB_LISTEN, .netns_fd = netns_fd, .tap_fd = -1, .tcp_fd = -1, .dns_fd = -1 };
        int r = run_job(&j, err, n);
        if (r < 0) {
                safe_close(j.tcp_fd);
                safe_close(j.dns_fd);
                return r;
        }
        *ret_tcp_fd = j.tcp_fd;
        *ret_dns_fd = j.dns_fd;
        return 0;
}

int vmnet_connect(int netns_fd, uint16_t port, int *ret_fd, char *err, size_t n) {
        if (port == 0) {
                snprintf(err, n, "port 0");
                return -EINVAL;
        }
        struct job j = { .kind = JOB_CONNECT, .netns_fd = netns_fd, .tap_fd = -1, .tcp_fd = -1, .dns_fd = -1,
                         .port = port };
        int r = run_job(&j, err, n);
        if (r < 0)
                return r;
        *ret_fd = j.tcp_fd;
        return 0;
}
