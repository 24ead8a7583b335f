"""Lab 5's notebook: stored clean, its solution regions release cleanly, and it runs under papermill
at tiny parameters (the MLP only, N = 1 and 2, two steps per run: four clusters), recording what the
grader checks."""
import pytest

import _netem_labs as netem_labs
from helpers import NOTEBOOKS, check_executed, check_stored_clean, run_notebook

NOTEBOOK = NOTEBOOKS / "05_ring_vs_ps.ipynb"
TINY = {"workers": [2], "models": ["mlp"], "steps": 2, "batch_size": 32}
TINY.update(netem_labs.LAB5)  # the section on emulated links, at its smallest
FIGURE_CELLS = ("scaling", "bytes", "cost-model", "report-003", "crossover", "timelines")


def test_stored_clean_with_one_parameters_cell_and_teaching_regions():
    nb = check_stored_clean(NOTEBOOK, analysis=5, figures=FIGURE_CELLS)

    from labkit.grading.release import release_notebook

    student, regions = release_notebook(nb, NOTEBOOK.name)
    assert regions == 9  # the prediction, comm_terms, the audit, five answers and the emulated links' answer
    sources = "\n".join(c.source for c in student.cells)
    assert "2 * (N - 1) / N * M" not in sources and "M_mlp = 4 *" not in sources
    assert sources.count("raise NotImplementedError()") == 3
    assert "ring_vs_ps.scaling(" in sources  # plumbing, not an exercise
    # the student's comm_terms drives the calibration and the extrapolation; the starting point fails the check
    assert "sweep.calibrate(terms=comm_terms)" in sources and "report_003(range(1, 7), terms=comm_terms)" in sources
    cell = next(c for c in student.cells if c.source.startswith("def comm_terms"))
    namespace = {}
    exec(cell.source, namespace)
    from labkit import costmodel

    with pytest.raises(NotImplementedError):
        costmodel.check_terms(namespace["comm_terms"])


@pytest.mark.notebook
@pytest.mark.cluster
@pytest.mark.slow
def test_runs_under_papermill_and_records_its_metrics(tmp_path):
    nb, rec = run_notebook(NOTEBOOK, tmp_path, TINY, timeout=900)
    table = rec["scaling_table"]
    assert [(r["arch"], r["workers"]) for r in table] == [("ps", 1), ("ps", 2), ("ring", 1), ("ring", 2)]
    assert all(r["model"] == "mlp" and r["images_per_s"] > 0 and r["steps"] == 2 for r in table)
    assert rec["bytes_deviation"]["max_abs_deviation"] < 0.25, rec["bytes_deviation"]
    assert rec["busiest_task_bytes"]["ps"] > 1.5 * rec["busiest_task_bytes"]["ring"]  # 2M vs M at N=2
    assert {r["task"] for r in rec["task_bytes"]} == {"ps:0", "chief:0", "worker:0", "worker:1", "total"}
    fit = rec["fit_error"]
    assert fit["runs"] == 3 and fit["median_abs_error"] >= 0 and fit["loopback_median_abs_error"] >= 0
    assert set(rec["crossover"]) == {"1 Gb/s", "10 Gb/s", "this machine (fitted)"}
    assert set(rec["crossover"]["1 Gb/s"]) == {"2", "3", "4", "5", "6"}
    assert rec["settings"]["workers"] == [1, 2] and rec["settings"]["hosts"] is None  # 127.0.0.1
    assert len(list((tmp_path / "runs" / "lab5").glob("scaling-*/mlp-*-w*/cluster.json"))) == 4
    # the prediction: the ps moves 2 N M per step, within the rubric's 10%
    assert rec["ps0_bytes_per_step"] == pytest.approx(rec["predicted_ps_bytes_per_step"], rel=0.1)
    assert rec["predicted_ps_bytes_per_step"] == 2 * 2 * 23_298_088
    # the audit: a ring worker sends 2(N-1)/N x M = M at N = 2, the report's formula with the model as "chunk"
    assert rec["ring_worker_share"]["worker_sent_over_model"] == pytest.approx(1.0, abs=0.05)
    assert rec["audit_003"]["ring_worker_sent_over_model"] == rec["ring_worker_share"]["worker_sent_over_model"]
    # synchronous PS is the ring's SGD: the same losses at N = 2 (up to float rounding)
    rows = {(r["arch"], r["workers"]): r for r in table}
    assert rows[("ps", 2)]["last_loss"] == pytest.approx(rows[("ring", 2)]["last_loss"], rel=1e-3)
    assert rec["same_sgd"] == {"model": "mlp", "workers": 2, "ps_last_loss": rows[("ps", 2)]["last_loss"],
                               "ring_last_loss": rows[("ring", 2)]["last_loss"]}
    check_executed(nb, FIGURE_CELLS)
    netem_labs.check_lab5(nb, rec)  # last: it skips where links cannot be emulated
