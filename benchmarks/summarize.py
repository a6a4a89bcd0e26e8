#!/usr/bin/python3
"""Markdown tables from Google Benchmark JSON output of bench_gemm and bench_pointwise.

    ./build/benchmarks/bench_gemm --benchmark_filter='gemm/(ours|bf16|bf16f)/.*/4096/' --benchmark_out=bf16.json
    /usr/bin/python3 benchmarks/summarize.py gemm-bf16 bf16.json

    ./build/benchmarks/bench_gemm --benchmark_filter='/4096/' --benchmark_out=gemm.json
    /usr/bin/python3 benchmarks/summarize.py gemm gemm.json
    ./build/benchmarks/bench_pointwise --benchmark_format=json | /usr/bin/python3 benchmarks/summarize.py pointwise -

With --benchmark_repetitions the median aggregate is used; without, the single run. Several JSON
files may be given (later ones add rows; same names overwrite).

gemm:       one row per (M, K, N, op): ours and OpenBLAS GFLOP/s, ours/OpenBLAS, ours and OpenBLAS
            as a fraction of the FMA peak measured in the same process, for each thread count.
gemm-bf16:  one row per (M, K, N, op): our fp32 GEMM, gemm_bf16 on bf16 operands ("bf16") and on
            float operands rounded while packed ("bf16f"): GFLOP/s, each over fp32, and bf16 as a
            fraction of the bf16 dot-product peak measured in the same process.
pointwise:  one row per kernel: GB/s, the copy probe's GB/s and the ratio, per thread count.
"""
import argparse
import json
import re
import sys


def load(paths):
    rows = {}
    context = {}
    for p in paths:
        data = json.load(sys.stdin if p == "-" else open(p))
        context.update(data.get("context", {}))
        for b in data["benchmarks"]:
            name = b.get("run_name", b["name"])
            name = re.sub(r"/(iterations:\d+|manual_time|real_time)", "", name)
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") != "median":
                    continue
                rows[name] = b
            elif name not in rows or rows[name].get("run_type") != "aggregate":
                rows[name] = b
    return rows, context


def gemm_data(rows, impls):
    """{(threads, M, K, N, op, impl): benchmark} for the gemm/<impl>/... rows of the given impls."""
    pat = re.compile(r"gemm/(" + "|".join(impls) + r")/(NN|NT|TN)/(\d+)/(\d+)/(\d+)/threads:(\d+)$")
    data = {}
    for name, b in rows.items():
        m = pat.match(name)
        if m:
            impl, op, M, K, N, t = m.groups()
            data[(int(t), int(M), int(K), int(N), op, impl)] = b
    return data


def gemm_table(rows, context):
    data = gemm_data(rows, ("ours", "openblas"))
    peak = context.get("peak GFLOP/s (1 thread, 2 threads)")
    if peak:
        print(f"FMA peak measured in the same run (1 thread, 2 threads): {peak} GFLOP/s\n")
    threads = sorted({k[0] for k in data}, reverse=True)
    for t in threads:
        print(f"**{t} thread{'s' if t > 1 else ''}**\n")
        print("| M | K | N | op | ours GFLOP/s | OpenBLAS GFLOP/s | ours/OpenBLAS | ours % peak | OpenBLAS % peak |")
        print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
        shapes = sorted({k[1:5] for k in data if k[0] == t}, key=lambda s: (-s[0], s[1], s[2], "NN NT TN".index(s[3])))
        ratios, fracs = [], []
        for (M, K, N, op) in shapes:
            o = data.get((t, M, K, N, op, "ours"))
            b = data.get((t, M, K, N, op, "openblas"))
            og = o["GFLOP/s"] if o else float("nan")
            bg = b["GFLOP/s"] if b else float("nan")
            ratio = og / bg if o and b else float("nan")
            if o and b:
                ratios.append(ratio)
            if o:
                fracs.append(o["peak"])
            print(f"| {M} | {K} | {N} | {op} | {og:.0f} | {bg:.0f} | {ratio:.2f}x | "
                  f"{100 * o['peak'] if o else float('nan'):.0f} % | {100 * b['peak'] if b else float('nan'):.0f} % |")
        if fracs:
            fr = sorted(fracs)
            msg = f"\nours: median {100 * fr[len(fr) // 2]:.0f} % of peak (min {100 * fr[0]:.0f} %, max {100 * fr[-1]:.0f} %)"
            if ratios:
                rs = sorted(ratios)
                msg += f"; median ours/OpenBLAS {rs[len(rs) // 2]:.2f}x (min {rs[0]:.2f}x)"
            print(msg)
        print()


def gemm_bf16_table(rows, context):
    data = gemm_data(rows, ("ours", "bf16", "bf16f"))
    for key in ("peak GFLOP/s (1 thread, 2 threads)", "bf16 dot peak GFLOP/s (1 thread, 2 threads)", "gemm_bf16 path"):
        if key in context:
            print(f"{key}: {context[key]}  ")
    print()
    nan = float("nan")
    for t in sorted({k[0] for k in data}, reverse=True):
        print(f"**{t} thread{'s' if t > 1 else ''}**\n")
        print("| M | K | N | op | fp32 GFLOP/s | bf16 GFLOP/s | bf16 / fp32 | bf16f GFLOP/s | bf16f / fp32 | bf16 % of bf16 peak |")
        print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        shapes = sorted({k[1:5] for k in data if k[0] == t}, key=lambda s: (-s[0], s[1], s[2], "NN NT TN".index(s[3])))
        ratios, fracs = [], []
        for (M, K, N, op) in shapes:
            g = {i: data.get((t, M, K, N, op, i)) for i in ("ours", "bf16", "bf16f")}
            v = {i: (b["GFLOP/s"] if b else nan) for i, b in g.items()}
            frac = g["bf16"]["peak"] if g["bf16"] else nan
            r, rf = v["bf16"] / v["ours"], v["bf16f"] / v["ours"]
            if g["bf16"] and g["ours"]:
                ratios.append(r)
                fracs.append(frac)
            print(f"| {M} | {K} | {N} | {op} | {v['ours']:.0f} | {v['bf16']:.0f} | {r:.2f}x | {v['bf16f']:.0f} | "
                  f"{rf:.2f}x | {100 * frac:.0f} % |")
        if ratios:
            rs, fr = sorted(ratios), sorted(fracs)
            print(f"\nbf16 / fp32: median {rs[len(rs) // 2]:.2f}x (min {rs[0]:.2f}x, max {rs[-1]:.2f}x); "
                  f"bf16 % of bf16 peak: median {100 * fr[len(fr) // 2]:.0f} % (min {100 * fr[0]:.0f} %)")
        print()


def pointwise_table(rows, context):
    pat = re.compile(r"([a-z_]+)/([0-9x]+)/threads:(\d+)$")
    data = {}
    for name, b in rows.items():
        m = pat.match(name)
        if m and not name.startswith("copy/"):
            k, shape, t = m.groups()
            data[(int(t), k, shape)] = b
    threads = sorted({k[0] for k in data}, reverse=True)
    print("| kernel | shape | threads | GB/s | copy GB/s (same size) | of copy |")
    print("|---|---|---:|---:|---:|---:|")
    for t in threads:
        for (tt, k, shape), b in data.items():
            if tt == t:
                print(f"| {k} | {shape} | {t} | {b['GB/s']:.1f} | {b['copy_GB/s']:.1f} | {100 * b['of_copy']:.0f} % |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["gemm", "gemm-bf16", "pointwise"])
    ap.add_argument("json", nargs="+", help="Google Benchmark JSON files ('-' for stdin)")
    args = ap.parse_args()
    rows, context = load(args.json)
    {"gemm": gemm_table, "gemm-bf16": gemm_bf16_table, "pointwise": pointwise_table}[args.kind](rows, context)


if __name__ == "__main__":
    main()
