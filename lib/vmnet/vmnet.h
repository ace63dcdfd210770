/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A VM's network (docs/network.md): each VMM runs in a network namespace of
 * its own that holds one tap device, the guest's only link. Nothing is
 * routed out of it: the namespace's nftables rules redirect every TCP
 * connection of the guest to one listening socket and let UDP reach only
 * the DNS socket, both made inside the namespace and served by the egress
 * gateway (airlock-gw) from the host's side, which decides and dials every
 * connection itself. Everything else the guest sends (IPv6, ICMP, other
 * UDP, a forged source address or MAC, ARP for other addresses) is dropped
 * at the tap.
 *
 * Every namespace looks the same from the inside (the addresses below), so
 * the guest's configuration is part of a template's snapshot and holds for
 * every restore and fork; a sandbox is known to the gateway by the sockets
 * it was handed, never by an address.
 *
 * Root only (airlock-nodemgr, or a root node): the namespace work happens in
 * a short-lived thread, so the caller never leaves its own namespace.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMNET_TAP "tap0"
#define VMNET_GUEST_ADDR "10.200.0.2"
#define VMNET_GATEWAY_ADDR "10.200.0.1"
#define VMNET_PREFIX_LEN 30
#define VMNET_GUEST_MAC "02:a1:0c:00:00:02" /* locally administered */
#define VMNET_GATEWAY_MAC "02:a1:0c:00:00:01"
#define VMNET_REDIRECT_PORT 15001 /* where every guest TCP connection lands */
#define VMNET_DNS_PORT 53

struct vmnet {
        int netns_fd; /* the namespace (an nsfs fd) */
        int tap_fd;   /* the tap's queue, for QEMU: -netdev tap,fd=N */
};

/* Makes a namespace with the tap, its address, the guest's static
 * neighbour entry and the rules. 0, or a negative errno with a reason in
 * err (size n). */
int vmnet_create(struct vmnet *ret, char *err, size_t n);
void vmnet_release(struct vmnet *v);

/* The gateway's sockets in the namespace netns_fd: a listening TCP socket
 * on VMNET_GATEWAY_ADDR:VMNET_REDIRECT_PORT and a UDP socket on
 * VMNET_GATEWAY_ADDR:VMNET_DNS_PORT, both non-blocking and close-on-exec.
 * Called again for the same namespace (a restarted gateway), it makes new
 * ones: SO_REUSEADDR on the listener, the DNS socket with SO_REUSEPORT
 * refused (the old one must be gone first: the gateway's end closed). */
int vmnet_listen(int netns_fd, int *ret_tcp_fd, int *ret_dns_fd, char *err, size_t n);

/* A TCP socket made in the namespace netns_fd, non-blocking and
 * close-on-exec, its connection to VMNET_GUEST_ADDR:port started (poll for
 * POLLOUT, then SO_ERROR): the node's way to a server in the guest (a
 * service port). The rules let through the guest's replies on it and
 * nothing the guest starts. */
int vmnet_connect(int netns_fd, uint16_t port, int *ret_fd, char *err, size_t n);

/* The ruleset vmnet_create() loads, as nft(8) text (for docs and tests). */
const char *vmnet_ruleset(void);
