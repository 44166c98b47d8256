#!/bin/bash
# Tools the image test uses to read the OCI archive the way container tools do (skopeo), and
# util-linux's nsenter, which the image carries, and binutils' objcopy, which leaves a debug
# build's debug information out of the image (packaging/image/build.sh). Idempotent.
set -euo pipefail
need=()
command -v skopeo >/dev/null || need+=(skopeo)
command -v nsenter >/dev/null || need+=(util-linux)
command -v objcopy >/dev/null || need+=(binutils)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "image-tools: $(skopeo --version)"
