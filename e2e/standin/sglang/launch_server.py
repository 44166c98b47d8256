"""`python -m sglang.launch_server ARGS` -> the gpuplane stand-in (sglang_standin.main)."""

import os
import sys
import warnings


def _main():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.dirname(here), here):  # sglang_standin.py beside the package, or inside it
        if os.path.isfile(os.path.join(d, "sglang_standin.py")) and d not in sys.path:
            sys.path.insert(0, d)
    import sglang_standin

    sglang_standin.main()


if __name__ == "__main__":
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]"
    )
    _main()
