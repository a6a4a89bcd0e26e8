#!/usr/bin/python3
"""PyTorch peer for the BERT pre-training step benchmark: the same BERT (tests/reference/bert_model.py,
HF BertForPreTraining's structure and maths), BERT's initialisation (N(0, 0.02), zero biases, unit
norms), MLM at `--masked` positions per sequence + NSP, AdamW with decay exclusions, global-norm
clipping, dropout as configured, fp32, a fixed number of threads.

Prints one JSON line: {"impl": "pytorch", "batch", "seq", "threads", "step_seconds" (median),
"samples_per_second", "peak_rss_mb"}. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402  (puts tests/reference on the path)
import torch  # noqa: E402

import bert_model  # noqa: E402


def main():
    args = peer_common.parse_args(__doc__, "bert-base.json", 3, [("--masked", int, 20)])
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.config) as f:
        cfg = json.load(f)
    params = {}
    for name, shape in bert_model.param_shapes(cfg).items():
        if "LayerNorm" in name:
            t = torch.ones(shape) if name.endswith(".weight") else torch.zeros(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape) * cfg.get("initializer_range", 0.02)
        params[name] = t.requires_grad_(True)
    decay = [p for n, p in params.items() if not bert_model.no_decay(n)]
    other = [p for n, p in params.items() if bert_model.no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-6)
    B, T, M, V = args.batch, args.seq, args.masked, cfg["vocab_size"]
    g = torch.Generator().manual_seed(1)
    types = torch.tensor([[0] * (T // 2) + [1] * (T - T // 2)] * B)
    lengths = torch.full((B,), T)
    positions = torch.tensor([[1 + (k * (T - 1)) // M for k in range(M)]] * B)

    def step(i):
        ids = torch.randint(0, V, (B, T), generator=g)
        labels = torch.randint(0, V, (B, M), generator=g)
        nsp = torch.randint(0, 2, (B,), generator=g)
        opt.zero_grad(set_to_none=True)
        mlm, nsp_loss = bert_model.pretraining_loss(params, (ids, types, lengths, positions, labels, nsp), cfg,
                                                    training=True)
        loss = mlm + nsp_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        return loss

    med, loss = peer_common.timed_steps(args, step)
    peer_common.report(torch, args, med, loss, masked=M, samples_per_second=B / med)

if __name__ == "__main__":
    main()
