#!/usr/bin/env python3
"""Writes tests/reference/data/wordpiece_golden.jsonl: golden WordPiece encodings made by the
independent Python implementation (wordpiece_reference.py) on lines of seeded random text, so that
tests/data/test_wordpiece.cpp checks them even where python3 is missing.

    python3 tests/reference/make_wordpiece_golden.py data/bert/vocab.txt tests/reference/data/wordpiece_golden.jsonl

One JSON array per line: [text, [ids...]] (ASCII-escaped JSON).
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wordpiece_reference as ref  # noqa: E402

WORDS = ("The whale, Ishmael said, was unaffable; naïve résumé café Ångström Straße İstanbul "
         "ΟΔΥΣΣΕΥΣ Α'Σ ΑΣ'Α Привет мир 日本語 中文 한국어 ﾃｽﾄ ＦＵＬＬ ﬁne ǅemal x\u0301\u0327 "
         "don't 3.14 e.g. U.S.A. $100 #hashtag @user ... — “quoted” ‘single’ 😀🎉").split()
MARKS = "\u0301\u0308\u0327\u0345\u093c\u0b56\u1b44\U0001d165\U0001d16d\u20dd"
ODD = "\t\r\x01\x7f\x85\xa0\u1680\u2003\u200b\u2028\u2029\u3000\ufeff\ufffd\U000e0001"


def random_char(rng):
    while True:
        c = rng.randrange(0x110000)
        if not 0xD800 <= c <= 0xDFFF and c != 0x0A:
            return chr(c)


def random_line(rng):
    parts = []
    for _ in range(rng.randrange(1, 16)):
        r = rng.random()
        if r < 0.55:
            w = rng.choice(WORDS)
            parts.append(w.upper() if rng.random() < 0.2 else w)
        elif r < 0.7:
            parts.append(rng.choice(MARKS))
        elif r < 0.8:
            parts.append(rng.choice(ODD))
        elif r < 0.97:
            parts.append("".join(random_char(rng) for _ in range(rng.randrange(1, 6))))
        else:
            parts.append("z" * rng.randrange(95, 106))  # around the 100-character limit
        parts.append(" " if rng.random() < 0.8 else "")
    return "".join(parts)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    vocab = ref.load_vocab(sys.argv[1])
    rng = random.Random(20261125)
    with open(sys.argv[2], "w", encoding="ascii", newline="\n") as out:
        for _ in range(600):
            text = random_line(rng)
            out.write(json.dumps([text, ref.encode(text, vocab)]) + "\n")


if __name__ == "__main__":
    main()
