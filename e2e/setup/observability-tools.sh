#!/bin/bash
# Installs the Debian packages the GitOps and monitoring tests need:
#   - lua5.1: Argo CD's health scripts are Lua 5.1 (run there by gopher-lua); the tests run
#     examples/gitops/argocd/**/health.lua with the real interpreter,
#   - prometheus (with promtool): `promtool check metrics` on a live scrape, `promtool check
#     rules` / `promtool test rules` on the chart's alerts, and a real Prometheus scraping the
#     agent in the kube e2e.
# Idempotent: does nothing (and touches no network) when everything is already installed.
# Needs root (or sudo) and a Debian mirror reachable through apt.
set -euo pipefail

PKGS=(lua5.1 prometheus)

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "observability-tools: installing ${missing[*]}" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# policy-rc.d: the package must not start a Prometheus service; the tests start their own.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  made_policy=1
fi
ok=1
{ $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq &&
  $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || ok=0
[ "$made_policy" = 1 ] && $SUDO rm -f "$policy"
if [ "$ok" = 0 ]; then
  cat "$log" >&2
  echo "observability-tools: apt-get failed" >&2
  exit 1
fi
