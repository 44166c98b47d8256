#!/bin/bash
# Tools that build and check the .deb: cargo-deb (pinned) and lintian. Idempotent.
set -euo pipefail
CARGO_DEB_VERSION=3.8.0
if ! command -v lintian >/dev/null || ! command -v dpkg-deb >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian dpkg-dev >/dev/null
fi
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi
echo "packaging-tools: $(cargo deb --version), $(lintian --version)"
