#!/usr/bin/env python3
"""Independent SQuAD v1.1 scorer (standard library only), written from the public description of
the official v1.1 evaluation: normalise (lowercase, drop string.punctuation, replace the whole-word
articles a/an/the by a space, collapse white space), exact match, token-bag F1, maximum over the
ground truths, totals in percent; a question without a prediction scores 0.

  squad_eval_reference.py DATASET.json PREDICTIONS.json   -> {"exact_match": .., "f1": ..}
  squad_eval_reference.py --perturb SEED DATASET.json OUT.json
      writes seeded perturbed predictions (for the C++ comparison test)
"""
import collections
import json
import random
import re
import string
import sys

PUNCT = frozenset(string.punctuation)
ARTICLE = re.compile(r"\b(a|an|the)\b")


def normalise(text):
    text = "".join(ch for ch in text.lower() if ch not in PUNCT)
    return " ".join(ARTICLE.sub(" ", text).split())


def f1(prediction, truth):
    p, t = normalise(prediction).split(), normalise(truth).split()
    common = sum((collections.Counter(p) & collections.Counter(t)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(t)
    return 2 * precision * recall / (precision + recall)


def questions(dataset):
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"], qa


def evaluate(dataset, predictions):
    em = total_f1 = 0.0
    total = unanswered = 0
    for _, qa in questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            unanswered += 1
            continue
        pred = predictions[qa["id"]]
        truths = [a["text"] for a in qa["answers"]]
        em += max(float(normalise(pred) == normalise(t)) for t in truths)
        total_f1 += max(f1(pred, t) for t in truths)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * total_f1 / total, "unanswered": unanswered}


def perturb(dataset, seed):
    rng = random.Random(seed)
    out = {}
    for context, qa in questions(dataset):
        kind = rng.randrange(7)
        truth = qa["answers"][rng.randrange(len(qa["answers"]))]
        start = len(context[: truth["answer_start"]].encode("utf-8"))
        cbytes = context.encode("utf-8")
        if kind == 0:
            continue  # no prediction
        words = context.split()
        if kind == 1:
            pred = truth["text"]
        elif kind == 2:
            pred = "The " + truth["text"].upper() + "."
        elif kind == 3:  # widen by some words of the context
            i = rng.randrange(len(words))
            pred = " ".join(words[i : i + rng.randrange(1, 8)]) + " " + truth["text"]
        elif kind == 4:  # a random context span
            i = rng.randrange(len(words))
            pred = " ".join(words[i : i + rng.randrange(1, 12)])
        elif kind == 5:  # truth with its last word dropped, or empty
            pred = " ".join(truth["text"].split()[:-1])
        else:  # bytes around the answer, cut at character boundaries
            lo = max(0, start - rng.randrange(0, 20))
            hi = min(len(cbytes), start + len(truth["text"].encode("utf-8")) + rng.randrange(0, 20))
            pred = cbytes[lo:hi].decode("utf-8", "ignore")
        out[qa["id"]] = pred
    return out


def main(argv):
    if len(argv) == 4 and argv[0] == "--perturb":
        with open(argv[2], encoding="utf-8") as f:
            dataset = json.load(f)
        with open(argv[3], "w", encoding="utf-8") as f:
            json.dump(perturb(dataset, int(argv[1])), f, ensure_ascii=False)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        dataset = json.load(f)
    with open(argv[1], encoding="utf-8") as f:
        predictions = json.load(f)
    print(json.dumps(evaluate(dataset, predictions)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
