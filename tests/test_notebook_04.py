"""Lab 4's notebook: stored clean, its solution regions release cleanly, and it runs under papermill
at tiny parameters (one 2-worker sweep run, then the kill/resume demo), recording what the grader checks."""
import math

import pytest

from helpers import NOTEBOOKS, check_executed, check_stored_clean, run_notebook

NOTEBOOK = NOTEBOOKS / "04_lenet_batch_sweep.ipynb"
TINY = {"workers": [2], "batch_sizes": [50], "epochs": 2, "train_limit": 2000, "test_limit": 500, "idle_s": 0.5}
FIGURES = ("sweep-curves", "throughput", "bytes", "fault-curves")


def test_stored_clean_with_one_parameters_cell_and_teaching_regions():
    nb = check_stored_clean(NOTEBOOK, analysis=3, figures=FIGURES)

    from labkit.grading.release import release_notebook

    student, regions = release_notebook(nb, NOTEBOOK.name)
    assert regions == 4  # the sweep and the three answers
    sweep_cell = next(c for c in student.cells if "YOUR CODE HERE" in c.source)
    assert "lenet_sweep.sweep(" not in sweep_cell.source and "raise NotImplementedError()" in sweep_cell.source


@pytest.mark.notebook
@pytest.mark.cluster
@pytest.mark.slow
def test_runs_under_papermill_and_records_the_sweep_and_the_recovery(tmp_path):
    nb, rec = run_notebook(NOTEBOOK, tmp_path, TINY, timeout=600)

    table = {row["config"]: row for row in rec["sweep_table"]}
    assert list(table) == ["2 x 50", "Idle"]
    assert all(v is not None for v in table["2 x 50"].values()), table["2 x 50"]
    assert table["Idle"]["cpu_user_pct"] is not None
    assert rec["best_config"]["config"] == "2 x 50"
    (tp,) = rec["throughput"]
    assert tp["measured_over_analytic"] == pytest.approx(1.0, abs=0.25)  # each worker's own sockets
    assert {r["task"] for r in rec["tasks"]} == {"worker:0", "worker:1"}

    ev = rec["resume_evidence"]
    assert ev["failed_task"] == "worker:1" and ev["returncode"] == -9
    assert ev["start_epoch"] == ev["kill_after_epoch"] == 1 and ev["first_epoch_trained"] == 2
    assert ev["restored_checkpointed_weights"] == 1
    assert math.isfinite(ev["accuracy_difference_points"]) and abs(ev["accuracy_difference_points"]) < 0.5

    check_executed(nb, FIGURES)
    assert len(list((tmp_path / "runs" / "lab4").iterdir())) == 2  # the sweep and the fault demo
