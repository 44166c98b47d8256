#!/usr/bin/env python3
"""Runs SGLang's OWN argument parsing, resolution and checks on a rendered launch command, on CPU.

Used by e2e/tests/sglang_args.rs with the venv from e2e/setup/sglang-venv.sh (sglang 0.5.23). No GPU and no
weights: the real --model-path (e.g. /shared/models/Qwen3.5-122B-A10B) is replaced by a tiny local model
directory that holds only a config.json of the same architecture, and `--device cpu` is appended.

What runs is what `python -m sglang.launch_server ARGV` runs before it spawns any scheduler:
    load_plugins()                          (launch_server.py, so plugin flags parse the same)
    server_args = prepare_server_args(argv) (argparse: unknown flags, bad types and bad choices exit 2)
    server_args.resolve_once()              (run_resolution_pipeline: every resolution hook, incl.
                                             handle_speculative_decoding, which rewrites NEXTN -> EAGLE and
                                             forces draft tokens = steps + 1 when topk == 1)
    server_args.check_server_args()         (what Engine._launch_subprocesses calls next)
The values reported are ServerArgs.resolved_dict(), i.e. what GET /server_info would report.
Not run: resolve_auto_parsers() (only matters for `auto` parsers; it loads a tokenizer) and everything after
(process spawning, weight loading, CUDA graph capture, the draft worker).

INPUT (stdin, JSON), one of:
  * a list of strings: the flags, i.e. the rendered argv minus [python, "-m", "sglang.launch_server"];
    options come from the command line: --model {qwen3_5_moe,qwen3_moe} --tp N --no-cpu-shim
  * {"cases": [{"name": str, "argv": [...], "model": str?, "tp": int?, "cpu_shim": bool?}, ...]}
    to check several commands in one process (importing sglang + torch takes ~5-8 s).
OUTPUT (stdout, JSON): for a list, one result; for cases, {"results": {name: result}}. A result is
  {ok, stage, error, error_type, resolved: {...}, passed: {...}, rewritten: {field: [passed, resolved]},
   warnings: [...], extra: {...}, model, cpu_shims, argv_used}
  stage: "parse" | "resolve" | "check" | "done". Exit status 0 whenever the JSON was written.

Models (config.json only, a few KB):
  qwen3_5_moe (default)  Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe: the architecture of
                         Qwen3.5-122B-A10B (hybrid Gated-DeltaNet linear attention + full attention, MoE, one
                         MTP layer, which NEXTN uses as its draft). SGLang resolves it on CPU with ONE shim, see
                         CPU SHIM below.
  qwen3_moe              Qwen3MoeForCausalLM (plain attention MoE, Qwen3-30B-A3B style): needs no shim.

CPU SHIM (only with qwen3_5_moe; cpu_shim true by default; --no-cpu-shim / "cpu_shim": false turn it off):
  Qwen3.5 is a hybrid "mamba-like" model, so resolution turns on the mamba radix cache.
  _mamba_radix_cache_resolution (arg_groups/overrides.py) picks mamba_radix_cache_strategy "extra_buffer"
  because at that point the overlap schedule is still on (the speculative hook only turns it off for CPU later),
  and then validate_mamba_extra_buffer (arg_groups/mamba_hook.py:120) asserts
  _platform_supports_mamba_cache_extra_buffer(), which is True only on CUDA/MUSA/NPU/HIP/XPU:
      AssertionError: extra_buffer requires platform support for Mamba cache state snapshots.
  That is a statement about the device, not about the flags. The shim makes that one function answer as it
  does on CUDA; everything else (including the asserts that follow it: mamba_track_interval >= draft tokens,
  mamba_track_interval % page_size == 0) runs unchanged.
"""

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The fields the test compares (keys of ServerArgs.resolved_dict(), i.e. /server_info).
FIELDS = [
    "tp_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "mem_fraction_static",
    "tool_call_parser",
    "reasoning_parser",
    "disable_custom_all_reduce",
    "host",
    "port",
    "served_model_name",
]
# Reported for information only.
EXTRA = [
    "device",
    "model_path",
    "speculative_draft_model_path",
    "max_running_requests",
    "disable_overlap_schedule",
    "enable_metrics",
    "attention_backend",
    "mamba_radix_cache_strategy",
]

# Tiny configs: real architecture names and layer layout, toy sizes.
QWEN3_5_MOE = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "image_token_id": 248056,
    "video_token_id": 248057,
    "vision_start_token_id": 248053,
    "vision_end_token_id": 248054,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "vocab_size": 1024,
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "full_attention_interval": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "max_position_embeddings": 4096,
        "mtp_num_hidden_layers": 1,
        "dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "qwen3_5_moe",
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 128,
    },
}
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
# Used when the command carries --speculative-draft-model-path (an EAGLE3-style draft head).
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 1,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
MODELS = {"qwen3_5_moe": QWEN3_5_MOE, "qwen3_moe": QWEN3_MOE}


def write_model(root, name, config):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return d


def set_flag(argv, names, value, append=True):
    """Replaces the value of the first flag in `names` (`--f v` or `--f=v`); appends `names[0] value` if absent."""
    out, done, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if not done and a in names and i + 1 < len(argv):
            out += [a, value]
            i += 2
            done = True
            continue
        if not done and any(a.startswith(n + "=") for n in names):
            out.append(a.split("=", 1)[0] + "=" + value)
            done = True
        else:
            out.append(a)
        i += 1
    if not done and append:
        out += [names[0], value]
    return out


def plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return str(v)


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        try:
            self.messages.append(record.getMessage())
        except Exception:  # noqa: BLE001
            pass


def describe(exc):
    """Type, message and -- for bare asserts -- where in sglang it was raised."""
    msg = str(exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    for fr in reversed(tb):
        if "/sglang/" in fr.filename:
            where = f"{fr.filename.split('/site-packages/')[-1]}:{fr.lineno} in {fr.name}"
            break
    text = f"{type(exc).__name__}: {msg}" if msg else f"{type(exc).__name__} (no message)"
    if where:
        text += f" [at {where}]"
    return type(exc).__name__, text


def check_one(flags, model, tp, cpu_shim, root):
    import sglang.srt.arg_groups.mamba_hook as mamba_hook
    from sglang.srt.server_args import prepare_server_args

    if model not in MODELS:
        raise SystemExit(f"unknown model {model!r}; one of {sorted(MODELS)}")
    model_dir = write_model(root, model, MODELS[model])
    argv = set_flag(list(flags), ["--model-path", "--model"], model_dir, append=False)
    if any(a in ("--speculative-draft-model-path", "--speculative-draft-model") or a.startswith("--speculative-draft-model-path=") for a in argv):
        argv = set_flag(argv, ["--speculative-draft-model-path", "--speculative-draft-model"], write_model(root, "draft", DRAFT), append=False)
    argv = set_flag(argv, ["--device"], "cpu")
    if tp is not None:
        argv = set_flag(argv, ["--tp-size", "--tensor-parallel-size"], str(tp))

    shims = []
    original = mamba_hook._platform_supports_mamba_cache_extra_buffer
    if cpu_shim and model == "qwen3_5_moe":
        mamba_hook._platform_supports_mamba_cache_extra_buffer = lambda: True
        shims.append("arg_groups.mamba_hook._platform_supports_mamba_cache_extra_buffer() -> True (as on CUDA)")

    res = {
        "ok": False,
        "stage": "parse",
        "error": None,
        "error_type": None,
        "resolved": {},
        "passed": {},
        "rewritten": {},
        "warnings": [],
        "extra": {},
        "model": model,
        "cpu_shims": shims,
        "argv_used": argv,
    }
    cap = Capture()
    sg = logging.getLogger("sglang")
    sg.addHandler(cap)
    try:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                sa = prepare_server_args(argv)
        except SystemExit as e:  # argparse: exit 2 with "sglang serve: error: ..."
            lines = [l for l in err.getvalue().splitlines() if "error:" in l]
            res["error_type"] = "argparse"
            res["error"] = (lines[-1] if lines else err.getvalue().strip()) or f"exit {e.code}"
            return res
        finally:
            sys.stderr.write(err.getvalue())
        res["passed"] = {k: plain(getattr(sa, k, None)) for k in FIELDS}
        try:
            res["stage"] = "resolve"
            sa.resolve_once()
            res["stage"] = "check"
            sa.check_server_args()
            res["stage"] = "done"
        except Exception as e:  # noqa: BLE001  (ValueError, AssertionError, TypeError, NotImplementedError, ...)
            res["error_type"], res["error"] = describe(e)
            traceback.print_exc(file=sys.stderr)
            return res
        rd = sa.resolved_dict()
        res["resolved"] = {k: plain(rd.get(k)) for k in FIELDS}
        res["extra"] = {k: plain(rd.get(k)) for k in EXTRA}
        res["rewritten"] = {
            k: [res["passed"][k], res["resolved"][k]]
            for k in FIELDS
            if res["passed"][k] is not None and res["passed"][k] != res["resolved"][k]
        }
        res["ok"] = True
        return res
    finally:
        sg.removeHandler(cap)
        res["warnings"] = cap.messages
        mamba_hook._platform_supports_mamba_cache_extra_buffer = original


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3_5_moe", choices=sorted(MODELS))
    ap.add_argument("--tp", type=int, default=None, help="override --tp-size")
    ap.add_argument("--no-cpu-shim", action="store_true")
    opts = ap.parse_args()

    data = json.load(sys.stdin)
    # Everything sglang prints goes to stderr; stdout carries only the JSON answer.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from sglang.srt.plugins import load_plugins

    load_plugins()
    with tempfile.TemporaryDirectory(prefix="gpuplane-sglang-") as root:
        if isinstance(data, list):
            answer = check_one(data, opts.model, opts.tp, not opts.no_cpu_shim, root)
        else:
            answer = {"results": {}}
            for c in data["cases"]:
                answer["results"][c["name"]] = check_one(
                    c["argv"], c.get("model", opts.model), c.get("tp"), c.get("cpu_shim", True), root
                )
    json.dump(answer, out, indent=1)
    out.write("\n")
    out.flush()


if __name__ == "__main__":
    main()
