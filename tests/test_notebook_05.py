"""Lab 5's notebook: stored clean, its solution regions release cleanly, and it runs under papermill
at tiny parameters (the MLP only, N = 1 and 2, two steps per run: four clusters), recording what the
grader checks."""
import pytest

from helpers import NOTEBOOKS, check_executed, check_stored_clean, run_notebook

NOTEBOOK = NOTEBOOKS / "05_ring_vs_ps.ipynb"
TINY = {"workers": [2], "models": ["mlp"], "steps": 2, "batch_size": 32}
FIGURE_CELLS = ("scaling", "bytes", "cost-model", "report-003", "crossover", "timelines")


def test_stored_clean_with_one_parameters_cell_and_teaching_regions():
    nb = check_stored_clean(NOTEBOOK, analysis=3, figures=FIGURE_CELLS)

    from labkit.grading.release import release_notebook

    student, regions = release_notebook(nb, NOTEBOOK.name)
    assert regions == 6  # the sweep, the bytes by hand, the cost model's terms and the three answers
    sources = "\n".join(c.source for c in student.cells)
    assert "ring_vs_ps.scaling(" not in sources and "ring_terms = (2 * (N - 1)" not in sources
    assert sources.count("raise NotImplementedError()") == 3


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
    check_executed(nb, FIGURE_CELLS)
