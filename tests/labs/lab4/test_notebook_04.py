"""Lab 4's notebook: stored clean, its solution regions release cleanly, and it runs under papermill
at tiny parameters (one 2-worker sweep run, then the kill/resume demo), recording what the grader checks."""

import math

import pytest

from helpers import LABS, check_executed, check_stored_clean

NOTEBOOK = LABS / "lab4" / "04_lenet_batch_sweep.ipynb"
TINY = {
    "workers": [1, 2],
    "batch_sizes": [50, 100],
    "epochs": 2,
    "train_limit": 3000,
    "test_limit": 1000,
    "idle_s": 0.5,
}
FIGURES = ("sweep-curves", "throughput", "bytes", "fault-curves")


def test_stored_clean_with_one_parameters_cell_and_teaching_regions():
    nb = check_stored_clean(NOTEBOOK, analysis=6, figures=FIGURES)

    from labkit.grading.kit.release import release_notebook

    student, regions = release_notebook(nb, NOTEBOOK.name)
    # the ring all-reduce, its four functions between processes, the prediction, the audit, six answers
    assert regions == 13
    ring_cell = next(c for c in student.cells if c.source.startswith("def ring_allreduce"))
    assert "array_split" not in ring_cell.source and "raise NotImplementedError()" in ring_cell.source
    namespace = {}
    exec(ring_cell.source, namespace)  # the student's starting point fails the notebook's own check
    with pytest.raises(NotImplementedError):
        namespace["ring_allreduce"]([])
    assert any("lenet_sweep.sweep(" in c.source for c in student.cells)  # plumbing, not an exercise
    (collectives,) = [c for c in student.cells if c.source.startswith("def reduce_scatter")]
    assert collectives.source.count("raise NotImplementedError()") == 4 and "array_split" not in collectives.source


@pytest.mark.notebook
@pytest.mark.cluster
@pytest.mark.slow
def test_runs_under_papermill_and_records_the_sweep_and_the_recovery(executed):
    nb, rec, workdir = executed(NOTEBOOK, TINY, timeout=600)

    table = {row["config"]: row for row in rec["sweep_table"]}
    assert list(table) == ["1 x 50", "1 x 100", "2 x 50", "2 x 100", "Idle"]
    assert all(v is not None for v in table["2 x 50"].values()), table["2 x 50"]
    assert table["Idle"]["cpu_user_pct"] is not None
    for tp in rec["throughput"][2:]:  # the two-worker runs: each worker's own sockets, and the simulation
        assert tp["measured_over_analytic"] == pytest.approx(1.0, abs=0.25)
        assert tp["bytes_per_step"] == pytest.approx(rec["ring_simulation"]["largest_bytes_per_worker"], rel=0.25)
    assert rec["ring_simulation"] == {
        "bytes_per_worker": {"1": 0, "2": 246_824},
        "largest_workers": 2,
        "largest_bytes_per_worker": 246_824,
    }  # 2(N-1)/N x 61,706 x 4 bytes
    assert {r["task"] for r in rec["tasks"]} == {"worker:0", "worker:1"}
    # 1 x 100 and 2 x 50 are the same SGD: the same first-epoch loss, as predicted
    eq = rec["equivalent_configs"]
    assert eq["pairs"] == ["1 x 100 and 2 x 50"] and eq["identical_pairs"] == rec["predicted_identical_pairs"] == 1
    assert eq["epoch1_val_loss_ratio_2x50_1x100"] == pytest.approx(1, abs=1e-4)
    # the audit: report 000's send rates predicted from the measured bytes per step, both readings
    # of its batch size, for the worker counts this run had (N = 2)
    per_step = sum(tp["bytes_per_step"] for tp in rec["throughput"][2:]) / 2
    predicted = rec["audit_000"]["predicted_send_bytes_per_s"]
    assert set(predicted["global"]) == set(predicted["per_worker"]) == {"2 x 50", "2 x 100", "2 x 200"}
    assert predicted["global"]["2 x 200"] == pytest.approx(30 * 60_000 / 200 * per_step / 464, rel=1e-9)
    assert all(predicted["per_worker"][k] == pytest.approx(predicted["global"][k] / 2) for k in predicted["global"])

    ev = rec["resume_evidence"]
    assert ev["failed_task"] == "worker:1" and ev["returncode"] == -9
    # the survivor met TensorFlow's own error before the launcher stepped in
    assert ev["survivor_error"] == "UnavailableError" and 0 <= rec["mwms_failure_s"] == ev["mwms_failure_s"] < 30
    assert ev["start_epoch"] == ev["kill_after_epoch"] == 1 and ev["first_epoch_trained"] == 2
    assert ev["restored_checkpointed_weights"] == 1
    assert math.isfinite(ev["accuracy_difference_points"]) and abs(ev["accuracy_difference_points"]) < 0.5

    check_executed(nb, FIGURES)
    kinds = sorted(p.name.split("-")[0] for p in (workdir / "runs" / "lab4").iterdir())
    assert kinds == ["collective", "fault", "sweep"], kinds  # the collectives' logs, the sweep, the fault demo
