#!/usr/bin/env python3
"""The hostile suite: every option of every program, probed with the input classes that broke
programs before (docs/reliability.md). The probes are generated from each program's own option
list (`<program> --options-json`, examples/cli.hpp), so a program added later, or a new flag, is
probed without new test code; a program needs only a small valid command line in
tests/hostile/baselines.json (the suite fails naming a program that has none).

  hostile.py --bin BUILD/examples --src SOURCE --work DIR [--jobs 2] PROGRAM...

Classes, per program:
  numeric  every option holding a number, with edge values ('', 'x', -1, 0, nan, inf, 1e999,
           2^63, 2^64): a usage error or an error, or a run that prints no nan/inf
  files    every option naming an input, as a FIFO, a directory, /dev/zero, a missing file, an
           empty file: refused (status 1 or 2) with a message naming it, never a hang
  outputs  every output option set to an input (the same path, a hard link to it, a directory
           holding it): refused, the input unchanged
  midrun   every mapped input of a trainer truncated while the run reads it: status 1 naming it
  diverge  every trainer at the highest learning rate without clipping: no nan/inf reported with
           status 0; an error names the last good checkpoint
Every probe: no signal, no hang (a probe still running after --limit seconds is a failure).
"""
import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

NUMERIC_EDGES = ["", "x", "-1", "0", "nan", "inf", "1e999", "9223372036854775808", "18446744073709551616"]
NONFINITE = re.compile(r"(?<![A-Za-z_])-?(nan|inf|infinity)(?![A-Za-z_])", re.I)


def sh(cmd, cwd, stdin=subprocess.DEVNULL):
    return subprocess.run(cmd, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace")


class Suite:
    def __init__(self, a):
        self.bin, self.src, self.work, self.limit = os.path.abspath(a.bin), os.path.abspath(a.src), os.path.abspath(a.work), a.limit
        self.failures, self.count = [], 0
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines.json")) as f:
            self.baselines = json.load(f)["programs"]

    # ---- assets: small valid inputs for the baselines ----
    def assets(self):
        w = os.path.join(self.work, "assets")
        shutil.rmtree(w, ignore_errors=True)
        os.makedirs(w)
        text = os.path.join(w, "text")
        os.makedirs(text)
        src_text = os.path.join(self.src, "data", "corpus", "valid")
        names = sorted(os.listdir(src_text))[:1]
        for n in names:
            shutil.copy(os.path.join(src_text, n), text)
        v = {"src": self.src, "text": text, "tok": os.path.join(w, "t.tok"), "bex": os.path.join(w, "t.bex"),
             "jsonl": os.path.join(w, "t.jsonl"), "bert_model": os.path.join(w, "bert.json"),
             "gpt_model": os.path.join(w, "gpt.json"), "gpt_run": os.path.join(w, "gpt-run"),
             "squad_train": os.path.join(self.src, "data", "squad", "train-v1.1.json"),
             "squad_dev": os.path.join(self.src, "data", "squad", "dev-v1.1.json"),
             "predictions": os.path.join(w, "predictions.json")}
        steps = [[self.prog("encode_dataset"), "-i", text, "-o", v["tok"], "--threads", "1"],
                 [self.prog("bert_data"), "-i", text, "-o", v["bex"], "--seq-len", "32", "--max-predictions", "5"],
                 [self.prog("gpt_train"), "--train", v["tok"], "--layers", "1", "--embd", "32", "--heads", "2",
                  "--positions", "32", "--seq-len", "16", "--batch-size", "2", "--steps", "1", "--threads", "1",
                  "--out", v["gpt_run"]]]
        for cmd in steps:
            r = sh(cmd, w)
            if r.returncode != 0:
                sys.exit(f"hostile: cannot make the assets: {' '.join(cmd)}: {r.stderr[-2000:]}")
        json.dump({"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
                   "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
                   "type_vocab_size": 2}, open(v["bert_model"], "w"))
        json.dump({"vocab_size": 50257, "n_positions": 32, "n_layer": 1, "n_head": 2, "n_embd": 32},
                  open(v["gpt_model"], "w"))
        lines = [l.strip() for l in open(os.path.join(text, names[0]), errors="replace") if len(l.strip()) > 20][:16]
        with open(v["jsonl"], "w") as f:
            for i, l in enumerate(lines):
                f.write(json.dumps({"text": l, "label": "ab"[i % 2]}) + "\n")
        dev = json.load(open(v["squad_dev"]))
        ids = [q["id"] for a in dev["data"] for p in a["paragraphs"] for q in p["qas"]]
        json.dump({i: "the" for i in ids}, open(v["predictions"], "w"))
        self.assets_ = v

    def prog(self, name):
        return os.path.join(self.bin, name)

    # ---- one probe ----
    def argv(self, name, args):
        cmd, positional = [self.prog(name)], []
        for k, val in args.items():
            if k.startswith("#"):
                positional.append(val)
            elif val is None:
                cmd.append(k)
            else:
                cmd += [k, val]
        return cmd + positional

    def fill(self, name, d, out):
        v = dict(self.assets_, out=out)
        return {k: (None if val is None else val.format(**v)) for k, val in d.items()}

    def run(self, name, cls, what, args, cwd, check, during=None):
        os.makedirs(cwd, exist_ok=True)
        cmd = self.argv(name, args)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, errors="replace", env=env, start_new_session=True)
        if during:
            during(p)
        try:
            out, err = p.communicate(timeout=self.limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return self.report(name, cls, what, cmd, f"still running after {self.limit} s (a hang?)", err)
        status = p.returncode
        if status < 0:
            return self.report(name, cls, what, cmd, f"killed by signal {-status}", err)
        if status not in (0, 1, 2, 130):
            return self.report(name, cls, what, cmd, f"exit status {status}", err)
        if status in (1, 2) and not re.search(rf"^{re.escape(name)}: (usage )?error", err, re.M):
            return self.report(name, cls, what, cmd, f"status {status} without a '{name}: error' line", err)
        problem = check(status, out, err, cwd)
        if problem:
            return self.report(name, cls, what, cmd, problem, err)
        return None

    def report(self, name, cls, what, cmd, problem, err):
        return f"FAIL [{cls}] {name} {what}: {problem}\n    $ {' '.join(cmd)}\n" + "".join(
            f"    | {l}\n" for l in err.strip().splitlines()[-4:])

    # ---- the probes of one program ----
    def probes(self, name):
        r = sh([self.prog(name), "--options-json"], self.work)
        if r.returncode != 0:
            return [lambda: f"FAIL {name}: --options-json exited with {r.returncode}: {r.stderr[-500:]}"]
        options = json.loads(r.stdout)["options"]
        if name not in self.baselines:
            return [lambda: f"FAIL {name}: no baseline in tests/hostile/baselines.json (a small valid command line)"]
        b = self.baselines[name]
        base_dir = os.path.join(self.work, "probes", name)
        shutil.rmtree(base_dir, ignore_errors=True)
        jobs, n = [], [0]

        def probe_dir():
            n[0] += 1
            return os.path.join(base_dir, str(n[0]))

        def key_of(o):  # the baseline's spelling of an option, else its first long name
            for k in o["names"] + ([("#" + o["flag"])] if o["positional"] else []):
                if k in b["args"]:
                    return k
            return "#" + o["flag"] if o["positional"] else o["flag"]

        def with_value(o, value, d):
            args = self.fill(name, b["args"], os.path.join(d, "out"))
            k = key_of(o)
            # an option that excludes or needs others in the baseline (baselines.json "probe_with")
            w = next((b["probe_with"][n] for n in o["names"] + [k] if n in b.get("probe_with", {})), {})
            for drop in w.get("drop", []):
                args.pop(drop, None)
            args.update(self.fill(name, w.get("add", {}), os.path.join(d, "out")))
            args[k] = value
            return args

        # the baseline itself must succeed: the probes change one thing of a valid command line
        d = probe_dir()
        jobs.append((name, "baseline", "as is", self.fill(name, b["args"], os.path.join(d, "out")), d,
                     lambda status, out, err, d_: None if status == 0 else f"status {status}", None))

        def clean_numbers(status, out, err, d):
            if status != 0:
                return None
            texts = [out] + [open(os.path.join(r_, f), errors="replace").read()
                             for r_, _, fs in os.walk(d) for f in fs if f.endswith((".jsonl", ".json"))]
            for t in texts:
                m = NONFINITE.search(t)
                if m:
                    return f"status 0 but a non-finite number was reported: ...{t[max(0, m.start() - 80):m.end() + 20]}"
            return None

        inputs = [o for o in options if o.get("kind") == "input" and o["value"]]
        outputs = [o for o in options if o.get("kind") == "output" and o["value"]]

        # numeric edge values
        for o in options:
            if not o["value"] or o.get("kind") not in ("count", "integer", "number"):
                continue
            for v in NUMERIC_EDGES:
                d = probe_dir()
                jobs.append((name, "numeric", f"{o['flag']} '{v}'", with_value(o, v, d), d, clean_numbers, None))

        # inputs that are not files, or not there, or empty
        def refused_naming(path):
            base = os.path.basename(path.rstrip("/"))

            def check(status, out, err, d):
                if status not in (1, 2):
                    return f"status {status}: accepted"
                if base not in err:
                    return f"the message does not name '{base}'"
                return None
            return check

        for o in inputs:
            for kind in ("fifo", "dir", "zero", "missing", "empty"):
                d = probe_dir()
                os.makedirs(d)
                path = os.path.join(d, "in-" + kind)
                if kind == "fifo":
                    os.mkfifo(path)
                elif kind == "dir":
                    os.makedirs(path)
                elif kind == "zero":
                    path = "/dev/zero"
                elif kind == "empty":
                    open(path, "w").close()
                jobs.append((name, "files", f"{o['flag']} {kind}", with_value(o, path, d), d, refused_naming(path),
                             None))

        # outputs set to an input: the same path, a hard link to it, a directory holding it
        def tree_hash(p):
            h = hashlib.sha256()
            if os.path.isdir(p):
                for r_, ds, fs in sorted(os.walk(p)):
                    ds.sort()
                    for f in sorted(fs):
                        h.update(f.encode())
                        h.update(open(os.path.join(r_, f), "rb").read())
            elif os.path.exists(p):
                h.update(open(p, "rb").read())
            return h.hexdigest()

        for out_o in outputs:
            for in_o in inputs:
                key = key_of(in_o)
                original = self.fill(name, b["args"], "").get(key)
                if not original or not os.path.exists(original):
                    continue
                for how in ("same", "link", "holder"):
                    if how == "link" and os.path.isdir(original):
                        continue
                    d = probe_dir()
                    os.makedirs(d)
                    holder = os.path.join(d, "holder")
                    os.makedirs(holder)
                    copy = os.path.join(holder, os.path.basename(original.rstrip("/")))
                    (shutil.copytree if os.path.isdir(original) else shutil.copy)(original, copy)
                    out_path = {"same": copy, "link": os.path.join(d, "link"), "holder": holder}[how]
                    if how == "link":
                        os.link(copy, out_path)
                    args = with_value(in_o, copy, d)
                    args[key_of(out_o)] = out_path
                    before = tree_hash(copy)

                    def check(status, out, err, d_, copy=copy, before=before):
                        if tree_hash(copy) != before:
                            return "the input was changed"
                        return None if status in (1, 2) else f"status {status}: the output was accepted"
                    jobs.append((name, "outputs", f"{key_of(out_o)} = {how} of {key}", args, d, check, None))

        # mapped inputs truncated while a trainer reads them
        for key in b.get("mapped", []):
            d = probe_dir()
            os.makedirs(d)
            args = self.fill(name, b["args"], os.path.join(d, "out"))
            victim = os.path.join(d, "victim" + os.path.splitext(args[key])[1])
            shutil.copy(args[key], victim)
            args[key] = victim
            args.update({"--steps": "1000000", "--checkpoint-every": "0", "--log-every": "1", "--eval-every": "1"})
            metrics = os.path.join(d, "out", "metrics.jsonl")

            def during(p, metrics=metrics, victim=victim):
                while p.poll() is None:  # until the run has trained a step (or ended)
                    if os.path.exists(metrics) and '"kind":"train"' in open(metrics, errors="replace").read():
                        break
                    time.sleep(0.05)
                os.truncate(victim, 64)

            def check(status, out, err, d_, victim=victim):
                if status != 1:
                    return f"status {status}, not 1"
                return None if os.path.basename(victim) in err else "the message does not name the file"
            jobs.append((name, "midrun", f"{key} truncated", args, d, check, during))

        # a diverging run
        if b.get("trainer"):
            d = probe_dir()
            args = self.fill(name, b["args"], os.path.join(d, "out"))
            args.update({"--lr": "100", "--clip": "none", "--steps": "8", "--checkpoint-every": "2"})

            def check(status, out, err, d_):
                if status == 1:
                    return None if re.search(r"last good checkpoint|No checkpoint was saved", err) else \
                        "status 1 without naming the last good checkpoint"
                return clean_numbers(status, out, err, d_)
            jobs.append((name, "diverge", "--lr 100 --clip none", args, d, check, None))
        return jobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=float, default=120, help="seconds after which a probe counts as hung")
    ap.add_argument("--only", default="", help="run only these classes (comma-separated)")
    ap.add_argument("programs", nargs="+")
    a = ap.parse_args()
    s = Suite(a)
    os.makedirs(s.work, exist_ok=True)
    s.assets()
    jobs = []
    for p in a.programs:
        for j in s.probes(p):
            if callable(j):
                s.failures.append(j())
            elif not a.only or j[1] in a.only.split(","):
                jobs.append(j)
    counts = {}
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for r, j in zip(ex.map(lambda j: s.run(*j), jobs), jobs):
            counts[(j[0], j[1])] = counts.get((j[0], j[1]), 0) + 1
            if r:
                s.failures.append(r)
    for p in a.programs:
        line = ", ".join(f"{c} {n}" for (q, c), n in sorted(counts.items()) if q == p)
        print(f"{p}: {line}")
    for f in s.failures:
        print(f)
    print(f"hostile: {len(jobs)} probes, {len(s.failures)} failure(s)")
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
