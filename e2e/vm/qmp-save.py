#!/usr/bin/env python3
"""Saves a running qemu machine into a file over its QMP socket (e2e/vm/snapshot.sh).

    qmp-save.py SOCKET STATE

Migrates the guest's whole state (RAM, devices) through `zstd` into STATE while it runs (qemu
pauses it for the last pages; a guest stopped before would stay paused when restored) and quits
qemu, which flushes the disks: the root disk then holds exactly what the saved guest has written,
and `qemu ... -incoming "exec:zstd -dc STATE"` on a copy of it goes on from there. Writes
STATE.done once the migration completed, before the quit (the caller may be gone after it); exit 0
only then, the reason otherwise on stderr.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import Qmp  # noqa: E402


def main(path, state):
    q = Qmp(path)
    # qemu limits migration to 128 MiB/s by default; a file has no such need.
    q.cmd("migrate-set-parameters", **{"max-bandwidth": 64 << 30})
    q.cmd("migrate", uri=f"exec:zstd -q -1 -T0 -o {state}")
    deadline = time.monotonic() + 600
    while True:
        st = q.cmd("query-migrate")
        status = st.get("status")
        if status == "completed":
            break
        if status in ("failed", "cancelled") or time.monotonic() > deadline:
            raise RuntimeError(f"migration {status}: {st.get('error-desc', '')}")
        time.sleep(0.2)
    open(state + ".done", "w").close()
    try:
        q.cmd("quit")
    except EOFError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        main(sys.argv[1], sys.argv[2])
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        sys.exit(f"qmp-save: {e}")
