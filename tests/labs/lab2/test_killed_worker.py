"""Lab 2's killed worker: others_per_step's self-check and the rubric's two checks, whose verifier
recomputes the value from the run's own files (worker 0's train series, the kit's kill record), pass
the reference and fail the readings students get wrong; a run folder without those files is the TA's.
No TensorFlow: the run's folder is written here as the tasks and the kit write it."""

from __future__ import annotations

import json

import pytest

from helpers import NOTEBOOKS
from labkit.grading.judge import verify
from labkit.grading.judge.rubric import evaluate, load_rubric
from labkit.labs.lab2 import selfcheck, solution
from labkit.labs.lab2.experiment import KILL_RECORD, kill_windows


def trace(before=0.8, steps=900, kill_at=330):
    """Worker 0's train rows, every 5 of its steps: `before` others' updates per own step until the
    global step passes kill_at, none after (worker 1 dead)."""
    rows, g, local, others = [], 0, 0, 0.0
    while g < steps:
        local += 1
        if g < kill_at:
            others += before
        g = local + int(others)
        if local % 5 == 0:
            rows.append({"t": local / 100, "local_step": local, "global_step": g, "loss": 0.5})
    return rows


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "runs" / "lab2" / "killed-cluster-b50"
    folder.mkdir(parents=True)
    (folder / KILL_RECORD).write_text(json.dumps({"victim": "worker:1", "seen_global_step": 300}))
    (folder / "worker-0.json").write_text(json.dumps({"task": "worker:0", "series": {"train": trace()}}))
    return tmp_path, folder.relative_to(tmp_path).as_posix()


def whole_trace(rows, start, end):  # the window ignored
    return solution.others_per_step(rows, 0, 10**9)


def with_own_steps(rows, start, end):  # the global steps per own step: its own counted as others'
    inside = [r for r in rows if start <= r["global_step"] <= end]
    return (inside[-1]["global_step"] - inside[0]["global_step"]) / (inside[-1]["local_step"] - inside[0]["local_step"])


def records(fn, workdir, folder):
    rows = json.loads((workdir / folder / "worker-0.json").read_text())["series"]["train"]
    windows = kill_windows(json.loads((workdir / folder / KILL_RECORD).read_text()))
    stale = {w: fn(rows, *windows[w]) for w in windows}
    return {"killed_worker": {"run_dir": folder, "others_per_step": stale}}


def graded(rec, workdir):
    """The rubric's two killed-worker checks at these records: (threshold status, verifier verdict) each."""
    lab = load_rubric(NOTEBOOKS / "rubric.toml").labs["lab2"]
    out = []
    for check in (c for c in lab.checks if c.name.startswith("killed worker")):
        ctx = verify.Context(workdir=workdir, records=rec, params={}, claimed=verify.lookup(rec, check.ref))
        out.append((evaluate(check, None, rec).status, verify.run(check.verify, ctx).ok))
    return out


def test_the_reference_passes_its_self_check_and_both_checks_on_its_run(run):
    assert selfcheck.others_per_step(solution.others_per_step).passed
    workdir, folder = run
    rec = records(solution.others_per_step, workdir, folder)
    assert rec["killed_worker"]["others_per_step"]["before"] == pytest.approx(0.8, abs=0.05)
    assert rec["killed_worker"]["others_per_step"]["after"] == 0
    assert graded(rec, workdir) == [("pass", True), ("pass", True)]


@pytest.mark.parametrize("wrong", [whole_trace, with_own_steps], ids=lambda f: f.__name__)
def test_a_wrong_reading_fails_the_self_check_and_the_verifier(run, wrong):
    assert not selfcheck.others_per_step(wrong).passed
    workdir, folder = run
    verdicts = [ok for _, ok in graded(records(wrong, workdir, folder), workdir)]
    assert verdicts.count(False) >= 1, verdicts


def test_a_number_the_trace_does_not_give_fails_and_a_missing_trace_is_the_tas(run):
    workdir, folder = run
    rec = records(solution.others_per_step, workdir, folder)
    rec["killed_worker"]["others_per_step"]["before"] = 0.5  # plausible, above the threshold, not the run's
    assert graded(rec, workdir)[0] == ("pass", False)
    (workdir / folder / "worker-0.json").unlink()
    with pytest.raises(verify.Unverifiable, match="worker-0.json"):
        graded(rec, workdir)
