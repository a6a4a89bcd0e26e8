#!/usr/bin/python3
"""HuggingFace-shaped checkpoints of a tiny BERT and a tiny GPT-2, and their losses, for
tests/io/test_huggingface.cpp.

    /usr/bin/python3 tests/reference/hf_reference.py --out-dir tests/reference/data/hf
    /usr/bin/python3 tests/reference/hf_reference.py --loss-of DIR --kind bert|gpt2 \
        --expected tests/reference/data/hf/expected.json --out loss.json

The first form writes one directory per variant, each with config.json and model.safetensors laid
out as transformers' save_pretrained writes them (names, dtypes, buffers, tied copies; the
safetensors format is written by hand here: 8-byte little-endian header length, JSON header,
data), and expected.json with the batches and the loss of every variant computed by the PyTorch
references (bert_model.py, gpt_model.py, written from the public model definitions) from the
weights as stored (F16/BF16 rounding included):

  bert_pretraining   BertForPreTraining, current transformers: 'bert.' prefix, F32, no buffers, the
                     tied decoder left out; config.json with every key BertConfig writes
  bert_legacy_f16    as the older bert-base-uncased files: LayerNorm.gamma/beta, the
                     embeddings.position_ids buffer (I64), the tied cls.predictions.decoder.weight
                     and .bias copies; F16
  bert_model_bf16    BertModel alone (no prefix, pooler, no heads), BF16; a fine-tuned config
                     (id2label, label2id, problem_type, ...)
  gpt2_lmhead        GPT2LMHeadModel, current transformers: 'transformer.' prefix, F32, no mask
                     buffers, no lm_head.weight (tied); vocab padded past the ids used; every
                     GPT2Config key
  gpt2_legacy_f16    transformers 4.2x: 'transformer.' prefix, BOOL attn.bias (1,1,P,P) and F32
                     attn.masked_bias () buffers, lm_head.weight written; F16
  gpt2_hub_bf16      the hub's gpt2 file: no prefix, F32 attn.bias buffers; BF16

The second form reads any HF-layout directory (for example sparselm's export) by hand and prints
the loss of expected.json's batch for it, so the C++ test checks that our export loads here.
Exit code 77 (and no output) when torch is missing.
"""
import argparse
import json
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))

BERT = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 24, "max_position_embeddings": 16, "type_vocab_size": 2, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "layer_norm_eps": 1e-12,
        "initializer_range": 0.02}
GPT2 = {"vocab_size": 64, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 2,
        "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
GPT2_IDS = 50  # the "tokenizer's" vocabulary: ids below this; the embedding is padded to 64


def bert_config_current():
    """What BertConfig.save_pretrained writes (transformers 4.4x) for BertForPreTraining."""
    return {"architectures": ["BertForPreTraining"], "attention_probs_dropout_prob": 0.1, "classifier_dropout": None,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 16, "initializer_range": 0.02,
            "intermediate_size": 24, "layer_norm_eps": 1e-12, "max_position_embeddings": 16, "model_type": "bert",
            "num_attention_heads": 2, "num_hidden_layers": 2, "pad_token_id": 0, "position_embedding_type": "absolute",
            "torch_dtype": "float32", "transformers_version": "4.46.3", "type_vocab_size": 2, "use_cache": True,
            "vocab_size": 40}


def bert_config_legacy():
    """The shape of bert-base-uncased's config.json."""
    c = bert_config_current()
    del c["classifier_dropout"], c["torch_dtype"]
    c.update({"architectures": ["BertForMaskedLM"], "gradient_checkpointing": False,
              "transformers_version": "4.6.0.dev0"})
    return c


def bert_config_finetuned():
    """A fine-tuned BertModel's config: labels, task, and generic PretrainedConfig keys."""
    c = bert_config_current()
    c.update({"architectures": ["BertModel"], "_name_or_path": "bert-tiny", "finetuning_task": "sst2",
              "id2label": {"0": "NEGATIVE", "1": "POSITIVE"}, "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
              "problem_type": "single_label_classification", "chunk_size_feed_forward": 0, "is_decoder": False,
              "add_cross_attention": False, "output_attentions": False, "torch_dtype": "bfloat16"})
    return c


def gpt2_config_current():
    """What GPT2Config.save_pretrained writes for GPT2LMHeadModel (every key of the class)."""
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": GPT2_IDS - 1, "embd_pdrop": 0.1, "eos_token_id": GPT2_IDS - 1,
            "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 16, "n_embd": 16,
            "n_head": 2, "n_inner": None, "n_layer": 2, "n_positions": 16, "reorder_and_upcast_attn": False,
            "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
            "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
            "summary_type": "cls_index", "summary_use_proj": True,
            "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
            "torch_dtype": "float32", "transformers_version": "4.46.3", "use_cache": True, "vocab_size": 64}


# ---- safetensors by hand -----------------------------------------------------------------------

def st_write(path, tensors):
    """tensors: list of (name, dtype string, shape, bytes), written in this order."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def st_read(path):
    """name -> float32 torch tensor (F32/F16/BF16; other dtypes as stored)."""
    import numpy as np
    import torch
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        shape = e["shape"]
        if e["dtype"] == "F32":
            t = torch.tensor(np.frombuffer(buf, dtype="<f4").copy())
        elif e["dtype"] == "F16":
            t = torch.tensor(np.frombuffer(buf, dtype="<f2").astype("float32"))
        elif e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype("uint32") << 16
            t = torch.tensor(u.view("float32").copy())
        elif e["dtype"] == "I64":
            t = torch.tensor(np.frombuffer(buf, dtype="<i8").copy())
        elif e["dtype"] in ("BOOL", "U8"):
            t = torch.tensor(np.frombuffer(buf, dtype="u1").copy())
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {e['dtype']}")
        out[name] = t.reshape(shape)
    return out


def encode(t, dtype):
    """A float tensor as (dtype string, bytes), rounded to the dtype."""
    import torch
    if dtype == "F32":
        return "F32", t.to(torch.float32).contiguous().numpy().tobytes()
    if dtype == "F16":
        return "F16", t.to(torch.float16).contiguous().numpy().tobytes()
    if dtype == "BF16":
        return "BF16", t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    raise ValueError(dtype)


def rounded(t, dtype):
    import torch
    if dtype == "F16":
        return t.to(torch.float16).to(torch.float32)
    if dtype == "BF16":
        return t.to(torch.bfloat16).to(torch.float32)
    return t


def write_dir(out_dir, name, config, tensors):
    d = os.path.join(out_dir, name)
    st_write(os.path.join(d, "model.safetensors"), tensors)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


# ---- losses -----------------------------------------------------------------------------------

def bert_batch_tensors(b, B, T):
    import torch
    L = torch.long
    v = lambda k, shape: torch.tensor(b[k], dtype=L).reshape(shape)
    P = len(b["masked_positions"]) // B
    return (v("ids", (B, T)), v("token_types", (B, T)), v("lengths", (B,)), v("masked_positions", (B, P)),
            v("masked_labels", (B, P)), v("nsp_labels", (B,)))


def bert_loss(t, batch, cfg):
    """MLM + NSP loss of HF-named tensors t ('bert.'-prefixed names)."""
    import bert_model
    mlm, nsp = bert_model.pretraining_loss(t, batch, cfg)
    return float(mlm), float(nsp)


def gpt2_loss(t, ids, targets, cfg):
    import gpt_model
    return float(gpt_model.loss_fn(gpt_model.forward(t, ids, cfg), targets))


def normalise(tensors, prefix):
    """HF names as saved (any prefix, gamma/beta) -> the prefixed names the references read."""
    out = {}
    for n, t in tensors.items():
        n = n.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        top = n.startswith("cls.") or n.startswith("lm_head.") or n.startswith("classifier.") or n.startswith("qa_")
        if not top and not n.startswith(prefix):
            n = prefix + n
        out[n] = t
    return out


def loss_of(args):
    import torch
    sys.path.insert(0, here)
    with open(args.expected) as f:
        exp = json.load(f)
    t = st_read(os.path.join(args.loss_of, "model.safetensors"))
    with torch.no_grad():
        if args.kind == "bert":
            t = normalise(t, "bert.")
            cfg = BERT
            mlm, nsp = bert_loss(t, bert_batch_tensors(exp["bert_batch"], exp["bert_B"], exp["bert_T"]), cfg)
            res = {"mlm_loss": mlm, "nsp_loss": nsp}
        else:
            t = {n[len("transformer."):] if n.startswith("transformer.") else n: v for n, v in t.items()}
            ids = torch.tensor(exp["gpt2_ids"], dtype=torch.long).reshape(exp["gpt2_B"], exp["gpt2_T"])
            tg = torch.tensor(exp["gpt2_targets"], dtype=torch.long).reshape(exp["gpt2_B"], exp["gpt2_T"])
            res = {"loss": gpt2_loss(t, ids, tg, GPT2)}
    with open(args.out, "w") as f:
        json.dump(res, f)


# ---- generating the variants ------------------------------------------------------------------

def generate(out_dir):
    import numpy as np
    import torch
    sys.path.insert(0, here)
    import bert_model
    import gpt_model

    torch.set_num_threads(1)
    rng = np.random.default_rng(20261125)

    def draw(shapes, norm):
        p = {}
        for name, shape in shapes.items():
            if norm(name):
                v = (1.0 if name.endswith(".weight") else 0.0) + 0.1 * rng.standard_normal(shape)
            elif name.endswith(".bias"):
                v = 0.1 * rng.standard_normal(shape)
            else:
                v = 0.2 * rng.standard_normal(shape)
            p[name] = torch.tensor(v, dtype=torch.float32)
        return p

    exp = {"torch": torch.__version__}

    # BERT: one set of weights, three files.
    bp = draw(bert_model.param_shapes(BERT), lambda n: "LayerNorm" in n)
    B, T, P, V = 3, 9, 3, BERT["vocab_size"]
    L = torch.long
    batch = (torch.tensor(rng.integers(0, V, (B, T)), dtype=L), torch.tensor([[0] * 4 + [1] * (T - 4)] * B, dtype=L),
             torch.tensor([T, 6, T - 1], dtype=L), torch.tensor([[1, 5, 8], [2, 3, 0], [4, 6, 7]], dtype=L),
             torch.tensor(rng.integers(0, V, (B, P)), dtype=L), torch.tensor([0, 1, 1], dtype=L))
    ints = lambda t: [int(x) for x in t.reshape(-1).tolist()]
    exp.update({"bert_B": B, "bert_T": T,
                "bert_batch": {"ids": ints(batch[0]), "token_types": ints(batch[1]), "lengths": ints(batch[2]),
                               "masked_positions": ints(batch[3]), "masked_labels": ints(batch[4]),
                               "nsp_labels": ints(batch[5])}})
    base = [n for n in bp if n.startswith("bert.")]
    heads = [n for n in bp if not n.startswith("bert.")]

    def bert_tensors(dtype, names, rename=lambda n: n):
        return [(rename(n),) + (lambda e: (e[0], tuple(bp[n].shape), e[1]))(encode(bp[n], dtype)) for n in names]

    # current BertForPreTraining
    write_dir(out_dir, "bert_pretraining", bert_config_current(), bert_tensors("F32", base + heads))
    with torch.no_grad():
        mlm, nsp = bert_loss(bp, batch, BERT)
    exp["bert_pretraining"] = {"mlm_loss": mlm, "nsp_loss": nsp}

    # legacy bert-base-uncased shape, F16
    gb = lambda n: n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    ts = bert_tensors("F16", base, gb)
    ts.append(("bert.embeddings.position_ids", "I64", (1, BERT["max_position_embeddings"]),
               np.arange(BERT["max_position_embeddings"], dtype="<i8").reshape(1, -1).tobytes()))
    ts += bert_tensors("F16", heads, gb)
    word = bp["bert.embeddings.word_embeddings.weight"]
    ts.append(("cls.predictions.decoder.weight",) + (lambda e: (e[0], tuple(word.shape), e[1]))(encode(word, "F16")))
    pb = bp["cls.predictions.bias"]
    ts.append(("cls.predictions.decoder.bias",) + (lambda e: (e[0], tuple(pb.shape), e[1]))(encode(pb, "F16")))
    write_dir(out_dir, "bert_legacy_f16", bert_config_legacy(), ts)
    with torch.no_grad():
        mlm, nsp = bert_loss({n: rounded(t, "F16") for n, t in bp.items()}, batch, BERT)
    exp["bert_legacy_f16"] = {"mlm_loss": mlm, "nsp_loss": nsp}

    # BertModel alone, BF16: no heads; the encoder's output (valid positions) is checked
    write_dir(out_dir, "bert_model_bf16", bert_config_finetuned(),
              bert_tensors("BF16", base, lambda n: n[len("bert."):]))
    with torch.no_grad():
        x = bert_model.encoder({n: rounded(t, "BF16") for n, t in bp.items()}, batch[0], batch[1], batch[2], BERT)
    valid = torch.arange(T)[None, :] < batch[2][:, None]  # the output at padded positions is not defined
    exp["bert_model_bf16"] = {"sequence_output_sum": float(x[valid].sum()), "cls_output": [float(v) for v in x[0, 0]]}

    # GPT-2: one set of weights, three files.
    gp = draw(gpt_model.param_shapes(GPT2), lambda n: ".ln_" in n or n.startswith("ln_f"))
    gB, gT = 2, 11
    seq = torch.tensor(rng.integers(0, GPT2_IDS, (gB, gT + 1)), dtype=L)
    ids, targets = seq[:, :-1], seq[:, 1:]
    exp.update({"gpt2_B": gB, "gpt2_T": gT, "gpt2_ids": ints(ids), "gpt2_targets": ints(targets)})
    Pn = GPT2["n_positions"]

    def gpt_tensors(dtype, prefix, buffers=None, lm_head=False):
        out = []
        for n, t in gp.items():
            d, b = encode(t, dtype)
            out.append((prefix + n, d, tuple(t.shape), b))
            if buffers and n.endswith("ln_1.bias"):  # after ln_1, where GPT2Attention registers them
                layer = n[:-len("ln_1.bias")]
                if buffers == "bool":
                    mask = np.tril(np.ones((Pn, Pn), dtype="u1")).reshape(1, 1, Pn, Pn)
                    out.append((prefix + layer + "attn.bias", "BOOL", (1, 1, Pn, Pn), mask.tobytes()))
                else:
                    mask = np.tril(np.ones((Pn, Pn), dtype="<f4")).reshape(1, 1, Pn, Pn)
                    out.append((prefix + layer + "attn.bias", "F32", (1, 1, Pn, Pn), mask.tobytes()))
                out.append((prefix + layer + "attn.masked_bias", "F32", (), np.array(-1e4, dtype="<f4").tobytes()))
        if lm_head:
            d, b = encode(gp["wte.weight"], dtype)
            out.append(("lm_head.weight", d, tuple(gp["wte.weight"].shape), b))
        return out

    variants = [("gpt2_lmhead", "F32", "transformer.", None, False),
                ("gpt2_legacy_f16", "F16", "transformer.", "bool", True),
                ("gpt2_hub_bf16", "BF16", "", "f32", False)]
    for name, dtype, prefix, buffers, lm_head in variants:
        cfg = gpt2_config_current()
        if name == "gpt2_hub_bf16":  # the hub's gpt2 config.json: fewer keys
            for k in ("reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx", "scale_attn_weights", "n_inner",
                      "use_cache", "torch_dtype", "transformers_version"):
                del cfg[k]
        write_dir(out_dir, name, cfg, gpt_tensors(dtype, prefix, buffers, lm_head))
        with torch.no_grad():
            exp[name] = {"loss": gpt2_loss({n: rounded(t, dtype) for n, t in gp.items()}, ids, targets, GPT2)}

    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir")
    ap.add_argument("--loss-of")
    ap.add_argument("--kind", choices=["bert", "gpt2"])
    ap.add_argument("--expected")
    ap.add_argument("--out")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"hf_reference.py: {e}; skipping", file=sys.stderr)
        sys.exit(77)
    if args.loss_of:
        if not (args.kind and args.expected and args.out):
            ap.error("--loss-of needs --kind, --expected and --out")
        loss_of(args)
    elif args.out_dir:
        generate(args.out_dir)
    else:
        ap.error("give --out-dir or --loss-of")


if __name__ == "__main__":
    main()
