#!/usr/bin/env python3
"""Turn JSON-lines metrics (examples/gpt_train, examples/sparse_lm, examples/bert_pretrain) into PNG
curves with gnuplot.

    scripts/plot_metrics.py runs/gpt-mini/metrics.jsonl -o docs/img/gpt-mini.png
    scripts/plot_metrics.py runs/a/metrics.jsonl runs/b/metrics.jsonl --labels dense,sparse -o cmp.png
    scripts/plot_metrics.py runs/study/*.jsonl --validation-only --min-step 100 -o study.png
    scripts/plot_metrics.py runs/bert/phase1/metrics.jsonl --bert -o docs/img/bert-phase1.png

One figure with two panels: loss (training and validation) and validation perplexity (log scale),
against the optimiser step, with the unigram baseline (from the run line) as a dashed line. With
--bert (bert_pretrain's metrics): masked-LM loss, and validation MLM and NSP accuracy.
Several runs are drawn in one figure, one colour each. Only the Python standard library and
gnuplot (Debian's gnuplot-nox) are needed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def read(path, bert=False):
    """Training (step, loss), evaluation (step, loss, perplexity) and the unigram baseline perplexity
    the run line reports (None when absent). With bert: (step, MLM loss) and (step, MLM loss, MLM
    accuracy, NSP accuracy)."""
    train, evals, unigram = [], [], None
    try:
        f = open(path, "rb")
    except OSError as e:
        sys.exit(f"{path}: cannot read the metrics file ({e.strerror})")
    with f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                sys.exit(f"{path}:{n}: not UTF-8 ({e.reason} at byte {e.start})")
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            kind = j.get("kind")
            if bert:
                if kind == "train" and "mlm_loss" in j:
                    train.append((j["step"], j["mlm_loss"]))
                elif kind == "eval" and "mlm_loss" in j:
                    evals.append((j["step"], j["mlm_loss"], j["mlm_accuracy"], j["nsp_accuracy"]))
            elif kind == "run" and j.get("unigram_perplexity"):
                unigram = float(j["unigram_perplexity"])
            elif kind == "train" and "loss" in j:
                train.append((j["step"], j["loss"]))
            elif kind == "eval" and "loss" in j:
                evals.append((j["step"], j["loss"], j.get("perplexity", 0.0)))
    if not train and not evals:
        sys.exit(f"{path}: no training or evaluation lines")
    return train, evals, unigram


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl files")
    ap.add_argument("-o", "--output", required=True, help="PNG file to write")
    ap.add_argument("--labels", help="comma-separated names of the runs (default: their directories)")
    ap.add_argument("--title", default="")
    ap.add_argument("--validation-only", action="store_true", help="leave out the training-loss curves")
    ap.add_argument("--loss-range", help="y range of the loss panel, LO:HI (default: automatic)")
    ap.add_argument("--min-step", type=int, default=0, help="leave out points before this step")
    ap.add_argument("--bert", action="store_true", help="bert_pretrain metrics: MLM loss, MLM and NSP accuracy")
    args = ap.parse_args()
    if args.labels:
        labels = args.labels.split(",")
    else:  # the runs' directories, or the file names when they share one (sparsity_study's <variant>.jsonl)
        labels = [os.path.basename(os.path.dirname(os.path.abspath(m))) for m in args.metrics]
        if len(set(labels)) < len(labels):
            labels = [os.path.splitext(os.path.basename(m))[0] for m in args.metrics]
    if len(labels) != len(args.metrics):
        sys.exit(f"{len(labels)} labels for {len(args.metrics)} metrics files")
    # The gnuplot data files go into a directory removed when the plot is done (or fails).
    with tempfile.TemporaryDirectory(prefix="plot_metrics_") as tmp:
        plot(args, labels, tmp)


def plot(args, labels, tmp):
    """Writes one data file per run into tmp and the figure to args.output."""
    loss_plots, ppl_plots, baselines = [], [], []
    for k, (path, label) in enumerate(zip(args.metrics, labels)):
        train, evals, unigram = read(path, args.bert)
        train = [t for t in train if t[0] >= args.min_step]
        evals = [e for e in evals if e[0] >= args.min_step]
        if args.validation_only:
            train = []
        tf, ef = os.path.join(tmp, f"train{k}.dat"), os.path.join(tmp, f"eval{k}.dat")
        with open(tf, "w") as f:
            f.writelines(f"{s} {l}\n" for s, l in train)
        with open(ef, "w") as f:
            f.writelines(" ".join(str(v) for v in e) + "\n" for e in evals)
        colour = k + 1
        if train:
            loss_plots.append(f"'{tf}' using 1:2 with lines lc {colour} dt 3 title '{label} train'")
        if evals:
            loss_plots.append(f"'{ef}' using 1:2 with linespoints lc {colour} pt 7 ps 0.6 title '{label} validation'")
            if args.bert:
                ppl_plots.append(f"'{ef}' using 1:3 with linespoints lc {colour} pt 7 ps 0.6 title '{label} MLM'")
                ppl_plots.append(f"'{ef}' using 1:4 with lines lc {colour} dt 2 title '{label} NSP'")
            else:
                ppl_plots.append(f"'{ef}' using 1:3 with linespoints lc {colour} pt 7 ps 0.6 title '{label}'")
            if unigram and unigram not in baselines:
                baselines.append(unigram)
                ppl_plots.append(f"{unigram} with lines lc {colour} dt 2 title 'unigram baseline"
                                 + (f" ({label})'" if len(args.metrics) > 1 else "'"))
    if not loss_plots:
        sys.exit(f"nothing to plot at or after step {args.min_step}")
    script = [
        "set terminal pngcairo size 1200,480 font 'sans,10'" , f"set output '{args.output}'",
        "set multiplot layout 1,2" + (" title '" + args.title.replace("'", "''") + "'" if args.title else ""),
        "set grid", "set key top right", "set xlabel 'step'",
    ] + ([f"set yrange [{args.loss_range}]"] if args.loss_range else []) + [
        "set ylabel 'cross-entropy (nats)'",
        "set title '" + ("masked-LM loss" if args.bert else "loss") + "'", "plot " + ", ".join(loss_plots),
    ]
    if ppl_plots and args.bert:
        script += ["set autoscale y", "set yrange [0:1]", "set ylabel 'accuracy'", "set key bottom right",
                   "set title 'validation accuracy'", "plot " + ", ".join(ppl_plots)]
    elif ppl_plots:
        script += ["set autoscale y", "set logscale y", "set ylabel 'perplexity'", "set title 'validation perplexity'",
                   "plot " + ", ".join(ppl_plots)]
    script.append("unset multiplot")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(out_dir, exist_ok=True)
    try:
        subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    except FileNotFoundError:
        sys.exit("gnuplot not found: install it with scripts/setup.sh (Debian package gnuplot-nox)")
    print(args.output)


if __name__ == "__main__":
    main()
