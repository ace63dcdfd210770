/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's network: eth0 (the VM's one NIC) gets the fixed address of
 * every sandbox namespace (lib/vmnet/vmnet.h), a default route to the
 * gateway, and the gateway as resolver. Set once at boot: the template's
 * snapshot carries it to every restore and fork.
 */
#include "boot.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "vmnet.h"

#define NET_DEVICE "eth0"
#define NET_WAIT_MS 3000 /* virtio_net probes as its module loads; it is there long before */

static void set_in_addr(struct sockaddr *sa, const char *addr) {
        struct sockaddr_in *in = (struct sockaddr_in *) sa;
        memset(in, 0, sizeof *in);
        in->sin_family = AF_INET;
        (void) inet_pton(AF_INET, addr, &in->sin_addr);
}

static int link_up(int sock, const char *name) {
        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
        if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
                return -errno;
        ifr.ifr_flags |= IFF_UP;
        return ioctl(sock, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

static int write_resolv_conf(void) {
        static const char conf[] = "# written by airlock-guest: the sandbox's resolver is its egress gateway\n"
                                   "nameserver " VMNET_GATEWAY_ADDR "\n";
        int fd = open("/etc/resolv.conf.airlock", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return -errno;
        ssize_t n = write(fd, conf, sizeof conf - 1);
        int r = n == (ssize_t) sizeof conf - 1 ? 0 : -EIO;
        close(fd);
        /* a symlink there (systemd-resolved's) is replaced, not followed */
        if (r == 0 && rename("/etc/resolv.conf.airlock", "/etc/resolv.conf") < 0)
                r = -errno;
        if (r < 0)
                (void) unlink("/etc/resolv.conf.airlock");
        return r;
}

int boot_net_setup(void) {
        int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (sock < 0)
                return log_error_errno(-errno, "Failed to open a socket for the network set-up: %m");
        int r = link_up(sock, "lo");
        if (r < 0)
                log_warn("Failed to bring up lo: %s", strerror(-r));

        struct ifreq ifr = { 0 };
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", NET_DEVICE);
        for (int waited = 0; ioctl(sock, SIOCGIFFLAGS, &ifr) < 0; waited += 10) {
                if (errno != ENODEV || waited >= NET_WAIT_MS) {
                        r = log_error_errno(-errno, "No " NET_DEVICE ": %m; the sandbox has no network");
                        goto out;
                }
                nanosleep(&(struct timespec){ 0, 10 * 1000000 }, NULL);
        }
        set_in_addr(&ifr.ifr_addr, VMNET_GUEST_ADDR);
        if (ioctl(sock, SIOCSIFADDR, &ifr) < 0) {
                r = log_error_errno(-errno, "Failed to set the address of " NET_DEVICE ": %m");
                goto out;
        }
        set_in_addr(&ifr.ifr_netmask, "0.0.0.0");
        ((struct sockaddr_in *) &ifr.ifr_netmask)->sin_addr.s_addr = htonl(~0u << (32 - VMNET_PREFIX_LEN));
        if (ioctl(sock, SIOCSIFNETMASK, &ifr) < 0 || (r = link_up(sock, NET_DEVICE)) < 0) {
                r = log_error_errno(r < 0 ? r : -errno, "Failed to bring up " NET_DEVICE ": %m");
                goto out;
        }
        struct rtentry rt = { 0 };
        set_in_addr(&rt.rt_dst, "0.0.0.0");
        set_in_addr(&rt.rt_genmask, "0.0.0.0");
        set_in_addr(&rt.rt_gateway, VMNET_GATEWAY_ADDR);
        rt.rt_flags = RTF_UP | RTF_GATEWAY;
        rt.rt_dev = (char *) NET_DEVICE;
        if (ioctl(sock, SIOCADDRT, &rt) < 0 && errno != EEXIST) {
                r = log_error_errno(-errno, "Failed to add the default route: %m");
                goto out;
        }
        if ((r = write_resolv_conf()) < 0)
                log_warn("Failed to write /etc/resolv.conf: %s", strerror(-r));
        log_info(NET_DEVICE " is " VMNET_GUEST_ADDR "/%d via " VMNET_GATEWAY_ADDR, VMNET_PREFIX_LEN);
        r = 0;
out:
        close(sock);
        return r;
}
