"""Checks pipelined gpt_train runs against a one-stage run (ctest examples.pipeline and
examples.pipeline_ranks).

    compare_pipeline_runs.py WORK REF PLACEMENT NAME:STAGES:SCHEDULE[:SPLIT,SPLIT] ...

Every run in WORK/NAME must log the reference's training losses and end on its validation loss
within 1e-5 relative (staged gradients differ from the sequential ones only in the rounding of the
tied embedding's two contributions), and describe its pipeline in the run line (stages, schedule,
placement) and the summary (stages, split, the given split when there is one, the predicted bubble
(S - 1)/(M + S - 1), a measured bubble in [0, 1)).
"""
import json
import math
import sys


def lines(work, run, kind):
    with open(f"{work}/{run}/metrics.jsonl") as f:
        return [l for l in map(json.loads, filter(str.strip, f)) if l["kind"] == kind]


def close(a, b):
    return abs(a - b) <= 1e-5 * abs(b)


def main():
    work, ref_name, placement = sys.argv[1:4]
    ref = [l["loss"] for l in lines(work, ref_name, "train")]
    assert ref and all(map(math.isfinite, ref)), ref
    with open(f"{work}/{ref_name}.json") as f:
        one = json.load(f)
    assert "pipeline" not in one, one
    micro = lines(work, ref_name, "run")[0]["config"]["trainer"]["accumulation"]["steps"]
    for spec in sys.argv[4:]:
        name, stages, schedule, *split = spec.split(":")
        stages = int(stages)
        got = [l["loss"] for l in lines(work, name, "train")]
        assert len(got) == len(ref) and all(close(a, b) for a, b in zip(got, ref)), (name, got, ref)
        with open(f"{work}/{name}.json") as f:
            s = json.load(f)
        assert close(s["valid"]["loss"], one["valid"]["loss"]), (name, s["valid"], one["valid"])
        pipe = s["pipeline"]
        assert pipe["stages"] == stages and len(pipe["split"]) == stages - 1, pipe
        if split:
            assert pipe["split"] == [int(x) for x in split[0].split(",")] and not pipe["balanced"], pipe
        assert abs(pipe["predicted_bubble"] - (stages - 1) / (micro + stages - 1)) < 1e-9, pipe
        assert 0 <= pipe["measured_bubble"] < 1, pipe
        run = lines(work, name, "run")[0]["pipeline"]
        assert (run["stages"], run["schedule"], run["placement"]) == (stages, schedule, placement), run
    print(f"{', '.join(sys.argv[4:])}: the losses of {ref_name} within 1e-5")


if __name__ == "__main__":
    main()
