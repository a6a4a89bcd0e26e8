"""Shared parts of the PyTorch peers (torch_gpt_step.py, torch_bert_step.py, torch_gpt_train.py): the
command line, timing of the training steps, the JSON line they print, and the GPT's initial weights."""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "reference"))


def parse_args(doc, default_config, default_steps, extra=()):
    """--config, --batch 8, --seq 128, --steps, --warmup 1, --threads 2, plus extra (name, type, default)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--config", default=os.path.join(here, "..", "..", "configs", default_config))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=default_steps, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    for name, kind, default in extra:
        ap.add_argument(name, type=kind, default=default)
    return ap.parse_args()


def timed_steps(args, step):
    """Runs step(i) for warmup + steps iterations; returns (median seconds of the timed ones, last
    loss). step(i) returns the loss of its step."""
    times, loss = [], None
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step(i)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), loss


def report(torch, args, seconds, loss, **rates):
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "batch": args.batch, "seq": args.seq,
        "threads": args.threads, "step_seconds": seconds, **rates,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "loss": float(loss),
    }))


def gpt_params(torch, gpt_model, cfg):
    """A GPT's initial tensors as sparselm draws them (N(0, 0.02), c_proj scaled by 1/sqrt(2L), norms
    at 1, biases at 0), with requires_grad; returns (params by name, decayed, not decayed)."""
    L = cfg["n_layer"]
    params = {}
    for name, shape in gpt_model.param_shapes(cfg).items():
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif ".ln_" in name or name.startswith("ln_f"):
            t = torch.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape) * std
        params[name] = t.requires_grad_(True)
    decay = [p for n, p in params.items() if not gpt_model.no_decay(n)]
    other = [p for n, p in params.items() if gpt_model.no_decay(n)]
    return params, decay, other
