#!/usr/bin/python3
"""PyTorch reference for sparselm's LLaMA family (tests/models/test_llama_parity.cpp).

    /usr/bin/python3 tests/reference/llama_reference.py --out tests/reference/data/llama_tiny_parity.json
        [--hf-dir DIR]

Builds LLaMA (tests/reference/llama_model.py, written from the public model definition) for two
variants of configs/llama-tiny.json — grouped-query attention (4 heads, 2 KV heads) with an untied
head, and multi-query attention (1 KV head) with the head tied to the embedding — with weights drawn
here (numpy, fixed seed; larger than LLaMA's 0.02 so the gradients are well above float noise), and
writes as JSON per variant: the config, the weights (HF names, torch.nn.Linear (out, in) layout), token
ids and targets (one target is -100, ignored), the logits (B·T·V), the mean cross-entropy and every
parameter gradient (HF names and layouts).
With --hf-dir, also writes each variant as an HF LLaMA directory DIR/<variant> (config.json with
LlamaConfig's keys, model.safetensors with the state-dict names, F32) for the loading tests.
With --logits-of DIR (an HF LLaMA directory, e.g. sparselm's export) and --variant NAME, writes
instead {"logits": ...} of DIR's model for that variant's token ids (taken from --ids-from, a file
this script wrote): PyTorch reading our export.
Exit code 77 (and no output file) when torch is missing.
"""
import argparse
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def hf_config(cfg):
    """config.json as transformers' LlamaConfig writes it (the keys this test cares about)."""
    keys = ["vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
            "initializer_range", "hidden_act"]
    out = {k: cfg[k] for k in keys}
    out.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
                "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1, "rope_scaling": None,
                "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", "use_cache": True,
                "transformers_version": "4.44.0"})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hf-dir")
    ap.add_argument("--config", default=os.path.join(root, "configs", "llama-tiny.json"))
    ap.add_argument("--logits-of")
    ap.add_argument("--variant")
    ap.add_argument("--ids-from")
    args = ap.parse_args()
    sys.path.insert(0, here)
    from reference_start import start
    np, torch = start(args.out, "llama_reference.py")
    import llama_model
    import hf_reference  # safetensors writer and encoder (this project's own)

    torch.set_num_threads(1)
    if args.logits_of:
        with open(args.ids_from) as f:
            v = json.load(f)["variants"][args.variant]
        with open(os.path.join(args.logits_of, "config.json")) as f:
            cfg = json.load(f)
        t = hf_reference.st_read(os.path.join(args.logits_of, "model.safetensors"))
        ids = torch.tensor(v["ids"]).view(v["batch"], v["seq"])
        with torch.no_grad():
            logits = llama_model.forward(t, ids, cfg)
        with open(args.out, "w") as f:
            json.dump({"logits": [float(x) for x in logits.reshape(-1).tolist()]}, f)
        return
    with open(args.config) as f:
        base = json.load(f)
    variants = {"gqa_untied": dict(base),
                "mqa_tied": dict(base, num_key_value_heads=1, tie_word_embeddings=True)}
    rng = np.random.default_rng(20261206)
    out = {"variants": {}, "torch": torch.__version__}
    flat = lambda t: [float(x) for x in t.detach().reshape(-1).tolist()]
    for vname, cfg in variants.items():
        params = {}
        for name, shape in llama_model.param_shapes(cfg).items():
            if name.endswith("norm.weight"):
                v = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                v = 0.2 * rng.standard_normal(shape)
            params[name] = torch.tensor(v, dtype=torch.float32)
        B, T, V = 2, 7, cfg["vocab_size"]
        s = torch.tensor(rng.integers(0, V, (B, T + 1)), dtype=torch.long)
        ids, tg = s[:, :-1].clone(), s[:, 1:].clone()
        tg[0, 3] = -100
        p0 = {n: t.clone().requires_grad_(True) for n, t in params.items()}
        logits = llama_model.forward(p0, ids, cfg)
        loss = llama_model.loss_fn(logits, tg)
        loss.backward()
        out["variants"][vname] = {
            "config": cfg, "batch": B, "seq": T,
            "ids": [int(x) for x in ids.reshape(-1).tolist()],
            "targets": [int(x) for x in tg.reshape(-1).tolist()],
            "params": {n: flat(t) for n, t in params.items()},
            "logits": flat(logits), "loss": float(loss),
            "grads": {n: flat(t.grad) for n, t in p0.items()},
        }
        if args.hf_dir:
            tensors = [(n, *hf_reference.encode(t, "F32")) for n, t in params.items()]
            tensors = [(n, d, list(params[n].shape), b) for n, d, b in tensors]
            hf_reference.write_dir(args.hf_dir, vname, hf_config(cfg), tensors)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
