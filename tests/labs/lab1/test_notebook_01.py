"""Lab 1's notebook: stored clean, its solution regions release cleanly, and it runs under papermill
at tiny parameters, recording what the grader checks."""

import pytest

from helpers import LABS, check_executed, check_stored_clean
from labkit.learning import lr

NOTEBOOK = LABS / "lab1" / "01_single_node_lr.ipynb"
TINY = {"epochs": 2, "train_limit": 2000, "test_limit": 1000, "idle_s": 0.2}
FIGURES = ("core-resources", "keras-resources", "learning-curves", "batch-accuracy")


@pytest.mark.tensorflow
def test_stored_clean_with_one_parameters_cell_and_teaching_regions():
    nb = check_stored_clean(NOTEBOOK, analysis=4, figures=FIGURES)

    from labkit.grading.kit.release import release_notebook

    student, regions = release_notebook(nb, NOTEBOOK.name)
    assert regions == 8  # the SGD step, the prediction, the audit's model and reading size, the four answers
    step_cell = next(c for c in student.cells if c.source.startswith("def sgd_step"))
    assert "GradientTape" not in step_cell.source and "raise NotImplementedError()" in step_cell.source
    namespace = {}
    exec(step_cell.source, namespace)  # the student's starting point fails the notebook's own check
    with pytest.raises(NotImplementedError):
        lr.check_step(namespace["sgd_step"])
    model_cell = next(c for c in student.cells if c.source.startswith("def chance_best_reading"))
    assert "comb" not in model_cell.source and "raise NotImplementedError()" in model_cell.source


@pytest.mark.notebook
def test_runs_under_papermill_and_records_its_metrics(executed):
    nb, rec, workdir = executed(NOTEBOOK, TINY, timeout=300)
    assert rec["epochs"] == 2 and rec["data"] == {"n_train": 2000, "n_test": 1000, "seed": 0}
    for version in ("core", "keras"):
        assert rec[f"{version}_test_accuracy"] > 0.6, rec  # 80 steps from random weights; chance is 0.1
        assert [h["epoch"] for h in rec[f"{version}_history"]] == [1, 2]
        assert rec[f"{version}_wall_s"] >= rec[f"{version}_train_s"] > 0 and rec[f"{version}_samples_per_s"] > 0
    assert [r["version"] for r in rec["comparison"]] == ["core", "keras"]
    # the prediction: the untrained model's test loss is log(10) within 5%, as the rubric grades it
    assert rec["core_initial_test_loss"] == pytest.approx(rec["predicted_initial_test_loss"], rel=0.05)
    assert rec["core_best_test_accuracy"] == max(h["test_accuracy"] for h in rec["core_history"])
    # the audit: the reading size (the report's percents rounded), the model at both sizes, and the
    # measurement, which owes nothing to the model: the run's per-epoch weights on consecutive 31-image
    # test batches (32 of them here, the last 8 images left out)
    audit, measured = rec["audit_97"], rec["epoch_readings"]
    assert audit["q"] == rec["core_test_accuracy"] and audit["readings"] == 50 and audit["reading_size"] == 31
    assert audit["level"] == 0.965  # the least reading printed as 97%
    assert 0 <= audit["model_chance_50"] < audit["model_chance"] <= 1  # 49 of 50 is rarer than 30 of 31
    assert measured["curves"] == 32 and measured["readings_per_curve"] == 2
    assert measured["final_mean"] == pytest.approx(audit["q"], abs=0.01)  # 992 of the 1,000 images, 8 left out
    assert measured["model_std"] == pytest.approx((audit["q"] * (1 - audit["q"]) / 31) ** 0.5)
    assert {r["version"] for r in rec["resources"]} == {"core", "keras"}

    # The grader's re-check: the saved weights give the recorded accuracy on the same test subset.
    weights = workdir / rec["artifacts"]["core_weights"]
    settings = lr.evaluation_settings({**TINY, "seed": 0})
    assert lr.evaluate_weights(weights, **settings) == pytest.approx(rec["core_test_accuracy"], abs=1e-9)

    assert len(list((workdir / "runs" / "lab1").iterdir())) == 2  # one TensorBoard run per version
    check_executed(nb, FIGURES, not_in_stderr=["cpu_feature_guard"])
