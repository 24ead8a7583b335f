"""Labs 3 and 4's kit helpers that need no cluster: report 000's table and the send-rate audit,
the survivors' failure summary, the tasks' --collective-timeout, TensorFlow's error as the
result file holds it, and the emulated section's plumbing where links cannot be emulated."""

import pandas as pd
import pytest

from labkit.measure import plots
from labkit.labs.lab4 import experiment as lenet_sweep
from labkit.tasks import strategy_train


def test_report_000_table_is_the_reports_own():
    t = lenet_sweep.report_000()
    assert list(zip(t["workers"], t["batch_size"])) == [(n, b) for n in (1, 2, 3) for b in (50, 100, 200)]
    row = t[(t["workers"] == 2) & (t["batch_size"] == 200)].iloc[0]
    assert row["time_s"] == 7 * 60 + 44 and row["net_sent_bytes_per_s"] == 4_306_106 and row["val_accuracy"] == 0.8997


def test_send_rate_audit_sets_each_reading_beside_the_report():
    predicted = {
        "global": {"2 x 200": 4_306_106 / 2, "3 x 50": 11_655_754.0},
        "per_worker": {"2 x 200": 4_306_106 / 4, "3 x 50": 11_655_754 / 3},
    }
    audit = lenet_sweep.send_rate_audit(predicted)
    assert list(audit.index) == ["2 x 200", "3 x 50"]  # only the rows predicted, in the report's order
    assert audit.loc["2 x 200", "report_over_global"] == pytest.approx(2)
    assert audit.loc["2 x 200", "report_over_per_worker"] == pytest.approx(4)
    assert audit.loc["3 x 50", "report_over_global"] == pytest.approx(1)
    assert audit.loc["3 x 50", "report_sent_bytes_per_s"] == 11_655_754


def _ft(survivor: dict, bound: float = 60.0) -> dict:
    errors = [survivor["error"]] if survivor["error"] else []
    return {
        "peer_failure": {
            "survivors": {"worker:0": survivor},
            "errors": errors,
            "survivor_wait_s": bound,
            "mwms_failure_s": survivor["error_after_s"],
            "summary": "summary line",
        }
    }


def test_the_survivors_failure_in_words():
    met = {
        "error": "UnavailableError",
        "message": "Collective ops is aborted by: x\nRestart your program",
        "error_after_s": 0.05,
        "exit_after_s": 0.2,
        "stopped_by_launcher": False,
        "returncode": 1,
    }
    text = lenet_sweep.describe_peer_failure(_ft(met))
    assert text.splitlines()[:2] == [
        "summary line",
        "worker:0: UnavailableError 0.050 s after the kill; it exited 0.200 s after the kill",
    ]
    assert "    Restart your program" in text
    hung = {
        **met,
        "error": None,
        "message": None,
        "error_after_s": None,
        "exit_after_s": None,
        "stopped_by_launcher": True,
        "returncode": -15,
    }
    text = lenet_sweep.describe_peer_failure(_ft(hung, bound=5))
    assert "no TensorFlow error" in text and "still running 5 s after the kill, stopped by the launcher" in text


@pytest.mark.tensorflow
def test_peer_failure_keeps_tensorflows_words_without_the_ops_stack():
    tf = pytest.importorskip("tensorflow")
    message = (
        "Graph execution error:\n\nDetected at node sgd/CollectiveReduceV2 defined at (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n\n  File "y.py", line 2, in f\n\n'
        "Collective ops is aborted by: recvmsg:Connection reset by peer\n"
        "The error could be from a previous operation. Restart your program to reset."
    )
    out = strategy_train.peer_failure(tf.errors.UnavailableError(None, None, message))
    assert out["error"] == "UnavailableError" and out["failed_epoch"] > 0
    assert out["message"].startswith("Collective ops is aborted by") and "File" not in out["message"]


def test_collective_timeout_is_a_positive_number_of_seconds():
    assert strategy_train.parse_args([]).collective_timeout is None
    assert strategy_train.parse_args(["--collective-timeout", "2.5"]).collective_timeout == 2.5
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit):
            strategy_train.parse_args(["--collective-timeout", bad])


def test_fault_tolerance_checks_its_bound_before_starting_anything():
    with pytest.raises(ValueError, match="survivor_wait_s"):
        lenet_sweep.fault_tolerance(survivor_wait_s=0, log=None, progress=False)


@pytest.mark.tensorflow
def test_the_emulated_section_without_links_is_an_empty_frame_and_two_panels_that_say_so():
    pytest.importorskip("tensorflow")
    from labkit.labs.lab3 import experiment as sparse_lr

    frame = sparse_lr.emulated_dense([], batch_size=100, samples=100, workers=2)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 0
    assert list(frame.columns) == list(sparse_lr.EMULATED_COLUMNS)
    fig = plots.emulated_dense(frame)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts[0] == "emulated links: skipped (see above)" and not any(ax.axison for ax in fig.axes)
    fig, ax = plots.subplots()
    plots.skipped(ax, "nothing to show: why")
    assert [t.get_text() for t in ax.texts] == ["nothing to show: why"] and not ax.axison


@pytest.mark.tensorflow
def test_report_001s_dense_step_travels_to_the_tasks_and_is_dense():
    """The tasks define the step from its source (with its imports), and its gradient has a row
    for every feature: not Lab 3's exercise, which has one per distinct feature."""
    tf = pytest.importorskip("tensorflow")
    from labkit.learning import sparse
    from labkit.labs.lab3 import experiment as sparse_lr
    from labkit.labs.lab3.dense_lr_step import sparse_lr_gradient
    from labkit.tasks.ps_sparse_lr import load_gradient

    step = load_gradient(sparse_lr.gradient_source(sparse_lr_gradient))
    x = tf.SparseTensor([[0, 1], [1, 3]], [1.0, 1.0], [2, 6])
    loss, g = step(tf.zeros([6]), x, tf.constant([1.0, 0.0]))
    assert g.indices.numpy().tolist() == list(range(6)) and g.dense_shape.numpy().tolist() == [6]
    want_loss, want = sparse.dense_gradient(tf.zeros([6]), x, tf.constant([1.0, 0.0]))
    assert float(loss) == pytest.approx(float(want_loss)) and g.values.numpy() == pytest.approx(want.numpy())
