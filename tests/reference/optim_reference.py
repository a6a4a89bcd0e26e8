"""PyTorch reference for sparselm's optimisers (tests/optim/test_torch_parity.cpp).

    /usr/bin/python3 optim_reference.py input.json output.json

input.json:  {"cases": [{"name", "optimizer": "adamw" | "adam" | "sgd" | "lamb", "config": {...},
               "tensors": [{"name", "no_decay", "no_trust", "frozen", "values": [...]}],
               "steps": [{"lr", "grads": [[...] per tensor]}]}]}
output.json: {name: {"params": [[...] per tensor], "slots": {slot: [[...] per tensor]}}}

AdamW, Adam and SGD are torch.optim's own; LAMB has no torch.optim class and is written here from
its formula (You et al. 2019, as in docs/design/optimisers.md). Frozen tensors are left out of the
optimiser; no_decay tensors form a param group with weight_decay 0. All arithmetic in float32.

Run only with Debian's /usr/bin/python3 (python3-torch 1.13); never imported by the library.
"""
import json
import sys

import torch


def lamb_step(params, state, group, t):
    b1, b2, eps, lr = group["beta1"], group["beta2"], group["eps"], group["lr"]
    for p, wd, trust in params:
        st = state.setdefault(p, {"m": torch.zeros_like(p), "v": torch.zeros_like(p)})
        m, v, g = st["m"], st["v"], p.grad
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        if group["bias_correction"]:
            mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        else:
            mh, vh = m, v
        u = mh / (vh.sqrt() + eps) + wd * p
        ratio = 1.0
        if trust:
            nw, nu = p.norm().item(), u.norm().item()
            if nw > 0 and nu > 0:
                ratio = nw / nu
        p.sub_(lr * ratio * u)


def run_case(case):
    kind, cfg = case["optimizer"], case["config"]
    tensors = [torch.tensor(t["values"], dtype=torch.float32) for t in case["tensors"]]
    info = case["tensors"]
    live = [i for i, t in enumerate(info) if not t["frozen"]]
    wd = cfg.get("weight_decay", 0.0)
    decay = [tensors[i] for i in live if not info[i]["no_decay"]]
    no_decay = [tensors[i] for i in live if info[i]["no_decay"]]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    betas = (cfg.get("beta1", 0.9), cfg.get("beta2", 0.999))

    if kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=cfg["eps"])
    elif kind == "adam":
        opt = torch.optim.Adam(groups, lr=0.0, betas=betas, eps=cfg["eps"], weight_decay=0.0)
    elif kind == "sgd":
        opt = torch.optim.SGD(groups, lr=0.0, momentum=cfg["momentum"], nesterov=cfg["nesterov"], dampening=0.0)
    elif kind == "lamb":
        opt = None
        lamb_params = [(tensors[i], 0.0 if info[i]["no_decay"] else wd, not info[i]["no_trust"]) for i in live]
        lamb_state = {}
    else:
        raise SystemExit(f"unknown optimizer {kind}")

    for t, step in enumerate(case["steps"], start=1):
        for i in live:
            tensors[i].grad = torch.tensor(step["grads"][i], dtype=torch.float32)
        if opt is None:
            lamb_step(lamb_params, lamb_state,
                      {"beta1": betas[0], "beta2": betas[1], "eps": cfg["eps"], "lr": step["lr"],
                       "bias_correction": cfg.get("bias_correction", True)}, t)
        else:
            for g in opt.param_groups:
                g["lr"] = step["lr"]
            with torch.no_grad():
                opt.step()

    def slot(get):
        out = []
        for i, p in enumerate(tensors):
            x = get(p) if i in live else None
            out.append((x if x is not None else torch.zeros_like(p)).tolist())
        return out

    if kind in ("adamw", "adam"):
        slots = {"m": slot(lambda p: opt.state[p]["exp_avg"]), "v": slot(lambda p: opt.state[p]["exp_avg_sq"])}
    elif kind == "sgd":
        slots = {"momentum": slot(lambda p: opt.state[p].get("momentum_buffer"))} if cfg["momentum"] > 0 else {}
    else:
        slots = {"m": slot(lambda p: lamb_state[p]["m"]), "v": slot(lambda p: lamb_state[p]["v"])}
    return {"params": [p.tolist() for p in tensors], "slots": slots}


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    torch.set_num_threads(1)
    with torch.no_grad():
        out = {c["name"]: run_case(c) for c in cases}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
