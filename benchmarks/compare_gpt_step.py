#!/usr/bin/python3
"""Runs the sparselm GPT training step (build/benchmarks/bench_gpt_step) and the PyTorch peer
(benchmarks/peers/torch_gpt_step.py) on the same model and shapes, one after the other in one
invocation, and prints a markdown table: tokens/s of both, the ratio, our MFU against the FMA peak
measured in the same run, and peak RSS of both processes.

    /usr/bin/python3 benchmarks/compare_gpt_step.py                      # GPT-2 small, 8x128 and 4x64
    /usr/bin/python3 benchmarks/compare_gpt_step.py --shapes 4x64 --steps 3
    /usr/bin/python3 benchmarks/compare_gpt_step.py --shapes 8x128 --precision bf16   # both in bf16

--json FILE (or $SPARSELM_RESULTS) also appends one results line per shape (benchmarks/common/results.py).
"""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from common import results  # noqa: E402


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=results.child_env()).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(root, "configs", "gpt2-small.json"))
    ap.add_argument("--shapes", default="8x128,4x64", help="comma-separated BxT")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="both: our --precision, PyTorch's bf16 autocast")
    ap.add_argument("--extra", default="", help="extra flags for bench_gpt_step (e.g. --recompute)")
    results.add_argument(ap)
    args = ap.parse_args()
    out = results.Results("compare_gpt_step", args.json)
    ours_bin = os.path.join(args.build, "benchmarks", "bench_gpt_step")
    if not os.path.exists(ours_bin):
        sys.exit(f"{ours_bin} not found: build first (cmake --build {args.build} --target bench_gpt_step)")
    rows = []
    for shape in args.shapes.split(","):
        b, t = (int(x) for x in shape.lower().split("x"))
        common = ["--config", args.config, "--batch", str(b), "--seq", str(t), "--steps", str(args.steps),
                  "--threads", str(args.threads), "--precision", args.precision]
        ours = run([ours_bin] + common + args.extra.split())
        theirs = run(["/usr/bin/python3", os.path.join(here, "peers", "torch_gpt_step.py")] + common)
        rows.append((shape, ours, theirs))
        print(f"# {shape}: ours {ours['tokens_per_second']:.1f} tok/s, pytorch {theirs['tokens_per_second']:.1f} tok/s",
              file=sys.stderr)
    print(f"model {os.path.basename(args.config)}, {args.precision}, AdamW + global-norm clipping, {args.threads} threads, "
          f"median of {args.steps} steps")
    print()
    bf16 = args.precision == "bf16"
    peak_col = "bf16 dot peak GFLOP/s" if bf16 else "FMA peak GFLOP/s"
    print(f"| batch x seq | sparselm tok/s | PyTorch tok/s | ratio | sparselm MFU | {peak_col} | "
          "sparselm RSS MB | PyTorch RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for shape, o, p in rows:
        # In bf16 the MFU is against the bf16 dot-product peak of the same run.
        peak = o["bf16_peak_gflops"] if bf16 else o["fma_peak_gflops"]
        mfu = o["model_gflops_per_s"] / peak if peak else float("nan")
        print(f"| {shape} | {o['tokens_per_second']:.1f} | {p['tokens_per_second']:.1f} | "
              f"{o['tokens_per_second'] / p['tokens_per_second']:.2f}x | {100 * mfu:.1f} % | "
              f"{peak:.0f} | {o['peak_rss_mb']:.0f} | {p['peak_rss_mb']:.0f} |")
        b, t = (int(x) for x in shape.lower().split("x"))
        out.add({"config": os.path.basename(args.config), "batch": b, "seq": t, "precision": args.precision,
                 "extra": args.extra, "steps": args.steps},
                {"sparselm_tokens_per_second": o["tokens_per_second"],
                 "pytorch_tokens_per_second": p["tokens_per_second"],
                 "ratio_vs_pytorch": o["tokens_per_second"] / p["tokens_per_second"], "mfu": mfu,
                 "sparselm_peak_rss_mb": o["peak_rss_mb"], "pytorch_peak_rss_mb": p["peak_rss_mb"],
                 "torch": p.get("torch")},
                args.threads, o["fma_peak_gflops"])


if __name__ == "__main__":
    main()
