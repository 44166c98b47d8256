#!/bin/bash
# Creates the Python virtual environment that e2e/tests/sglang_args.rs uses to run SGLang's OWN argument
# parser and checks (prepare_server_args -> ServerArgs.resolve_once -> check_server_args) on the command
# line the agent renders. No GPU and no model weights are needed; e2e/sglang/check_args.py runs it on CPU.
#
#   venv:  $GPUPLANE_E2E_CACHE/sglang-venv   (default /var/cache/gpuplane-e2e/sglang-venv)
#   stamp: $GPUPLANE_E2E_CACHE/sglang-venv/.gpuplane-ok-sglang-<version>   (written only after a verified install)
#
# Idempotent and cached: when the stamp is there and the venv's python still reports sglang $SGLANG_VERSION, it
# does nothing and touches no network (~0.1 s). Otherwise it (re)creates the venv and runs `pip install sglang==$SGLANG_VERSION`.
#
# Size: about 11 GB, ~4-5 minutes on a fast link. SGLang pins torch==2.14.1 and pulls the CUDA 13 runtime
# wheels from PyPI. A CPU-only torch wheel would make it much smaller, but those are published only on
# download.pytorch.org (not on PyPI), and sglang's pins (torch, torchaudio, flashinfer[cu13], ...) would have
# to be overridden; the CI machines reach only PyPI, so the plain install is used.
# Needs root (or sudo) only to apt-get install python3-venv when it is missing.
set -euo pipefail

SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
VENV="$CACHE/sglang-venv"
STAMP="$VENV/.gpuplane-ok-sglang-$SGLANG_VERSION"

# A quick check that the venv is usable: sglang imports, has the expected version, and its server-args
# module (the code check_args.py drives) imports too.
verify() {
  "$VENV/bin/python" - "$SGLANG_VERSION" <<'EOF'
import sys
import importlib.metadata as md
want = sys.argv[1]
got = md.version("sglang")
assert got == want, f"sglang {got} installed, want {want}"
import sglang  # noqa: F401
from sglang.srt.server_args import ServerArgs, prepare_server_args  # noqa: F401
import torch
print(f"sglang {got}, torch {torch.__version__}, python {sys.version.split()[0]}")
EOF
}

# Fast path (~0.1 s; importing sglang + torch would take 5-8 s): the stamp is written only after a verified
# install, so checking that the interpreter still runs and reports the version is enough here.
if [ -f "$STAMP" ] && "$VENV/bin/python" -c '
import sys, importlib.metadata as md
sys.exit(md.version("sglang") != sys.argv[1])' "$SGLANG_VERSION" >/dev/null 2>&1; then
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Debian's python3 (3.11 on bookworm) is preferred over whatever python3 comes first in PATH (pyenv etc.),
# so that the venv does not depend on a per-user interpreter.
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then
  echo "== installing python3 (Debian)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3
fi
# The venv module needs ensurepip, which Debian ships separately in python3-venv.
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "== installing python3-venv (Debian)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' || {
  echo "sglang-venv.sh: $PY is too old for sglang $SGLANG_VERSION (needs >= 3.10)" >&2
  exit 1
}

start=$(date +%s)
echo "== creating $VENV with $($PY --version) and installing sglang==$SGLANG_VERSION (about 11 GB)"
mkdir -p "$CACHE"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install -q --upgrade pip
# --no-cache-dir: the wheels are several GB and would otherwise be kept a second time in ~/.cache/pip.
nice -n 10 "$VENV/bin/python" -m pip install --no-cache-dir --progress-bar off "sglang==$SGLANG_VERSION"

verify
# And SGLang's argument resolution must really run on this machine (CPU, tiny config, no weights).
CHECK="$(cd "$(dirname "$0")/.." && pwd)/sglang/check_args.py"
if [ -f "$CHECK" ]; then
  echo '["--model-path", "x", "--tp-size", "4", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]' |
    "$VENV/bin/python" "$CHECK" 2>/dev/null | grep -q '"ok": true' || {
    echo "sglang-venv.sh: sglang installed but its argument resolution failed; see: $VENV/bin/python $CHECK" >&2
    exit 1
  }
fi
touch "$STAMP"
echo "== sglang venv ready in $(( $(date +%s) - start ))s: $(du -sh "$VENV" | cut -f1) at $VENV"
