#!/bin/bash
# images/templates/docker.sh OUT.img
#
# The `docker` template: the `python` template with Debian's Docker
# (docker.io: dockerd, containerd, runc, the CLI; iptables; docker-compose
# 1.29, also as `docker compose` through a CLI plugin that runs it) and the
# kernel's container modules (netfilter, bridge, veth, overlayfs: images/
# kernel.sh rootfs-modules) for modprobe. The template build starts dockerd
# before its snapshot (docker.d/etc/airlock/template-start), so every
# sandbox has it running. Images are pulled through the sandbox's egress
# gateway like any connection, under its policy; containers' traffic leaves
# through the sandbox's own interface, so through the gateway too.
#
# Environment: as python.sh; AIRLOCK_KERNEL_DIR (the node sets it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export EXTRA_PACKAGES=docker.io,docker-compose,iptables,kmod${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}
export EXTRA_TREE=$HERE/docker.d
export KERNEL_MODULES=1
export MIN_IMAGE_MB=${MIN_IMAGE_MB:-4096}
exec "$HERE/python.sh" "$@"
