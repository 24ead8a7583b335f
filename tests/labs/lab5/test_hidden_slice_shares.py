"""Lab 5's failure section is graded on traces: the student's slice_shares, run by the probe on
failure traces the notebook never had (drawn from the rubric's seed), judged against the reference;
and the trace the kit ships is the kit's own recording, with its provenance."""

import json

import pytest

from helpers import hidden_verdict
from labkit.labs.lab5 import experiment as ring_vs_ps
from labkit.labs.lab5 import checks


def slice_shares(trace, kill=0):
    """A correct answer, written independently of labkit.labs.lab5.solution."""
    kills = sorted(k["after_step"] for k in trace["kills"])
    lo, hi = kills[kill] + 1, (kills[kill + 1] if kill + 1 < len(kills) else 10**9)
    counts = {}
    for s in trace["steps"]:
        if lo < s["step"] <= hi:
            for w in s["slices_on"]:
                counts[w] = counts.get(w, 0) + 1
    total = sum(counts.values())
    return {w: c / total for w, c in counts.items()}


def verdict(fn, tmp_path, **args):
    return hidden_verdict("lab5_slice_shares", fn, tmp_path, **args)


def test_a_correct_answer_passes_on_traces_the_notebook_never_had(tmp_path):
    assert verdict(slice_shares, tmp_path, seed=11).ok
    cases = checks.inputs_slice_shares(seed=11)
    assert cases == checks.inputs_slice_shares(seed=11) != checks.inputs_slice_shares(seed=12)
    assert len({c["trace"]["workers"] for c in cases}) > 2  # other cluster sizes than the shipped 3
    assert any(c["trace"]["steps"][0]["step"] != 1 for c in cases)  # steps out of order


@pytest.mark.parametrize(
    "wrong, reason",
    [
        # counts the step in flight when the kill landed (the dead worker may have run a slice of it)
        (
            lambda t, kill=0: slice_shares(
                {**t, "kills": [{**k, "after_step": k["after_step"] - 1} for k in t["kills"]]}, kill
            ),
            "not the grader's",
        ),
        # runs on to the end of the trace instead of stopping at the next kill
        (lambda t, kill=0: slice_shares({**t, "kills": t["kills"][: kill + 1]}, kill), "not the grader's"),
        # shares of the steps, not of the slices: the worker of each step's first slice
        (
            lambda t, kill=0: {
                w: v
                for w, v in slice_shares(
                    {**t, "steps": [{**s, "slices_on": s["slices_on"][:1]} for s in t["steps"]]}, kill
                ).items()
            },
            "not the grader's",
        ),
        (lambda t, kill=0: [0.5, 0.5], "must return a dict"),
    ],
)
def test_wrong_answers_fail_with_a_reason(tmp_path, wrong, reason):
    try:
        v = verdict(wrong, tmp_path, seed=11)
    except TypeError as e:
        assert reason in str(e)
        return
    assert not v.ok and reason in v.reason, v.reason


def test_the_shipped_trace_is_a_recording_with_its_provenance():
    t = ring_vs_ps.recorded_failure()
    prov = t["provenance"]
    assert prov["recorded_by"].startswith(
        ("labkit.experiments.ring_vs_ps.ps_failure(", "labkit.labs.lab5.experiment.ps_failure(")
    )
    assert len(prov["labkit_commit"]) == 40 and prov["tensorflow"] and prov["cores"] >= 1
    assert [k["task"] for k in t["kills"]] == ["worker:1", "ps:0"]
    assert all(len(s["slices_on"]) == t["workers"] for s in t["steps"])
    # the summary it ships agrees with its own steps: no step after the ps was lost
    assert {row["task"]: row["steps_after"] for row in t["summary"]}["ps:0"] == 0
    assert "/tmp/" not in json.dumps(t)  # no path of the machine that recorded it
    assert sum(slice_shares(t, 0).values()) == pytest.approx(1.0)
