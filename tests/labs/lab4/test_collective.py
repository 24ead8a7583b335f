"""Lab 4's collectives between real processes: the reference averages and moves the cost model's bytes;
a wrong schedule and a dropped chunk fail the self-check, each naming the property it breaks; a
worker that raises, waits for a message never sent, or loops, ends the run with its log's tail; and
no worker outlives a run. No TensorFlow."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from labkit.labs.lab4 import collective, collective_model
from _collectives import reduce_scatter_loops
from labkit.labs.lab4.solution import all_gather, gather, reduce_scatter, scatter


def grads_of(world: int, values: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(values).astype(np.float32) for _ in range(world)]


def workers_alive() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "labkit.tasks.collective_worker" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(autouse=True)
def nothing_outlives():
    yield
    assert workers_alive() == [], "a collective's worker outlived its run"


# --- plausible wrong answers, as a student writes them ------------------------------------------


def reduce_scatter_wrong_schedule(rank, world, value, send, recv):
    """Sends chunk (rank + s) where the ring sends (rank - s): the sums land in the wrong chunks."""
    chunks = [c.copy() for c in np.array_split(value, world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    for s in range(world - 1):
        send(right, chunks[(rank + s) % world])
        chunks[(rank + s - 1) % world] += recv(left)
    return chunks[(rank + 1) % world] / world


def all_gather_dropped_chunk(rank, world, value, send, recv):
    """Stops one round early: every worker misses one chunk (it keeps zeros there)."""
    chunks = [np.zeros_like(c) for c in np.array_split(np.zeros(len(value) * world, value.dtype), world)]
    chunks[(rank + 1) % world] = value
    right, left = (rank + 1) % world, (rank - 1) % world
    for s in range(world - 2):
        send(right, chunks[(rank + 1 - s) % world])
        chunks[(rank - s) % world] = recv(left)
    return np.concatenate(chunks)


def gather_sum(rank, world, value, send, recv):
    """The sum where the average is due."""
    if rank != 0:
        send(0, value)
        return None
    total = value.copy()
    for src in range(1, world):
        total += recv(src)
    return total


def reduce_scatter_raises(rank, world, value, send, recv):
    if rank == 1:
        raise ValueError("worker one's chunk index is off")
    return value


def reduce_scatter_waits(rank, world, value, send, recv):
    """Every worker waits for a message its left neighbour never sends."""
    return recv((rank - 1) % world)


def reduce_scatter_impersonates(rank, world, value, send, recv):
    """Connects to the relay as its neighbour, to receive what the neighbour is sent."""
    import socket
    import struct
    import sys

    port = int(sys.argv[sys.argv.index("--port") + 1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(struct.pack("!Biiq", 0, (rank + 1) % world, 0, 4) + b"fake")
        return recv((rank - 1) % world)


# --- the reference --------------------------------------------------------------------------------


def test_the_reference_averages_and_moves_the_models_bytes(tmp_path):
    grads = grads_of(3, 1001)  # 3 does not divide 1001: uneven chunks
    run = collective.self_check(
        grads, ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter), folder=tmp_path
    )
    assert run is not None and run.verdict.passed, run.verdict.text() if run else "no run"
    assert collective_model.problems(run, grads) == []
    mean = np.mean(grads, axis=0)
    for phase in ("all-gather", "scatter"):
        for r in range(3):
            np.testing.assert_allclose(run.result(phase, r), mean, rtol=1e-5, atol=1e-6)
    size = 1001 * 4
    ring_sent = run.sent("reduce-scatter") + run.sent("all-gather")
    assert ring_sent.sum() == 2 * 2 * size  # every chunk crosses N-1 links in each phase
    assert np.all(np.abs(ring_sent - 2 * 2 / 3 * size) <= 2 * 2 * 4)  # 2(N-1)/N each, a value per chunk off
    assert run.received("gather")[0] == 2 * size and run.sent("scatter")[0] == 2 * size  # worker 0: the hot spot
    assert run.sent("gather")[0] == 0 and run.received("scatter")[0] == 0
    assert np.all(run.seconds > 0) and len(run.seconds) == 4
    frame = collective_model.table(run, mwms_bytes_per_worker=2.0 * size)
    summary = collective_model.per_worker(frame)
    assert summary.loc[("ring", 0), "model_sent_bytes"] == pytest.approx(2 * 2 / 3 * size)
    assert summary.loc[("gather/scatter", 0), "received_bytes"] == 2 * size
    assert (frame["collective"] == "MWMS (sweep)").sum() == 1
    assert (tmp_path / "worker-2.log").read_text().count("worker 2:") == 4  # one line per phase


def test_a_length_the_workers_do_not_divide_and_four_workers(tmp_path):
    grads = grads_of(4, 10_007, seed=3)
    run = collective.all_reduce(
        grads, ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter), folder=tmp_path
    )
    assert collective_model.problems(run, grads) == []
    assert run.link_bytes[run.index("all-gather")].sum() == 3 * 10_007 * 4


# --- wrong answers fail, each naming its property ---------------------------------------------------


def failed(run) -> str:
    assert run is not None and not run.verdict.passed
    return " | ".join(run.verdict.failed)


def test_a_wrong_schedule_fails_the_self_check(tmp_path):
    grads = grads_of(3, 300)
    run = collective.self_check(grads, ring=(reduce_scatter_wrong_schedule, all_gather), folder=tmp_path)
    why = failed(run)
    assert "reduce-scatter: worker w returns the average of chunk (w + 1) mod N" in why
    assert "ring: every worker ends with the average" in why
    assert "sends only to its right-hand neighbour" not in why  # it still talks to the right neighbour


def test_a_dropped_chunk_fails_the_self_check(tmp_path):
    grads = grads_of(3, 300)
    run = collective.self_check(grads, ring=(reduce_scatter, all_gather_dropped_chunk), folder=tmp_path)
    why = failed(run)
    assert "all-gather: each of the N chunks crosses N-1 links" in why and "they sent less" in why
    assert "ring: every worker ends with the average" in why
    assert "reduce-scatter" not in why


def test_a_sum_for_the_average_fails_the_self_check(tmp_path):
    grads = grads_of(3, 50)
    run = collective.self_check(grads, gather_scatter=(gather_sum, scatter), folder=tmp_path)
    why = failed(run)
    assert "gather: worker 0 returns the average" in why and "worker(s) 0 do not" in why


def test_no_message_shows_a_value_of_the_checker():
    grads = grads_of(3, 30)
    mean = np.mean(grads, axis=0)
    wrong = collective_model.CollectiveRun(
        3,
        30,
        4,
        ("ring",) * 2,
        ("reduce-scatter", "all-gather"),
        [[None] * 3, [mean * 3] * 3],
        np.tile(1 - np.eye(3, dtype=np.int64), (2, 1, 1)),
        np.ones((2, 3, 3), np.int64),
        np.ones(2),
    )  # fmt: skip  (every worker sent one byte to each other worker: a left-hand link too)
    text = " ".join(collective_model.problems(wrong, grads))
    assert "(bytes went 0 -> 2, 1 -> 0, 2 -> 1)" in text  # the links that are not the ring's
    assert "they sent less" in text and "worker(s) 0, 1, 2 do not" in text
    for number in (f"{mean[0]:.3}", "120", "80"):  # a value, the gradient's bytes, its (N-1)/N share
        assert number not in text


# --- failures are reported, with the worker's log ----------------------------------------------------


def test_a_worker_that_raises_is_named_with_its_log_tail(tmp_path):
    with pytest.raises(collective.CollectiveError) as e:
        collective.all_reduce(grads_of(3, 30), ring=(reduce_scatter_raises, all_gather), folder=tmp_path)
    assert e.value.rank == 1
    assert "worker 1 raised in reduce-scatter: ValueError: worker one's chunk index is off" in str(e.value)
    assert "Traceback" in e.value.log_tail and "reduce_scatter_raises" in e.value.log_tail


def test_the_self_check_reports_a_worker_that_raises(tmp_path, capsys):
    run = collective.self_check(grads_of(3, 30), ring=(reduce_scatter_raises, all_gather), folder=tmp_path)
    assert run is None
    out = capsys.readouterr().out
    assert "runs on 3 worker processes without an error (worker 1 raised in reduce-scatter" in out
    assert "worker 1's log" in out


def test_a_worker_waiting_for_a_message_never_sent_is_named(tmp_path):
    started = time.monotonic()
    with pytest.raises(collective.CollectiveError) as e:
        collective.all_reduce(
            grads_of(3, 30), ring=(reduce_scatter_waits, all_gather), folder=tmp_path, phase_timeout=4
        )
    assert time.monotonic() - started < 30
    assert "waited 3 s in reduce-scatter for a message from worker" in str(e.value)


def test_a_worker_that_loops_is_stopped_at_the_deadline(tmp_path):
    started = time.monotonic()
    with pytest.raises(collective.CollectiveError) as e:
        collective.all_reduce(
            grads_of(3, 30), ring=(reduce_scatter_loops, all_gather), folder=tmp_path, phase_timeout=3
        )
    assert time.monotonic() - started < 30
    assert "worker(s) 2 did not finish reduce-scatter in time" in str(e.value)
    assert "worker 2's log" in str(e.value)


def test_a_connection_without_a_workers_token_ends_the_run(tmp_path):
    with pytest.raises(collective.CollectiveError, match="said it was worker . without that worker's token"):
        collective.all_reduce(grads_of(3, 30), ring=(reduce_scatter_impersonates, all_gather), folder=tmp_path)
    assert not list(tmp_path.glob("*.npy"))  # no worker's gradient lies where another could read it


def test_bad_input_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="float32"):
        collective.all_reduce([np.zeros(5), np.zeros(5)], ring=(reduce_scatter, all_gather), folder=tmp_path)
    with pytest.raises(ValueError, match="same length"):
        collective.all_reduce(
            [np.zeros(5, np.float32), np.zeros(6, np.float32)], ring=(reduce_scatter, all_gather), folder=tmp_path
        )
    with pytest.raises(ValueError, match="pair of functions"):
        collective.all_reduce(grads_of(2, 4), ring=reduce_scatter, folder=tmp_path)
    with pytest.raises(ValueError, match="give ring="):
        collective.all_reduce(grads_of(2, 4), folder=tmp_path)


# --- the notebook's cell, as written and as released -----------------------------------------------


def notebook_functions(tmp_path, released: bool):
    """The notebook's collective cell (the reference, or the student kit's stubs) as a module."""
    import importlib.util

    import nbformat

    from labkit.grading.kit.release import release_notebook

    path = Path(__file__).parents[3] / "labkit" / "labs" / "lab4" / "04_lenet_batch_sweep.ipynb"
    nb = nbformat.read(path, as_version=4)
    if released:
        nb, _ = release_notebook(nb, path.name)
    (cell,) = [c for c in nb.cells if c.get("id") == "lab4-collective"]
    module = tmp_path / f"cell_{int(released)}.py"
    module.write_text("import numpy as np\n\n\n" + cell.source + "\n")
    spec = importlib.util.spec_from_file_location(module.stem, module)
    fns = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fns)
    return fns


def test_the_notebooks_cell_passes_and_the_released_stubs_are_named(tmp_path, capsys):
    nb = notebook_functions(tmp_path, released=False)
    grads = grads_of(3, 257)
    run = collective.self_check(
        grads, ring=(nb.reduce_scatter, nb.all_gather), gather_scatter=(nb.gather, nb.scatter), folder=tmp_path / "a"
    )
    assert run is not None and run.verdict.passed, run.verdict.text() if run else "no run"
    stub = notebook_functions(tmp_path, released=True)
    run = collective.self_check(grads, ring=(stub.reduce_scatter, stub.all_gather), folder=tmp_path / "b")
    assert run is None
    assert "raised in reduce-scatter: NotImplementedError" in capsys.readouterr().out


# --- the hidden check: the grader's cluster shape and gradients --------------------------------------

ARGS = {"seed": 52, "workers": 4, "values": 10_007}  # the rubric's: 4 workers, a length 4 does not divide


def hidden_verdict(fns: dict, folder: Path, **args):
    """The hidden check's probe (here, in this process) and judge, as the grader's two processes run them."""
    from labkit.grading.judge import hidden, probe

    check = hidden.HIDDEN["lab4_collective"]
    args = check.args({**ARGS, **args})
    return hidden.decide("lab4_collective", args, probe.outputs(check, fns, args, folder), folder)


def functions(**replace) -> dict:
    fns = {"reduce_scatter": reduce_scatter, "all_gather": all_gather, "gather": gather, "scatter": scatter}
    return {**fns, **replace}


def test_the_reference_passes_the_hidden_check(tmp_path):
    v = hidden_verdict(functions(), tmp_path)
    assert v.ok, v.reason


@pytest.mark.parametrize(
    "wrong, named",
    [
        ({"reduce_scatter": reduce_scatter_wrong_schedule}, "reduce-scatter: worker w returns the average of chunk"),
        ({"all_gather": all_gather_dropped_chunk}, "all-gather: each of the N chunks crosses N-1 links"),
        ({"gather": gather_sum}, "gather: worker 0 returns the average"),
    ],
)
def test_wrong_collectives_fail_the_hidden_check_naming_the_property(tmp_path, wrong, named):
    v = hidden_verdict(functions(**wrong), tmp_path)
    assert not v.ok and named in v.reason
    assert "every worker ends with the average" in v.reason


def test_the_graders_engines_run_the_notebooks_functions_and_report_the_released_stubs(tmp_path):
    """The probe engine on the notebook, in a process of its own as the sandbox runs it (the functions
    taken from its cells), then hidden.judge on what it wrote: the reference passes; the released
    notebook's stubs fail, named."""
    import json

    import nbformat

    from labkit.grading.judge import hidden, probe
    from labkit.grading.kit.release import release_notebook

    path = Path(__file__).parents[3] / "labkit" / "labs" / "lab4" / "04_lenet_batch_sweep.ipynb"
    released, _ = release_notebook(nbformat.read(path, as_version=4), path.name)
    nbformat.write(released, tmp_path / "student.ipynb")
    for notebook, passes in ((path, True), (tmp_path / "student.ipynb", False)):
        out = tmp_path / f"out-{passes}"
        out.mkdir()
        check = {
            "check": "lab4_collective",
            "functions": list(hidden.HIDDEN["lab4_collective"].functions),
            "args": ARGS,
        }
        spec = {"notebook": str(notebook), "out": str(out), "memory_bytes": 2**31, "checks": [check]}
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        ran = subprocess.run([sys.executable, probe.__file__, str(tmp_path / "spec.json")], timeout=120)
        assert ran.returncode == 0
        v = hidden.judge("lab4_collective", ARGS, out)
        assert v.ok is passes, v.reason
        if not passes:
            assert "raised in reduce-scatter: NotImplementedError" in v.reason


def test_the_hidden_check_refuses_a_run_of_another_shape(tmp_path):
    from labkit.grading.judge import hidden
    from labkit.labs.declare import Unverifiable

    arrays = collective.all_reduce(
        grads_of(3, 100), ring=(reduce_scatter, all_gather), gather_scatter=(gather, scatter), folder=tmp_path
    ).to_arrays()
    with pytest.raises(Unverifiable, match="does not match"):
        hidden.decide("lab4_collective", hidden.HIDDEN["lab4_collective"].args(ARGS), arrays, tmp_path)


def test_a_hung_worker_ends_the_hidden_checks_probe_in_its_phase_time(tmp_path):
    started = time.monotonic()
    with pytest.raises(collective.CollectiveError, match="in reduce-scatter for a message from worker"):
        hidden_verdict(functions(reduce_scatter=reduce_scatter_waits), tmp_path, timeout=3)
    assert time.monotonic() - started < 30


PARENT = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from _collectives import reduce_scatter_loops
from labkit.labs.lab4.solution import all_gather
from labkit.labs.lab4 import collective
grads = [np.ones(30, np.float32)] * 3
collective.all_reduce(grads, ring=(reduce_scatter_loops, all_gather), folder={folder!r}, phase_timeout=300)
"""


def test_workers_die_with_a_parent_killed_mid_run(tmp_path):
    """SIGKILL runs no cleanup in the parent: its workers still go (the kernel's parent-death signal)."""
    import signal

    code = PARENT.format(tests=str(Path(__file__).parents[2]), folder=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:

        def ours() -> list[psutil.Process]:
            found = []
            for p in psutil.process_iter():
                try:
                    if str(tmp_path) in " ".join(p.cmdline()) and "collective_worker" in " ".join(p.cmdline()):
                        found.append(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            return found

        deadline = time.monotonic() + 60
        while len(ours()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ours()) == 3, "the workers did not start"
        time.sleep(0.5)  # worker 2 is in its loop
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ours() == []
    finally:
        parent.kill()
        parent.wait(10)
