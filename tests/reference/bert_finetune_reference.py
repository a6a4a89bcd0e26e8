#!/usr/bin/python3
"""PyTorch reference for sparselm's BERT fine-tuning models (tests/models/test_bert_finetune_parity.cpp).

    /usr/bin/python3 tests/reference/bert_finetune_reference.py --out tests/reference/data/bert_finetune_parity.json

The encoder is tests/reference/bert_model.py's; the heads are written here from the public model
definitions (HF BertForSequenceClassification: pooler tanh(x[CLS]·Wp + bp), dropout, classifier;
BertForQuestionAnswering: qa_outputs → start / end logits, padded positions excluded, loss the mean
of the start and end cross-entropies). Weights are drawn here (numpy, fixed seed) and written in
sparselm's names and layouts, with:
  - classification (3 labels; one sequence without a label, one padded): the loss, every gradient,
    and 6 AdamW steps as S4 fine-tunes (bias correction off, ε 1e-6, weight decay 0.01 but not on
    norms and biases, a linear decay of the learning rate): the loss before each step and after;
  - span (SQuAD): the loss, the start and end losses apart, every gradient (one sequence without an
    answer, one padded).
The C++ test regenerates this file first whenever torch is importable. Exit code 77 (and no
output file) when torch is missing.
"""
import argparse
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))

CONFIG = {"model_type": "bert", "vocab_size": 50, "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3,
          "intermediate_size": 40, "max_position_embeddings": 16, "type_vocab_size": 2, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12,
          "initializer_range": 0.02}
LABELS = 3


def STAND_HF(C, V):
    """Stand-ins (HF names, HF layouts) for the tensors a fine-tuning model lacks; dropped again."""
    import torch
    return {"cls.predictions.transform.dense.weight": torch.zeros(C, C), "cls.predictions.transform.dense.bias":
            torch.zeros(C), "cls.predictions.transform.LayerNorm.weight": torch.zeros(C),
            "cls.predictions.transform.LayerNorm.bias": torch.zeros(C), "cls.predictions.bias": torch.zeros(V),
            "cls.seq_relationship.weight": torch.zeros(2, C), "cls.seq_relationship.bias": torch.zeros(2),
            "bert.pooler.dense.weight": torch.zeros(C, C), "bert.pooler.dense.bias": torch.zeros(C)}


def STAND_OURS(C, V):
    """The same stand-ins in sparselm's names and layouts."""
    import torch
    return {"cls.predictions.transform.dense.weight": torch.zeros(C, C), "cls.predictions.transform.dense.bias":
            torch.zeros(C), "cls.predictions.transform.LayerNorm.weight": torch.zeros(C),
            "cls.predictions.transform.LayerNorm.bias": torch.zeros(C), "cls.predictions.bias": torch.zeros(V),
            "cls.seq_relationship.weight": torch.zeros(C, 2), "cls.seq_relationship.bias": torch.zeros(2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, here)
    from reference_start import start
    np, torch = start(args.out, "bert_finetune_reference.py")
    import bert_model

    torch.set_num_threads(1)
    cfg = CONFIG
    C = cfg["hidden_size"]
    rng = np.random.default_rng(20261125)

    def draw(shapes):
        out = {}
        for name, shape in shapes.items():
            if "LayerNorm" in name:
                v = (1.0 if name.endswith(".weight") else 0.0) + 0.1 * rng.standard_normal(shape)
            elif name.endswith(".bias"):
                v = 0.1 * rng.standard_normal(shape)
            else:
                v = 0.2 * rng.standard_normal(shape)
            out[name] = torch.tensor(v, dtype=torch.float32)
        return out

    # The encoder's tensors (pre-training heads dropped), the pooler, and each task's head.
    base = {n: s for n, s in bert_model.param_shapes(cfg).items() if not n.startswith("cls.")}
    enc = draw(base)
    cls_head = draw({"classifier.weight": (LABELS, C), "classifier.bias": (LABELS,)})
    qa_head = draw({"qa_outputs.weight": (2, C), "qa_outputs.bias": (2,)})

    def ours(t):
        """sparselm names and layouts: the encoder as bert_model.to_sparselm, heads (in, out)."""
        full = dict(t)
        for k, v in STAND_HF(C, cfg["vocab_size"]).items():  # to_sparselm wants every pre-training tensor
            full.setdefault(k, v)
        out = {k: v for k, v in bert_model.to_sparselm(full, cfg).items() if not k.startswith("cls.")}
        if "bert.pooler.dense.weight" not in t:
            out.pop("pooler.dense.weight")
            out.pop("pooler.dense.bias")
        for k in ("classifier", "qa_outputs"):
            if k + ".weight" in t:
                out[k + ".weight"] = t[k + ".weight"].t()
                out[k + ".bias"] = t[k + ".bias"]
        return out

    B, T, V = 3, 10, cfg["vocab_size"]
    L = torch.long
    ids = torch.tensor(rng.integers(0, V, (B, T)), dtype=L)
    types = torch.tensor([[0] * 4 + [1] * (T - 4)] * B, dtype=L)
    lengths = torch.tensor([T, 7, T - 2], dtype=L)
    labels = torch.tensor([2, 0, -1], dtype=L)         # the third sequence has no label
    starts = torch.tensor([5, -1, 4], dtype=L)         # the second has no answer
    ends = torch.tensor([7, -1, 4], dtype=L)

    def classify_loss(t):
        x = bert_model.encoder(t, ids, types, lengths, cfg)
        pooled = torch.tanh(x[:, 0] @ t["bert.pooler.dense.weight"].t() + t["bert.pooler.dense.bias"])
        logits = pooled @ t["classifier.weight"].t() + t["classifier.bias"]
        return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-1)

    def span_losses(t):
        x = bert_model.encoder(t, ids, types, lengths, cfg)
        lg = x @ t["qa_outputs.weight"].t() + t["qa_outputs.bias"]          # (B, T, 2)
        pad = torch.arange(T)[None, :] >= lengths[:, None]
        s = lg[..., 0].masked_fill(pad, float("-inf"))
        e = lg[..., 1].masked_fill(pad, float("-inf"))
        use = starts >= 0
        ls = torch.nn.functional.cross_entropy(s[use], starts[use])
        le = torch.nn.functional.cross_entropy(e[use], ends[use])
        return ls, le

    def leaf(p):
        return {n: v.clone().requires_grad_(True) for n, v in p.items()}

    flat = lambda t: [float(x) for x in t.detach().reshape(-1).tolist()]

    pc = leaf({**enc, **cls_head})
    lc = classify_loss(pc)
    lc.backward()
    pq = leaf({**{k: v for k, v in enc.items() if "pooler" not in k}, **qa_head})
    ls, le = span_losses(pq)
    ((ls + le) / 2).backward()

    # 6 AdamW steps (S4: no bias correction), linear decay from lr0 to 0 over 6 steps, on sparselm's
    # tensors (the update is elementwise, so the layout does not matter).
    steps, lr0, b1, b2, eps, wd = 6, 1e-2, 0.9, 0.999, 1e-6, 0.01
    pt = leaf(ours({**enc, **cls_head}))

    def classify_from_ours(t):
        """The classification loss over sparselm-named tensors (HF views of them, differentiable)."""
        full = dict(t)
        for k, v in STAND_OURS(C, cfg["vocab_size"]).items():
            full.setdefault(k, v)
        x = bert_model.from_sparselm(full, cfg)
        x["classifier.weight"] = t["classifier.weight"].t()
        x["classifier.bias"] = t["classifier.bias"]
        return classify_loss(x)

    state = {n: (torch.zeros_like(v), torch.zeros_like(v)) for n, v in pt.items()}
    losses = []
    for k in range(steps):
        for v in pt.values():
            v.grad = None
        loss = classify_from_ours(pt)
        loss.backward()
        lr = lr0 * (1.0 - k / steps)
        with torch.no_grad():
            for n, p in pt.items():
                m, v = state[n]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                decay = 0.0 if bert_model.no_decay(n) else wd
                p.mul_(1 - lr * decay)
                p.addcdiv_(m, v.sqrt() + eps, value=-lr)
        losses.append(float(loss))
    with torch.no_grad():
        final = float(classify_from_ours(pt))

    ints = lambda t: [int(x) for x in t.reshape(-1).tolist()]
    out = {
        "config": cfg, "labels": LABELS, "batch": B, "seq": T,
        "ids": ints(ids), "token_types": ints(types), "lengths": ints(lengths),
        "class_labels": ints(labels), "start_positions": ints(starts), "end_positions": ints(ends),
        "classify": {"params": {n: flat(v) for n, v in ours({**enc, **cls_head}).items()}, "loss": float(lc),
                     "grads": {n: flat(v) for n, v in ours({n: t.grad for n, t in pc.items()}).items()}},
        "span": {"params": {n: flat(v) for n, v in ours({k: v for k, v in {**enc, **qa_head}.items()
                                                         if "pooler" not in k}).items()},
                 "loss": float((ls + le) / 2), "start_loss": float(ls), "end_loss": float(le),
                 "grads": {n: flat(v) for n, v in ours({n: t.grad for n, t in pq.items()}).items()}},
        "train": {"optimizer": {"type": "adamw", "beta1": b1, "beta2": b2, "eps": eps, "weight_decay": wd,
                                "bias_correction": False},
                  "schedule": {"type": "linear", "max_lr": lr0, "total_steps": steps, "warmup_proportion": 0.0,
                               "min_lr": 0.0},
                  "steps": steps, "losses": losses, "final_loss": final},
        "torch": torch.__version__,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
