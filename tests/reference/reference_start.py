"""The start every model reference script shares: remove a stale output (a failed run must not leave
the previous one for the C++ test to read), then import numpy and torch, or exit 77 -- the ctest
skip code -- when Debian's python3-torch is not installed."""
import os
import sys


def start(out, script):
    if os.path.exists(out):
        os.remove(out)
    try:
        import numpy
        import torch
    except ImportError as e:
        print(f"{script}: {e}; skipping", file=sys.stderr)
        sys.exit(77)
    return numpy, torch
