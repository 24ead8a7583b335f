"""Lab 2's self-checks pass the reference and fail the answers students get wrong, naming the
function and the property and no value; the hidden check of the same function fails each of them
too (its probe and judge called directly, as helpers.hidden_verdict does). sync_round's tests load
TensorFlow (marked), and its hidden check runs a cluster (marked slow)."""

from __future__ import annotations

import re

import pytest

import labkit.labs.lab2.selfcheck as checks
from helpers import LABS, NOTEBOOKS, hidden_verdict
from labkit.experiments import traces
from labkit.labs.lab2 import solution
from labkit.notebook import verdicts

HIDDEN = {"global_step": ("lab2_global_step", {"seed": 13}), "worker0_share": ("lab2_worker0_share", {"seed": 7})}


@pytest.fixture(scope="module")
def runs():
    """The notebook's emulated runs where it emulates no link: the kit's recording."""
    frame, _ = traces.frame("lab2_emulated_shares")
    return frame


def run(name: str, fn, runs) -> verdicts.Verdict:
    return checks.worker0_share(fn, runs) if name == "worker0_share" else checks.global_step(fn)


@pytest.mark.parametrize("name", list(HIDDEN))
def test_the_reference_passes_its_self_check_and_its_hidden_check(name, runs, tmp_path):
    fn = getattr(solution, name)
    v = run(name, fn, runs)
    assert v.passed, v.failed
    assert len(v.checked) >= 5 and verdicts.bundle(v)["text/plain"].startswith(f"ok: {name} passes its self-check")
    check, args = HIDDEN[name]
    assert hidden_verdict(check, fn, tmp_path, **args).ok


def test_the_reference_notebooks_own_functions_pass(runs):
    from labkit.grading.judge import probe

    fns, _ = probe.load_functions(LABS / "lab2" / "02_sync_vs_async_sgd.ipynb", list(HIDDEN))
    for name, fn in fns.items():
        v = run(name, fn, runs)
        assert v.passed, (name, v.failed)


def _no_value(v: verdicts.Verdict, name: str) -> None:
    text = verdicts.bundle(v)["text/plain"]
    assert text.startswith(f"SELF-CHECK FAILED: {name} fails its self-check on: "), text
    assert not re.search(r"\d\.\d|\d{2}", text), text  # no value: the properties are words


def _share(b, r, s, n, k=1):
    return solution.worker0_share(b, r, s, n, k)


WRONG = {
    "global_step": [
        # the modes swapped
        (
            lambda mode, n, k: solution.global_step("async" if mode == "sync" else "sync", n, k),
            ["sync: one update per round", "async"],
        ),
        # one update per worker step in both modes
        (lambda mode, n, k: n * k, ["sync: one update per round"]),
        # the sync round counted per worker (and as a fraction)
        (lambda mode, n, k: k / n if mode == "sync" else n * k, ["a whole number", "sync: one update per round"]),
        # the chief's steps left out of the async count: one worker too few
        (lambda mode, n, k: k if mode == "sync" else (n - 1) * k, ["one worker", "the workers' counts add up"]),
        # the notebook's own cluster whatever the arguments (3 workers, 100 steps each)
        (lambda mode, n, k: 100 if mode == "sync" else 300, ["one worker", "in proportion to the steps"]),
    ],
    "worker0_share": [
        # a rate in bits read as bytes per second
        (lambda b, r, s, n, k=1: _share(b / 8, r, s, n, k), ["your runs on emulated links"]),
        # every worker but worker 0 remote, whoever shares the ps's node
        (lambda b, r, s, n, k=1: _share(b, r, s, n, 1), ["every worker beside the ps", "among the workers beside"]),
        # a remote step costs the link alone, not its compute as well
        (
            lambda b, r, s, n, k=1: (1 / s) / (k / s + (n - k) * r / (8 * b)),
            ["a number for every case tried, without an error (it raised ZeroDivisionError)"],
        ),
        # worker 0's steps over the remote workers', not over everyone's
        (lambda b, r, s, n, k=1: (1 / s) / max((n - k) / (s + 8 * b / r), 1e-300), ["a share: a number above 0"]),
        # one worker's share of n, whatever the link
        (lambda b, r, s, n, k=1: 1 / n, ["a slower link, or more bytes", "your runs on emulated links"]),
    ],
}


@pytest.mark.parametrize("name, i", [(name, i) for name, wrong in WRONG.items() for i in range(len(wrong))])
def test_a_wrong_answer_fails_its_self_check_and_its_hidden_check(name, i, runs, tmp_path):
    fn, properties = WRONG[name][i]
    v = run(name, fn, runs)
    assert not v.passed
    for p in properties:
        assert any(p in f for f in v.failed), (p, v.failed)
    _no_value(v, name)
    check, args = HIDDEN[name]
    assert not hidden_verdict(check, fn, tmp_path, **args).ok


def test_without_runs_the_share_is_checked_on_its_limits_alone():
    """Without the notebook's runs the bits-for-bytes mistake keeps every limit: only the runs show it."""
    assert checks.worker0_share(lambda b, r, s, n, k=1: _share(b / 8, r, s, n, k)).passed
    assert len(checks.worker0_share(solution.worker0_share).checked) == 7


# ---------------------------------------------------------------------------------------------
# sync_round (TensorFlow)


def _round(tmp_path, old: str = "", new: str = ""):
    """Lab 2's reference round, or a mistake in it (``old`` replaced by ``new``), as a student's
    ``def sync_round`` whose source the tasks can read: written to a file and imported from it."""
    import importlib.util
    import inspect

    from labkit.labs.lab2.solution import sync_round

    source = inspect.getsource(sync_round)
    assert old in source, old
    path = tmp_path / f"round_{abs(hash(new))}.py"
    path.write_text("from __future__ import annotations\n\n" + source.replace(old, new))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sync_round


@pytest.mark.tensorflow
def test_sync_round_self_check_passes_lab2s_round_and_fails_a_sum(tmp_path):
    """The hidden check's cluster fails the summed round too: tests/experiments/test_hidden_sync_round.py."""
    assert checks.sync_round(_round(tmp_path)).passed
    v = checks.sync_round(_round(tmp_path, "learning_rate * mean", "learning_rate * num_workers * mean"))
    assert v.failed == ["the weights: plain SGD on the mean of every worker's gradient, once per round"]
    _no_value(v, "sync_round")
    assert checks.sync_round(lambda *args: None).failed == [checks.SOURCE_PROPERTY]


@pytest.mark.tensorflow
def test_sync_round_self_check_fails_a_fixed_worker_count(tmp_path):
    """A round that takes three gradients whatever num_workers: right with three workers only."""
    v = checks.sync_round(_round(tmp_path, "take_grad(num_workers)", "take_grad(3)"))
    assert not v.passed and v.failed[0].startswith("a round that completes, for any number of workers"), v.failed


@pytest.mark.cluster
@pytest.mark.slow
def test_the_hidden_check_fails_a_fixed_worker_count_too(tmp_path, monkeypatch):
    """The grader's cluster has 2 workers: a round that waits for 3 gradients never completes one,
    and its probe raises (the grader's verdict: "running your sync_round failed: ...")."""
    from labkit.distributed.launchers.base import ClusterTimeout

    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path / "runs"))
    fn = _round(tmp_path, "take_grad(num_workers)", "take_grad(3)")
    args = {"rounds": 3, "train_limit": 600, "test_limit": 100, "seed": 4, "timeout": 60}
    with pytest.raises(ClusterTimeout, match="still running: ps:0, worker:0, worker:1"):
        hidden_verdict("lab2_sync_round", fn, tmp_path, **args)


def test_make_check_lists_every_self_check_and_names_a_failed_one(runs, tmp_path):
    from _check_report import make_check_lines

    notebook = LABS / "lab2" / "02_sync_vs_async_sgd.ipynb"
    right = {  # sync_round's verdict as it shows it (its tests are above)
        "lab2-08-selfcheck": [verdicts.Verdict("sync_round", ["a round that completes, for any number of workers"])],
        "lab2-predict-k-selfcheck": [run("global_step", solution.global_step, runs)],
        "lab2-killed-selfcheck": [checks.others_per_step(solution.others_per_step)],
        "lab2-w0share-selfcheck": [run("worker0_share", solution.worker0_share, runs)],
        "lab2-audit-selfcheck": [checks.audit_000(_audit_000(), STEP["async"])],
        "lab2-audit2-selfcheck": [checks.audit_sync(_audit_sync(), STEP["sync"])],
    }
    (exercises, checked), cell = make_check_lines("lab2", notebook, right, tmp_path / "right")
    assert exercises.status == "ok" and checked.text == (
        "6 of 6 passed (sync_round, global_step, others_per_step, audit_000, audit_sync, worker0_share)"
    )
    wrong = dict(right, **{"lab2-predict-k-selfcheck": [run("global_step", WRONG["global_step"][1][0], runs)]})
    (_, checked), cell = make_check_lines("lab2", notebook, wrong, tmp_path / "wrong")
    assert checked.status == "FAIL" and checked.text.startswith(
        f"5 of 6 passed: global_step fails its self-check (cell {cell['lab2-predict-k-selfcheck']}) on: sync: one update"
    ), checked.text


def test_correct_answers_written_otherwise_pass(runs):
    """The properties hold for any right answer: updates per worker step, seconds per step then rates."""

    def global_step(mode, workers, local_steps):
        updates_per_worker_step = {"async": 1, "sync": 1 / workers}[mode]
        return round(workers * local_steps * updates_per_worker_step)

    def worker0_share(step_bytes, rate_bits, step_s, workers, beside_ps=1):
        remote_s = step_s + step_bytes * 8 / rate_bits
        return (1 / step_s) / (beside_ps / step_s + (workers - beside_ps) / remote_s)

    assert checks.global_step(global_step).passed
    assert checks.worker0_share(worker0_share, runs).passed


# ---------------------------------------------------------------------------------------------
# The audits, beside the rubric's compare checks of the same records


def _compare(name: str, records: dict):
    """Lab 2's rubric check ``name`` on ``records``, as the grader scores it."""
    from labkit.grading.judge import rubric

    lab = rubric.load_rubric(NOTEBOOKS / "rubric.toml").labs["lab2"]
    return rubric.evaluate(next(c for c in lab.checks if c.name == name), None, records)


STEP = {"async": 66_120.0, "sync": 64_980.0}  # bytes per worker step, as a run measures them (a pull and a push)
SYNC_S = 8 * 60 + 46


def _audit_000(factor=1.0):
    return {"seconds_to_send_one_gradient_at_227_bytes_per_s": factor * STEP["async"] / 2 / 227}


def _audit_sync(seconds=SYNC_S, half=0.5, inverted=False):
    sent, grads = 19_775_391 * seconds, 60_000 * STEP["sync"] * half
    return {
        "report_sent_bytes": sent,
        "gradient_bytes_at_most": grads,
        "ratio": grads / sent if inverted else sent / grads,
    }


def test_the_audits_right_pass_their_self_checks_and_the_rubrics_checks():
    assert checks.audit_000(_audit_000(), STEP["async"]).passed
    assert checks.audit_sync(_audit_sync(), STEP["sync"]).passed
    records = {"audit_000": _audit_000(), "audit_sync_traffic": _audit_sync(), "bytes_per_worker_step": STEP}
    assert _compare("audit: report 000's 227 B/s", records).status == "pass"
    assert _compare("audit: report 000's 19.8 MB/s, the bytes sent", records).status == "pass"
    assert _compare("audit: report 000's 19.8 MB/s, the gradients' bytes", records).status == "pass"


@pytest.mark.parametrize(
    "wrong",
    [_audit_000(2.0), _audit_000(8.0), _audit_000(1 / 60), {"seconds": STEP["async"] / 454}, "154 s"],
    ids=["a whole step, not a gradient", "in bits", "in minutes", "another key", "a string"],
)
def test_a_wrong_audit_000_fails_its_self_check_and_the_rubrics_check(wrong):
    v = checks.audit_000(wrong, STEP["async"])
    assert v.failed == [
        "seconds_to_send_one_gradient_at_227_bytes_per_s: one gradient, half of your measured async worker "
        "step's bytes, sent at 227 bytes per second"
    ]
    text = verdicts.bundle(v)["text/plain"]
    assert str(round(STEP["async"] / 454)) not in text and not re.search(r"\d\.\d", text), text
    records = {"audit_000": wrong, "bytes_per_worker_step": STEP}
    assert _compare("audit: report 000's 227 B/s", records).status in ("fail", "missing")


@pytest.mark.parametrize(
    "wrong, failed, rubric_check",
    [
        (_audit_sync(seconds=8.46 * 60), "report_sent_bytes", "the bytes sent"),  # 8 min 46 s read as 8.46 min
        (_audit_sync(seconds=8 + 46 / 60), "report_sent_bytes", "the bytes sent"),  # in minutes
        (_audit_sync(half=1.0), "gradient_bytes_at_most", "the gradients' bytes"),  # a whole step per push
        (_audit_sync(half=0.5 / 3), "gradient_bytes_at_most", "the gradients' bytes"),  # a third of the steps
        (_audit_sync(inverted=True), "ratio", None),  # the gradients over the report: the rubric reads it nowhere
    ],
)
def test_a_wrong_audit_sync_fails_its_self_check_and_the_rubrics_check(wrong, failed, rubric_check):
    v = checks.audit_sync(wrong, STEP["sync"])
    assert len(v.failed) == 1 and v.failed[0].startswith(failed + ":"), v.failed
    assert not re.search(r"\d\.\d", verdicts.bundle(v)["text/plain"])
    if rubric_check:
        records = {"audit_sync_traffic": wrong, "bytes_per_worker_step": STEP}
        assert _compare(f"audit: report 000's 19.8 MB/s, {rubric_check}", records).status == "fail"
