"""A two-class text set from the bundled validation text, for the fine-tuning tests: sentences of
40 to 300 characters from Moby-Dick and from the State of the Union addresses, labelled by their
source ("moby", "sotu"), interleaved deterministically; every k-th row held out.

    make_classify_set.py CORPUS_DIR TRAIN.jsonl TEST.jsonl PER_SOURCE K
"""
import json
import os
import re
import sys


def sentences(path):
    text = " ".join(open(path, encoding="utf-8").read().split())
    return [t for t in re.split(r"(?<=[.!?]) ", text) if 40 <= len(t) <= 300]


def main():
    src, train, test, per_source, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    moby = sentences(os.path.join(src, "moby_dick.txt"))[:per_source]
    sotu = [t for f in sorted(os.listdir(os.path.join(src, "sotu"))) for t in sentences(os.path.join(src, "sotu", f))]
    rows = [(t, "moby") for t in moby] + [(t, "sotu") for t in sotu[:per_source]]
    rows = rows[::2] + rows[1::2]
    with open(train, "w") as tr, open(test, "w") as te:
        for i, (t, label) in enumerate(rows):
            (te if i % k == 0 else tr).write(json.dumps({"text": t, "label": label}) + "\n")


if __name__ == "__main__":
    main()
