#!/usr/bin/python3
"""PyTorch peer of a gpt_train run, for the time-to-quality race (benchmarks/time_to_quality.sh): the
same GPT-2 model (tests/reference/gpt_model.py, as torch_gpt_step.py), initialisation rule, AdamW
with decay exclusions, warmup_cosine schedule (optim/schedules.hpp: lr of step i, 0-based, is
i/warmup * max during warm-up, then min + (max - min)(1 + cos(pi p))/2), global-norm clipping, and
the same data: sparselm token files, windows of seq+1 tokens at multiples of seq taken in file
order (gpt_train --order sequential) or in gpt_train's shuffled order (--order shuffled --data-seed S:
the order of gpt_train --seed S, the same Feistel permutation per epoch), B windows a batch; evaluation over the first E batches of the
validation file's windows, the loss averaged over their target tokens.

Writes gpt_train-style metrics lines to --metrics ("train" and "eval", each with wall_seconds: the
seconds of training so far, evaluations left out) and stops after --steps, or at the first
evaluation after --minutes of training. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import peer_common  # noqa: E402  (puts tests/reference on the path)
import torch  # noqa: E402

import gpt_model  # noqa: E402


def read_tokens(path):
    """The ids of a sparselm token file (docs/reference/file-formats.md) as an int64 array, and its vocab."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) != 64 or head[:8] != b"SPLMTOK\0":
            sys.exit(f"torch_gpt_train.py: {path}: not a sparselm token file")
        version, width = np.frombuffer(head[8:16], "<u4")
        count, vocab, seq_len = np.frombuffer(head[16:40], "<u8")
        if version != 1 or width not in (2, 4) or seq_len != 0:
            sys.exit(f"torch_gpt_train.py: {path}: need a version-1 single-stream token file")
        ids = np.fromfile(f, dtype="<u2" if width == 2 else "<u4")
    if len(ids) != count:
        sys.exit(f"torch_gpt_train.py: {path}: {len(ids)} ids, the header says {count}")
    return ids.astype(np.int64), int(vocab)


class Windows:
    """Windows k = ids[k*T : k*T + T + 1]; a short tail window with at least T/2 targets is kept,
    its missing inputs 0 and targets -100 (data/lm_batches.hpp)."""

    def __init__(self, ids, T):
        self.ids, self.T = ids, T
        n = len(ids)
        full = (n - 1) // T if n > T else 0
        tail = n - full * T
        self.count = full + (1 if tail >= 2 and 2 * (tail - 1) >= T else 0)

    def row(self, k):
        seg = self.ids[k * self.T: k * self.T + self.T + 1]
        inp = np.zeros(self.T, np.int64)
        tgt = np.full(self.T, -100, np.int64)
        inp[: len(seg) - 1] = seg[:-1]
        tgt[: len(seg) - 1] = seg[1:]
        return inp, tgt

    def batch(self, ks):
        rows = [self.row(k) for k in ks]
        return torch.from_numpy(np.stack([r[0] for r in rows])), torch.from_numpy(np.stack([r[1] for r in rows]))


M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def philox4x32(ctr, key):
    """core/rng.hpp's philox4x32: 10 rounds."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def mix_stream(a, b):
    z = (a * 0x9E3779B97F4A7C15 + b + 0x632BE59BD9B4E019) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Permutation:
    """data/lm_batches.hpp's index_permutation(n, seed, stream): a 6-round Feistel network keyed by
    counter_rng(seed) on the smallest even-bit power-of-two domain >= n, cycle-walking into [0, n)."""

    def __init__(self, n, seed, stream):
        bits = 1 if n <= 1 else (n - 1).bit_length()
        self.n, self.half = n, (bits + 1) // 2
        self.mask = (1 << self.half) - 1
        self.key = (seed & M32, (seed >> 32) & M32)
        self.streams = [mix_stream(stream, k) for k in range(6)]

    def feistel(self, x):
        left, right = x >> self.half, x & self.mask
        for st in self.streams:
            word = philox4x32((right >> 2 & M32, right >> 34 & M32, st & M32, st >> 32), self.key)[right & 3]
            left, right = right, left ^ (word & self.mask)
        return (left << self.half) | right

    def __call__(self, i):
        x = self.feistel(i)
        while x >= self.n:
            x = self.feistel(x)
        return x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="model config (HF GPT-2 keys, e.g. configs/gpt-mini.json)")
    ap.add_argument("--train", required=True)
    ap.add_argument("--valid", required=True)
    ap.add_argument("--metrics", required=True, help="metrics JSON lines to write")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, required=True, help="steps of the schedule")
    ap.add_argument("--minutes", type=float, default=0, help="stop at the first evaluation after this much training")
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--min-lr", type=float, default=8e-5)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--max-norm", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="initialisation seed")
    ap.add_argument("--order", choices=("sequential", "shuffled"), default="sequential",
                    help="training windows in file order, or gpt_train's seeded order of --data-seed")
    ap.add_argument("--data-seed", type=int, default=1234, help="shuffled: gpt_train's --seed of the same order")
    ap.add_argument("--print-windows", type=int, default=0, help="print the first N training windows and exit")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(args.config) as f:
        cfg = json.load(f)
    train_ids, vocab = read_tokens(args.train)
    valid_ids, _ = read_tokens(args.valid)
    if vocab > cfg["vocab_size"]:
        sys.exit(f"torch_gpt_train.py: token files of vocabulary {vocab}, the model has {cfg['vocab_size']}")
    train, valid = Windows(train_ids, args.seq), Windows(valid_ids, args.seq)

    params, decay, other = peer_common.gpt_params(torch, gpt_model, cfg)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)

    def lr_at(i):
        if i < args.warmup_steps:
            return args.lr * i / args.warmup_steps
        p = (i - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
        return args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * p))

    def evaluate():
        total, count = 0.0, 0
        with torch.no_grad():
            n = valid.count if args.eval_batches == 0 else min(valid.count, args.eval_batches * args.batch)
            for k0 in range(0, n, args.batch):
                inp, tgt = valid.batch(range(k0, min(n, k0 + args.batch)))
                logits = gpt_model.forward(params, inp, cfg)
                total += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100, reduction="sum"))
                count += int((tgt != -100).sum())
        return total / count

    out = open(args.metrics, "w")

    def write(j):
        out.write(json.dumps(j) + "\n")
        out.flush()

    write({"kind": "run", "impl": "pytorch", "torch": torch.__version__, "threads": args.threads,
           "parameters": sum(p.numel() for p in params.values()), "train_windows": train.count,
           "valid_windows": valid.count, "config": vars(args)})
    def window(p):  # the training window at position p of the stream of epochs
        epoch, k = divmod(p, train.count)
        if args.order == "sequential":
            return k
        if epoch not in perms:
            perms.clear()
            perms[epoch] = Permutation(train.count, args.data_seed, epoch)
        return perms[epoch](k)

    perms = {}
    if args.print_windows:
        print(" ".join(str(window(p)) for p in range(args.print_windows)))
        return
    wall, position = 0.0, 0
    window_loss, window_tokens, window_seconds = 0.0, 0, 0.0

    def eval_line(step):
        t0 = time.perf_counter()
        loss = evaluate()
        write({"kind": "eval", "step": step, "loss": loss, "wall_seconds": wall,
               "seconds": time.perf_counter() - t0})
        print(f"step {step}: validation loss {loss:.4f} after {wall:.1f} s of training", flush=True)

    eval_line(0)
    for i in range(args.steps):
        t0 = time.perf_counter()
        ks = [window(position + r) for r in range(args.batch)]
        position += args.batch
        inp, tgt = train.batch(ks)
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        opt.zero_grad(set_to_none=True)
        logits = gpt_model.forward(params, inp, cfg, training=True)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                 ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), args.max_norm)
        opt.step()
        seconds = time.perf_counter() - t0
        wall += seconds
        step = i + 1
        window_loss += float(loss) * args.batch * args.seq
        window_tokens += args.batch * args.seq
        window_seconds += seconds
        if step % args.log_every == 0 or step == args.steps:
            write({"kind": "train", "step": step, "loss": window_loss / window_tokens, "lr": lr_at(i),
                   "tokens_per_s": window_tokens / window_seconds, "wall_seconds": wall})
            window_loss, window_tokens, window_seconds = 0.0, 0, 0.0
        if step % args.eval_every == 0 or step == args.steps:
            eval_line(step)
            if args.minutes and wall >= 60 * args.minutes:
                break
    out.close()


if __name__ == "__main__":
    main()
