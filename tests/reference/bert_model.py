"""BERT for pre-training in plain PyTorch, written from the public model definition (Devlin et
al., 2018; HF BERT tensor names and torch.nn.Linear (out, in) weight layout). Used as the
independent reference for sparselm's BERT, and as the map between the two naming schemes.

Run only with Debian's /usr/bin/python3 (python3-torch 1.13); never imported by the library.
"""
import math

import torch


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def param_shapes(cfg):
    """HF BERT (BertForPreTraining) parameter names and shapes. Linear weights are (out, in)."""
    C, V, P, S = cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"], cfg["type_vocab_size"]
    F, L = cfg["intermediate_size"], cfg["num_hidden_layers"]
    sh = {"bert.embeddings.word_embeddings.weight": (V, C), "bert.embeddings.position_embeddings.weight": (P, C),
          "bert.embeddings.token_type_embeddings.weight": (S, C),
          "bert.embeddings.LayerNorm.weight": (C,), "bert.embeddings.LayerNorm.bias": (C,)}
    for l in range(L):
        p = f"bert.encoder.layer.{l}."
        for n in ("query", "key", "value"):
            sh[p + f"attention.self.{n}.weight"] = (C, C)
            sh[p + f"attention.self.{n}.bias"] = (C,)
        sh.update({p + "attention.output.dense.weight": (C, C), p + "attention.output.dense.bias": (C,),
                   p + "attention.output.LayerNorm.weight": (C,), p + "attention.output.LayerNorm.bias": (C,),
                   p + "intermediate.dense.weight": (F, C), p + "intermediate.dense.bias": (F,),
                   p + "output.dense.weight": (C, F), p + "output.dense.bias": (C,),
                   p + "output.LayerNorm.weight": (C,), p + "output.LayerNorm.bias": (C,)})
    sh.update({"bert.pooler.dense.weight": (C, C), "bert.pooler.dense.bias": (C,),
               "cls.predictions.transform.dense.weight": (C, C), "cls.predictions.transform.dense.bias": (C,),
               "cls.predictions.transform.LayerNorm.weight": (C,), "cls.predictions.transform.LayerNorm.bias": (C,),
               "cls.predictions.bias": (V,),
               "cls.seq_relationship.weight": (2, C), "cls.seq_relationship.bias": (2,)})
    return sh


def no_decay(name):
    """Tensors excluded from weight decay and from LAMB's trust ratio: norms and biases (HF or
    sparselm names)."""
    return name.endswith(".bias") or "LayerNorm" in name or ".ln_" in name


def to_sparselm(t, cfg):
    """HF-named tensors (dict) -> sparselm's names and layouts (dict of tensors): linear weights
    transposed to (in, out), query/key/value fused into attn.c_attn, blocks "encoder.layer.<l>"."""
    out = {}
    L = cfg["num_hidden_layers"]
    for n in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        out[f"embeddings.{n}.weight"] = t[f"bert.embeddings.{n}.weight"]
    out["embeddings.LayerNorm.weight"] = t["bert.embeddings.LayerNorm.weight"]
    out["embeddings.LayerNorm.bias"] = t["bert.embeddings.LayerNorm.bias"]
    for l in range(L):
        h, s = f"bert.encoder.layer.{l}.", f"encoder.layer.{l}."
        qkv = ("query", "key", "value")
        out[s + "attn.c_attn.weight"] = torch.cat([t[h + f"attention.self.{n}.weight"].t() for n in qkv], dim=1)
        out[s + "attn.c_attn.bias"] = torch.cat([t[h + f"attention.self.{n}.bias"] for n in qkv])
        out[s + "attn.c_proj.weight"] = t[h + "attention.output.dense.weight"].t()
        out[s + "attn.c_proj.bias"] = t[h + "attention.output.dense.bias"]
        out[s + "ln_1.weight"] = t[h + "attention.output.LayerNorm.weight"]
        out[s + "ln_1.bias"] = t[h + "attention.output.LayerNorm.bias"]
        out[s + "mlp.c_fc.weight"] = t[h + "intermediate.dense.weight"].t()
        out[s + "mlp.c_fc.bias"] = t[h + "intermediate.dense.bias"]
        out[s + "mlp.c_proj.weight"] = t[h + "output.dense.weight"].t()
        out[s + "mlp.c_proj.bias"] = t[h + "output.dense.bias"]
        out[s + "ln_2.weight"] = t[h + "output.LayerNorm.weight"]
        out[s + "ln_2.bias"] = t[h + "output.LayerNorm.bias"]
    for n in ("cls.predictions.transform.dense", "bert.pooler.dense", "cls.seq_relationship"):
        out[n.replace("bert.", "") + ".weight"] = t[n + ".weight"].t()
        out[n.replace("bert.", "") + ".bias"] = t[n + ".bias"]
    out["cls.predictions.transform.LayerNorm.weight"] = t["cls.predictions.transform.LayerNorm.weight"]
    out["cls.predictions.transform.LayerNorm.bias"] = t["cls.predictions.transform.LayerNorm.bias"]
    out["cls.predictions.bias"] = t["cls.predictions.bias"]
    return out


def from_sparselm(t, cfg):
    """The inverse of to_sparselm (differentiable: the HF tensors are views of sparselm's)."""
    out = {}
    C = cfg["hidden_size"]
    for n in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
        for k in ("weight", "bias"):
            if f"embeddings.{n}.{k}" in t:
                out[f"bert.embeddings.{n}.{k}"] = t[f"embeddings.{n}.{k}"]
    for l in range(cfg["num_hidden_layers"]):
        h, s = f"bert.encoder.layer.{l}.", f"encoder.layer.{l}."
        w, b = t[s + "attn.c_attn.weight"], t[s + "attn.c_attn.bias"]
        for i, n in enumerate(("query", "key", "value")):
            out[h + f"attention.self.{n}.weight"] = w[:, i * C:(i + 1) * C].t()
            out[h + f"attention.self.{n}.bias"] = b[i * C:(i + 1) * C]
        pairs = {"attention.output.dense": "attn.c_proj", "intermediate.dense": "mlp.c_fc", "output.dense": "mlp.c_proj"}
        for hn, sn in pairs.items():
            out[h + hn + ".weight"] = t[s + sn + ".weight"].t()
            out[h + hn + ".bias"] = t[s + sn + ".bias"]
        for hn, sn in {"attention.output.LayerNorm": "ln_1", "output.LayerNorm": "ln_2"}.items():
            out[h + hn + ".weight"] = t[s + sn + ".weight"]
            out[h + hn + ".bias"] = t[s + sn + ".bias"]
    for n in ("cls.predictions.transform.dense", "bert.pooler.dense", "cls.seq_relationship"):
        out[n + ".weight"] = t[n.replace("bert.", "") + ".weight"].t()
        out[n + ".bias"] = t[n.replace("bert.", "") + ".bias"]
    for k in ("weight", "bias"):
        out[f"cls.predictions.transform.LayerNorm.{k}"] = t[f"cls.predictions.transform.LayerNorm.{k}"]
    out["cls.predictions.bias"] = t["cls.predictions.bias"]
    return out


def encoder(t, ids, types, lengths, cfg, training=False):
    """Sequence output (B, T, C) for ids, token types (B, T) and valid lengths (B). With
    training=True, dropout is applied with the config's probabilities (as BERT does)."""
    B, T = ids.shape
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D = C // H
    eps = cfg.get("layer_norm_eps", 1e-12)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), t[p + ".weight"], t[p + ".bias"], eps)
    lin = lambda x, p: x @ t[p + ".weight"].t() + t[p + ".bias"]
    x = (t["bert.embeddings.word_embeddings.weight"][ids] + t["bert.embeddings.position_embeddings.weight"][:T][None]
         + t["bert.embeddings.token_type_embeddings.weight"][types])
    hidden_p, attn_p = cfg.get("hidden_dropout_prob", 0.0), cfg.get("attention_probs_dropout_prob", 0.0)
    drop = lambda x, p: torch.nn.functional.dropout(x, p, True) if training and p > 0 else x
    x = drop(ln(x, "bert.embeddings.LayerNorm"), hidden_p)
    keep = torch.arange(T)[None, :] < lengths[:, None]                      # (B, T) valid keys
    additive = torch.where(keep, 0.0, float("-inf"))[:, None, None, :]      # (B, 1, 1, T)
    for l in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{l}."
        q, k, v = (lin(x, p + f"attention.self.{n}").view(B, T, H, D).transpose(1, 2) for n in ("query", "key", "value"))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D) + additive
        a = (drop(torch.softmax(s, dim=-1), attn_p) @ v).transpose(1, 2).reshape(B, T, C)
        x = ln(x + drop(lin(a, p + "attention.output.dense"), hidden_p), p + "attention.output.LayerNorm")
        h = gelu_erf(lin(x, p + "intermediate.dense"))
        x = ln(x + drop(lin(h, p + "output.dense"), hidden_p), p + "output.LayerNorm")
    return x


def pretraining_loss(t, batch, cfg, training=False):
    """(mlm_loss, nsp_loss): mean cross-entropies over the masked positions (label >= 0) and over the
    sequences with an NSP label."""
    ids, types, lengths, positions, labels, nsp = batch
    C, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
    x = encoder(t, ids, types, lengths, cfg, training)
    B, T, _ = x.shape
    rows = (torch.arange(B)[:, None] * T + positions).reshape(-1)
    use = labels.reshape(-1) >= 0
    xm = x.reshape(B * T, C)[rows[use]]
    z = gelu_erf(xm @ t["cls.predictions.transform.dense.weight"].t() + t["cls.predictions.transform.dense.bias"])
    z = torch.nn.functional.layer_norm(z, (C,), t["cls.predictions.transform.LayerNorm.weight"],
                                       t["cls.predictions.transform.LayerNorm.bias"], eps)
    logits = z @ t["bert.embeddings.word_embeddings.weight"].t() + t["cls.predictions.bias"]
    mlm = torch.nn.functional.cross_entropy(logits, labels.reshape(-1)[use])
    pooled = torch.tanh(x[:, 0] @ t["bert.pooler.dense.weight"].t() + t["bert.pooler.dense.bias"])
    nl = pooled @ t["cls.seq_relationship.weight"].t() + t["cls.seq_relationship.bias"]
    nsp_loss = torch.nn.functional.cross_entropy(nl, nsp, ignore_index=-1)
    return mlm, nsp_loss
