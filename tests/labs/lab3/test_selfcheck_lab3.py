"""Lab 3's self-checks pass the reference and fail the answers students get wrong, naming the
function and the property and no value; the hidden check of the same function fails each of them
too (its probe and judge called directly, as helpers.hidden_verdict does). The formulas' checks
load no TensorFlow; sparse_lr_gradient's does (marked)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import labkit.labs.lab3.selfcheck as checks
from helpers import LABS, NOTEBOOKS, hidden_verdict
from labkit.datasets import clickdata
from labkit.experiments import traces
from labkit.labs.lab3.solution import reference_distinct_features, reference_ps_link_shares
from labkit.notebook import verdicts

SPEC = clickdata.ClickSpec(num_features=1_000_000, seed=0)  # the notebook's click data at its defaults
ROWS = 100  # the notebook's batch_size


@pytest.fixture(scope="module")
def runs():
    """The notebook's emulated dense runs where it emulates no link: the kit's recording, and their F."""
    frame, provenance = traces.frame("lab3_emulated_dense")
    return frame, traces.argument(provenance, "num_features")


def _no_value(v: verdicts.Verdict, name: str) -> None:
    text = verdicts.bundle(v)["text/plain"]
    assert text.startswith(f"SELF-CHECK FAILED: {name} fails its self-check on: "), text
    assert not re.search(r"\d\.\d|(?<![a-z])\d{2}", text), text  # no value (int64 is a type's name)


# ---------------------------------------------------------------------------------------------
# expected_distinct_features


def _distinct(spec, rows, present_optional=0.5, pmf="cdf-difference", repeats=True):
    """expected_distinct_features with one of the mistakes students make (the defaults: right)."""
    a = 1.0 - spec.zipf_s
    optional = np.arange(spec.num_fields) >= spec.num_fields - spec.optional_fields
    total = 0.0
    for present, vocab in zip(np.where(optional, present_optional, 1.0), spec.vocab_sizes):
        k = np.arange(vocab, dtype=np.float64)
        cdf = (1 - (k + 2) ** a) / (1 - (vocab + 1.0) ** a)
        p = {"cdf-difference": np.diff(np.concatenate([[0.0], cdf])), "cdf": cdf, "uniform": np.full(vocab, 1 / vocab)}[
            pmf
        ]
        p = present * p
        total += float(np.sum(1 - (1 - p) ** rows) if repeats else np.sum(np.minimum(1.0, rows * p)))
    return total


WRONG_DISTINCT = [
    (lambda s, r: _distinct(s, r, present_optional=1.0), ["one row"]),  # the optional fields always there
    (
        lambda s, r: r * (s.num_fields - s.optional_fields / 2),
        ["each row adding fewer", "click generator"],
    ),  # no repeats
    (lambda s, r: _distinct(s, r, pmf="cdf"), ["one row", "click generator"]),  # the CDF taken for the probability
    (lambda s, r: _distinct(s, r, pmf="uniform"), ["click generator"]),  # every value as likely
    (lambda s, r: _distinct(s, r, repeats=False), ["each row adding fewer", "click generator"]),  # r x p, capped at 1
]


def test_the_reference_distinct_features_pass():
    for fn in (reference_distinct_features, _distinct):
        v = checks.expected_distinct_features(fn, SPEC, ROWS)
        assert v.passed and len(v.checked) == 5, v.failed
    assert hidden_verdict("lab3_distinct_features", _distinct, NOTEBOOKS, seed=13).ok


@pytest.mark.parametrize("i", range(len(WRONG_DISTINCT)))
def test_a_wrong_distinct_features_fails_its_self_check_and_its_hidden_check(i, tmp_path):
    fn, properties = WRONG_DISTINCT[i]
    v = checks.expected_distinct_features(fn, SPEC, ROWS)
    assert not v.passed
    for p in properties:
        assert any(p in f for f in v.failed), (p, v.failed)
    _no_value(v, "expected_distinct_features")
    assert not hidden_verdict("lab3_distinct_features", fn, tmp_path, seed=13).ok


def test_without_the_notebooks_spec_the_checks_own_is_tried():
    """The notebook's a9a data has no click spec: the check's own small spec still catches a mistake."""
    assert checks.expected_distinct_features(reference_distinct_features, None, ROWS).passed
    assert not checks.expected_distinct_features(WRONG_DISTINCT[0][0], None, ROWS).passed


# ---------------------------------------------------------------------------------------------
# ps_link_shares


def _link(f, steps, window, rate, beside=1, into=12, out=4, bits=8, first=None):
    """ps_link_shares with one of the mistakes students make (the defaults: right)."""
    crossing = sum(steps[beside if first is None else first :])
    capacity = rate / bits * window
    return into * f * crossing / capacity, out * f * crossing / capacity


WRONG_LINK = [
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, bits=1), ["your runs"]),  # the rate read as bytes per second
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, first=0), ["nothing crosses", "beside it change nothing"]),
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, into=4), ["three times as much", "your runs"]),  # no index
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, into=4, out=12), ["three times as much", "your runs"]),  # swapped
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, into=8), ["three times as much"]),  # int32 index
    (lambda f, s, w, r, k=1: _link(f, s, w, r, k, first=k + 1), ["beside it change nothing"]),  # one worker too few
]


def test_the_reference_ps_link_shares_pass(runs):
    for fn in (reference_ps_link_shares, _link):
        v = checks.ps_link_shares(fn, *runs)
        assert v.passed and len(v.checked) == 6, v.failed


@pytest.mark.parametrize("i", range(len(WRONG_LINK)))
def test_a_wrong_ps_link_shares_fails_its_self_check_and_its_hidden_check(i, runs, tmp_path):
    fn, properties = WRONG_LINK[i]
    v = checks.ps_link_shares(fn, *runs)
    assert not v.passed
    for p in properties:
        assert any(p in f for f in v.failed), (p, v.failed)
    _no_value(v, "ps_link_shares")
    assert not hidden_verdict("lab3_ps_link_shares", fn, tmp_path, seed=17).ok


def test_the_reference_notebooks_own_functions_pass(runs):
    from labkit.grading.judge import probe

    names = ["expected_distinct_features", "ps_link_shares"]
    fns, _ = probe.load_functions(LABS / "lab3" / "03_sparse_lr.ipynb", names)
    assert checks.expected_distinct_features(fns[names[0]], SPEC, ROWS).passed
    assert checks.ps_link_shares(fns[names[1]], *runs).passed


# ---------------------------------------------------------------------------------------------
# sparse_lr_gradient (TensorFlow), and sync_round (Lab 2's)


def _sparse(w, x, y, mean=True, dense=False):
    """The sparse gradient, or a mistake: the loss summed, or a dense [F] gradient gathered at the end."""
    import tensorflow as tf

    b = tf.cast(x.dense_shape[0], tf.float32) if mean else 1.0
    if dense:
        z = tf.reshape(tf.sparse.sparse_dense_matmul(x, tf.reshape(w, [-1, 1])), [-1])
        err = tf.reshape(tf.sigmoid(z) - y, [-1, 1])
        g = tf.reshape(tf.sparse.sparse_dense_matmul(x, err, adjoint_a=True), [-1]) / b
        uniq, _ = tf.unique(x.indices[:, 1])
        loss = tf.reduce_sum(tf.nn.softplus(z) - y * z) / b
        return loss, tf.IndexedSlices(tf.gather(g, uniq), uniq, tf.constant([w.shape[0]], tf.int64))
    uniq, local = tf.unique(x.indices[:, 1], out_idx=tf.int64)
    rows = x.indices[:, 0]
    z = tf.math.unsorted_segment_sum(x.values * tf.gather(tf.gather(w, uniq), local), rows, x.dense_shape[0])
    err = tf.sigmoid(z) - y
    g_u = tf.math.unsorted_segment_sum(x.values * tf.gather(err, rows), local, tf.size(uniq, out_type=tf.int64)) / b
    loss = tf.reduce_sum(tf.nn.softplus(z) - y * z) / b
    return loss, tf.IndexedSlices(g_u, uniq, tf.constant([w.shape[0]], tf.int64))


@pytest.mark.tensorflow
def test_sparse_lr_gradient_self_check_passes_the_reference_and_fails_a_sum_and_a_dense_step():
    from labkit.labs.lab3.solution import sparse_gradient

    assert checks.sparse_lr_gradient(lambda w, x, y: sparse_gradient(w, x, y)).passed
    assert checks.sparse_lr_gradient(_sparse).passed
    v = checks.sparse_lr_gradient(_summed)
    assert len(v.failed) == 1 and v.failed[0].startswith("the mean log-loss and its gradient"), v.failed
    for wrong in (lambda w, x, y: _sparse(w, x, y, dense=True), _shape_of_w):
        v = checks.sparse_lr_gradient(wrong)
        assert len(v.failed) == 1 and v.failed[0].startswith("about as fast with w of twenty million"), v.failed
    _no_value(v, "sparse_lr_gradient")
    # the hidden check fails both, on its growth measured from outside: tests/labs/lab3/test_hidden_sparse_outside.py
    # and test_hidden_sparse_gradient_scaling.py (minutes); the sum, below


def _shape_of_w(w, x, y):
    """The sparse step with the dense shape the notebook warns against: tf.shape(w) of the variable
    reads all of w eagerly (a copy of F values each step; inside a tf.function it does not)."""
    import tensorflow as tf

    loss, g = _sparse(w, x, y)
    return loss, tf.IndexedSlices(g.values, g.indices, tf.cast(tf.shape(w), tf.int64))


def _summed(w, x, y):
    return _sparse(w, x, y, mean=False)


@pytest.mark.tensorflow
@pytest.mark.slow
def test_the_hidden_check_fails_a_summed_sparse_gradient_too(tmp_path):
    v = hidden_verdict("lab3_sparse_gradient", _summed, tmp_path, seed=11)
    assert not v.ok, v.reason


@pytest.mark.tensorflow
def test_sparse_lr_gradient_self_check_names_a_dense_result_and_an_error():
    import tensorflow as tf

    def per_feature(w, x, y):
        loss, g = _sparse(w, x, y)
        return loss, tf.IndexedSlices(tf.zeros([w.shape[0]]), tf.range(w.shape[0], dtype=tf.int64), g.dense_shape)

    v = checks.sparse_lr_gradient(per_feature)
    assert v.failed == ["one gradient row per distinct feature of the batch (tf.unique), not per feature"]
    assert checks.sparse_lr_gradient(lambda w, x, y: _sparse(w, x, y)[1]).failed == [
        "a (loss, tf.IndexedSlices) pair, eagerly and inside a tf.function"
    ]
    v = checks.sparse_lr_gradient(lambda w, x, y: (tf.reduce_sum(tf.gather(w, x.indices[:, 1] + 10**9)), None))
    assert len(v.failed) == 1 and "without an error (it raised" in v.failed[0], v.failed


def test_lab3s_sync_round_self_check_is_lab2s():
    """Lab 3's sync runs are built with the round the student pastes from Lab 2: the same check."""
    import labkit.labs.lab2.selfcheck as lab2_checks

    assert checks.sync_round is lab2_checks.sync_round


def test_make_check_lists_every_self_check_and_names_a_failed_one(runs, audit_inputs, tmp_path):
    from _check_report import make_check_lines

    notebook = LABS / "lab3" / "03_sparse_lr.ipynb"
    right = {  # the TensorFlow checks' verdicts as they show them (their tests are above)
        "lab3-08-selfcheck": [verdicts.Verdict("sparse_lr_gradient", ["the mean log-loss and its gradient"])],
        "lab3-sync-round-selfcheck": [verdicts.Verdict("sync_round", ["the weights: plain SGD"])],
        "lab3-predict-selfcheck": [checks.expected_distinct_features(reference_distinct_features, SPEC, ROWS)],
        "lab3-pslink-selfcheck": [checks.ps_link_shares(reference_ps_link_shares, *runs)],
        "lab3-audit-selfcheck": [
            checks.audit_001(_reference_audit(*audit_inputs), audit_inputs[0], 61_000.0)  # the fixture's bytes
        ],
    }
    (exercises, checked), cell = make_check_lines("lab3", notebook, right, tmp_path / "right")
    assert exercises.status == "ok" and checked.text == (
        "5 of 5 passed (sparse_lr_gradient, sync_round, expected_distinct_features, audit_001, ps_link_shares)"
    ), checked.text
    wrong = dict(right, **{"lab3-pslink-selfcheck": [checks.ps_link_shares(WRONG_LINK[0][0], *runs)]})
    (_, checked), cell = make_check_lines("lab3", notebook, wrong, tmp_path / "wrong")
    assert checked.status == "FAIL" and checked.text.startswith(
        f"4 of 5 passed: ps_link_shares fails its self-check (cell {cell['lab3-pslink-selfcheck']}) on: close to what"
    ), checked.text


def test_correct_answers_written_otherwise_pass(runs):
    """The properties hold for any right answer: the distinct count field by field with a loop over
    the values' probabilities taken from the CDF at both ends; the link's seconds, then shares."""

    def expected_distinct_features(spec, rows):
        total = 0.0
        for f, vocab in enumerate(spec.vocab_sizes):
            present = 0.5 if f >= spec.num_fields - spec.optional_fields else 1.0
            k = np.arange(int(vocab) + 1, dtype=np.float64)
            cdf = (1 - (k + 1) ** (1 - spec.zipf_s)) / (1 - (vocab + 1.0) ** (1 - spec.zipf_s))  # P(id < k)
            p = present * np.diff(cdf)
            total += float(np.sum(1 - np.power(1 - p, rows)))
        return total

    def ps_link_shares(num_features, local_steps, window_s, rate_bits, beside_ps=1):
        crossing = sum(local_steps) - sum(local_steps[:beside_ps])
        seconds_in = crossing * num_features * 12 * 8 / rate_bits
        seconds_out = crossing * num_features * 4 * 8 / rate_bits
        return seconds_in / window_s, seconds_out / window_s

    assert checks.expected_distinct_features(expected_distinct_features, SPEC, ROWS).passed
    assert checks.ps_link_shares(ps_link_shares, *runs).passed


# ---------------------------------------------------------------------------------------------
# The audit of report 001, beside the rubric's compare checks of the same records

F_LARGEST = 33_762_578  # the notebook's largest profiled size, pinned by the rubric


@pytest.fixture(scope="module")
def audit_inputs():
    """What the audit's cell reads, as a run measures it: the op profile's table (dense_alloc_bytes
    at each size and batch: a float32 [F, 1] output and a little more), the sparse sync run's bytes."""
    import pandas as pd

    index = pd.MultiIndex.from_product([(10_000, 1_000_000, F_LARGEST), (10, 100)], names=["num_features", "batch"])
    alloc = [4.0 * f * 1.0 + 512 * b for f, b in index]
    speed = pd.DataFrame({"dense_alloc_bytes": alloc}, index=index)
    summary = pd.DataFrame({"bytes_per_step": [61_000.0]}, index=["sync b100"])
    return speed, summary


def _reference_audit(speed, summary) -> dict:
    """The reference notebook's own audit cell, run on ``speed`` and ``summary``."""
    import nbformat

    from labkit.learning import costmodel

    nb = nbformat.read(str(LABS / "lab3" / "03_sparse_lr.ipynb"), as_version=4)
    source = next(c.source for c in nb.cells if c.id == "lab3-audit")
    code = source[source.index("### BEGIN SOLUTION") : source.index("### END SOLUTION")]
    namespace = {"clickdata": clickdata, "costmodel": costmodel, "speed": speed, "summary": summary}
    namespace.update(profile_features=(10_000, 1_000_000, F_LARGEST), batch_size=100)
    exec(code, namespace)
    return namespace["audit_001"]


def _rubric_fails(audit: dict, speed, summary) -> list[str]:
    """The names of Lab 3's rubric checks of audit_001 that do not pass ``audit``."""
    from labkit.grading.judge import rubric

    lab = rubric.load_rubric(NOTEBOOKS / "rubric.toml").labs["lab3"]
    largest = speed.xs(F_LARGEST, level="num_features")["dense_alloc_bytes"]
    records = {
        "audit_001": audit,
        "dense_alloc_bytes": {f"b{b}": float(a) for b, a in largest.items()},
        "sync_bytes_per_step": float(summary.loc["sync b100", "bytes_per_step"]),
    }
    checks_of_audit = [
        c for c in lab.checks if c.kind == "compare" and str(c.spec.get("left", "")).startswith("audit_001")
    ]
    assert len(checks_of_audit) == 9
    return [c.name for c in checks_of_audit if rubric.evaluate(c, None, records).status != "pass"]


def test_the_reference_audit_passes_its_self_check_and_the_rubrics_checks(audit_inputs):
    speed, summary = audit_inputs
    audit = _reference_audit(speed, summary)
    v = checks.audit_001(audit, speed, summary.loc["sync b100", "bytes_per_step"])
    assert v.passed and len(v.checked) == 6, v.failed
    assert _rubric_fails(audit, speed, summary) == []


def _changed(audit: dict, path: str, change) -> dict:
    import copy

    out = copy.deepcopy(audit)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = change(node[last], out)
    return out


@pytest.mark.parametrize(
    "path, change, failed",
    [  # each a reading students make
        ("dense_output_columns.b10", lambda x, a: x / 2, "dense_output_columns"),  # 8 bytes a value
        ("seconds_at_350_megabits_per_s", lambda x, a: x / 8, "seconds_at_350_megabits"),  # a megabit as a megabyte
        ("ps_link_bytes_per_iteration.ps_alone", lambda x, a: x / 2, "ps_alone"),  # one direction only
        (
            "ps_link_bytes_per_iteration.beside_a_worker",
            lambda x, a: a["ps_link_bytes_per_iteration"]["ps_alone"],
            "beside",
        ),
        ("ps_link_megabits_per_s_needed.ps_alone", lambda x, a: x * 1e6 / 2**20, "megabits_per_s_needed"),  # 2^20
        ("sparse_share_of_dense_bytes", lambda x, a: 1 / x, "sparse_share"),  # dense over sparse
    ],
)
def test_a_wrong_audit_fails_its_self_check_and_the_rubrics_check(audit_inputs, path, change, failed):
    speed, summary = audit_inputs
    audit = _changed(_reference_audit(speed, summary), path, change)
    v = checks.audit_001(audit, speed, summary.loc["sync b100", "bytes_per_step"])
    assert v.failed and failed in v.failed[0], v.failed  # the first property it fails is the mistake's
    assert not re.search(r"\d\.\d", verdicts.bundle(v)["text/plain"])
    assert _rubric_fails(audit, speed, summary), path
