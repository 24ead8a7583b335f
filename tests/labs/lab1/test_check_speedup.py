"""Lab 1's speed check, ``core loop faster than keras fit``: the kit times each epoch on this process's
CPU clock beside the wall clock, ``lr.compare``'s table carries the later epochs' images per CPU second,
and the rubric's ``speedup`` check compares the two rows with its factor, naming both rates and the
factor, passed or failed. The wall clock, which other programs' load stretches, decides nothing; with
both cores kept busy the reference still passes."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import LABS, NOTEBOOKS, run_notebook, small_rubric
from labkit.grading.judge.rubric import RubricError, _check, evaluate, load_rubric
from labkit.learning import lr
from labkit.notebook.record import to_jsonable

CHECK = "core loop faster than keras fit"
N_TRAIN = 5000


def _check_of(rubric_path=NOTEBOOKS / "rubric.toml"):
    return next(c for c in load_rubric(rubric_path).labs["lab1"].checks if c.name == CHECK)


def _run(version: str, epoch_s: list[float], epoch_cpu_s: list[float]) -> lr.LRRun:
    import pandas as pd

    history = pd.DataFrame(
        {
            "version": version,
            "epoch": range(1, len(epoch_s) + 1),
            "test_accuracy": 0.8,
            "test_loss": 0.6,
            "train_loss": 0.7,
            "epoch_s": epoch_s,
            "epoch_cpu_s": epoch_cpu_s,
        }
    )
    W, b = np.zeros((lr.NUM_FEATURES, lr.NUM_CLASSES), np.float32), np.zeros(lr.NUM_CLASSES, np.float32)
    return lr.LRRun(version, history, W, b, N_TRAIN, 1000, 50, 0.01, sum(epoch_s) + 1.0)


def _records(core: lr.LRRun, keras: lr.LRRun) -> dict:
    """What every release of the notebook records: ``record("comparison", comparison.reset_index())``."""
    return {"comparison": to_jsonable(lr.compare(core, keras).reset_index())}


def test_the_check_passes_at_its_factor_and_fails_below_naming_both_rates_and_the_factor():
    check = _check_of()
    keras = _run("keras", [1.0, 0.5, 0.5], [0.8, 0.2, 0.2])  # 25,000 images per CPU second after epoch 1
    # loaded: core's wall time stretched to keras's, its CPU time 3x less: the CPU rates decide
    passing = evaluate(check, None, _records(_run("core", [1.0, 0.5, 0.5], [0.9, 0.2 / 3, 0.2 / 3]), keras))
    assert (passing.status, passing.points, passing.value) == ("pass", 1.0, 3.0)
    assert "core 75,000 vs keras 25,000 steady_cpu_samples_per_s: 3.00x, the check asks at least 2x" in passing.reason
    at_factor = evaluate(check, None, _records(_run("core", [9.0, 9.0, 9.0], [0.3, 0.1, 0.1]), keras))
    assert at_factor.status == "pass" and at_factor.value == 2.0  # the bar is "at least"
    # a step that costs more CPU than 1/2 of fit's, however fast the wall clock says it ran
    slow = evaluate(check, None, _records(_run("core", [0.1, 0.01, 0.01], [0.3, 0.2 / 1.5, 0.2 / 1.5]), keras))
    assert (slow.status, slow.points, slow.value) == ("fail", 0.0, 1.5)
    assert "core 37,500 vs keras 25,000 steady_cpu_samples_per_s: 1.50x, the check asks at least 2x" in slow.reason


def test_without_the_rates_the_check_says_what_is_missing():
    check = _check_of()
    records = _records(_run("core", [1.0, 0.5], [0.3, 0.1]), _run("keras", [1.0, 0.5], [0.5, 0.2]))
    only_core = {"comparison": records["comparison"][:1]}
    missing = evaluate(check, None, only_core)
    assert missing.status == "missing" and "no row whose version is 'keras'" in missing.reason
    one_epoch = _records(_run("core", [1.0], [0.3]), _run("keras", [1.0], [0.5]))  # nothing after the first
    got = evaluate(check, None, one_epoch)
    assert got.status == "missing" and "steady_cpu_samples_per_s" in got.reason and got.points == 0
    assert evaluate(check, None, {"comparison": "a table"}).status == "missing"


def test_the_rubric_refuses_a_speedup_without_a_usable_factor_or_names():
    base = {"name": "x", "points": 1, "kind": "speedup", "record": "t", "fast": "a", "slow": "b", "rate": "r"}
    with pytest.raises(RubricError, match="factor must be a positive number"):
        _check("l", 0, {**base, "factor": 0}, "here")
    with pytest.raises(RubricError, match="rate must be a name"):
        _check("l", 0, {**base, "rate": 3, "factor": 2}, "here")
    with pytest.raises(RubricError, match=r"missing key\(s\) \['factor'\]"):
        _check("l", 0, base, "here")
    assert _check("l", 0, {**base, "factor": 1.5, "by": "run"}, "here").spec["by"] == "run"


def test_the_kit_times_each_epoch_on_the_process_cpu_clock():
    """A trainer without TensorFlow (NumPy's) through ``lr.train``: each epoch's CPU seconds beside its
    wall seconds, and the rates the check reads computed from them."""
    rng = np.random.default_rng(0)
    x, y = rng.random((600, lr.NUM_FEATURES), np.float32), rng.integers(0, lr.NUM_CLASSES, 600)
    data = SimpleNamespace(x_train=x, y_train=y, x_test=x[:100], y_test=y[:100])
    run = lr.train("numpy", data, 3, progress=False)
    cpu = run.history["epoch_cpu_s"]
    assert (cpu > 0).all() and run.cpu_s == pytest.approx(cpu.sum())
    s = run.summary()
    assert s["cpu_samples_per_s"] == pytest.approx(3 * 600 / cpu.sum())
    assert s["steady_cpu_samples_per_s"] == pytest.approx(2 * 600 / cpu.iloc[1:].sum())
    assert lr.compare(run).loc["numpy", "steady_cpu_samples_per_s"] == s["steady_cpu_samples_per_s"]


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_reference_passes_at_test_size_with_both_cores_kept_busy(tmp_path):
    """Lab 1's reference at the grader's test size (``helpers.SMALL_LAB1``) while two busy loops
    take both cores: the check passes, by more than its factor."""
    from labkit.core.proc import OwnedProcess

    check = _check_of(small_rubric(tmp_path))
    params = load_rubric(tmp_path / "rubric.toml").labs["lab1"].parameters
    loop = [sys.executable, "-c", "while 1: pass"]  # each dies with this process (OwnedProcess's death signal)
    with OwnedProcess(loop, tmp_path / "busy-0.log") as one, OwnedProcess(loop, tmp_path / "busy-1.log") as two:
        nb, records = run_notebook(LABS / "lab1" / "01_single_node_lr.ipynb", tmp_path, params, timeout=600)
        assert one.poll() is None and two.poll() is None  # the cores stayed busy all along
    score = evaluate(check, nb, records)
    assert score.status == "pass" and score.value >= check.spec["factor"], score
    assert f"the check asks at least {check.spec['factor']:g}x" in score.reason
