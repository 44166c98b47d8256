#!/usr/bin/env python3
"""Stand-in for `python -m sglang.launch_server` (SGLang 0.5.23), for gpuplane's end-to-end tests.

Standard library only. It parses the real 0.5.23 flag table (server-args.tsv), resolves the speculative-decoding
flags the way SGLang does, prints SGLang's startup log lines in order with SGLang's formats, and only after the
simulated weight load and CUDA-graph capture opens --host/--port and answers the HTTP endpoints gpuplane uses.
Nothing here loads a model or touches a GPU.

Facts it follows: server-args.tsv (next to this file; its header names its source) for the flags; SGLang 0.5.23's
HTTP endpoints, startup log, P2P behaviour and speculative-decoding rules for the rest.

Environment (all optional)
--------------------------
  STANDIN_LOAD_SECONDS      weight-load time                          (default 3)
  STANDIN_GRAPH_SECONDS     CUDA-graph capture time                   (default 2)
  STANDIN_WARMUP_SECONDS    time from "Uvicorn running" to healthy    (default 1)
  STANDIN_INIT_SECONDS      distributed-init time                     (default 0.5)
  STANDIN_KV_SECONDS        KV-cache allocation time                  (default 0.5)
  STANDIN_HEALTH_DELAY      delay of a healthy /health answer (the real one takes ~1 s)   (default 0.2)
  STANDIN_CRASH_AT          init | load | kv | graph | warmup | ready: fail in that phase: a traceback-like
                            log, GPU memory back to 0, exit 1 ("ready" fails 0.5 s after becoming ready)
  STANDIN_GPU_MEMORY_FILE   path; rewritten (atomically) as the start-up progresses with one line per GPU the server
                            uses, "index,mib" (like `nvidia-smi --query-gpu=index,memory.used`): STANDIN_BASE_MIB at
                            start, ramping to STANDIN_WEIGHTS_MIB during the weight load, + the KV cache, + graphs;
                            all 0 when the process exits. Indices: --base-gpu-id/--gpu-id-step over
                            CUDA_VISIBLE_DEVICES (when it holds integers) or over 0..N-1.
  STANDIN_BASE_MIB          GPU memory after CUDA init                (default 757)
  STANDIN_WEIGHTS_MIB       GPU memory after the weight load          (default 59607)
  STANDIN_GPU_TOTAL_MIB     GPU size for the "avail mem" figures      (default 143771, an H200)
  STANDIN_KV_MIB            KV cache size (default: total * mem_fraction_static - weights; <= 0 -> "Not enough memory")
  STANDIN_GRAPH_MIB         CUDA-graph memory                         (default 1228)
  STANDIN_P2P_CORRUPT_MARKER  path of the "P2P is broken on this host" marker (default /etc/gpuplane-standin/p2p-corrupt).
                            If it exists and tp_size >= 2:
                              NCCL_P2P_DISABLE != "1"           -> hang forever right after "Init ... begin." (memory flat
                                                                   at STANDIN_BASE_MIB)
                              else no --disable-custom-all-reduce -> hang forever after "Load weight end. ..." (memory
                                                                   flat at STANDIN_WEIGHTS_MIB)
                              else normal start-up.
                            A hung stand-in never opens the port; SIGTERM still ends it with status 0.
  STANDIN_STUCK_FILE        path; while it exists a health check of a ready server "generates" nothing: /health and
                            /health_generate answer 503 after SGLANG_HEALTH_CHECK_TIMEOUT seconds (default 20), as
                            the real server does when the scheduler is stuck.
  STANDIN_HOLD_DEVICES      comma-separated device files the process opens at start and keeps open, as SGLang keeps
                            /dev/nvidiaN open (tests use a stand-in GPU's /dev/dri/cardN)
  STANDIN_METRICS_NAMES     colon (default): /metrics names as SGLang spells them, `sglang:num_running_reqs`;
                            underscore: `sglang_num_running_reqs`, as SGLang's router rewrites them
  STANDIN_TTFT_SECONDS      time to first token each request is recorded with in /metrics      (default 0.15)
  STANDIN_ITL_SECONDS       inter-token latency each request is recorded with in /metrics      (default 0.012)
  STANDIN_LOG_STYLE         0.5.23 (default): "Init parallel begin.", "Capture target decode CUDA graph begin. ...";
                            legacy: older SGLang lines ("Init torch distributed begin.", "Capture cuda graph begin. ...").
  STANDIN_MODEL_ARCH        model architecture when <model-path>/config.json is absent (default Qwen3ForCausalLM)
  STANDIN_CONTEXT_LEN       context length when config.json gives none (default 32768)
  STANDIN_NO_TOOL_CALL      1: chat answers carry no parsed tool call (the raw call text is the content)
  STANDIN_NO_TOOL_CALL_FILE path; while it exists, the same (tests flip it while the server runs)
  STANDIN_SERVER_ARGS_TSV   flag table (default: server-args.tsv next to this file, or inside the sglang package)
SGLang's own variables honoured: SGLANG_LOG_MS, SGLANG_HEALTH_CHECK_TIMEOUT, SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION,
SGLANG_DIAG_BYPASS_HEALTH_GENERATE, NCCL_P2P_DISABLE.

Signals: SIGTERM / SIGINT -> exit 0 (uvicorn's shutdown lines if the server was listening).
Exit codes: 0 stopped by signal, 1 failure (crash, bind error, resolution error traceback), 2 command-line error.
"""

import argparse
import ast
import errno
import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.5.23"
HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = threading.RLock()
PID = os.getpid()


# --------------------------------------------------------------------------------------------------------------------
# environment helpers and logging
# --------------------------------------------------------------------------------------------------------------------
def env_float(name, default):
    v = os.environ.get(name, "").strip()
    return float(v) if v else float(default)


def env_bool(name, default):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    return v.strip().lower() in ("1", "true", "yes", "y")


def ts():
    now = time.time()
    s = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if env_bool("SGLANG_LOG_MS", False):
        s += ".%03d" % int((now % 1) * 1000)
    return s


def emit(line, stream=None):
    stream = stream or sys.stderr
    with _LOCK:
        stream.write(line + "\n")
        stream.flush()


def log(msg, prefix=""):
    """SGLang's format: [%(asctime)s{prefix}] %(message)s"""
    emit("[%s%s] %s" % (ts(), prefix, msg))


def uvlog(msg, level="INFO", stream=None):
    """uvicorn's format: [%(asctime)s] %(levelprefix)s %(message)s (levelprefix = 'INFO:' padded to 9)."""
    emit("[%s] %s %s" % (ts(), (level + ":").ljust(9), msg), stream)


# --------------------------------------------------------------------------------------------------------------------
# command line: argparse built from the real 0.5.23 flag table
# --------------------------------------------------------------------------------------------------------------------
def human_readable_int(s):
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]i?)?\s*", s)
    if not m:
        raise ValueError(s)
    num, suf = float(m.group(1)), (m.group(2) or "")
    exp = {"k": 1, "m": 2, "g": 3, "t": 4}.get(suf[:1].lower(), 0)
    val = num * ((1024 if suf.endswith("i") else 1000) ** exp)
    if val != int(val):
        raise ValueError(s)
    return int(val)


def nullable_str(s):
    return None if s in ("", "None") else s


def json_list_type(s):
    v = json.loads(s)
    if not isinstance(v, list):
        raise ValueError(s)
    return v


def parse_cuda_graph_config_arg(s):
    v = json.loads(s)
    if not isinstance(v, dict):
        raise ValueError(s)
    return v


def parse_cuda_graph_backend_arg(s):
    if s == "tc_piecewise":
        raise argparse.ArgumentTypeError("'tc_piecewise' is not a valid CUDA graph backend")
    return s


TYPES = {
    "str": str, "int": int, "float": float, "human_readable_int": human_readable_int, "nullable_str": nullable_str,
    "json.loads": json.loads, "json_list_type": json_list_type,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
}


class _StoreTrueWithChoice(argparse.Action):
    """--monokernel-backend amd: deprecated, takes a value from choices and stores True."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)


def tsv_path():
    for p in (os.environ.get("STANDIN_SERVER_ARGS_TSV"), os.path.join(HERE, "server-args.tsv"),
              os.path.join(HERE, "sglang", "server-args.tsv")):
        if p and os.path.isfile(p):
            return p
    raise SystemExit("sglang stand-in: server-args.tsv not found (set STANDIN_SERVER_ARGS_TSV)")


def load_flag_table(path=None):
    rows = []
    with open(path or tsv_path(), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            flag, aliases, typ, default, choices, dest = line.split("\t")
            rows.append(dict(flag=flag, aliases=[a for a in aliases.split(",") if a], type=typ,
                             default=default, choices=[c for c in choices.split(",") if c], dest=dest))
    return rows


def _literal(s):
    if s == "":
        return None
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return s


def build_parser(rows):
    p = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    for r in rows:
        notes = [n.strip() for n in r["type"].split(";")]
        kind, names, kw = notes[0], [r["flag"]] + r["aliases"], {"dest": r["dest"]}
        if kind == "help":
            p.add_argument(*sorted(names, key=len), action="help", help=argparse.SUPPRESS)
            continue
        kw["default"] = _literal(r["default"])
        if kind.startswith("bool(BooleanOptionalAction"):
            names = [n for n in names if not n.startswith("--no-")]
            kw["action"] = argparse.BooleanOptionalAction
        elif "store_true" in kind:
            kw["action"] = "store_true"
        elif kind.startswith("DEPRECATED const("):
            kw.update(action=_StoreTrueWithChoice, choices=r["choices"] or None)
        else:
            typ = TYPES.get(kind, str)
            kw["type"] = typ
            if r["choices"]:
                kw["choices"] = [typ(c) for c in r["choices"]] if typ in (int, float) else r["choices"]
            for n in notes[1:]:
                if n.startswith("nargs="):
                    kw["nargs"] = n[len("nargs="):]
                elif n.startswith("const="):
                    kw["const"] = _literal(n[len("const="):])
                elif n == "REQUIRED":
                    kw["required"] = True
        p.add_argument(*names, **kw)
    return p


# --------------------------------------------------------------------------------------------------------------------
# argument resolution (the parts that matter to gpuplane; speculative.txt)
# --------------------------------------------------------------------------------------------------------------------
NOT_FIELDS = {"help", "config", "servicer_impl", "metrics_port", "metrics_host"}
MTP_ARCHS = {"DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
             "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
             "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
             "HYV3ForCausalLM", "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration"}
SPEC_ALGOS = {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE"}


def model_config(model_path):
    cfg = {}
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        pass
    archs = cfg.get("architectures") or [os.environ.get("STANDIN_MODEL_ARCH", "Qwen3ForCausalLM")]
    ctx = cfg.get("max_position_embeddings") or int(env_float("STANDIN_CONTEXT_LEN", 32768))
    return archs[0], int(ctx), cfg.get("model_type", "qwen3")


def warn(msg):
    log(msg)  # before the loggers are configured SGLang uses basicConfig "[%(asctime)s] %(message)s": same look


def resolve_speculative(a, arch):
    algo = a["speculative_algorithm"]
    if algo is None:
        return
    if a["speculative_draft_model_path"] and a["speculative_draft_model_revision"] is None:
        a["speculative_draft_model_revision"] = "main"
    algo = algo.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo not in SPEC_ALGOS:
        raise ValueError(f"Unknown speculative algorithm name: {algo}")
    a["speculative_algorithm"] = algo
    if algo == "NONE":
        return
    if a["max_running_requests"] is None:
        if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
            warn("Max running requests is reset to 48 for speculative decoding. You can override this by "
                 "explicitly setting --max-running-requests.")
        a["max_running_requests"] = 48
    if algo == "NGRAM":
        a["enable_mixed_chunk"] = False
        a["speculative_eagle_topk"] = a["speculative_ngram_max_bfs_breadth"]
        if a["speculative_num_draft_tokens"] is None:
            warn("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding.")
            a["speculative_num_draft_tokens"] = 12
        if a["speculative_num_steps"] is None:
            a["speculative_num_steps"] = a["speculative_num_draft_tokens"] // a["speculative_eagle_topk"]
        return
    if algo not in ("EAGLE", "EAGLE3", "STANDALONE"):  # DFLASH, DSPARK, UNO, FROZEN_KV_MTP: single-chain drafts
        a["speculative_num_steps"] = a["speculative_eagle_topk"] = 1
        if a["speculative_num_draft_tokens"] is None:
            a["speculative_num_draft_tokens"] = a["speculative_dflash_block_size"] or 16
        return
    if algo == "STANDALONE" and a["enable_mixed_chunk"]:
        a["enable_mixed_chunk"] = False
    if arch in MTP_ARCHS and a["speculative_draft_model_path"] is None:
        a["speculative_draft_model_path"] = a["model_path"]
        a["speculative_draft_model_revision"] = a["revision"]
    if a["speculative_adaptive"]:
        reason = None
        if algo not in ("EAGLE", "EAGLE3"):
            reason = f"speculative_algorithm={algo} is not EAGLE/EAGLE3"
        elif a["speculative_eagle_topk"] not in (None, 1):
            reason = f"speculative_eagle_topk={a['speculative_eagle_topk']} != 1"
        if reason:
            warn(f"speculative_adaptive disabled: {reason}. Falling back to static speculative params.")
            a["speculative_adaptive"] = False
        else:
            a["speculative_eagle_topk"] = 1
            if a["speculative_num_steps"] is None:
                a["speculative_num_steps"] = 3
            a["speculative_num_draft_tokens"] = a["speculative_num_steps"] + 1
    if not a["speculative_adaptive"] and a["speculative_num_steps"] is None:
        assert a["speculative_eagle_topk"] is None and a["speculative_num_draft_tokens"] is None
        if algo != "STANDALONE" and arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
            steps, topk, draft = 5, 4, 8
        else:
            steps, topk, draft = 3, 1, 4
        a["speculative_num_steps"], a["speculative_eagle_topk"], a["speculative_num_draft_tokens"] = steps, topk, draft
    if (a["speculative_eagle_topk"] == 1
            and a["speculative_num_draft_tokens"] != a["speculative_num_steps"] + 1):
        warn("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1")
        a["speculative_num_draft_tokens"] = a["speculative_num_steps"] + 1
    # SGLang compares topk with '>' here; topk None (steps given without topk) fails exactly like this:
    if a["speculative_eagle_topk"] > 1 and a["page_size"] > 1:
        if a["attention_backend"] not in ("flashinfer", "fa3", "triton"):
            raise ValueError("speculative_eagle_topk > 1 with page_size > 1 is only supported on ('flashinfer', "
                             f"'fa3', 'triton'); got attention_backend={a['attention_backend']}")


def resolve(ns, argv):
    a = {k: v for k, v in vars(ns).items() if k not in NOT_FIELDS}
    arch, ctx, model_type = model_config(a["model_path"])
    if getattr(ns, "config", None):
        warn("sglang stand-in: --config is not supported and was ignored")
    a["tokenizer_path"] = a["tokenizer_path"] or a["model_path"]
    a["served_model_name"] = a["served_model_name"] or a["model_path"]
    if a["page_size"] is None:
        a["page_size"] = 1
    if a["mem_fraction_static"] is None:
        a["mem_fraction_static"] = 0.85
    if a["chunked_prefill_size"] is None:
        a["chunked_prefill_size"] = 8192
    if a.get("disable_cuda_graph"):
        a["cuda_graph_backend_decode"] = a["cuda_graph_backend_decode"] or "disabled"
        a["cuda_graph_backend_prefill"] = a["cuda_graph_backend_prefill"] or "disabled"
    resolve_speculative(a, arch)
    a["enable_dp_attention"] = (a.get("attn_dp_size") or 1) > 1
    for k in ("watermark_config", "watermark_key", "watermark_key_b"):
        if k in a:
            a[k] = "<redacted>"
    return a, arch, ctx, model_type


# --------------------------------------------------------------------------------------------------------------------
# GPU memory file
# --------------------------------------------------------------------------------------------------------------------
class GpuMemory:
    def __init__(self, path, indices):
        self.path, self.indices, self.mib = path, indices, 0

    def set(self, mib):
        self.mib = int(mib)
        if not self.path:
            return
        tmp = "%s.tmp.%d" % (self.path, PID)
        try:
            with open(tmp, "w") as f:
                f.writelines("%d,%d\n" % (i, self.mib) for i in self.indices)
            os.replace(tmp, self.path)
        except OSError as e:
            emit("sglang stand-in: cannot write %s: %s" % (self.path, e))


# --------------------------------------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------------------------------------
class Standin:
    def __init__(self, args, arch, ctx, model_type, argv):
        self.a, self.arch, self.ctx, self.model_type, self.argv = args, arch, ctx, model_type, argv
        self.status = "Starting"
        self.shutting_down = False
        self.httpd = None
        self.legacy = os.environ.get("STANDIN_LOG_STYLE", "0.5.23").strip().lower() == "legacy"
        self.tp, self.pp = int(args["tp_size"]), int(args["pp_size"])
        self.ranks = [(p, t) for p in range(self.pp) for t in range(self.tp)]
        self.t = {k: env_float("STANDIN_%s_SECONDS" % k.upper(), d)
                  for k, d in (("init", 0.5), ("load", 3), ("kv", 0.5), ("graph", 2), ("warmup", 1))}
        self.crash_at = os.environ.get("STANDIN_CRASH_AT", "").strip().lower()
        self.total = int(env_float("STANDIN_GPU_TOTAL_MIB", 143771))
        self.base = int(env_float("STANDIN_BASE_MIB", 757))
        self.weights = int(env_float("STANDIN_WEIGHTS_MIB", 59607))
        self.graph_mib = int(env_float("STANDIN_GRAPH_MIB", 1228))
        kv = os.environ.get("STANDIN_KV_MIB", "").strip()
        self.kv = int(float(kv)) if kv else int(self.total * float(args["mem_fraction_static"])) - self.weights
        self.kv_tokens = max(self.kv, 0) * 8  # 128 KiB of K+V per token
        self.max_running = args["max_running_requests"] or 4096
        self.timings = {}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        need = [int(args["base_gpu_id"]) + i * int(args["gpu_id_step"]) for i in range(len(self.ranks))]
        self.bad_ordinal = None
        try:
            ids = [int(x) for x in visible.split(",") if x.strip()] if visible is not None else None
        except ValueError:
            ids = None
        if ids is not None:
            if need and max(need) >= len(ids):
                self.bad_ordinal = visible
                need = [i for i in need if i < len(ids)]
            need = [ids[i] for i in need]
        self.mem = GpuMemory(os.environ.get("STANDIN_GPU_MEMORY_FILE"), need)

    # ---- helpers ---------------------------------------------------------------------------------------------------
    def prefix(self, pp, tp):
        return (" PP%d" % pp if self.pp > 1 else "") + (" TP%d" % tp if self.tp > 1 else "")

    def each(self, msg_fn):
        for pp, tp in self.ranks:
            log(msg_fn(pp, tp) if callable(msg_fn) else msg_fn, self.prefix(pp, tp))

    def rank0(self, msg):
        log(msg, self.prefix(0, 0))

    def avail(self):
        return (self.total - self.mem.mib) / 1024.0

    def hang(self):
        while True:
            time.sleep(3600)

    def fail(self, phase, exc):
        tb = ("Traceback (most recent call last):\n"
              '  File "%s", line 1, in run_scheduler_process\n    scheduler = Scheduler(server_args, ...)\n'
              '  File "%s", line 1, in %s\n    raise %s\n%s'
              % (__file__, __file__, phase, exc.split(":")[0], exc))
        if phase == "warmup":
            log("Initialization failed. warmup error: " + tb)
        else:
            log("Scheduler hit an exception: " + tb, self.prefix(0, 0))
            log("Received sigquit from a child process. It usually means the child failed.")
        log("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d" % (PID, PID))
        self.exit(1)

    def exit(self, code):
        with _LOCK:
            self.mem.set(0)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(code)

    def maybe_crash(self, phase):
        msgs = {
            "init": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "load": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
            "kv": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "graph": "RuntimeError: Capture CUDA graph failed: CUDA error: an illegal memory access was encountered",
            "warmup": "RuntimeError: generate request failed: 500 Internal Server Error",
            "ready": "RuntimeError: CUDA error: an illegal memory access was encountered",
        }
        if self.crash_at == phase:
            self.fail(phase, msgs[phase] + " (STANDIN_CRASH_AT=%s)" % phase)

    def sleep_ramp(self, seconds, start, end):
        steps = max(1, int(seconds / 0.2))
        for i in range(1, steps + 1):
            time.sleep(seconds / steps)
            self.mem.set(start + (end - start) * i / steps)

    # ---- start-up phases -------------------------------------------------------------------------------------------
    def run(self):
        a = self.a
        log("server_args=%r" % (a,))
        self.mem.set(self.base)
        t0 = time.perf_counter()
        marker = os.environ.get("STANDIN_P2P_CORRUPT_MARKER", "/etc/gpuplane-standin/p2p-corrupt")
        p2p_broken = os.path.exists(marker) and self.tp >= 2
        nccl_p2p = os.environ.get("NCCL_P2P_DISABLE") != "1"
        custom_ar = not a["disable_custom_all_reduce"]

        # distributed init
        self.each("Init torch distributed begin." if self.legacy else "Init parallel begin.")
        if self.bad_ordinal is not None:
            self.fail("init", "RuntimeError: CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES=%s)"
                      % self.bad_ordinal)
        if p2p_broken and nccl_p2p:
            self.hang()  # NCCL's P2P transport over broken P2P: the first collective never returns
        self.maybe_crash("init")
        time.sleep(self.t["init"])
        if self.tp * self.pp > 1:
            self.rank0("sglang is using nccl==2.30.7")
        base_gb = self.base / 1024.0
        if self.legacy:
            self.each("Init torch distributed ends. mem usage=%.2f GB" % base_gb)
        else:
            self.each("Init parallel ends. elapsed=%.2f s" % (time.perf_counter() - t0))
            self.each("Memory baseline taken. mem usage=%.2f GB" % base_gb)

        # weights
        t = time.perf_counter()
        self.each("Load weight begin. avail mem=%.2f GB" % self.avail())
        if self.crash_at == "load":
            self.sleep_ramp(self.t["load"] / 2, self.base, (self.base + self.weights) / 2)
            self.maybe_crash("load")
        self.sleep_ramp(self.t["load"], self.base, self.weights)
        self.timings["load_weight"] = time.perf_counter() - t
        usage = (self.weights - self.base) / 1024.0
        if self.legacy:
            self.each("Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB."
                      % (self.arch, self.avail(), usage))
        else:
            self.each("Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                      % (self.timings["load_weight"], self.arch, self.avail(), usage))
        if p2p_broken and custom_ar:
            self.hang()  # custom all-reduce's CUDA-IPC buffers over broken P2P: the first all-reduce never returns

        # KV cache
        t = time.perf_counter()
        time.sleep(self.t["kv"])
        self.maybe_crash("kv")
        if self.kv <= 0:
            self.fail("kv", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        self.mem.set(self.weights + self.kv)
        half = self.kv / 2048.0
        if self.legacy:
            self.each("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                      % (self.kv_tokens, half, half))
        else:
            self.each("KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                      % (self.kv_tokens, half, half))
            self.each("Memory pool end. avail mem=%.2f GB" % self.avail())
        self.timings["kv_cache_allocation"] = time.perf_counter() - t

        # CUDA graphs
        self.capture_graphs()
        self.maybe_crash("graph")
        self.rank0("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
                   "context_len=%d" % (self.kv_tokens, a["chunked_prefill_size"], a["max_prefill_tokens"],
                                       self.max_running, self.context_len())
                   + ("" if self.legacy else ", available_gpu_mem=%.2f GB" % self.avail()))
        self.timings["scheduler_e2e"] = time.perf_counter() - t0
        self.timings["tokenizer_e2e"] = time.perf_counter() - t0
        if not self.legacy:
            g = self.timings["graph"]
            log("Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f, scheduler_e2e=%.2f, "
                "cuda_graph={%s}, tokenizer_e2e=%.2f" % (
                    self.timings["load_weight"], self.timings["kv_cache_allocation"], self.timings["scheduler_e2e"],
                    ", ".join("%s=%.2f" % (k, g.get(k, 0.0)) for k in (
                        "prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")),
                    self.timings["tokenizer_e2e"]))
        self.serve()

    def context_len(self):
        return int(self.a["context_length"] or self.ctx)

    def capture_graphs(self):
        a, g = self.a, {}
        self.timings["graph"] = g
        spec = a["speculative_algorithm"] not in (None, "NONE")
        prefill = a["cuda_graph_backend_prefill"] != "disabled"
        decode = a["cuda_graph_backend_decode"] != "disabled"
        parts = ([("prefill", "target prefill")] if prefill else []) + (
            ([("target_verify", "target verify"), ("draft_decode", "draft decode")] if spec
             else [("decode", "target decode")]) if decode else [])
        start = self.mem.mib
        if self.legacy:
            if decode:
                t = time.perf_counter()
                self.each("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB"
                          % self.avail())
                self.sleep_ramp(self.t["graph"], start, start + self.graph_mib)
                g["decode"] = time.perf_counter() - t
                self.each("Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB."
                          % (g["decode"], self.graph_mib / 1024.0, self.avail()))
            return
        if prefill is False:
            self.each("Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' (e.g. "
                      "via --cuda-graph-backend-prefill=disabled or auto-disable rules).")
        bs = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192,
              208, 224, 240, 256]
        for i, (key, name) in enumerate(parts):
            lo = start + self.graph_mib * i / len(parts)
            hi = start + self.graph_mib * (i + 1) / len(parts)
            t, before = time.perf_counter(), self.avail()
            if key == "prefill":
                self.each("Capture %s CUDA graph begin. backend=%s, num_tokens=%s, avail mem=%.2f GB" % (
                    name, a["cuda_graph_backend_prefill"] or "breakable",
                    [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                     4096], before))
            else:
                per_req = a["speculative_num_draft_tokens"] if key == "target_verify" else 1
                self.each("Capture %s CUDA graph begin. backend=%s, num_tokens_per_req=%s, avail mem=%.2f GB"
                          % (name, a["cuda_graph_backend_decode"] or "full", per_req, before))
            self.sleep_ramp(self.t["graph"] / len(parts), lo, hi)
            g[key] = time.perf_counter() - t
            used = (hi - lo) / 1024.0
            if key == "prefill":
                self.each("Capture %s CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                          % (name, g[key], used, self.avail()))
            else:
                self.each("Capture %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                          % (name, bs, g[key], used, self.avail()))

    # ---- HTTP ------------------------------------------------------------------------------------------------------
    def serve(self):
        a = self.a
        host, port = a["host"], int(a["port"])
        uvlog("Started server process [%d]" % PID)
        uvlog("Waiting for application startup.")
        uvlog("Application startup complete.")

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

        handler = type("Handler", (Handler,), {"standin": self})
        try:
            self.httpd = Server((host, port), handler)
        except OSError as e:
            uvlog("[Errno %d] error while attempting to bind on address %r: %s"
                  % (e.errno or 0, (host, port), (e.strerror or str(e)).lower()), "ERROR")
            self.exit(1)
        fmt = "Uvicorn running on %s://[%s]:%d (Press CTRL+C to quit)" if ":" in host else \
            "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)"
        uvlog(fmt % ("http", host, port))
        threading.Thread(target=self.warmup, daemon=True).start()
        self.httpd.serve_forever(poll_interval=0.2)

    def self_request(self, method, path, body=None):
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.a["host"], self.a["host"])
        c = http.client.HTTPConnection(host, int(self.a["port"]), timeout=600)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    def warmup(self):
        try:
            if not self.a["skip_server_warmup"]:
                time.sleep(self.t["warmup"])
                self.maybe_crash("warmup")
                if self.self_request("GET", "/model_info") != 200:
                    raise RuntimeError("GET /model_info failed")
                body = {"text": "The capital city of France is",
                        "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
                if self.self_request("POST", "/generate", body) != 200:
                    raise RuntimeError("POST /generate failed")
                self.self_request("POST", "/freeze_gc")
            self.status = "Up"
            log("The server is fired up and ready to roll!")
            if self.crash_at == "ready":
                time.sleep(0.5)
                self.maybe_crash("ready")
        except Exception as e:  # noqa: BLE001 - any failure is an initialization failure, as in SGLang
            self.fail("warmup", "%s: %s" % (type(e).__name__, e))

    def stop(self, signum, frame):
        if self.httpd is not None:
            self.shutting_down = True
            uvlog("Shutting down")
            uvlog("Waiting for application shutdown.")
            uvlog("Application shutdown complete.")
            uvlog("Finished server process [%d]" % PID)
        self.exit(0)

    # ---- response bodies -------------------------------------------------------------------------------------------
    def model_card(self):
        name = self.a["served_model_name"]
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
                "parent": None, "max_model_len": self.context_len()}

    def model_info(self):
        a = self.a
        return {"model_path": a["model_path"], "served_model_name": a["served_model_name"],
                "tokenizer_path": a["tokenizer_path"], "is_generation": True,
                "preferred_sampling_params": a["preferred_sampling_params"], "weight_version": "default",
                "load_format": a["load_format"], "reasoning_parser": a["reasoning_parser"],
                "tool_call_parser": a["tool_call_parser"], "disaggregation_mode": "null",
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": self.model_type, "architectures": [self.arch]}

    def server_info(self):
        a = self.a
        g = self.timings.get("graph", {})
        startup = {"load_weight": self.timings.get("load_weight", 0.0),
                   "kv_cache_allocation": self.timings.get("kv_cache_allocation", 0.0),
                   "scheduler_e2e": self.timings.get("scheduler_e2e", 0.0),
                   "cuda_graph": {k: g.get(k, 0.0) for k in ("prefill", "decode", "target_verify", "draft_prefill",
                                                             "draft_decode", "draft_extend")},
                   "tokenizer_e2e": self.timings.get("tokenizer_e2e", 0.0)}
        gb = 1024.0
        internal = dict(a)
        internal.update(world_size=self.tp * self.pp, startup_time=startup,
                        effective_max_running_requests_per_dp=self.max_running, last_gen_throughput=0.0,
                        memory_usage={"weight": round((self.weights - self.base) / gb, 2),
                                      "kvcache": round(self.kv / gb, 2), "startup_available": round(self.avail(), 2),
                                      "token_capacity": self.kv_tokens, "token_capacity_swa": 0,
                                      "graph": {"decode": round(self.graph_mib / gb, 2)}},
                        disaggregation_mode="null", decode_cuda_graph_bs=[1, 2, 4, 8],
                        decode_cuda_graph_memory_gb=round(self.graph_mib / gb, 2))
        info = dict(a)
        info.update(launch_command=" ".join(self.argv), status="ready", max_total_num_tokens=self.kv_tokens,
                    max_req_input_len=self.context_len() - 1, hicache_object_layout={}, kv_events=None,
                    startup_time=startup, internal_states=[internal], version=VERSION, frontend="python")
        return info

    def metrics(self):
        """SGLang 0.5.23's /metrics as its collector (sglang/srt/observability/metrics_collector.py) names and shapes
        it: the scheduler's gauges (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank), the tokenizer's
        counters, its startup_time_seconds / startup_cuda_graph_time_seconds by phase, and its three latency
        histograms with the collector's default buckets (labels model_name, engine_type, and is_streaming but on
        the inter-token one), each request observed by the POST routes. STANDIN_METRICS_NAMES=underscore spells every name
        `sglang_` (SGLang's router rewrites `:` to `_`)."""
        a = self.a
        lab = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"' % a["served_model_name"]
        with _LOCK:
            obs = dict(Handler.generated)
            hists = {k: (list(v[0]), v[1], v[2]) for k, v in Handler.histograms.items()}
        spec = a.get("speculative_algorithm")
        # What SGLang's scheduler logs for speculative decoding: accepted tokens per verify step (1 without).
        accept_len = round(1.0 + 0.7 * (a.get("speculative_num_steps") or 1), 2) if spec else 0.0
        gauges = [("num_running_reqs", obs.get("running", 0)), ("num_queue_reqs", 0), ("num_grammar_queue_reqs", 0),
                  ("gen_throughput", obs.get("gen_throughput", 0)), ("cache_hit_rate", 0),
                  ("token_usage", round(min(1.0, obs.get("generation_tokens_total", 0) / max(1, self.kv_tokens)), 6)),
                  ("num_used_tokens", 0),
                  ("kv_available_tokens", self.kv_tokens), ("kv_used_tokens", 0),
                  ("max_total_num_tokens", self.kv_tokens),
                  ("weight_memory_usage_gb", round((self.weights - self.base) / 1024.0, 2)),
                  ("kv_cache_memory_usage_gb", round(self.kv / 1024.0, 2)),
                  ("graph_memory_usage_gb", round(self.graph_mib / 1024.0, 2)), ("page_size", a["page_size"]),
                  ("context_len", self.context_len()), ("is_cuda_graph", 1), ("utilization", 0),
                  ("spec_accept_length", accept_len), ("spec_accept_rate", 0.7 if spec else 0.0)]
        out = []
        for name, v in gauges:
            out += ["# HELP sglang:%s %s." % (name, name.replace("_", " ")), "# TYPE sglang:%s gauge" % name,
                    "sglang:%s{%s} %s" % (name, lab, float(v))]
        tl = 'model_name="%s",engine_type="unified"' % a["served_model_name"]
        for name in ("prompt_tokens_total", "generation_tokens_total", "num_requests_total"):
            out += ["# HELP sglang:%s %s." % (name, name.replace("_", " ")), "# TYPE sglang:%s counter" % name,
                    'sglang:%s{%s,is_streaming="false"} %s' % (name, tl, float(obs.get(name, 0)))]
        # TokenizerMetricsCollector.emit_startup_time: one series per phase.
        for name, phases in (("startup_time_seconds", [(k, self.timings.get(k, 0.0)) for k in (
                "load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")]),
                             ("startup_cuda_graph_time_seconds", [(k, self.timings.get("graph", {}).get(k, 0.0)) for k in (
                                 "prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                                 "draft_extend")])):
            out += ["# HELP sglang:%s %s." % (name, name.replace("_", " ")), "# TYPE sglang:%s gauge" % name]
            out += ['sglang:%s{%s,phase="%s"} %r' % (name, tl, k, round(float(v), 3)) for k, v in phases]
        for name, buckets in HISTOGRAM_BUCKETS:
            counts, total, n = hists.get(name, ([0] * len(buckets), 0.0, 0))
            hl = tl if name == "inter_token_latency_seconds" else tl + ',is_streaming="false"'
            out += ["# HELP sglang:%s %s." % (name, name.replace("_", " ")), "# TYPE sglang:%s histogram" % name]
            cum = 0
            for b, c in zip(buckets, counts):
                cum += c
                out.append('sglang:%s_bucket{%s,le="%r"} %s' % (name, hl, float(b), float(cum)))
            out += ['sglang:%s_bucket{%s,le="+Inf"} %s' % (name, hl, float(n)),
                    "sglang:%s_sum{%s} %r" % (name, hl, float(total)), "sglang:%s_count{%s} %s" % (name, hl, float(n))]
        text = "\n".join(out) + "\n"
        if os.environ.get("STANDIN_METRICS_NAMES", "colon") == "underscore":
            text = text.replace("sglang:", "sglang_")
        return text.encode()


# The tokenizer collector's default buckets (SGLang 0.5.23, sglang/srt/observability/metrics_collector.py).
HISTOGRAM_BUCKETS = (
    ("time_to_first_token_seconds", (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)),
    ("inter_token_latency_seconds", (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                                     0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
                                     8.000)),
    ("e2e_request_latency_seconds", (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
                                     1200, 1800, 2400)),
)


def observe(name, value, times=1):
    """One observation (`times` equal ones) of histogram `name`; call with _LOCK held."""
    buckets = dict(HISTOGRAM_BUCKETS)[name]
    counts, total, n = Handler.histograms.get(name, ([0] * len(buckets), 0.0, 0))
    for i, b in enumerate(buckets):
        if value <= b:
            counts[i] += times
            break
    Handler.histograms[name] = (counts, total + value * times, n + times)


def observe_request(n_tokens):
    """A finished request of `n_tokens` generated tokens, timed as STANDIN_TTFT_SECONDS (default 0.15) to the first
    token and STANDIN_ITL_SECONDS (default 0.012) between the next ones, recorded as SGLang's tokenizer manager
    does: time to first token, inter-token latency per token, end-to-end latency; the generation throughput gauge."""
    ttft = float(os.environ.get("STANDIN_TTFT_SECONDS", "0.15"))
    itl = float(os.environ.get("STANDIN_ITL_SECONDS", "0.012"))
    e2e = ttft + itl * max(0, n_tokens - 1)
    with _LOCK:
        observe("time_to_first_token_seconds", ttft)
        if n_tokens > 1:
            observe("inter_token_latency_seconds", itl, n_tokens - 1)
        observe("e2e_request_latency_seconds", e2e)
        Handler.generated["gen_throughput"] = round(n_tokens / e2e, 3) if e2e > 0 else 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    standin = None  # set per server
    generated = {}
    histograms = {}  # name -> (per-bucket counts, sum, count)

    def version_string(self):
        return "uvicorn"

    def log_message(self, fmt, *args):  # replaced by the uvicorn-style access log in send()
        pass

    def send(self, code, body=b"", ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body, separators=(",", ":")).encode()
        uvlog('%s:%d - "%s" %d %s' % (self.client_address[0], self.client_address[1], self.requestline, code,
                                       HTTPStatus(code).phrase), stream=sys.stdout)
        self.send_response(code)
        if body or ctype != "application/json":
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body_json(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw.strip() else {}

    GET_ROUTES = ("/health", "/health_generate", "/ready", "/ping", "/v1/models", "/model_info", "/get_model_info",
                  "/server_info", "/get_server_info", "/metrics")
    POST_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions", "/freeze_gc", "/flush_cache")

    def route(self):
        return self.path.split("?", 1)[0]

    def do_GET(self):
        s, path = self.standin, self.route()
        if path in ("/health", "/health_generate"):
            return self.health(path)
        if path in ("/ready", "/ping"):
            return self.send(200 if s.status == "Up" and not s.shutting_down else 503)
        if path == "/v1/models":
            return self.send(200, {"object": "list", "data": [s.model_card()]})
        if path.startswith("/v1/models/"):
            m = path[len("/v1/models/"):]
            if m == s.a["served_model_name"]:
                return self.send(200, s.model_card())
            return self.send(404, {"error": {"message": "The model '%s' does not exist" % m,
                                             "type": "invalid_request_error", "param": "model",
                                             "code": "model_not_found"}})
        if path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
            if path.startswith("/get_"):
                log("Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' instead."
                    % (path, path.replace("/get_", "/")))
            return self.send(200, s.model_info() if "model" in path else s.server_info())
        if (path == "/metrics" or path.startswith("/metrics/")) and s.a["enable_metrics"]:
            return self.send(200, s.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        return self.not_found(path, self.POST_ROUTES)

    def do_POST(self):
        path = self.route()
        if path not in self.POST_ROUTES:
            return self.not_found(path, self.GET_ROUTES)
        try:
            req = self.body_json()
        except ValueError as e:
            return self.send(400, {"object": "error", "message": "Invalid JSON: %s" % e, "type": "Bad Request",
                                   "param": None, "code": 400})
        if path in ("/freeze_gc", "/flush_cache"):
            return self.send(200)
        text, n = " Paris. It is the capital", 8
        s = self.standin
        s.rank0("Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
                "#queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 0.00")
        with _LOCK:
            for k, v in (("num_requests_total", 1), ("prompt_tokens_total", 7), ("generation_tokens_total", n)):
                Handler.generated[k] = Handler.generated.get(k, 0) + v
        observe_request(n)
        rid, now = uuid.uuid4().hex, int(time.time())
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
        model = req.get("model") or s.a["served_model_name"]
        if path == "/generate":
            return self.send(200, {"text": text, "output_ids": list(range(1000, 1000 + n)), "meta_info": {
                "id": rid, "finish_reason": {"type": "length", "length": n}, "prompt_tokens": 7,
                "weight_version": "default", "completion_tokens": n, "cached_tokens": 0, "e2e_latency": 0.01}})
        if path == "/v1/completions":
            return self.send(200, {"id": rid, "object": "text_completion", "created": now, "model": model,
                                   "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
                                   "usage": usage})
        message, finish = chat_message(s.a, req, text)
        return self.send(200, {"id": rid, "object": "chat.completion", "created": now, "model": model,
                               "choices": [{"index": 0, "message": message, "logprobs": None,
                                            "finish_reason": finish}], "usage": usage})

    def not_found(self, path, other_method_routes):
        if path in other_method_routes:
            return self.send(405, {"detail": "Method Not Allowed"})
        return self.send(404, {"detail": "Not Found"})

    def health(self, path):
        s = self.standin
        if s.shutting_down:
            log("Health check request received during shutdown. Returning 503.")
            return self.send(503)
        if s.status == "Starting":
            return self.send(503)
        if env_bool("SGLANG_DIAG_BYPASS_HEALTH_GENERATE", False):
            return self.send(200)
        if not env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True) and path == "/health":
            return self.send(200)
        stuck = os.environ.get("STANDIN_STUCK_FILE")
        if stuck and os.path.exists(stuck):
            timeout = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
            tic = time.time()
            time.sleep(timeout)
            log("Health check failed. Server couldn't get a response from detokenizer for last %d seconds. tic start "
                "time: %s. last_heartbeat time: %s" % (timeout, time.strftime("%H:%M:%S", time.localtime(tic)),
                                                      "00:00:00"))
            s.status = "UnHealthy"
            return self.send(503)
        time.sleep(env_float("STANDIN_HEALTH_DELAY", 0.2))
        s.status = "Up"
        return self.send(200)


# --------------------------------------------------------------------------------------------------------------------
def chat_message(a, req, default_text):
    """The assistant message of a chat completion, shaped like SGLang 0.5.23's ChatMessage
    (python/sglang/srt/entrypoints/openai/protocol.py): content, reasoning_content when --reasoning-parser is set,
    tool_calls [{id, index, type: "function", function: {name, arguments}}] when --tool-call-parser is set and tools
    are offered (finish_reason "tool_calls"). "A <op> B" arithmetic in the last user message is answered. With
    STANDIN_NO_TOOL_CALL=1, or while the file STANDIN_NO_TOOL_CALL_FILE exists, no tool call is parsed: the raw call
    text comes back as content, as with a wrong or missing parser."""
    msgs = req.get("messages") or []
    last = next((m.get("content") for m in reversed(msgs) if isinstance(m, dict) and m.get("role") == "user"), "")
    last = last if isinstance(last, str) else ""
    text, finish = default_text, "length"
    m = re.search(r"(-?\d+)\s*([*x\u00d7+-])\s*(-?\d+)", last)
    if m:
        x, op, y = int(m.group(1)), m.group(2), int(m.group(3))
        val = x + y if op == "+" else x - y if op == "-" else x * y
        text, finish = "%d %s %d = %d" % (x, op, y, val), "stop"
    message = {"role": "assistant", "content": text, "reasoning_content": None}
    if a.get("reasoning_parser"):
        message["reasoning_content"] = "The user asks: %s. Let me work it out." % last[:200]
    tools = [t for t in (req.get("tools") or []) if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    no_call_file = os.environ.get("STANDIN_NO_TOOL_CALL_FILE")
    no_call = env_bool("STANDIN_NO_TOOL_CALL", False) or bool(no_call_file and os.path.exists(no_call_file))
    if tools and req.get("tool_choice", "auto") != "none":
        fn = tools[0]["function"]
        params = (fn.get("parameters") or {}).get("required") or []
        args = json.dumps({p: "Paris" for p in params if isinstance(p, str)})
        if a.get("tool_call_parser") and not no_call:
            message["content"] = None
            message["tool_calls"] = [{"id": "call_%s" % uuid.uuid4().hex[:24], "index": 0, "type": "function",
                                      "function": {"name": fn.get("name"), "arguments": args}}]
            finish = "tool_calls"
        else:
            message["content"] = "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>" % (
                json.dumps(fn.get("name")), args)
            finish = "stop"
    return message, finish


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = build_parser(load_flag_table()).parse_args(argv)  # exits 2 with argparse's message on a bad command line
    args, arch, ctx, model_type = resolve(ns, argv)  # resolution errors end in a Python traceback, exit 1
    standin = Standin(args, arch, ctx, model_type, argv)
    held = [hold_device(p.strip()) for p in os.environ.get("STANDIN_HOLD_DEVICES", "").split(",") if p.strip()]
    signal.signal(signal.SIGTERM, standin.stop)
    signal.signal(signal.SIGINT, standin.stop)
    standin.run()
    for fd in held:
        os.close(fd)


def hold_device(path):
    """A descriptor on `path` kept for the server's life, as SGLang keeps /dev/nvidiaN open. A node
    no driver answers (the qemu host's NVIDIA stand-in nodes: ENXIO) is held through O_PATH: the
    descriptor names the node all the same, which is what a holder scan reads."""
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        return os.open(path, os.O_PATH)


if __name__ == "__main__":
    main()
