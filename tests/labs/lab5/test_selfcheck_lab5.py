"""Lab 5's self-checks pass the reference and fail the answers students get wrong, naming the
function and the property and no value; the hidden check of the same function fails each of them
too (its probe and judge called directly, as helpers.hidden_verdict does). No TensorFlow."""

from __future__ import annotations

import math
import re

import pytest

import labkit.labs.lab5.selfcheck as checks
from _check_report import make_check_lines, make_check_report
from helpers import LABS, NOTEBOOKS, hidden_verdict
from labkit.labs.lab5 import experiment, solution
from labkit.notebook import verdicts

HIDDEN = {  # function: (hidden check, the rubric's args)
    "ps_bytes_per_step": ("lab5_ps_bytes_per_step", {"seed": 17}),
    "dense_model_bytes": ("lab5_dense_model_bytes", {"seed": 19}),
    "ring_bytes_per_worker": ("lab5_ring_bytes_per_worker", {"seed": 23}),
    "comm_terms": ("lab5_comm_terms", {}),
    "link_ceiling": ("lab5_link_ceiling", {"seed": 19}),
    "slice_shares": ("lab5_slice_shares", {"seed": 5}),
}


def run(name: str, fn) -> verdicts.Verdict:
    """The self-check of ``name`` on ``fn``, with the arguments its notebook cell passes."""
    if name == "link_ceiling":
        return checks.link_ceiling(fn, solution.comm_terms)
    if name == "slice_shares":
        return checks.slice_shares(fn, experiment.recorded_failure())
    return getattr(checks, name)(fn)


def assert_fails(name: str, fn, properties, gap: str = "", *, tmp_path) -> None:
    """The self-check fails ``fn`` on each of ``properties`` (phrases), its message naming the
    function and no number with decimals; the hidden check fails it too, unless ``gap`` says why
    the grader's cases cannot show this mistake (then the test is an expected failure while they
    cannot, and an error once they can: the gap is reported, not hidden)."""
    v = run(name, fn)
    assert not v.passed
    for p in properties:
        assert any(p in f for f in v.failed), (p, v.failed)
    text = verdicts.bundle(v)["text/plain"]
    assert text.startswith(f"SELF-CHECK FAILED: {name} fails its self-check on: "), text
    assert not re.search(r"\d\.\d|\d{3}", text), text  # no value: the properties are words
    check, args = HIDDEN[name]
    try:
        hidden = hidden_verdict(check, fn, tmp_path, **args)
    except (TypeError, ValueError, ArithmeticError) as e:  # the probe refuses what is not an answer
        return print(f"{check}: the probe refused it ({type(e).__name__})")
    if gap and hidden.ok:
        pytest.xfail(f"{check} passes it: {gap}")
    assert not hidden.ok and not gap, (check, hidden.reason, gap)


@pytest.mark.parametrize("name", list(HIDDEN))
def test_the_reference_passes_its_self_check_and_its_hidden_check(name, tmp_path):
    fn = getattr(solution, name)
    v = run(name, fn)
    assert v.passed, v.failed
    assert len(v.checked) >= 3 and verdicts.bundle(v)["text/plain"].startswith(f"ok: {name} passes its self-check")
    check, args = HIDDEN[name]
    assert hidden_verdict(check, fn, tmp_path, **args).ok


def _M(units):
    return solution.dense_model_bytes(units)


WRONG = {
    "ps_bytes_per_step": [
        (lambda m, n: n * m, ["at one worker"]),  # one direction: what the ps sends, not what it receives
        (lambda m, n: 2 * m, ["in proportion to the workers"]),  # one worker's bytes, whatever N
        (lambda m, n: 2 * (n - 1) * m, ["at one worker", "in proportion to the workers"]),  # off by one worker
        (lambda m, n: 16 * n * m, ["at one worker"]),  # in bits
    ],
    "dense_model_bytes": [
        (lambda u: 4 * sum(a * b for a, b in zip(u, u[1:])), ["one layer"]),  # the biases left out
        (lambda u: 4 * sum(a * b + a for a, b in zip(u, u[1:])), ["one layer"]),  # a bias per input
        (lambda u: 8 * sum(a * b + b for a, b in zip(u, u[1:])), ["one layer"]),  # float64
        (lambda u: 4 * sum(a * b + b for a, b in zip(u[:-1], u[1:-1])), ["one layer"]),  # the last layer left out
        (lambda u: 4 * (sum(u[i] * u[i + 1] for i in range(len(u) - 1)) + sum(u)), ["one layer"]),  # a bias per unit
    ],
    "ring_bytes_per_worker": [
        (lambda m, n: 2 * m, ["none at one worker", "more with every worker added"]),  # flat
        (lambda m, n: 2 * (n - 1) * m, ["below twice the model"]),  # the whole ring's bytes
        (lambda m, n: (n - 1) / n * m, ["approaching it"]),  # the reduce-scatter alone
        (lambda m, n: m * n / 2, ["none at one worker", "below twice the model"]),  # N = 2's figure scaled with N
        (lambda m, n: 4 * (n - 1) / n * m, ["below twice the model"]),  # sent and received
    ],
    "comm_terms": [
        (  # the ring's two directions added: they overlap on a full-duplex link
            lambda a, M, N, k=1, s=None: (
                (2 * (N - 1), 4 * (N - 1) / N * M) if a == "ring" else solution.comm_terms(a, M, N, k, s)
            ),
            ["the ring's bytes: below twice the model"],
        ),
        (  # the ring's rounds: the reduce-scatter's only
            lambda a, M, N, k=1, s=None: (
                (N - 1, 2 * (N - 1) / N * M) if a == "ring" else solution.comm_terms(a, M, N, k, s)
            ),
            ["the ring's messages"],
        ),
        (  # the PS's one direction
            lambda a, M, N, k=1, s=None: (
                (2, max(N * max(s or [M / k] * k), M)) if a == "ps" else solution.comm_terms(a, M, N)
            ),
            ["both directions count"],
        ),
        (  # the mean shard, not the largest
            lambda a, M, N, k=1, s=None: (2, max(2 * N * M / k, 2 * M)) if a == "ps" else solution.comm_terms(a, M, N),
            ["the ps with the largest shard"],
        ),
        (  # a message per worker
            lambda a, M, N, k=1, s=None: (
                (2 * N, solution.comm_terms(a, M, N, k, s)[1]) if a == "ps" else solution.comm_terms(a, M, N)
            ),
            ["a PS step's messages"],
        ),
        (  # the workers' own links forgotten
            lambda a, M, N, k=1, s=None: (
                (2, 2 * N * max(s or [M / k] * k)) if a == "ps" else solution.comm_terms(a, M, N)
            ),
            ["never less than a worker's own link"],
        ),
    ],
    "link_ceiling": [
        (
            lambda a, b, m, n, r: solution.link_ceiling(a, b, m, n, r) * 8,
            ["comm_terms' critical-path bytes"],
        ),  # bits as bytes
        (
            lambda a, b, m, n, r: solution.link_ceiling(a, b, m, n, r) / n,
            ["comm_terms' critical-path bytes"],
        ),  # one worker's batch
        (  # the ps's link carrying one direction
            lambda a, b, m, n, r: (
                2 * solution.link_ceiling(a, b, m, n, r) if a == "ps" else solution.link_ceiling(a, b, m, n, r)
            ),
            ["comm_terms' critical-path bytes"],
        ),
        (  # no guard for the ring of one
            lambda a, b, m, n, r: n * b * r / (8 * (2 * (n - 1) / n * m if a == "ring" else 2 * n * m)),
            ["a number for every case tried, without an error (it raised ZeroDivisionError)"],
        ),
    ],
}


def _slice_shares(trace, kill, first_offset=1, through=True, to_end=False, shares=True, by_position=False):
    """slice_shares with one of the mistakes students make (the defaults: the right window)."""
    ends = sorted(k["after_step"] for k in trace["kills"]) + [math.inf]
    first, last = ends[kill] + first_offset, math.inf if to_end else ends[kill + 1]
    steps = trace["steps"][int(first) : None if math.isinf(last) else int(last)] if by_position else trace["steps"]
    slices = [
        w
        for s in steps
        for w in s["slices_on"]
        if by_position or (first < s["step"] and (s["step"] <= last if through else s["step"] < last))
    ]
    counts = {w: slices.count(w) for w in sorted(set(slices))}
    return {w: c / len(slices) if shares else c for w, c in counts.items()}


WRONG["slice_shares"] = [
    (
        lambda t, k=0: _slice_shares(t, k, first_offset=0),
        ["none for the worker killed", "each counted once"],
    ),  # in flight
    (lambda t, k=0: _slice_shares(t, k, to_end=True), ["each counted once"]),  # to the end, whatever the next kill
    (lambda t, k=0: _slice_shares(t, k, through=False), ["each counted once"]),  # the next kill's step left out
    (lambda t, k=0: _slice_shares(t, k, shares=False), ["summing to 1"]),  # counts, not shares
    (lambda t, k=0: _slice_shares(t, k, by_position=True), ["in any order"]),  # the steps' places in the list
]


@pytest.mark.parametrize("name, i", [(name, i) for name, wrong in WRONG.items() for i in range(len(wrong))])
def test_a_wrong_answer_fails_its_self_check_and_its_hidden_check(name, i, tmp_path):
    assert_fails(name, *WRONG[name][i], tmp_path=tmp_path)


def test_an_error_or_a_wrong_shape_is_a_failed_property_not_a_traceback():
    v = checks.comm_terms(lambda arch, M, N, n_ps=1, shards=None: 2 * M)
    assert v.failed == ["a pair (messages, bytes) for every case tried, without an error (it raised TypeError)"]
    v = checks.slice_shares(lambda trace, kill=0: [0.5, 0.5])
    assert v.failed == ["a {worker: share} dict for every case tried, without an error (it raised TypeError)"]
    v = checks.dense_model_bytes(lambda units: units[5])
    assert v.failed == ["a number for every case tried, without an error (it raised IndexError)"]


def test_link_ceiling_is_checked_against_the_students_own_comm_terms():
    """A link_ceiling consistent with a wrong comm_terms passes this property: comm_terms has its own."""

    def wrong_terms(arch, M, N, n_ps=1, shards=None):
        return (2, N * M) if arch == "ps" else solution.comm_terms(arch, M, N)

    def consistent(arch, batch, model_bytes, workers, rate_bits):
        return (
            2 * solution.link_ceiling(arch, batch, model_bytes, workers, rate_bits)
            if arch == "ps"
            else solution.link_ceiling(arch, batch, model_bytes, workers, rate_bits)
        )

    assert checks.link_ceiling(consistent, wrong_terms).passed
    assert not checks.link_ceiling(solution.link_ceiling, wrong_terms).passed
    assert not checks.comm_terms(wrong_terms).passed


def test_the_reference_notebooks_own_functions_pass(tmp_path):
    """As the notebook defines them (the grader's probe takes them so), not only as the kit's
    solution module does: the self-checks hold for either."""
    from labkit.grading.judge import probe

    fns, _ = probe.load_functions(LABS / "lab5" / "05_ring_vs_ps.ipynb", list(HIDDEN))
    for name in HIDDEN:
        if name == "link_ceiling":
            v = checks.link_ceiling(fns[name], fns["comm_terms"])
        else:
            v = run(name, fns[name])
        assert v.passed, (name, v.failed)


# ---------------------------------------------------------------------------------------------
# make check's report


def test_make_check_lists_every_self_check_and_names_a_failed_one(tmp_path):
    notebook = LABS / "lab5" / "05_ring_vs_ps.ipynb"
    right = {
        "lab5-predict-selfcheck": [
            run("ps_bytes_per_step", solution.ps_bytes_per_step),
            run("dense_model_bytes", solution.dense_model_bytes),
        ],
        "lab5-predict-ring-selfcheck": [run("ring_bytes_per_worker", solution.ring_bytes_per_worker)],
        "lab5-terms-selfcheck": [run("comm_terms", solution.comm_terms)],
        "lab5-ceiling-selfcheck": [run("link_ceiling", solution.link_ceiling)],
        "lab5-shares-selfcheck": [run("slice_shares", solution.slice_shares)],
        "lab5-audit-selfcheck": [checks.audit_003({"chunk_over_model": 1.0}, _ring_bytes())],
    }
    (exercises, checked), cell = make_check_lines("lab5", notebook, right, tmp_path / "right")
    assert exercises.status == "ok" and checked.status == "ok", checked.text
    assert checked.text == (
        "6 of 6 passed (ps_bytes_per_step, dense_model_bytes, ring_bytes_per_worker, audit_003, comm_terms, "
        "link_ceiling, slice_shares)"
    )
    wrong = dict(right, **{"lab5-terms-selfcheck": [run("comm_terms", WRONG["comm_terms"][0][0])]})
    (_, checked), cell = make_check_lines("lab5", notebook, wrong, tmp_path / "wrong")
    assert checked.status == "FAIL" and checked.text.startswith("5 of 6 passed: comm_terms fails its self-check ")
    assert f"(cell {cell['lab5-terms-selfcheck']}) on: the ring's bytes: below twice the model" in checked.text
    assert checked.todo == [f"fix comm_terms until its self-check, cell {cell['lab5-terms-selfcheck']}, passes"]


WRONG_LAB5 = {  # answers a student hands in, by cell id: (the reference's line, the student's)
    "lab5-predict": (
        "    return 4 * sum(n_in * n_out + n_out for n_in, n_out in zip(units, units[1:]))",
        "    return 4 * sum(n_in * n_out for n_in, n_out in zip(units, units[1:]))",  # the biases left out
    ),
    "lab5-predict-ring": (
        "    return 2 * (workers - 1) / workers * model_bytes",
        "    return 2 * model_bytes",  # flat: the many-worker limit at every N
    ),
    "lab5-shares": (
        "    first, last = ends[kill] + 1, ends[kill + 1]",
        "    first, last = ends[kill], ends[kill + 1]",  # the step in flight at the kill counted
    ),
}


@pytest.mark.notebook
@pytest.mark.cluster
def test_make_check_fails_a_wrong_lab5_where_the_grader_would(tmp_path):
    """A Lab 5 with three wrong answers that stop no cell, run by make check at two steps per run:
    the run goes on to the end, and the report names each function and property its self-check
    failed, with no value, and says the work is not ready."""
    import nbformat

    notebook = LABS / "lab5" / "05_ring_vs_ps.ipynb"
    nb = nbformat.read(str(notebook), as_version=4)
    for c in nb.cells:
        if c.id in WRONG_LAB5:
            old, new = WRONG_LAB5[c.id]
            assert old in c.source, c.id
            c.source = c.source.replace(old, new)
    text, report = make_check_report(nb, notebook, "5", tmp_path, cuts=[("\nsteps = 8 ", "\nsteps = 2 ")])
    assert report.startswith("self-checks 3 of 6 passed: "), report
    for name, prop in (
        ("dense_model_bytes", "one layer: the bytes of its float32 weight matrix"),
        ("ring_bytes_per_worker", "none at one worker"),
        ("slice_shares", "none for the worker killed"),
    ):
        assert f"{name} fails its self-check (cell" in report and prop in report, (name, prop, report)
    assert not re.search(r"\d\.\d", report), report  # no value: no number with decimals
    assert "Not ready to submit" in text and "fix dense_model_bytes until its self-check" in text


def test_correct_answers_written_otherwise_pass():
    """The properties hold for any right answer: a ring simulated round by round, an even split
    computed by the student, integer bytes, shares found by sorting the steps first."""

    def ring_loop(model_bytes, workers):
        sent = 0.0
        for _ in range(2 * (workers - 1)):  # reduce-scatter, then all-gather: a chunk each round
            sent += model_bytes / workers
        return sent

    def comm_terms(arch, M, N, n_ps=1, shards=None):
        if arch == "ring":
            return 2 * (N - 1), ring_loop(M, N)
        busiest = max(shards) if shards else M / n_ps
        return 2, max(2 * N * busiest, 2 * M)

    def dense_model_bytes(units):
        return sum(4 * (a + 1) * b for a, b in zip(units, units[1:]))  # a bias is a weight of a constant input

    def slice_shares(trace, kill=0):
        steps = sorted(trace["steps"], key=lambda s: s["step"])
        kills = sorted(k["after_step"] for k in trace["kills"])
        end = kills[kill + 1] if kill + 1 < len(kills) else steps[-1]["step"] if steps else 0
        counts = {}
        for s in steps:
            if kills[kill] + 1 < s["step"] <= end:
                for w in s["slices_on"]:
                    counts[w] = counts.get(w, 0) + 1
        total = sum(counts.values())
        return {w: c / total for w, c in counts.items()}

    assert checks.ring_bytes_per_worker(ring_loop).passed
    assert checks.comm_terms(comm_terms).passed
    assert checks.dense_model_bytes(dense_model_bytes).passed
    assert checks.slice_shares(slice_shares, experiment.recorded_failure()).passed
    assert checks.link_ceiling(
        lambda a, b, m, n, r: n * b * r / 8 / comm_terms(a, m, n)[1] if comm_terms(a, m, n)[1] else math.inf, comm_terms
    ).passed


def _ring_bytes(sent_over_model=4 / 3, workers=3, model_bytes=9.3e6):
    """``ring_worker_bytes`` as a run records it: at N = 3 a worker sends about 4/3 of the model."""
    return {"workers": workers, "model_bytes": model_bytes, "sent_per_step": sent_over_model * model_bytes}


def test_audit_003_passes_the_right_chunk_and_fails_the_readings_students_make():
    from labkit.grading.judge import rubric

    ring = _ring_bytes(1.37)  # a little framing over the 4/3 of the model
    right = {"workers": 3, "chunk_over_model": ring["sent_per_step"] / (4 / 3) / ring["model_bytes"]}
    assert checks.audit_003(right, ring).passed
    lab = rubric.load_rubric(NOTEBOOKS / "rubric.toml").labs["lab5"]
    check = next(c for c in lab.checks if c.name == "audit: report 003's 'Size of chunk'")
    records = {"ring_worker_bytes": {**ring, "sent_over_model": 1.37}}
    assert rubric.evaluate(check, None, {**records, "audit_003": right}).status == "pass"
    for wrong in (
        {"chunk_over_model": 1.37 / 2},  # the formula's "~ 2 x Size of chunk" taken at its word
        {"chunk_over_model": 1 / 3},  # the algorithm's chunk, M / N, whatever was measured
        {"chunk_over_model": 1.37},  # the bytes sent, over M
        {"chunk": 1.03},  # another key
    ):
        v = checks.audit_003(wrong, ring)
        assert v.failed and v.failed[0].startswith("chunk_over_model: the Size of chunk"), wrong
        assert not re.search(r"\d\.\d", verdicts.bundle(v)["text/plain"])
        assert rubric.evaluate(check, None, {**records, "audit_003": wrong}).status in ("fail", "missing"), wrong
