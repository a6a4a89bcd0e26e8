"""A GPT-2 decoder in plain PyTorch, written from the public model definition (Radford et al.,
2019; HF GPT-2 tensor names and Conv1D (in, out) weight layout). Used as the independent
reference for sparselm's GPT: same names, same shapes, same maths.

Run only with Debian's /usr/bin/python3 (python3-torch 1.13); never imported by the library.
"""
import math

import torch


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def param_shapes(cfg):
    """HF GPT-2 parameter names and shapes, in sparselm's arena order."""
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    F = cfg.get("n_inner") or 4 * C
    shapes = {"wte.weight": (V, C), "wpe.weight": (P, C)}
    for l in range(L):
        p = f"h.{l}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, F), p + "mlp.c_fc.bias": (F,),
            p + "mlp.c_proj.weight": (F, C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def no_decay(name):
    """Tensors excluded from weight decay: norms and biases (as sparselm flags them)."""
    return name.endswith(".bias") or ".ln_" in name or name.startswith("ln_f")


def forward(params, ids, cfg, training=False):
    """logits (B, T, V) for ids (B, T); params: dict name -> tensor (requires_grad as needed).
    With training=True, dropout is applied with the config's probabilities (as GPT-2 does)."""
    B, T = ids.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    D = C // H
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    act = gelu_tanh if cfg.get("activation_function", "gelu_new") == "gelu_new" else gelu_erf
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), params[p + ".weight"], params[p + ".bias"], eps)
    drop = lambda t, key: torch.nn.functional.dropout(t, cfg.get(key, 0.0), training) if training else t
    x = drop(params["wte.weight"][ids] + params["wpe.weight"][torch.arange(T)][None], "embd_pdrop")
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        a = ln(x, p + "ln_1")
        qkv = a @ params[p + "attn.c_attn.weight"] + params[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(~causal, float("-inf"))
        att = drop(torch.softmax(s, dim=-1), "attn_pdrop") @ v
        att = att.transpose(1, 2).reshape(B, T, C)
        x = x + drop(att @ params[p + "attn.c_proj.weight"] + params[p + "attn.c_proj.bias"], "resid_pdrop")
        m = ln(x, p + "ln_2")
        h = act(m @ params[p + "mlp.c_fc.weight"] + params[p + "mlp.c_fc.bias"])
        x = x + drop(h @ params[p + "mlp.c_proj.weight"] + params[p + "mlp.c_proj.bias"], "resid_pdrop")
    x = ln(x, "ln_f")
    return x @ params["wte.weight"].t()


def loss_fn(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
