#!/bin/sh
# Before kubelet and the API server: the node's address (the VM has no NIC: a dummy interface with
# a default route, so kubelet and the API server have a non-loopback InternalIP), the kernel bits
# containers need, and the images baked into the VM (no registry is reachable).
set -e
modprobe overlay
modprobe br_netfilter
sysctl -q -p /etc/sysctl.d/k8s.conf
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
ip addr replace 10.99.0.1/24 dev dummy0
ip link set dummy0 up
ip route replace default dev dummy0
for i in $(seq 120); do ctr version >/dev/null 2>&1 && break; sleep 1; done
for f in /etc/kubernetes/images/*.tar; do ctr -n k8s.io images import "$f"; done
