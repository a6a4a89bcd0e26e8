"""A LLaMA-family decoder in plain PyTorch, written from the public model definition (Touvron et
al., 2023, and the HF LlamaForCausalLM state-dict layout): RMSNorm, rotary position embedding in the
"rotate half" layout, grouped-query attention (repeat_kv), SwiGLU feed-forward, bias-free
projections, untied or tied LM head. Parameters use HF names and torch.nn.Linear (out, in) layouts.
Used as the independent reference for sparselm's llama<> (tests/models/test_llama_parity.cpp).

Run only with Debian's /usr/bin/python3 (python3-torch); never imported by the library.
"""
import math

import torch


def param_shapes(cfg):
    """HF LLaMA state-dict names and shapes."""
    C, V, L, F = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H = cfg["num_attention_heads"]
    G = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    shapes = {"model.embed_tokens.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (G * D, C),
            p + "self_attn.v_proj.weight": (G * D, C), p + "self_attn.o_proj.weight": (C, H * D),
            p + "post_attention_layernorm.weight": (C,),
            p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C), p + "mlp.down_proj.weight": (C, F),
        })
    shapes["model.norm.weight"] = (C,)
    if not cfg.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (V, C)
    return shapes


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary(T, D, theta, offset=0):
    """cos, sin (T, D) of positions offset..offset+T, the angles repeated over both halves."""
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    pos = torch.arange(offset, offset + T, dtype=torch.float32)
    f = torch.outer(pos, inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos(), emb.sin()


def forward(params, ids, cfg):
    """logits (B, T, V) for ids (B, T)."""
    B, T = ids.shape
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    G = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    cos, sin = rotary(T, D, cfg.get("rope_theta", 10000.0))
    lin = lambda x, name: x @ params[name].t()
    x = params["model.embed_tokens.weight"][ids]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms_norm(x, params[p + "input_layernorm.weight"], eps)
        q = lin(a, p + "self_attn.q_proj.weight").view(B, T, H, D).transpose(1, 2)
        k = lin(a, p + "self_attn.k_proj.weight").view(B, T, G, D).transpose(1, 2)
        v = lin(a, p + "self_attn.v_proj.weight").view(B, T, G, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k[:, :, None].expand(B, G, H // G, T, D).reshape(B, H, T, D)  # repeat_kv
        v = v[:, :, None].expand(B, G, H // G, T, D).reshape(B, H, T, D)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(~causal, float("-inf"))
        att = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + lin(att, p + "self_attn.o_proj.weight")
        m = rms_norm(x, params[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(lin(m, p + "mlp.gate_proj.weight"))
        x = x + lin(g * lin(m, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
    x = rms_norm(x, params["model.norm.weight"], eps)
    head = params["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else params["lm_head.weight"]
    return x @ head.t()


def loss_fn(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
