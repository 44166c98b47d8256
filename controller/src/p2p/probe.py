#!/usr/bin/env python3
"""GPU peer-to-peer CORRECTNESS probe (not only capability).

Usage:  CUDA_VISIBLE_DEVICES=0,1 python3 probe.py [--bytes N] [--iters K] [--timeout S] [--selftest-corrupt]

For every ordered pair (i, j), i != j, of the visible CUDA devices:
  - peer_access = torch.cuda.can_device_access_peer(i, j)
  - fill N bytes on GPU i with random data (seed fixed per pair)
  - copy i -> j with tensor.to(j) (a copy-engine peer copy when P2P is on), and copy back j -> i
  - copy i -> j through a CUDA kernel (copy_ into a strided view on j: no memcpy, the kernel reads over P2P)
  - compare: torch.equal on GPU i for both round trips, and SHA-256 checksums computed on the CPU of the
    original, of the data as it arrived on j, and of the data back on i
  - time the i -> j copy with CUDA events (K timed copies after one warm-up) -> GB/s (1 GB = 1e9 bytes)
Prints ONE JSON object on stdout:
  {"ok", "torch", "cuda", "bytes", "devices": [{"index", "name", "pci_bus_id", "total_mib"}],
   "pairs": [{"src", "dst", "src_pci", "dst_pci", "peer_access", "ok", "mismatched_bytes" | "error", "gbps",
              "checks": {"to_dst_checksum", "roundtrip_equal", "roundtrip_checksum", "kernel_copy_equal"}}]}
Exit code: 0 all pairs match; 1 a pair differs or errors, or the probe timed out (--timeout: the pair in flight is
reported failed with "error", and "timed_out": true);
2 fewer than 2 devices, or torch/CUDA missing (the JSON has "error").
--selftest-corrupt flips one byte on the destination after the i -> j copy, to prove the comparison catches it.
Only torch (and the standard library) is needed.
"""

import argparse
import ctypes
import hashlib
import json
import os
import sys
import threading

RESULT = {"ok": False, "torch": None, "cuda": None, "devices": [], "pairs": []}
_OUT = threading.Lock()
CURRENT = {}  # the pair being probed, for the watchdog


def finish(code, error=None):
    with _OUT:
        if error:
            RESULT["error"] = error
        sys.stdout.write(json.dumps(RESULT) + "\n")
        sys.stdout.flush()
        os._exit(code)


def timed_out(seconds):
    """A hung copy is a failed pair: report the pair in flight as failed (no top-level "error"), exit 1."""
    with _OUT:
        RESULT["ok"], RESULT["timed_out"] = False, True
        if CURRENT:
            RESULT["pairs"].append(dict(CURRENT, ok=False, error="timed out after %g s (the copy hung)" % seconds))
        else:
            RESULT["error"] = "timed out after %g s" % seconds


def sha256_cpu(t):
    """SHA-256 of a tensor's bytes, computed on the CPU."""
    c = t.detach().to("cpu").contiguous()
    return hashlib.sha256(ctypes.string_at(c.data_ptr(), c.numel() * c.element_size())).hexdigest()


def pci(props):
    try:
        return "%04x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    except AttributeError:
        return None


def probe_pair(torch, i, j, nbytes, iters, corrupt):
    cols = 1024  # int32 columns of the strided (kernel) copy
    n32 = max(nbytes // (4 * cols), 1) * cols
    di, dj = torch.device("cuda", i), torch.device("cuda", j)
    gen = torch.Generator(device=di)
    gen.manual_seed(1_000_003 * (i + 1) + j)
    src = torch.randint(-2**31, 2**31 - 1, (n32,), dtype=torch.int32, device=di, generator=gen)
    src_sum = sha256_cpu(src)

    # 1. direct copy i -> j (peer memcpy when P2P is enabled), then back j -> i
    on_dst = src.to(dj)
    if corrupt:
        on_dst.view(torch.uint8)[12345 % on_dst.numel()] ^= 0xFF
    torch.cuda.synchronize(di)
    torch.cuda.synchronize(dj)
    dst_sum = sha256_cpu(on_dst)
    back = on_dst.to(di)
    torch.cuda.synchronize(di)
    mism = int((src.view(torch.uint8) != back.view(torch.uint8)).sum().item())

    # 2. copy i -> j by a CUDA kernel: the destination is a transposed (non-contiguous) view, so copy_ cannot use
    #    memcpy and launches an element-wise kernel that reads GPU i's memory over P2P
    rows = n32 // cols
    kdst = torch.empty((cols, rows), dtype=torch.int32, device=dj)
    kdst.t().copy_(src.view(rows, cols))
    kback = kdst.t().contiguous().to(di).view(-1)
    torch.cuda.synchronize(di)
    kmism = int((src.view(torch.uint8) != kback.view(torch.uint8)).sum().item())

    checks = {"to_dst_checksum": dst_sum == src_sum, "roundtrip_equal": bool(torch.equal(src, back)),
              "roundtrip_checksum": sha256_cpu(back) == src_sum, "kernel_copy_equal": bool(torch.equal(src, kback))}

    # 3. bandwidth of the direct i -> j copy (the copy is issued on the source device's current stream)
    target = torch.empty_like(src, device=dj)
    with torch.cuda.device(di):
        target.copy_(src)  # warm-up
        torch.cuda.synchronize(di)
        torch.cuda.synchronize(dj)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            target.copy_(src)
        end.record()
        end.synchronize()
    torch.cuda.synchronize(dj)
    ms = start.elapsed_time(end) / iters
    gbps = round(src.numel() * 4 / (ms / 1e3) / 1e9, 2) if ms > 0 else None
    return {"ok": all(checks.values()) and mism == 0 and kmism == 0, "mismatched_bytes": max(mism, kmism),
            "gbps": gbps, "checks": checks}


def main():
    ap = argparse.ArgumentParser(description="GPU P2P correctness probe (see the module docstring)")
    ap.add_argument("--bytes", type=int, default=64 << 20, help="bytes per copy (default 64 MiB)")
    ap.add_argument("--iters", type=int, default=5, help="timed copies per pair (default 5)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds before giving up (a broken P2P copy can hang)")
    ap.add_argument("--selftest-corrupt", action="store_true", help="flip one byte after each i -> j copy")
    opts = ap.parse_args()
    RESULT["bytes"] = opts.bytes
    RESULT["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    if opts.selftest_corrupt:
        RESULT["selftest_corrupt"] = True
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        finish(2, "torch is not importable: %s" % e)
    RESULT["torch"], RESULT["cuda"] = torch.__version__, torch.version.cuda
    if not torch.cuda.is_available():
        finish(2, "CUDA is not available to torch")
    n = torch.cuda.device_count()
    for d in range(n):
        p = torch.cuda.get_device_properties(d)
        RESULT["devices"].append({"index": d, "name": p.name, "pci_bus_id": pci(p), "total_mib": p.total_memory >> 20})
    if n < 2:
        finish(2, "need at least 2 visible CUDA devices, found %d" % n)

    watchdog = threading.Timer(opts.timeout, lambda: (timed_out(opts.timeout), finish(1)))
    watchdog.daemon = True
    watchdog.start()
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            pair = {"src": i, "dst": j, "src_pci": RESULT["devices"][i]["pci_bus_id"],
                    "dst_pci": RESULT["devices"][j]["pci_bus_id"], "peer_access": None, "ok": False}
            CURRENT.clear()
            CURRENT.update(pair)
            try:
                pair["peer_access"] = bool(torch.cuda.can_device_access_peer(i, j))
                pair.update(probe_pair(torch, i, j, opts.bytes, max(opts.iters, 1), opts.selftest_corrupt))
            except Exception as e:  # noqa: BLE001 - a failing pair is a result, not a crash
                pair["ok"], pair["error"] = False, "%s: %s" % (type(e).__name__, e)
            with _OUT:
                CURRENT.clear()
                RESULT["pairs"].append(pair)
    RESULT["ok"] = all(p["ok"] for p in RESULT["pairs"])
    finish(0 if RESULT["ok"] else 1)


if __name__ == "__main__":
    main()
