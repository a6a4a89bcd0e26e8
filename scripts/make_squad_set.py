#!/usr/bin/env python3
"""Builds data/squad/{train,dev}-v1.1.json (SQuAD v1.1 format) from data/squad/questions.txt.

questions.txt: blocks, one per context.
  ## [dev] FILE:LINE          a whole line (one paragraph) of data/corpus/train/FILE, verbatim
  Question text? | answer | other answer ...
An answer may end in '#N' (N >= 1) to take its N-th occurrence in the context (default: the
first). Every answer must occur in the context; answer_start counts characters (code points).
Train questions take one answer; dev questions up to three. Standard library only.

  scripts/make_squad_set.py [--check]   (--check: build in memory and compare with the files)
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "corpus" / "train"
OUT = ROOT / "data" / "squad"


def parse(path):
    blocks, cur = [], None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("# "):
            continue
        if line.startswith("## "):
            head = line[3:].split()
            split = "dev" if head[0] == "dev" else "train"
            name, _, lineno = head[-1].rpartition(":")
            cur = {"split": split, "source": head[-1], "file": name, "line": int(lineno), "qas": [], "at": n}
            blocks.append(cur)
            continue
        parts = [p.strip() for p in line.split("|")]
        if cur is None or len(parts) < 2 or not parts[0].endswith("?"):
            sys.exit(f"{path}:{n}: expected 'question? | answer [| answer]', got {raw!r}")
        cur["qas"].append((n, parts[0], parts[1:]))
    return blocks


def locate(context, answer, where):
    occurrence = 1
    if "#" in answer:
        answer, _, k = answer.rpartition("#")
        occurrence = int(k)
    # occurrences that start and end at word boundaries ("it" is not found inside "white")
    def whole(i):
        j = i + len(answer)
        return (i == 0 or not context[i - 1].isalnum()) and (j == len(context) or not context[j].isalnum())

    starts = [i for i in range(len(context)) if context.startswith(answer, i) and whole(i)]
    if len(starts) < occurrence:
        sys.exit(f"{where}: answer {answer!r} (occurrence {occurrence}) not in the context as whole words")
    start = starts[occurrence - 1]
    assert context[start : start + len(answer)] == answer
    return {"text": answer, "answer_start": start}


def build(questions_file):
    blocks = parse(questions_file)
    sets = {"train": [], "dev": []}
    seen = set()
    for b in blocks:
        lines = (CORPUS / b["file"]).read_text(encoding="utf-8").split("\n")
        context = lines[b["line"] - 1].strip()
        words = len(context.split())
        if not 80 <= words <= 250:
            sys.exit(f"{questions_file}:{b['at']}: context {b['source']} has {words} words (80-250)")
        if b["source"] in seen:
            sys.exit(f"{questions_file}:{b['at']}: context {b['source']} used twice")
        seen.add(b["source"])
        qas = []
        for n, q, answers in b["qas"]:
            if b["split"] == "train" and len(answers) != 1:
                sys.exit(f"{questions_file}:{n}: train questions take one answer")
            if len(answers) > 3:
                sys.exit(f"{questions_file}:{n}: at most three answers")
            where = f"{questions_file}:{n}"
            qid = f"{b['split']}-{len(sets[b['split']]):03d}-{len(qas):02d}"
            qas.append({"id": qid, "question": q, "answers": [locate(context, a, where) for a in answers]})
        sets[b["split"]].append({"title": f"{b['source']}", "paragraphs": [{"context": context, "qas": qas}]})
    return {k: {"version": "1.1", "data": v} for k, v in sets.items()}


def main(argv):
    sets = build(OUT / "questions.txt")
    for split, doc in sets.items():
        text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
        path = OUT / f"{split}-v1.1.json"
        if "--check" in argv:
            if path.read_text(encoding="utf-8") != text:
                sys.exit(f"{path} differs from what questions.txt gives; rerun scripts/make_squad_set.py")
        else:
            path.write_text(text, encoding="utf-8")
        n_q = sum(len(p["qas"]) for a in doc["data"] for p in a["paragraphs"])
        print(f"{split}: {len(doc['data'])} contexts, {n_q} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
