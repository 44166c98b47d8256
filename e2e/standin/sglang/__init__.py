"""gpuplane test stand-in for the `sglang` package: only `python -m sglang.launch_server` is provided.

The implementation lives in sglang_standin.py (next to this package directory, or next to this file)."""

__version__ = "0.5.23"
