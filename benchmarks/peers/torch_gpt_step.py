#!/usr/bin/python3
"""PyTorch peer for the GPT training-step benchmark: the same GPT-2 model (tests/reference/gpt_model.py),
the same initialisation rule (N(0, 0.02), c_proj scaled by 1/sqrt(2L)), AdamW with decay exclusions,
global-norm clipping, dropout as configured, fp32 (or --precision bf16: forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16), the usual CPU mixed precision; fp32 master weights), a
fixed number of threads.

Prints one JSON line: {"impl": "pytorch", "batch", "seq", "threads", "step_seconds" (median),
"tokens_per_second", "peak_rss_mb"}. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402  (puts tests/reference on the path)
import torch  # noqa: E402

import gpt_model  # noqa: E402


def main():
    args = peer_common.parse_args(__doc__, "gpt2-small.json", 5, extra=[("--precision", str, "fp32")])
    if args.precision not in ("fp32", "bf16"):
        sys.exit(f"torch_gpt_step.py: --precision must be fp32 or bf16, got {args.precision}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.config) as f:
        cfg = json.load(f)
    params, decay, other = peer_common.gpt_params(torch, gpt_model, cfg)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    V = cfg["vocab_size"]
    g = torch.Generator().manual_seed(1)

    def step(i):
        ids = torch.randint(0, V, (args.batch, args.seq + 1), generator=g)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = gpt_model.forward(params, ids[:, :-1], cfg, training=True)
            loss = gpt_model.loss_fn(logits.float(), ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        return loss

    med, loss = peer_common.timed_steps(args, step)
    peer_common.report(torch, args, med, loss, tokens_per_second=args.batch * args.seq / med, precision=args.precision)

if __name__ == "__main__":
    main()
