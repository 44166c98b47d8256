#!/bin/sh
# Installs the SGLang stand-in so that `PREFIX/bin/python3 -m sglang.launch_server ARGS` runs it.
#   install.sh [PREFIX]            (default PREFIX=/opt/sglang-venv)
# If PREFIX/bin/python3 already exists (a real virtual environment), the files go into its site-packages.
# Otherwise PREFIX becomes a virtual environment without pip (`python3 -m venv --without-pip`, which
# needs no python3-venv package), and the files go into its site-packages: the agent's preflight runs
# the interpreter isolated (`python -I -s`), which ignores PYTHONPATH. Where even that fails,
# PREFIX/bin/python3 becomes a small wrapper around the system python3 with the stand-in on PYTHONPATH
# (PREFIX/lib/standin): it serves, but the agent's import check will not find sglang.
set -eu
PREFIX=${1:-/opt/sglang-venv}
SRC=$(cd "$(dirname "$0")" && pwd)
PY="$PREFIX/bin/python3"
[ -x "$PY" ] || python3 -m venv --without-pip "$PREFIX" >/dev/null 2>&1 || rm -rf "$PREFIX"
if [ -x "$PY" ]; then
    DEST=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
else
    echo "install.sh: python3 -m venv failed; a PYTHONPATH wrapper instead (isolated imports will not see it)" >&2
    SYSPY=$(command -v python3)
    DEST="$PREFIX/lib/standin"
    mkdir -p "$PREFIX/bin"
    cat >"$PY" <<WRAP
#!/bin/sh
PYTHONPATH="$DEST\${PYTHONPATH:+:\$PYTHONPATH}" exec "$SYSPY" "\$@"
WRAP
    chmod 755 "$PY"
    ln -sf python3 "$PREFIX/bin/python"
fi
mkdir -p "$DEST/sglang"
cp "$SRC/sglang_standin.py" "$SRC/server-args.tsv" "$DEST/"
cp "$SRC/sglang/__init__.py" "$SRC/sglang/launch_server.py" "$DEST/sglang/"
echo "sglang stand-in installed in $DEST (run: $PY -m sglang.launch_server --model-path M)"
