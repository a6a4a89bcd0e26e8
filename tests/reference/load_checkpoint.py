#!/usr/bin/python3
"""Loads a sparselm checkpoint (config.json + model.safetensors, HF GPT-2 names, Conv1D (in, out)
weights) into the independent PyTorch GPT-2 of gpt_model.py and prints the mean cross-entropy of
given tokens as JSON. The safetensors file is parsed here from its published layout (8-byte
little-endian header length, JSON header, raw little-endian data), not with sparselm code.

    /usr/bin/python3 tests/reference/load_checkpoint.py CHECKPOINT_DIR TOKENS.json
    TOKENS.json: {"batch": B, "seq": T, "ids": [B*T ints], "targets": [B*T ints]}
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_model  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = bytearray(data[b:e])
        out[name] = torch.frombuffer(buf, dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).float()
    return out


def main():
    ckpt, tokens = sys.argv[1], sys.argv[2]
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    shapes = gpt_model.param_shapes(cfg)
    missing = [n for n in shapes if n not in tensors]
    if missing:
        sys.exit(f"{ckpt}: missing tensors {missing[:5]}")
    bad = [n for n, s in shapes.items() if tuple(tensors[n].shape) != tuple(s)]
    if bad:
        sys.exit(f"{ckpt}: tensors with unexpected shapes {bad[:5]}")
    with open(tokens) as f:
        tok = json.load(f)
    B, T = tok["batch"], tok["seq"]
    ids = torch.tensor(tok["ids"], dtype=torch.long).view(B, T)
    targets = torch.tensor(tok["targets"], dtype=torch.long).view(B, T)
    with torch.no_grad():
        logits = gpt_model.forward(tensors, ids, cfg)
        loss = gpt_model.loss_fn(logits, targets).item()
    print(json.dumps({"loss": loss}))


if __name__ == "__main__":
    main()
