#!/usr/bin/python3
"""Renders docs/performance.md's current tables from the benchmarks' results lines
(benchmarks/results/data/*.jsonl, written by `--json FILE`: benchmarks/common/results.hpp, .py).

    scripts/render_performance.py                # print every table the data can give
    scripts/render_performance.py --write        # rewrite the tables between the markers of docs/performance.md
    scripts/render_performance.py --check        # exit 1 (with a diff) when they differ from the data: the
                                                 # docs.performance_tables ctest

A table sits between `<!-- table: KIND HOST -->` and `<!-- end table -->`; everything outside those
pairs is hand-written and left alone. KIND is one of the renderers below, HOST a host kind derived
from each line's probe (zen5, zen4, zen3, xeon-amx, ...). A table shows, for each case, the latest
line of that benchmark on that kind of host, its ratios, and the run (date, commit, command) it
came from. Python 3 standard library only.
"""
import argparse
import difflib
import glob
import json
import os
import re
import statistics
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = re.compile(r"^<!-- table: (\S+) (\S+) -->$")
END = "<!-- end table -->"


# ---- hosts -------------------------------------------------------------------------------------

def host_kind(h):
    vendor, family, model, isa = h.get("vendor", ""), h.get("family", 0), h.get("model", 0), set(h.get("isa", []))
    if vendor == "AuthenticAMD":
        if family == 26:
            return "zen5"
        if family == 25:
            return "zen4" if (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF) else "zen3"
        if family == 23:
            return "zen2"
    if vendor == "GenuineIntel":
        return "xeon-amx" if "amx_bf16" in isa else ("intel-avx512" if "avx512f" in isa else "intel-avx2")
    return re.sub(r"[^a-z0-9]+", "-", (h.get("cpu") or "unknown").lower()).strip("-")


HOST_NAMES = {"zen5": "Zen 5", "zen4": "Zen 4", "zen3": "Zen 3", "zen2": "Zen 2", "xeon-amx": "Intel Xeon (AMX)",
              "intel-avx512": "Intel (AVX-512)", "intel-avx2": "Intel (AVX2)"}


def host_label(kind, lines):
    h = lines[-1]["host"]
    peaks = {}
    for ln in lines:
        if ln.get("fma_peak_gflops"):
            peaks.setdefault(ln["threads"], []).append(ln["fma_peak_gflops"])
    peak = "; ".join(f"{min(v):.0f}–{max(v):.0f} GFLOP/s on {t} thread{'s' if t > 1 else ''}"
                     if round(min(v)) != round(max(v)) else f"{v[0]:.0f} GFLOP/s on {t} thread{'s' if t > 1 else ''}"
                     for t, v in sorted(peaks.items(), reverse=True))
    text = (f"{HOST_NAMES.get(kind, kind)} host: {h.get('cpu') or '?'} (family {h.get('family')}, model "
            f"{h.get('model')}; {', '.join(h.get('isa', [])) or 'no AVX2'}; {h.get('cpus')} CPUs)")
    text += f"; FMA peak measured in these runs: {peak}." if peak else "."
    loads = [ln["load"] for ln in lines if ln.get("load") is not None]
    if loads:
        cpus = h.get("cpus") or 1
        # above the CPU count something besides the benchmark was running; between half and the CPU
        # count the load may be the same sequence's previous benchmark (its threads count for a minute)
        if max(loads) > cpus + 0.5:
            note = " (measured under load: other work shared the CPUs)"
        elif max(loads) >= 0.5 * cpus:
            note = " (busy the minute before: other work, or the previous benchmark of the same sequence)"
        else:
            note = ""
        span = f"{min(loads):.1f}" if f"{min(loads):.1f}" == f"{max(loads):.1f}" else f"{min(loads):.1f}–{max(loads):.1f}"
        text += f" 1-minute load average when they started: {span}{note}."
    return text


# ---- data --------------------------------------------------------------------------------------

def load(data_dir):
    lines = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.jsonl"))):
        with open(path) as f:
            for n, text in enumerate(f, 1):
                if text.strip():
                    try:
                        ln = json.loads(text)
                    except ValueError as e:
                        sys.exit(f"{path}:{n}: not a JSON line: {e}")
                    ln["_order"] = (ln.get("date", ""), path, n)
                    lines.append(ln)
    lines.sort(key=lambda ln: ln["_order"])
    return lines


def latest(lines, key):
    """The latest line per key(line) (None: skip the line), in the order of first appearance."""
    out = {}
    for ln in lines:
        k = key(ln)
        if k is not None:
            out.pop(k, None)
            out[k] = ln
    return list(out.values())


class Runs:
    """Numbers the runs a table's rows come from; footnotes() lists them with their commands."""

    def __init__(self):
        self.ids = {}

    def ref(self, ln):
        if ln["run"] not in self.ids:
            self.ids[ln["run"]] = (len(self.ids) + 1, ln)
        return f"[{self.ids[ln['run']][0]}]"

    def footnotes(self):
        out = []
        for n, ln in self.ids.values():
            date = ln["date"].replace("T", " ").rstrip("Z")[:16]
            out.append(f"[{n}] {date} UTC, commit `{ln['commit']}`: `{ln['command']}`  ")
        if out:
            out[-1] = out[-1].rstrip()
        return out


def table(header, rows):
    out = ["| " + " | ".join(h for h, _ in header) + " |", "|" + "|".join(a for _, a in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def pct(x):
    return f"{100 * x:.1f} %"


def med(values):
    return statistics.median(values) if values else float("nan")


# ---- the tables --------------------------------------------------------------------------------

def render_gpt_step(lines):
    runs, rows = Runs(), []
    for ln in latest(lines, lambda ln: tuple(sorted(ln["case"].items())) + (ln["threads"],)):
        c, m = ln["case"], ln["metrics"]
        rows.append([f"{c['batch']}×{c['seq']}", c["precision"], ln["threads"], f"{m['sparselm_tokens_per_second']:.1f}",
                     f"{m['pytorch_tokens_per_second']:.1f}", f"**{m['ratio_vs_pytorch']:.2f}×**", pct(m["mfu"]),
                     f"{ln['fma_peak_gflops']:.0f}", f"{m['sparselm_peak_rss_mb']:.0f} / {m['pytorch_peak_rss_mb']:.0f}",
                     runs.ref(ln)])
    head = [("batch × seq", "---"), ("precision", "---"), ("threads", "---:"), ("sparselm tok/s", "---:"),
            ("PyTorch tok/s", "---:"), ("sparselm / PyTorch", "---:"), ("sparselm MFU", "---:"),
            ("FMA peak GFLOP/s", "---:"), ("peak RSS MB sparselm / PyTorch", "---:"), ("run", "---")]
    return table(head, rows), runs


def render_bert_step(lines):
    runs, rows = Runs(), []
    for ln in latest(lines, lambda ln: tuple(sorted(ln["case"].items())) + (ln["threads"],)):
        c, m = ln["case"], ln["metrics"]
        rows.append([f"{c['batch']}×{c['seq']}, {c['masked']} masked", ln["threads"],
                     f"{m['sparselm_samples_per_second']:.2f}", f"{m['pytorch_samples_per_second']:.2f}",
                     f"**{m['ratio_vs_pytorch']:.2f}×**", pct(m["mfu"]), f"{ln['fma_peak_gflops']:.0f}",
                     f"{m['sparselm_peak_rss_mb']:.0f} / {m['pytorch_peak_rss_mb']:.0f}", runs.ref(ln)])
    head = [("batch × seq", "---"), ("threads", "---:"), ("sparselm samples/s", "---:"), ("PyTorch samples/s", "---:"),
            ("sparselm / PyTorch", "---:"), ("sparselm MFU", "---:"), ("FMA peak GFLOP/s", "---:"),
            ("peak RSS MB sparselm / PyTorch", "---:"), ("run", "---")]
    return table(head, rows), runs


GEMM_NAME = re.compile(r"gemm/(ours|openblas)/(NN|NT|TN)/(\d+)/(\d+)/(\d+)/threads:(\d+)$")


def render_gemm(lines):
    by = {}
    for ln in latest(lines, lambda ln: ln["case"]["name"] if GEMM_NAME.match(ln["case"]["name"]) else None):
        impl, op, M, K, N, t = GEMM_NAME.match(ln["case"]["name"]).groups()
        by.setdefault((int(t), int(M), int(K), int(N), "NN NT TN".index(op), op), {})[impl] = ln
    runs, rows, fracs, ratios = Runs(), [], {}, {}
    for key in sorted(by, key=lambda k: (-k[0], -k[1], k[2], k[3], k[4])):
        t, M, K, N, _, op = key
        o, b = by[key].get("ours"), by[key].get("openblas")
        og = o["metrics"]["GFLOP/s"] if o else None
        bg = b["metrics"]["GFLOP/s"] if b else None
        ratio = og / bg if o and b else None
        if o:
            fracs.setdefault(t, []).append(o["metrics"]["peak"])
        if ratio:
            ratios.setdefault(t, []).append(ratio)
        rows.append([t, M, K, N, op, f"{og:.0f}" if o else "", f"{bg:.0f}" if b else "",
                     f"**{ratio:.2f}×**" if ratio else "", f"{100 * o['metrics']['peak']:.0f} %" if o else "",
                     f"{100 * b['metrics']['peak']:.0f} %" if b else "",
                     " ".join(sorted({runs.ref(x) for x in (o, b) if x}))])
    head = [("threads", "---:"), ("M", "---:"), ("K", "---:"), ("N", "---:"), ("op", "---"), ("ours GFLOP/s", "---:"),
            ("OpenBLAS GFLOP/s", "---:"), ("ours / OpenBLAS", "---:"), ("ours % of FMA peak", "---:"),
            ("OpenBLAS % of FMA peak", "---:"), ("run", "---")]
    out = table(head, rows)
    for t in sorted(fracs, reverse=True):
        fr = fracs[t]
        msg = (f"{t} thread{'s' if t > 1 else ''}: ours median {100 * med(fr):.0f} % of the FMA peak "
               f"({100 * min(fr):.0f}–{100 * max(fr):.0f} %)")
        if ratios.get(t):
            msg += f", median {med(ratios[t]):.2f}× OpenBLAS ({min(ratios[t]):.2f}–{max(ratios[t]):.2f}×)"
        out += ["", msg + "."]
    return out, runs


def render_bsr(lines):
    runs, rows = Runs(), []
    ordered = latest(lines, lambda ln: tuple(ln["case"][k] for k in ("in", "out", "M", "block", "sparsity")) + (ln["threads"],))
    ordered.sort(key=lambda ln: (-ln["threads"], ln["case"]["in"], ln["case"]["out"], -ln["case"]["block"]))
    for ln in ordered:
        c, m = ln["case"], ln["metrics"]
        paired = m.get("paired_speedup")
        rows.append([ln["threads"], f"{c['in']}×{c['out']}", c["M"], f"{c['sparsity']:.2f}", c["block"],
                     f"{m['sparse_step_ms']:.2f}", f"{m['gemm_step_ms']:.2f}", f"**{m['speedup_vs_gemm']:.2f}×**",
                     f"{paired:.2f}×" if paired is not None else "", f"{m['effective_gflops']:.0f}",
                     f"{100 * m['of_peak']:.0f} %", runs.ref(ln)])
    head = [("threads", "---:"), ("in × out", "---"), ("M", "---:"), ("sparsity", "---:"), ("B", "---:"),
            ("sparse step ms", "---:"), ("dense GEMM step ms", "---:"), ("dense / sparse", "---:"),
            ("paired dense / sparse", "---:"), ("effective GFLOP/s", "---:"), ("% of FMA peak", "---:"), ("run", "---")]
    return table(head, rows), runs


def render_s1_step(lines):
    runs, rows = Runs(), []
    for ln in latest(lines, lambda ln: tuple(sorted(ln["case"].items())) + (ln["threads"],)):
        c, m = ln["case"], ln["metrics"]
        rows.append([c["layers"], f"{c['batch']}×{c['seq']}", c["precision"], f"{c['sparsity']:.2f}", c["block"],
                     ln["threads"], f"{m['dense_step_seconds']:.3f}", f"{m['sparse_step_seconds']:.3f}",
                     f"**{m['speedup_vs_dense']:.2f}×**", f"{m['flop_ceiling']:.2f}×", f"{m['peak_rss_mb']:.0f}",
                     runs.ref(ln)])
    head = [("layers", "---:"), ("batch × seq", "---"), ("precision", "---"), ("sparsity", "---:"), ("B", "---:"),
            ("threads", "---:"), ("dense step s", "---:"), ("sparse step s", "---:"), ("dense / sparse", "---:"),
            ("FLOP ceiling", "---:"), ("peak RSS MB", "---:"), ("run", "---")]
    return table(head, rows), runs


def render_step_variants(lines):
    """bench_gpt_step / bench_bert_step lines: each variant (precision, block, sparsity) against the
    fp32 dense line of the same shape, model and threads."""
    runs, rows = Runs(), []
    shape = lambda c: (c["config"], c["batch"], c["seq"])  # noqa: E731
    ordered = latest(lines, lambda ln: (ln["benchmark"],) + tuple(sorted(ln["case"].items())) + (ln["threads"],))
    for ln in ordered:
        c, m = ln["case"], ln["metrics"]
        rate = "tokens_per_second" if "tokens_per_second" in m else "samples_per_second"
        base = [b for b in ordered if b["benchmark"] == ln["benchmark"] and b["threads"] == ln["threads"]
                and shape(b["case"]) == shape(c) and b["case"]["precision"] == "fp32" and b["case"]["block"] == 0]
        ratio = f"**{m[rate] / base[-1]['metrics'][rate]:.2f}×**" if base and base[-1] is not ln else ""
        variant = c["precision"] + (f", B = {c['block']}, s = {c['sparsity']:.2f}" if c["block"] else ", dense")
        rows.append([ln["benchmark"], c["config"], f"{c['batch']}×{c['seq']}", variant, ln["threads"],
                     f"{m[rate]:.1f} {'tok/s' if rate == 'tokens_per_second' else 'samples/s'}", ratio, pct(m["mfu"]),
                     f"{m['flop_ceiling']:.2f}×", f"{m['peak_rss_mb']:.0f}", runs.ref(ln)])
    head = [("benchmark", "---"), ("model", "---"), ("batch × seq", "---"), ("variant", "---"), ("threads", "---:"),
            ("rate", "---:"), ("vs fp32 dense", "---:"), ("MFU (dense-equivalent)", "---:"), ("FLOP ceiling", "---:"),
            ("peak RSS MB", "---:"), ("run", "---")]
    return table(head, rows), runs


POINTWISE_NAME = re.compile(r"([a-z_]+)/([0-9x]+)/threads:(\d+)$")


def render_pointwise(lines):
    runs, rows = Runs(), []
    mine = latest(lines, lambda ln: ln["case"]["name"] if POINTWISE_NAME.match(ln["case"]["name"])
                  and not ln["case"]["name"].startswith("copy/") else None)
    for ln in sorted(mine, key=lambda ln: -ln["threads"]):
        kernel, shape, _ = POINTWISE_NAME.match(ln["case"]["name"]).groups()
        m = ln["metrics"]
        rows.append([kernel, shape, ln["threads"], f"{m['GB/s']:.1f}", f"{m['copy_GB/s']:.1f}",
                     f"**{100 * m['of_copy']:.0f} %**", runs.ref(ln)])
    head = [("kernel", "---"), ("shape", "---"), ("threads", "---:"), ("GB/s", "---:"),
            ("copy GB/s (same size)", "---:"), ("of copy", "---:"), ("run", "---")]
    return table(head, rows), runs


def render_peak(lines):
    runs, rows = Runs(), []
    for ln in latest(lines, lambda ln: ln["case"]["name"] if "GFLOP/s" in ln["metrics"] else None):
        name = ln["case"]["name"]
        what = {"BM_fma_peak": "fp32 FMA", "BM_bf16_dot_peak": "AVX512-BF16 dot products",
                "BM_amx_peak": "AMX TDPBF16PS"}.get(name.split("/")[0], name)
        rows.append([what, ln["threads"], f"{ln['metrics']['GFLOP/s']:.1f}", runs.ref(ln)])
    head = [("peak", "---"), ("threads", "---:"), ("GFLOP/s (the probe: median of 7; its last of 3 calls)", "---:"),
            ("run", "---")]
    return table(head, rows), runs


def render_compile_time(lines):
    runs, rows = Runs(), []
    for ln in latest(lines, lambda ln: tuple(sorted(ln["case"].items()))):
        c, m = ln["case"], ln["metrics"]
        rows.append([c["form"], f"g++ {c['compiler']} `{c['flags']}`", f"{m['cpu_seconds']:.1f}", f"{m['wall_seconds']:.1f}",
                     f"{m['peak_rss_mib']:.0f}", f"{m['object_kib']}", runs.ref(ln)])
    head = [("form", "---"), ("compiler and flags", "---"), ("CPU s (user + system)", "---:"), ("wall s", "---:"),
            ("peak RSS MiB", "---:"), ("object KiB", "---:"), ("run", "---")]
    return table(head, rows), runs


def render_time_to_quality(lines):
    """benchmarks/time_to_quality.sh: the latest race (one run of the script) on this host kind."""
    runs, rows = Runs(), []
    last = [ln for ln in lines if ln["run"] == lines[-1]["run"]]
    for ln in latest(last, lambda ln: ln["case"]["contender"]):
        c, m = ln["case"], ln["metrics"]
        mins = m["minutes"]
        when = (f"{m['minutes_median']:.2f}" + (f" ({min(mins):.2f}–{max(mins):.2f})" if len(mins) > 1 else "")
                if mins else f"not reached (final loss {med(m['final_loss']):.3f})")
        if mins and m["reached"] < m["runs"]:
            when += f"; {m['runs'] - m['reached']} of {m['runs']} short of it after the schedule"
        ratio = f"**{m['ratio_vs_pytorch']:.2f}×**" if m.get("ratio_vs_pytorch") else "–"
        rows.append([c["contender"], f"`{c['model']}`", f"{m['reached']} of {m['runs']}", when, ratio,
                     f"{m['tokens_per_s']:.0f}", f"{m['target_loss']:.3f}", c["schedule_steps"], runs.ref(ln)])
    head = [("contender", "---"), ("model", "---"), ("runs at target", "---:"), ("minutes to target, median (range)", "---:"),
            ("PyTorch's minutes / these", "---:"), ("tokens/s", "---:"), ("target loss", "---:"),
            ("schedule steps", "---:"), ("run", "---")]
    return table(head, rows), runs


KINDS = {
    "gpt_step": (("compare_gpt_step",), render_gpt_step, "GPT step against PyTorch (`benchmarks/compare_gpt_step.py`)"),
    "bert_step": (("compare_bert_step",), render_bert_step, "BERT pre-training step against PyTorch (`benchmarks/compare_bert_step.py`)"),
    "gemm": (("bench_gemm",), render_gemm, "Dense fp32 GEMM against OpenBLAS and the FMA peak (`bench_gemm`)"),
    "bsr": (("bench_bsr",), render_bsr, "Block-sparse layer fwd + bwd against our dense GEMM step (`bench_bsr`)"),
    "s1_step": (("bench_s1_step",), render_s1_step, "S1-shaped step, block-sparse against dense (`bench_s1_step`)"),
    "peak": (("bench_peak",), render_peak, "The probe: peak rates of this host (`bench_peak`)"),
    "pointwise": (("bench_pointwise",), render_pointwise,
                  "Element-wise kernels against a copy of the same size (`bench_pointwise`)"),
    "compile_time": (("compile_time",), render_compile_time,
                     "Compile time of a downstream translation unit that trains a GPT one step (`benchmarks/compile_time.sh`)"),
    "time_to_quality": (("time_to_quality",), render_time_to_quality,
                        "Minutes of training to PyTorch's validation loss after its run (`benchmarks/time_to_quality.sh`)"),
    "step_variants": (("bench_gpt_step", "bench_bert_step"), render_step_variants,
                      "Whole steps: precision and sparsity variants against fp32 dense (`bench_gpt_step`, `bench_bert_step`)"),
}


def render(kind, host, lines):
    """The text between the markers of (kind, host), or None when the data has no such lines."""
    benchmarks, fn, title = KINDS[kind]
    mine = [ln for ln in lines if ln["benchmark"] in benchmarks and host_kind(ln["host"]) == host]
    if not mine:
        return None
    body, runs = fn(mine)
    used = [ln for ln in mine if ln["run"] in runs.ids]
    return ["<!-- generated by scripts/render_performance.py from benchmarks/results/data/: do not edit -->",
            f"{title}. {host_label(host, used)}", ""] + body + [""] + runs.footnotes()


def rewrite(doc_lines, lines):
    """doc_lines with every marked table rendered; errors for markers without data or without an end."""
    out, errors, i = [], [], 0
    while i < len(doc_lines):
        m = BEGIN.match(doc_lines[i])
        out.append(doc_lines[i])
        i += 1
        if not m:
            continue
        kind, host = m.groups()
        try:
            end = doc_lines.index(END, i)
        except ValueError:
            errors.append(f"line {i}: `<!-- table: {kind} {host} -->` has no `{END}`")
            continue
        if kind not in KINDS:
            errors.append(f"line {i}: unknown table kind {kind!r} (one of {', '.join(KINDS)})")
            text = doc_lines[i:end]
        else:
            text = render(kind, host, lines)
            if text is None:
                errors.append(f"line {i}: no results lines for table {kind} on host {host}")
                text = doc_lines[i:end]
        out += text + [END]
        i = end + 1
    return out, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(root, "benchmarks", "results", "data"))
    ap.add_argument("--doc", default=os.path.join(root, "docs", "performance.md"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the marked tables of --doc")
    mode.add_argument("--check", action="store_true", help="fail when --doc's marked tables differ from the data")
    args = ap.parse_args()
    lines = load(args.data)
    if not (args.write or args.check):
        for kind in KINDS:
            for host in sorted({host_kind(ln["host"]) for ln in lines if ln["benchmark"] in KINDS[kind][0]}):
                print(f"<!-- table: {kind} {host} -->")
                print("\n".join(render(kind, host, lines)))
                print(END + "\n")
        return 0
    with open(args.doc) as f:
        doc = f.read().split("\n")
    new, errors = rewrite(doc, lines)
    for e in errors:
        print(f"{args.doc}: {e}", file=sys.stderr)
    if args.write:
        if new != doc:
            with open(args.doc, "w") as f:
                f.write("\n".join(new))
        return 1 if errors else 0
    if new != doc:
        sys.stdout.writelines(difflib.unified_diff([ln + "\n" for ln in doc], [ln + "\n" for ln in new],
                                                   args.doc, args.doc + " (rendered from the data)"))
        print(f"{args.doc}: the tables differ from benchmarks/results/data/; run scripts/render_performance.py --write",
              file=sys.stderr)
        return 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
