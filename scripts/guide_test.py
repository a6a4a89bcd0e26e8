#!/usr/bin/python3
"""Runs the shell commands of the user's guide (docs/guide/*.md) at tiny sizes, so the guide cannot rot.

    scripts/guide_test.py --bin BUILD/examples [--pages a.md,b.md] [--work DIR] [--keep] [--list]

The convention (docs/README.md, "How the guide is tested"):

- Every block fenced ```sh in a guide page is run; other fences (```text, ```json, ```cpp, a bare
  fence) are not. A block right after the line <!-- guide-test: skip --> is not run (it needs the
  network, another machine, a long time or a build).
- The pages run in the order docs/guide/README.md lists them, in one scratch directory (--work, or
  a new temporary one), so a later page may use what an earlier one made (runs/data/*.tok). The
  directory holds links to the checkout's configs/, data/ and scripts/, and build/examples/, whose
  programs are wrappers around the ones in --bin.
- <!-- tiny: PROGRAM FLAGS --> (a line outside a block) appends FLAGS to every later call of
  build/examples/PROGRAM on that page (a later line for the same program replaces it; no FLAGS:
  none). FLAGS replace the command's own flags of the same names (a flag and its value), and
  !--flag removes --flag and its value, so the guide shows full-size commands and the test runs
  them with --steps 2, a narrower model and so on. <!-- tiny-env: NAME=VALUE --> sets an
  environment variable for the rest of the page (e.g. STEPS for scripts/main_job.sh).
- Each page runs in one bash process with `set -euo pipefail`: a failing command fails the test,
  naming the page, the block's line and the command's output.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "guide")
FENCE = re.compile(r"^(\s*)```+\s*([\w+-]*)")
TINY = re.compile(r"^<!--\s*tiny:\s*([\w.-]+)\s*(.*?)\s*-->\s*$")
TINY_ENV = re.compile(r"^<!--\s*tiny-env:\s*([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*-->\s*$")
SKIP = re.compile(r"^<!--\s*guide-test:\s*skip\b.*-->\s*$")
PROGRAM = re.compile(r"\bbuild/examples/([A-Za-z0-9_]+)")


def page_order():
    """The pages in the order of docs/guide/README.md's links, then any others alphabetically."""
    listed = []
    index = os.path.join(GUIDE, "README.md")
    if os.path.exists(index):
        for name in re.findall(r"\]\(([\w.-]+\.md)\)", open(index, encoding="utf-8").read()):
            if name != "README.md" and name not in listed and os.path.exists(os.path.join(GUIDE, name)):
                listed.append(name)
    rest = sorted(n for n in os.listdir(GUIDE) if n.endswith(".md") and n != "README.md" and n not in listed)
    return listed + rest


def extract(path):
    """A page's steps: ('tiny', program, flags), ('env', name, value) and ('block', line, text)."""
    steps, lines = [], open(path, encoding="utf-8").read().split("\n")
    i, skip_next = 0, False
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            indent, lang = m.group(1), m.group(2)
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```", lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            if lang == "sh" and not skip_next:
                steps.append(("block", start, "\n".join(body)))
            skip_next = False
        elif SKIP.match(line.strip()):
            skip_next = True
        elif TINY.match(line.strip()):
            t = TINY.match(line.strip())
            steps.append(("tiny", t.group(1), t.group(2)))
        elif TINY_ENV.match(line.strip()):
            t = TINY_ENV.match(line.strip())
            steps.append(("env", t.group(1), t.group(2)))
        elif line.strip():
            skip_next = skip_next and line.strip().startswith("<!--")
        i += 1
    return steps


# A program's wrapper: the page's tiny flags replace the same flags of the command (a flag and the
# value after it, unless that starts with '-'; !--flag only removes), then are appended.
WRAPPER = """#!/usr/bin/python3
import os, sys
real, prog = @REAL@, @PROG@
tiny_file = os.path.join(os.environ["GUIDE_WORK"], ".tiny", prog)
tiny = open(tiny_file).read().split() if os.path.exists(tiny_file) else []
def flags(args):
    out, i = [], 0
    while i < len(args):
        if args[i].startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            out.append(args[i:i + 2]); i += 2
        else:
            out.append(args[i:i + 1]); i += 1
    return out
drop = {t[1:] for t in tiny if t.startswith("!")}
tiny = [t for t in tiny if not t.startswith("!")]
names = {f[0].split("=")[0] for f in flags(tiny) if f[0].startswith("-")} | drop
args = [a for f in flags(sys.argv[1:]) if f[0].split("=")[0] not in names for a in f] + tiny
os.execv(real, [real] + args)
"""


def make_work(work, bin_dir):
    for name in ("configs", "data", "scripts", "include", "examples", "tests"):
        link = os.path.join(work, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(ROOT, name), link)
    wrappers = os.path.join(work, "build", "examples")
    os.makedirs(wrappers, exist_ok=True)
    os.makedirs(os.path.join(work, ".tiny"), exist_ok=True)
    for prog in sorted(os.listdir(bin_dir)):
        real = os.path.join(bin_dir, prog)
        if not (os.path.isfile(real) and os.access(real, os.X_OK)) or "." in prog:
            continue
        w = os.path.join(wrappers, prog)
        with open(w, "w") as f:
            f.write(WRAPPER.replace("@REAL@", repr(real)).replace("@PROG@", repr(prog)))
        os.chmod(w, 0o755)


def page_script(name, steps):
    out = ["set -euo pipefail", 'rm -f "$GUIDE_WORK"/.tiny/*']
    for s in steps:
        if s[0] == "tiny":
            out.append(f"printf '%s\\n' {shlex_quote(s[2])} > \"$GUIDE_WORK/.tiny/{s[1]}\"")
        elif s[0] == "env":
            out.append(f"export {s[1]}={shlex_quote(s[2])}")
        else:
            out.append(f"echo '>>> {name}:{s[1]}' >&2")
            out.append(s[2])
    return "\n".join(out) + "\n"


def shlex_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="directory of the built example programs (BUILD/examples)")
    ap.add_argument("--pages", help="comma-separated page names (default: every page, in the index's order)")
    ap.add_argument("--work", help="scratch directory (default: a new temporary one, deleted after a pass)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--list", action="store_true", help="print the extracted commands and exit")
    a = ap.parse_args()
    pages = a.pages.split(",") if a.pages else page_order()
    if a.list:
        for p in pages:
            print(page_script(p, extract(os.path.join(GUIDE, p))))
        return 0
    bin_dir = os.path.abspath(a.bin)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="sparselm-guide-")
    os.makedirs(work, exist_ok=True)
    make_work(work, bin_dir)
    env = dict(os.environ, GUIDE_WORK=work, GUIDE_BIN=bin_dir, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    failed, t_all = [], time.time()
    for p in pages:
        steps = extract(os.path.join(GUIDE, p))
        blocks = [s for s in steps if s[0] == "block"]
        if shutil.which("mpirun") is None and any("mpirun" in s[2] for s in blocks):
            steps = [s for s in steps if not (s[0] == "block" and "mpirun" in s[2])]
            print(f"note {p}: mpirun not found, its mpirun blocks are not run", flush=True)
            blocks = [s for s in steps if s[0] == "block"]
        missing = sorted({m for s in blocks for m in PROGRAM.findall(s[2])
                          if not os.path.exists(os.path.join(bin_dir, m))})
        if missing:
            print(f"FAIL {p}: programs not built in {bin_dir}: {', '.join(missing)}", flush=True)
            failed.append(p)
            continue
        t0 = time.time()
        r = subprocess.run(["bash", "-c", page_script(p, steps)], cwd=work, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        dt = time.time() - t0
        if r.returncode != 0:
            print(f"FAIL {p} ({len(blocks)} blocks, {dt:.1f} s), exit status {r.returncode}; the last lines:", flush=True)
            print("\n".join(r.stdout.rstrip("\n").split("\n")[-40:]), flush=True)
            failed.append(p)
        else:
            print(f"ok   {p} ({len(blocks)} blocks, {dt:.1f} s)", flush=True)
    print(f"{len(pages) - len(failed)} of {len(pages)} pages passed in {time.time() - t_all:.1f} s"
          + (f"; scratch directory {work}" if a.keep or failed else ""), flush=True)
    if not a.keep and not failed and not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
