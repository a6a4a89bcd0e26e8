#!/usr/bin/env python3
"""Dynamic-sparse BERT in miniature: masked-LM loss of dynamic sparse (B = 16 and B = 1), static
sparse and a dense model of the same training FLOPs, trained the same number of steps on the same
examples, with the learning rate tuned per variant and several seeds at each variant's best rate.

    scripts/bert_sparsity_study.py --build build --train runs/bert/train-128.bex \\
        --valid runs/bert/valid-128.bex --out runs/bert-study
    scripts/bert_sparsity_study.py ... --report-only      # table and plot from finished runs

Every run is one `bert_pretrain` process (LAMB, up_down schedule, dropout 0.1); a run whose
metrics.jsonl already ends in its final evaluation is not repeated, so the study can be stopped and
restarted. Writes <out>/results.json, <out>/table.md and <out>/study.png (scripts/plot_metrics.py).

FLOPs (multiply-adds x 2, forward + backward = 3 x forward) per sequence of T tokens with P
masked-LM predictions, L layers of width C, feed-forward F, vocabulary V, projection density d:
    encoder projections  3 * 2 * T * (4C^2 + 2CF) * L * d
    attention            3 * 2 * 2 * T^2 * C * L        (QK^T and AV)
    MLM head             3 * 2 * P * (C^2 + V C)        (transform + tied decoder, masked rows only)
    pooler + NSP         3 * 2 * (C^2 + 2C)
The dense baseline's width is the multiple of its head count whose total is closest to the sparse
models' (the embedding lookups and LayerNorms are left out: they are < 1 % here). Pattern updates
add a dense weight gradient every update period; that cost is left out and stated in docs/guide/bert.md.
Only the Python standard library is needed (and gnuplot for the plot).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def flops_per_sequence(cfg, density, T, P):
    C, F, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    proj = 2 * T * (4 * C * C + 2 * C * F) * L * density
    attn = 2 * 2 * T * T * C * L
    mlm = 2 * P * (C * C + V * C)
    nsp = 2 * (C * C + 2 * C)
    return 3 * (proj + attn + mlm + nsp)


def dense_of_equal_flops(base, density, T, P):
    """The base config with a narrower width (and feed-forward 4x it) of the sparse model's FLOPs."""
    target = flops_per_sequence(base, density, T, P)
    heads = base["num_attention_heads"]
    ratio = base["intermediate_size"] / base["hidden_size"]
    best = None
    for C in range(heads, base["hidden_size"] + 1, heads):
        cfg = dict(base, hidden_size=C, intermediate_size=int(round(ratio * C)))
        err = abs(flops_per_sequence(cfg, 1.0, T, P) - target)
        if best is None or err < best[0]:
            best = (err, cfg)
    return best[1], target


def final_eval(metrics):
    """The last evaluation line of a finished run (None while unfinished)."""
    if not os.path.exists(metrics):
        return None
    last, steps = None, None
    with open(metrics) as f:
        for line in f:
            j = json.loads(line)
            if j.get("kind") == "run":
                steps = j["config"]["steps"]
            if j.get("kind") == "eval":
                last = j
    return last if last is not None and last["step"] == steps else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "bert-tiny.json"))
    ap.add_argument("--train", required=True)
    ap.add_argument("--valid", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--update-period", type=int, default=5)
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--predictions", type=float, default=15.5,
                    help="masked-LM predictions per sequence on average (bert_data prints it)")
    ap.add_argument("--lrs", default="1e-3,3e-3,1e-2,3e-2", help="learning rates tried per variant (seed 1)")
    ap.add_argument("--seeds", default="1,2,3", help="seeds run at each variant's best learning rate")
    ap.add_argument("--variants", default="dynamic-b16,dynamic-b1,static-b16,dense-flops")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()

    with open(args.config) as f:
        base = json.load(f)
    density = 1.0 - args.sparsity
    dense_cfg, sparse_flops = dense_of_equal_flops(base, density, args.seq_len, args.predictions)
    os.makedirs(args.out, exist_ok=True)
    dense_path = os.path.join(args.out, "dense-flops-config.json")
    with open(dense_path, "w") as f:
        json.dump(dense_cfg, f, indent=2)
    flops = {"sparse": sparse_flops, "dense-flops": flops_per_sequence(dense_cfg, 1.0, args.seq_len, args.predictions),
             "dense-width": flops_per_sequence(base, 1.0, args.seq_len, args.predictions)}

    variants = {
        "dynamic-b16": ["--block", "16", "--sparsity", str(args.sparsity), "--update-period", str(args.update_period)],
        "dynamic-b1": ["--block", "1", "--sparsity", str(args.sparsity), "--update-period", str(args.update_period)],
        "static-b16": ["--block", "16", "--sparsity", str(args.sparsity), "--update-period", "0"],
        "static-b1": ["--block", "1", "--sparsity", str(args.sparsity), "--update-period", "0"],
        "dense-flops": [],  # its own config (below)
        "dense-width": [],
    }
    chosen = args.variants.split(",")
    for v in chosen:
        if v not in variants:
            sys.exit(f"unknown variant '{v}' (known: {', '.join(variants)})")
    lrs = [float(x) for x in args.lrs.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]

    def run(variant, lr, seed):
        out = os.path.join(args.out, f"{variant}-lr{lr:g}-seed{seed}")
        metrics = os.path.join(out, "metrics.jsonl")
        done = final_eval(metrics)
        if done is not None or args.report_only:
            return done, metrics
        config = dense_path if variant == "dense-flops" else args.config
        cmd = [os.path.join(args.build, "examples", "bert_pretrain"), "--config", config, "--train", args.train,
               "--valid", args.valid, "--out", out, "--steps", str(args.steps), "--batch-size", str(args.batch_size),
               "--lr", str(lr), "--seed", str(seed), "--eval-every", str(max(1, args.steps // 3)),
               "--eval-batches", "0", "--log-every", "10", "--threads", str(args.threads)]
        cmd += variants[variant]
        shutil.rmtree(out, ignore_errors=True)  # an unfinished run starts again
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return final_eval(metrics), metrics

    results = {"steps": args.steps, "batch_size": args.batch_size, "update_period": args.update_period,
               "sparsity": args.sparsity, "flops_per_sequence": flops, "dense_flops_config": dense_cfg,
               "variants": {}}
    for v in chosen:
        tuning = {}
        for lr in lrs:
            ev, _ = run(v, lr, seeds[0])
            if ev is not None:
                tuning[lr] = ev["mlm_loss"]
        if not tuning:
            continue
        best = min(tuning, key=tuning.get)
        per_seed, files = {}, []
        for s in seeds:
            ev, metrics = run(v, best, s)
            if ev is not None:
                per_seed[s] = ev
                files.append(metrics)
        losses = [e["mlm_loss"] for e in per_seed.values()]
        results["variants"][v] = {
            "tuning_mlm_loss": {f"{lr:g}": l for lr, l in sorted(tuning.items())},
            "best_lr": best,
            "seeds": {str(s): {k: e[k] for k in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")}
                      for s, e in per_seed.items()},
            "mlm_loss_mean": statistics.mean(losses) if losses else None,
            "mlm_loss_sd": statistics.stdev(losses) if len(losses) > 1 else None,
            "metrics": files,
        }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    rows = ["| variant | FLOPs / sequence (x10^9) | lr tried: final MLM loss (seed %d) | best lr | MLM loss, mean ± sd "
            "(%d seeds) | MLM accuracy | NSP accuracy |" % (seeds[0], len(seeds)),
            "|---|---:|---|---:|---:|---:|---:|"]
    for v, r in results["variants"].items():
        fl = flops["dense-flops"] if v == "dense-flops" else flops["dense-width"] if v == "dense-width" else flops["sparse"]
        tried = ", ".join(f"{lr}: {l:.3f}" for lr, l in r["tuning_mlm_loss"].items())
        acc = [e["mlm_accuracy"] for e in r["seeds"].values()]
        nsp = [e["nsp_accuracy"] for e in r["seeds"].values()]
        sd = f" ± {r['mlm_loss_sd']:.3f}" if r["mlm_loss_sd"] is not None else ""
        mean = f"{r['mlm_loss_mean']:.3f}{sd}" if r["mlm_loss_mean"] is not None else "-"
        rows.append(f"| {v} | {fl / 1e9:.2f} | {tried} | {r['best_lr']:g} | {mean} | "
                    f"{statistics.mean(acc):.3f} | {statistics.mean(nsp):.3f} |" if acc else f"| {v} | {fl / 1e9:.2f} | "
                    f"{tried} | {r['best_lr']:g} | - | - | - |")
    table = "\n".join(rows) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    plot = [r["metrics"][0] for r in results["variants"].values() if r["metrics"]]
    labels = [v for v, r in results["variants"].items() if r["metrics"]]
    if plot:
        subprocess.run([sys.executable, os.path.join(HERE, "plot_metrics.py"), *plot, "--bert", "--labels",
                        ",".join(labels), "--validation-only", "-o", os.path.join(args.out, "study.png"),
                        "--min-step", str(max(1, args.steps // 3)), "--title",
                        f"{os.path.splitext(os.path.basename(args.config))[0]}, s = {args.sparsity}, {args.steps} steps "
                        f"(seed {seeds[0]}, best lr of each; from step {max(1, args.steps // 3)})"],
                       check=False)


if __name__ == "__main__":
    main()
