#!/usr/bin/env python3
"""An independent reference for sparselm's WordPiece (tests/data/test_wordpiece.cpp): BERT's uncased
basic tokenizer and greedy longest-match WordPiece, written from the published algorithm with
Python's unicodedata (no tables shared with the C++ code).

    python3 tests/reference/wordpiece_reference.py VOCAB.txt INPUT.txt OUTPUT.txt

Reads INPUT as UTF-8 lines (split at "\\n" only; "\\r" stays in its line) and writes, per line,
the token ids separated by spaces.
"""
import sys
import unicodedata

CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_control(c):
    if c in "\t\n\r":
        return False
    return unicodedata.category(c).startswith("C")


def is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def basic_tokens(text):
    cleaned = []
    for c in text:
        cp = ord(c)
        if cp == 0 or cp == 0xFFFD or is_control(c):
            continue
        cleaned.append(" " if is_whitespace(c) else c)
    spaced = []
    for c in cleaned:
        if any(a <= ord(c) <= b for a, b in CJK):
            spaced += [" ", c, " "]
        else:
            spaced.append(c)
    out = []
    for word in "".join(spaced).split():
        word = word.lower()
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        cur = []
        for c in word:
            if is_punctuation(c):
                if cur:
                    out.append("".join(cur))
                    cur = []
                out.append(c)
            else:
                cur.append(c)
        if cur:
            out.append("".join(cur))
    return " ".join(out).split()


def wordpiece(word, vocab, unk):
    if len(word) > 100:
        return [unk]
    ids, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = vocab[piece]
                break
            end -= 1
        if found is None:
            return [unk]
        ids.append(found)
        start = end
    return ids


def load_vocab(path):
    """vocab.txt -> {token: id} (id = line number)."""
    with open(path, encoding="utf-8") as f:
        return {t.rstrip("\n"): i for i, t in enumerate(f)}


def encode(text, vocab):
    unk = vocab["[UNK]"]
    return [i for w in basic_tokens(text) for i in wordpiece(w, vocab, unk)]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    vocab = load_vocab(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8", newline="") as f, open(sys.argv[3], "w", encoding="utf-8") as out:
        for line in f.read().split("\n"):
            out.write(" ".join(map(str, encode(line, vocab))) + "\n")


if __name__ == "__main__":
    main()
