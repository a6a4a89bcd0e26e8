#!/usr/bin/python3
"""PyTorch reference for sparselm's GPT (tests/models/test_gpt_parity.cpp).

    /usr/bin/python3 tests/reference/gpt_reference.py --out tests/reference/data/gpt_tiny_parity.json

Builds GPT-2 (tests/reference/gpt_model.py, written from the public model definition) for
configs/gpt-tiny.json with weights drawn here (numpy, fixed seed; larger than GPT-2's 0.02 so the
gradients are well above float noise), and writes as JSON:
  - the config, the weights (HF names, Conv1D (in, out) layout), token ids and targets (one target
    is -100, ignored, as PyTorch's cross_entropy does);
  - the logits (B·T·V), the mean cross-entropy and every parameter gradient;
  - 10 AdamW steps (torch.optim.AdamW with decay exclusions for norms and biases, global-norm
    clipping by torch.nn.utils.clip_grad_norm_, the warmup + cosine schedule of
    sparselm::optim::warmup_cosine_schedule, two alternating batches): the loss before each step.
The C++ test loads the same weights into sparselm::gpt<>, compares everything, and regenerates this
file first whenever torch is importable, so a stale committed file cannot hide a change.
Exit code 77 (and no output file) when torch is missing.
"""
import argparse
import json
import math
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=os.path.join(root, "configs", "gpt-tiny.json"))
    args = ap.parse_args()
    sys.path.insert(0, here)
    from reference_start import start
    np, torch = start(args.out, "gpt_reference.py")
    import gpt_model

    torch.set_num_threads(1)
    with open(args.config) as f:
        cfg = json.load(f)
    rng = np.random.default_rng(20261122)
    params = {}
    for name, shape in gpt_model.param_shapes(cfg).items():
        if ".ln_" in name or name.startswith("ln_f"):
            base = 1.0 if name.endswith(".weight") else 0.0
            v = base + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(shape)
        else:
            v = 0.2 * rng.standard_normal(shape)
        params[name] = torch.tensor(v, dtype=torch.float32)
    B, T, V = 2, 7, cfg["vocab_size"]
    seqs = [torch.tensor(rng.integers(0, V, (B, T + 1)), dtype=torch.long) for _ in range(2)]
    batches = []
    for s in seqs:
        ids, tg = s[:, :-1].clone(), s[:, 1:].clone()
        tg[0, 3] = -100
        batches.append((ids, tg))

    def leaf(p):
        return {n: t.clone().requires_grad_(True) for n, t in p.items()}

    # logits, loss and gradients at the initial weights
    p0 = leaf(params)
    ids, tg = batches[0]
    logits = gpt_model.forward(p0, ids, cfg)
    loss = gpt_model.loss_fn(logits, tg)
    loss.backward()

    # 10 AdamW steps with clipping and the warmup + cosine schedule
    train = {"optimizer": {"type": "adamw", "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1},
             "schedule": {"type": "warmup_cosine", "max_lr": 1e-2, "total_steps": 10, "warmup_steps": 2,
                          "min_lr": 1e-3},
             "max_norm": 0.5, "steps": 10}
    sch = train["schedule"]

    def lr_at(step):
        if step < sch["warmup_steps"]:
            return sch["max_lr"] * step / sch["warmup_steps"]
        p = min((step - sch["warmup_steps"]) / max(1, sch["total_steps"] - sch["warmup_steps"]), 1.0)
        return sch["min_lr"] + (sch["max_lr"] - sch["min_lr"]) * 0.5 * (1 + math.cos(math.pi * p))

    pt = leaf(params)
    o = train["optimizer"]
    decay = [t for n, t in pt.items() if not gpt_model.no_decay(n)]
    other = [t for n, t in pt.items() if gpt_model.no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=0.0, betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, norms = [], []
    for step in range(train["steps"]):
        bi, bt = batches[step % 2]
        opt.zero_grad(set_to_none=True)
        l = gpt_model.loss_fn(gpt_model.forward(pt, bi, cfg), bt)
        l.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(pt.values()), train["max_norm"])))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        losses.append(float(l))
    with torch.no_grad():
        final = float(gpt_model.loss_fn(gpt_model.forward(pt, batches[train["steps"] % 2][0], cfg),
                                        batches[train["steps"] % 2][1]))

    flat = lambda t: [float(x) for x in t.detach().reshape(-1).tolist()]
    out = {
        "config": cfg, "batch": B, "seq": T,
        "ids": [[int(x) for x in b[0].reshape(-1).tolist()] for b in batches],
        "targets": [[int(x) for x in b[1].reshape(-1).tolist()] for b in batches],
        "params": {n: flat(t) for n, t in params.items()},
        "logits": flat(logits), "loss": float(loss),
        "grads": {n: flat(t.grad) for n, t in p0.items()},
        "train": train, "losses": losses, "grad_norms": norms, "final_loss": final,
        "torch": torch.__version__,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
