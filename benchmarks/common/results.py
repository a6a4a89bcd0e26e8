#!/usr/bin/python3
"""Results lines of the Python and shell benchmarks: the same JSON lines as the C++ ones
(benchmarks/common/results.hpp), appended to the file of `--json FILE` or $SPARSELM_RESULTS.

In a Python benchmark:

    from common import results                           # with benchmarks/ on sys.path
    results.add_argument(ap)                             # --json FILE (default $SPARSELM_RESULTS)
    args = ap.parse_args()
    out = results.Results("compare_gpt_step", args.json)
    out.add({"batch": 8, "seq": 128}, {"ratio_vs_pytorch": 6.4}, threads=2, fma_peak_gflops=430.0)

From a shell benchmark (values are JSON when they parse as JSON, else strings; the lines of one
invocation share SPARSELM_RESULTS_RUN="$(date -u +%Y-%m-%dT%H:%M:%SZ)-$$" as their run):

    /usr/bin/python3 benchmarks/common/results.py --json FILE --benchmark data_parallel \\
        --command "benchmarks/data_parallel.sh build" --threads 2 --case ranks=2 --metric ratio=0.97

The commit is taken at run time (`git rev-parse` of this checkout; "-dirty" when the Python
benchmarks or the PyTorch references, tests/reference/, differ from it); a C++ program a Python
benchmark runs was built from the commit its own lines give.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RELEVANT_ISA = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}


def host_probe():
    h = {"vendor": "", "family": 0, "model": 0, "cpu": "", "isa": [], "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "vendor_id":
                    h["vendor"] = value
                elif key == "cpu family":
                    h["family"] = int(value)
                elif key == "model":
                    h["model"] = int(value)
                elif key == "model name":
                    h["cpu"] = value
                elif key == "flags":
                    h["isa"] = sorted(RELEVANT_ISA & set(value.split()))
    except OSError:
        pass
    return h


def commit():
    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "benchmarks/*.py", "tests/reference")
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def add_argument(ap):
    ap.add_argument("--json", metavar="FILE", default=os.environ.get("SPARSELM_RESULTS") or None,
                    help="append the results as JSON lines to FILE (default: $SPARSELM_RESULTS; "
                         "benchmarks/results/data/*.jsonl are the project's)")


def command_line(argv=None):
    """The command as typed, without --json FILE."""
    argv = list(sys.argv if argv is None else argv)
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    return shlex.join(["/usr/bin/python3"] + out if out and out[0].endswith(".py") else out)


def child_env():
    """The environment for a benchmark's child processes: without SPARSELM_RESULTS, so that only the
    parent writes the results."""
    env = dict(os.environ)
    env.pop("SPARSELM_RESULTS", None)
    return env


class Results:
    def __init__(self, benchmark, path, command=None):
        self.benchmark, self.path = benchmark, path
        self.command = command if command is not None else command_line()
        self.date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.run = f"{self.date}-{os.getpid()}"
        if os.environ.get("SPARSELM_RESULTS_RUN"):  # one run over several calls: "<UTC date>-<id>"
            self.run = os.environ["SPARSELM_RESULTS_RUN"]
            self.date = self.run[:20]
        try:
            self.load = os.getloadavg()[0]  # the 1-minute load average at the start: other work on the machine
        except OSError:
            self.load = None
        self._host, self._commit = host_probe(), commit()  # at the start, as the C++ writer

    def add(self, case, metrics, threads, fma_peak_gflops=None):
        if not self.path:
            return
        line = {"benchmark": self.benchmark, "case": case, "metrics": metrics, "threads": threads}
        if fma_peak_gflops:
            line["fma_peak_gflops"] = fma_peak_gflops
        line.update({"host": self._host, "commit": self._commit, "date": self.date,
                     "run": self.run, "command": self.command})
        if self.load is not None:
            line["load"] = self.load
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def _value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_argument(ap)
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--command", required=True, help="the benchmark's command line, as a user would type it")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--fma-peak", type=float, default=None, help="the FMA peak, when the benchmark measured it")
    ap.add_argument("--case", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--metric", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    if not args.json:
        sys.exit("results.py: no results file (--json FILE or $SPARSELM_RESULTS)")
    pairs = lambda items: {k: _value(v) for k, _, v in (i.partition("=") for i in items)}  # noqa: E731
    Results(args.benchmark, args.json, args.command).add(pairs(args.case), pairs(args.metric), args.threads,
                                                         args.fma_peak)


if __name__ == "__main__":
    main()
