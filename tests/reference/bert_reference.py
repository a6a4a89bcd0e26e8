#!/usr/bin/python3
"""PyTorch reference for sparselm's BERT (tests/models/test_bert_parity.cpp).

    /usr/bin/python3 tests/reference/bert_reference.py --out tests/reference/data/bert_tiny_parity.json

Builds BERT for pre-training (tests/reference/bert_model.py, written from the public model
definition) with a small config, weights drawn here (numpy, fixed seed; larger than BERT's 0.02 so
the gradients are well above float noise), and writes as JSON, in sparselm's tensor names and
layouts (bert_model.to_sparselm):
  - the config, the weights, two batches (token types, a padded sequence, masked positions with an
    unused slot, NSP labels);
  - the MLM and NSP losses and every parameter gradient of their sum;
  - 10 LAMB steps (decay and trust-ratio exclusions for norms and biases, constant learning rate,
    two alternating batches): the loss before each step, and the final loss. LAMB's trust ratio is
    per tensor, so it runs on sparselm's tensors, where query, key and value are one fused tensor
    (as in Graphcore's BERT); the model reads HF-shaped views of them.
The C++ test loads the same weights into sparselm::bert<>, compares everything, and regenerates
this file first whenever torch is importable, so a stale committed file cannot hide a change.
Exit code 77 (and no output file) when torch is missing.
"""
import argparse
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))

CONFIG = {"model_type": "bert", "vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 48, "max_position_embeddings": 16, "type_vocab_size": 2, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12,
          "initializer_range": 0.02}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, here)
    from reference_start import start
    np, torch = start(args.out, "bert_reference.py")
    import bert_model
    from optim_reference import lamb_step

    torch.set_num_threads(1)
    cfg = CONFIG
    rng = np.random.default_rng(20261124)
    params = {}
    for name, shape in bert_model.param_shapes(cfg).items():
        if "LayerNorm" in name:
            v = (1.0 if name.endswith(".weight") else 0.0) + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.1 * rng.standard_normal(shape)
        else:
            v = 0.2 * rng.standard_normal(shape)
        params[name] = torch.tensor(v, dtype=torch.float32)

    B, T, P, V = 3, 9, 3, cfg["vocab_size"]
    L = torch.long
    batches = []
    for k in range(2):
        ids = torch.tensor(rng.integers(0, V, (B, T)), dtype=L)
        types = torch.tensor([[0] * 4 + [1] * (T - 4)] * B, dtype=L)
        lengths = torch.tensor([T, 6, T - 1 - k], dtype=L)
        positions = torch.tensor([[1, 5, 8], [2, 3, 0], [4, 6, 7 - k]], dtype=L)
        labels = torch.tensor(rng.integers(0, V, (B, P)), dtype=L)
        labels[1, 2] = -1  # an unused prediction slot
        nsp = torch.tensor([0, 1, -1 if k == 0 else 1], dtype=L)  # a sequence without an NSP label
        batches.append((ids, types, lengths, positions, labels, nsp))

    def leaf(p):
        return {n: t.clone().requires_grad_(True) for n, t in p.items()}

    p0 = leaf(params)
    mlm, nsp = bert_model.pretraining_loss(p0, batches[0], cfg)
    (mlm + nsp).backward()

    train = {"optimizer": {"type": "lamb", "beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.01},
             "schedule": {"type": "constant", "lr": 5e-3}, "steps": 10}
    o = train["optimizer"]
    pt = leaf(bert_model.to_sparselm(params, cfg))  # LAMB's tensors: sparselm's (fused qkv)
    group = {"beta1": o["beta1"], "beta2": o["beta2"], "eps": o["eps"], "lr": train["schedule"]["lr"],
             "bias_correction": True}
    lamb_params = [(t, 0.0 if bert_model.no_decay(n) else o["weight_decay"], not bert_model.no_decay(n))
                   for n, t in pt.items()]
    state, losses = {}, []
    for step in range(train["steps"]):
        for t in pt.values():
            t.grad = None
        m, n = bert_model.pretraining_loss(bert_model.from_sparselm(pt, cfg), batches[step % 2], cfg)
        (m + n).backward()
        with torch.no_grad():
            lamb_step(lamb_params, state, group, step + 1)
        losses.append(float(m + n))
    with torch.no_grad():
        m, n = bert_model.pretraining_loss(bert_model.from_sparselm(pt, cfg), batches[train["steps"] % 2], cfg)
        final = float(m + n)

    flat = lambda t: [float(x) for x in t.detach().reshape(-1).tolist()]
    ints = lambda t: [int(x) for x in t.reshape(-1).tolist()]
    ours = bert_model.to_sparselm(params, cfg)
    grads = bert_model.to_sparselm({n: t.grad for n, t in p0.items()}, cfg)
    out = {
        "config": cfg, "batch": B, "seq": T,
        "batches": [{"ids": ints(b[0]), "token_types": ints(b[1]), "lengths": ints(b[2]), "masked_positions": ints(b[3]),
                     "masked_labels": ints(b[4]), "nsp_labels": ints(b[5])} for b in batches],
        "params": {n: flat(t) for n, t in ours.items()},
        "mlm_loss": float(mlm), "nsp_loss": float(nsp),
        "grads": {n: flat(t) for n, t in grads.items()},
        "train": train, "losses": losses, "final_loss": final,
        "torch": torch.__version__,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
