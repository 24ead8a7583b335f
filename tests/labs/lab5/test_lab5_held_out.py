"""Lab 5's held-out cost-model check is judged against the kit's own model on the same runs.

The runs are a small sweep's task files written here as the kit writes them (``cluster.json`` and
task results per configuration folder); the grader's verifier reads them back, fits the reference
critical path to N = 1 and 2 and predicts N = 3. A claim at the reference's own error passes
whatever the load made that error; a claim far above it does not; and files the notebook rewrote to
make the reference's error large widen the allowance no further than the rubric's ceiling.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from labkit.grading.judge import verify
from labkit.labs.lab5 import experiment as ring_vs_ps

M = 23_298_088
BATCH = 64


def _write_run(root: Path, arch: str, n: int, step_s: float):
    folder = root / f"mlp-{arch}-w{n}"
    folder.mkdir(parents=True)
    names = ([("ps", 0), ("chief", 0)] if arch == "ps" else []) + [("worker", i) for i in range(n)]
    chief = ("chief", 0) if arch == "ps" else ("worker", 0)
    tasks = []
    for t, i in names:
        result = {"task": f"{t}:{i}", "type": t, "index": i}
        if (t, i) == chief:
            result["traffic"] = {
                "nics": ["lo"],
                "nic_sent_bytes_per_step": 2.0 * M * n,
                "counters_per_step": {f"{a}:{b} {side}": 1.0 * M for a, b in names for side in ("sent", "recv")},
            }
            result["train"] = {
                "per_worker_batch": BATCH,
                "images_per_step": BATCH * n,
                "images_per_s": BATCH * n / step_s,
                "model_bytes": M,
                "history": [{"epoch": 1, "steps": 4, "train_loss": 2.2}, {"epoch": 2, "steps": 4, "train_loss": 2.0}],
                "start_epoch": 0,
                "variables": [{"name": "w", "bytes": M, "device": "/job:ps/replica:0/task:0/device:CPU:0"}],
            }
        (folder / f"{t}-{i}.json").write_text(json.dumps(result))
        tasks.append(
            {
                "name": f"{t}:{i}",
                "type": t,
                "index": i,
                "host": "127.0.0.1",
                "ended": "finished",
                "returncode": None,
                "wall_s": 10.0,
                "log": f"{t}-{i}.log",
            }
        )
    (folder / "cluster.json").write_text(
        json.dumps(
            {
                "program": "strategy_train",
                "spec": {},
                "tasks": tasks,
                "startup_s": 1.0,
                "teardown_s": None,
                "wall_s": 10.0,
                "notes": [],
                "cluster_dir": None,
                "configuration": {"name": folder.name},
            }
        )
    )


STEPS = {
    ("ring", 1): 0.066,
    ("ps", 1): 0.221,
    ("ps", 2): 0.369,
    ("ring", 2): 0.393,
    ("ps", 3): 0.433,
    ("ring", 3): 0.737,
}  # a sweep on a loaded machine (held-out error 0.27)


@pytest.fixture
def workdir(tmp_path):
    sweep = tmp_path / "runs" / "lab5" / "scaling-20261127-000000-abcdef"
    for (arch, n), step in STEPS.items():
        _write_run(sweep, arch, n, step)
    (sweep / "cluster-ring-w3").mkdir()  # a cluster's own folder: read past
    (sweep / "cluster-ring-w3" / "cluster.json").write_text("{}")
    return tmp_path


def _ctx(workdir, claimed):
    return verify.Context(
        workdir=workdir,
        records={"fit_error": {"loopback_alpha_s": 3e-5, "loopback_bandwidth_bytes_per_s": 3.6e9}},
        params={},
        claimed=claimed,
    )


def test_the_sweep_reads_back_from_its_files(workdir):
    s = ring_vs_ps.load_sweep(next((workdir / "runs" / "lab5").iterdir()), cores=2)
    assert sorted(r.label for r in s.runs) == sorted(f"mlp {a} N={n}" for a, n in STEPS)
    ref = ring_vs_ps.reference_held_out_error(s, ring_vs_ps.costmodel.Link(3e-5, 3.6e9))
    assert 0.1 < ref < 0.6  # the load these step times carry: above no fixed bound's reach of luck


def test_the_reference_error_passes_and_one_far_above_it_does_not(workdir, monkeypatch):
    monkeypatch.setattr("labkit.core.proc.usable_cores", lambda: 2)
    s = ring_vs_ps.load_sweep(next((workdir / "runs" / "lab5").iterdir()), cores=2)
    ref = ring_vs_ps.reference_held_out_error(s, ring_vs_ps.costmodel.Link(3e-5, 3.6e9))
    ok = verify.run({"name": "lab5_held_out", "bound": 0.05, "margin": 0.1}, _ctx(workdir, ref))
    assert ok.ok and ok.value["reference_held_out_median_abs_error"] == pytest.approx(ref, abs=1e-4)
    bad = verify.run({"name": "lab5_held_out", "bound": 0.05, "margin": 0.1}, _ctx(workdir, ref + 0.2))
    assert not bad.ok and "kit's own model" in bad.reason


def test_no_sweep_is_unverifiable(tmp_path):
    with pytest.raises(verify.Unverifiable, match="no sweep"):
        verify.run({"name": "lab5_held_out"}, _ctx(tmp_path, 0.1))


def _inflate_held_out(workdir, faster: float) -> None:
    """What a notebook's code can do to the sweep it ran: rewrite the held-out N's task results so
    that those runs look ``faster`` times faster, and the kit's model on them looks far off."""
    for chief in (workdir / "runs" / "lab5").glob("scaling-*/mlp-*-w3/*.json"):
        data = json.loads(chief.read_text())
        if "train" in data:
            data["train"]["images_per_s"] *= faster
            chief.write_text(json.dumps(data))


def test_inflated_run_files_widen_the_allowance_no_further_than_the_ceiling(workdir, monkeypatch):
    monkeypatch.setattr("labkit.core.proc.usable_cores", lambda: 2)
    honest = verify.run({"name": "lab5_held_out", "bound": 0.3, "margin": 0.1}, _ctx(workdir, 0.27))
    assert honest.ok and honest.value["allowed"] == pytest.approx(0.37, abs=0.02)  # the loaded sweep's 0.27 + 0.1
    _inflate_held_out(workdir, 4.0)
    wrong = 2.0  # a model that predicts three times the held-out N's step time
    old = verify.run({"name": "lab5_held_out", "bound": 0.3, "margin": 0.1, "ceiling": math.inf}, _ctx(workdir, wrong))
    assert old.ok and old.value["reference_held_out_median_abs_error"] > wrong  # uncapped: the files let it pass
    new = verify.run({"name": "lab5_held_out", "bound": 0.3, "margin": 0.1}, _ctx(workdir, wrong))
    assert not new.ok and new.value["allowed"] == pytest.approx(0.6) and "never above 0.6" in new.reason


def test_a_ceiling_below_the_bound_is_the_rubrics_error(workdir):
    with pytest.raises(verify.Unverifiable, match="bound <= ceiling"):
        verify.run({"name": "lab5_held_out", "bound": 0.3, "ceiling": 0.2}, _ctx(workdir, 0.1))
