#!/usr/bin/python3
"""The table and plot of a time-to-quality race (benchmarks/time_to_quality.sh), from its run
directory: OUT/pytorch.jsonl (the peer's metrics; its last evaluation's loss is the target) and
OUT/<variant>-seed<n>/metrics.jsonl (gpt_train's). A run's time to the target is the wall_seconds of
its first evaluation at or below the target (training time; evaluations left out).

    benchmarks/time_to_quality.py OUT --variants dense-fp32 static-fp32 --seeds 1 2 3
        [--json benchmarks/results/data/time_to_quality.jsonl --command "..."] [--plot FILE.png]

Prints a Markdown table; --json appends one results line per contender (benchmarks/common/results.py);
the plot (gnuplot, PNG; default OUT/time-to-quality.png) shows validation loss against minutes.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from common import results  # noqa: E402


def evals(path):
    with open(path) as f:
        return [j for j in map(json.loads, f) if j.get("kind") == "eval"]


def rate(path):
    with open(path) as f:
        r = [(j["step"], j["tokens_per_s"]) for j in map(json.loads, f) if j.get("kind") == "train"]
    later = [t for s, t in r if s > 10] or [t for _, t in r]  # the first steps warm up
    return statistics.median(later) if later else float("nan")


def first_at(ev, target):
    """(minutes, step) of the first evaluation at or below target, or None."""
    for e in ev:
        if e["loss"] <= target:
            return e["wall_seconds"] / 60, e["step"]
    return None


def plot(curves, target, path):
    gp = shutil.which("gnuplot")
    if not gp:
        print("time_to_quality.py: gnuplot not found, no plot", file=sys.stderr)
        return
    work = path + ".d"
    os.makedirs(work, exist_ok=True)
    cmds = []
    for i, (name, ev) in enumerate(curves):
        dat = os.path.join(work, f"{i}.dat")
        with open(dat, "w") as f:
            for e in ev:
                f.write(f"{e['wall_seconds'] / 60:.4f} {e['loss']:.5f}\n")
        cmds.append(f"'{dat}' using 1:2 with lines lw 2 title '{name}'")
    cmds.append(f"{target} with lines dt 2 lc rgb 'black' title 'target (PyTorch after its run)'")
    cairo = subprocess.run([gp, "-e", "set terminal pngcairo"], capture_output=True).returncode == 0
    terminal = "pngcairo" if cairo else "png"
    script = "\n".join([
        f"set terminal {terminal} size 900,560",
        f"set output '{path}'",
        "set xlabel 'minutes of training (evaluations left out)'",
        "set ylabel 'validation loss'",
        "set grid",
        "set key top right",
        f"set yrange [{target - 0.6}:{target + 2.0}]",
        "plot " + ", \\\n  ".join(cmds),
    ])
    subprocess.run([gp], input=script, text=True, check=True)
    shutil.rmtree(work)
    print(f"time_to_quality.py: plot {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--variants", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", type=int, required=True)
    ap.add_argument("--command", default="benchmarks/time_to_quality.sh")
    ap.add_argument("--plot", default=None)
    results.add_argument(ap)
    args = ap.parse_args()

    peer = evals(os.path.join(args.out, "pytorch.jsonl"))
    target = peer[-1]["loss"]
    peer_min, peer_step = first_at(peer, target)
    steps = int(open(os.path.join(args.out, "steps")).read())
    rows = [("pytorch", [peer_min], [peer_step], 1, rate(os.path.join(args.out, "pytorch.jsonl")), [target])]
    curves = [("PyTorch fp32 dense", peer)]
    for v in args.variants:
        mins, stp, last, rates = [], [], [], []
        for s in args.seeds:
            m = os.path.join(args.out, f"{v}-seed{s}", "metrics.jsonl")
            if not os.path.exists(os.path.join(args.out, f"{v}-seed{s}", "summary.json")):
                continue  # not run, or cut short
            ev = evals(m)
            hit = first_at(ev, target)
            if hit:
                mins.append(hit[0])
                stp.append(hit[1])
            last.append(ev[-1]["loss"])
            rates.append(rate(m))
            if s == args.seeds[0]:
                curves.append((f"sparselm {v}", ev))
        rows.append((v, mins, stp, len(last), statistics.median(rates) if rates else float("nan"), last))

    print(f"target: validation loss {target:.4f} (PyTorch's last evaluation, step {peer[-1]['step']} of a "
          f"{steps}-step schedule, {peer[-1]['wall_seconds'] / 60:.1f} min)\n")
    print("| contender | runs reaching the target | minutes to target (median; min–max) | steps (median) | "
          "tokens/s | PyTorch minutes / these |")
    print("|---|---:|---:|---:|---:|---:|")
    out = results.Results("time_to_quality", args.json, args.command)
    for name, mins, stp, runs, tps, last in rows:
        if mins:
            med = statistics.median(mins)
            spread = f"; {min(mins):.2f}–{max(mins):.2f}" if len(mins) > 1 else ""
            ratio = peer_min / med
            print(f"| {name} | {len(mins)} of {runs} | {med:.2f}{spread} | {statistics.median(stp):.0f} | "
                  f"{tps:.0f} | **{ratio:.2f}×** |")
        else:
            med, ratio = None, None
            print(f"| {name} | 0 of {runs} | not reached (final loss {statistics.median(last):.4f}) | | {tps:.0f} | |")
        out.add({"contender": name, "schedule_steps": steps, "seeds": args.seeds if name != "pytorch" else [0],
                 "model": "configs/gpt-race-wide.json" if name.split("-")[0] in ("static", "dynamic")
                 else "configs/gpt-race.json", "batch": 8, "seq": 128},
                {"target_loss": target, "minutes_median": med, "minutes": mins, "steps_to_target": stp,
                 "runs": runs, "reached": len(mins), "ratio_vs_pytorch": ratio, "tokens_per_s": tps,
                 "final_loss": last}, threads=2)
    plot(curves, target, args.plot or os.path.join(args.out, "time-to-quality.png"))


if __name__ == "__main__":
    main()
