#!/usr/bin/env python3
"""Relays the guest's fault requests to qemu's monitor (e2e/vm/run.sh with VM_FAULTS=1).

    qmp-faults.py SOCKET RESULT_LOG LOG

A scenario that needs a hardware fault (issue 40: a PCIe error reported by a root port, a GPU
taken off the bus) cannot make one from inside the guest: it writes a line
`@@FAULT <n> <monitor command>@@` to its result port (RESULT_LOG on the host) and waits for the
kernel to show the effect. This relay, started beside qemu, reads RESULT_LOG as it grows and
runs each request's command once, through QMP's `human-monitor-command`, appending
`<n> <command> -> <reply>` to LOG. Only two commands are relayed — `pcie_aer_inject_error`
(qemu's AER injection at a device with an AER capability) and `device_del` (a hot-unplug) —
each on a device named by its id; anything else is refused in LOG. Ends when qemu closes the
socket.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import Qmp  # noqa: E402

ALLOWED = re.compile(r"^(pcie_aer_inject_error( -[ac])* [a-z0-9]+ [A-Z_]+|device_del [a-z0-9]+)$")
REQUEST = re.compile(r"@@FAULT (\d+) (.*)@@")


def connect(path):
    deadline = time.monotonic() + 120
    while True:
        try:
            return Qmp(path)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(path, result, log):
    q = connect(path)
    done = set()
    with open(log, "a") as out:
        while True:
            try:
                text = open(result, errors="replace").read()
            except OSError:
                text = ""
            for n, command in REQUEST.findall(text):
                if n in done:
                    continue
                done.add(n)
                command = command.strip()
                if not ALLOWED.match(command):
                    reply = "refused: not a fault command"
                else:
                    try:
                        reply = q.cmd("human-monitor-command", **{"command-line": command})
                    except RuntimeError as e:
                        reply = f"error: {e}"
                out.write(f"{n} {command} -> {str(reply).strip()}\n")
                out.flush()
            time.sleep(0.2)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    try:
        main(*sys.argv[1:])
    except (OSError, EOFError, ValueError):
        pass
