#!/usr/bin/python3
"""Runs the sparselm BERT pre-training step (build/benchmarks/bench_bert_step) and the PyTorch peer
(benchmarks/peers/torch_bert_step.py) on the same model and shape, one after the other in one
invocation, and prints a markdown table: samples/s of both, the ratio, our MFU against the FMA peak
measured in the same run, and peak RSS of both processes.

    /usr/bin/python3 benchmarks/compare_bert_step.py                     # BERT-base, 8x128, 20 masked
    /usr/bin/python3 benchmarks/compare_bert_step.py --config configs/bert-mini.json --steps 5

--json FILE (or $SPARSELM_RESULTS) also appends a results line (benchmarks/common/results.py).
"""
import argparse
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from common import results  # noqa: E402
from compare_gpt_step import run  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(root, "configs", "bert-base.json"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--masked", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(root, "build"))
    results.add_argument(ap)
    args = ap.parse_args()
    out = results.Results("compare_bert_step", args.json)
    ours_bin = os.path.join(args.build, "benchmarks", "bench_bert_step")
    if not os.path.exists(ours_bin):
        sys.exit(f"{ours_bin} not found: build first (cmake --build {args.build} --target bench_bert_step)")
    common = ["--config", args.config, "--batch", str(args.batch), "--seq", str(args.seq), "--masked",
              str(args.masked), "--steps", str(args.steps), "--threads", str(args.threads)]
    o = run([ours_bin] + common)
    p = run(["/usr/bin/python3", os.path.join(here, "peers", "torch_bert_step.py")] + common)
    print(f"model {os.path.basename(args.config)}, MLM ({args.masked} positions) + NSP, fp32, AdamW + global-norm "
          f"clipping, dropout as configured, {args.threads} threads, median of {args.steps} steps")
    print()
    print("| batch x seq | sparselm samples/s | PyTorch samples/s | ratio | sparselm MFU | FMA peak GFLOP/s | "
          "sparselm RSS MB | PyTorch RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.batch}x{args.seq} | {o['samples_per_second']:.2f} | {p['samples_per_second']:.2f} | "
          f"{o['samples_per_second'] / p['samples_per_second']:.2f}x | {100 * o['mfu']:.1f} % | "
          f"{o['fma_peak_gflops']:.0f} | {o['peak_rss_mb']:.0f} | {p['peak_rss_mb']:.0f} |")
    out.add({"config": os.path.basename(args.config), "batch": args.batch, "seq": args.seq, "masked": args.masked,
             "steps": args.steps},
            {"sparselm_samples_per_second": o["samples_per_second"],
             "pytorch_samples_per_second": p["samples_per_second"],
             "ratio_vs_pytorch": o["samples_per_second"] / p["samples_per_second"], "mfu": o["mfu"],
             "sparselm_peak_rss_mb": o["peak_rss_mb"], "pytorch_peak_rss_mb": p["peak_rss_mb"],
             "torch": p.get("torch")},
            args.threads, o["fma_peak_gflops"])


if __name__ == "__main__":
    main()
