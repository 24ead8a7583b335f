"""The probe runs each hidden check in a process of its own and writes every output itself, so one
check's functions cannot reach what another check measures or returned: a Lab 4 notebook whose
ring_allreduce replaces the collective check's runner in its process, and whose identical_pairs
writes a right-looking ring result over the probe's, earns neither (the probe run as the grader
starts it, in a process of its own; the judge here): three check processes and four workers, a few seconds."""

import inspect
import json
import resource
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.grading.judge import hidden
from labkit.labs.lab4 import solution

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {"lab4_ring_allreduce": {"seed": 4}, "lab4_identical_pairs": {}, "lab4_collective": {"seed": 52}}

NOTEBOOK = '''
import numpy as np


def ring_allreduce(grads):
    """Wrong bytes (a parameter server's); and it swaps the collective check's runner for one that
    runs a right gather in place of the student's, in whatever process calls it."""
    import labkit.labs.lab4.collective as c

    original = c.all_reduce

    def forged(grads, ring=None, gather_scatter=None, **options):
        return original(grads, ring=ring, gather_scatter=(right_gather, gather_scatter[1]), **options)

    c.all_reduce = forged
    return [np.sum(grads, axis=0)] * len(grads), [2 * g.nbytes for g in grads]


def identical_pairs(workers, batch_sizes):
    """Right, and it writes a right-looking ring_allreduce result where the probe keeps its outputs."""
    import sys, json
    from pathlib import Path
    from labkit.labs.lab4 import checks

    spec = json.loads(Path(sys.argv[sys.argv.index("--check") + 1]).read_text())
    out = Path(spec["out"])
    args = next(c["args"] for c in spec["checks"] if c["check"] == "lab4_ring_allreduce")
    arrays = {}
    for t, case in enumerate(checks.inputs_ring_allreduce(**args)):
        g = np.stack(case["grads"])
        n, size = g.shape
        chunk = [len(c) * 4 for c in np.array_split(np.zeros(size), n)]
        arrays[f"{t}_sums"] = np.stack([g.astype(np.float64).sum(axis=0)] * n)
        arrays[f"{t}_sent"] = np.asarray(
            [sum(chunk[(w - s) % n] + chunk[(w + 1 - s) % n] for s in range(n - 1)) for w in range(n)], np.float64
        )
        arrays[f"{t}_given"] = g
    np.savez(out / "lab4_ring_allreduce.npz", **arrays)
    (out / "status.json").write_text(json.dumps({"lab4_ring_allreduce": {"ok": True}}))
    counts = {}
    for w in workers:
        for b in batch_sizes:
            counts[w * b] = counts.get(w * b, 0) + 1
    return sum(k * (k - 1) // 2 for k in counts.values())


def gather(rank, world, value, send, recv):
    """Wrong: worker 0 returns the sum, not the average."""
    if rank != 0:
        send(0, value)
        return None
    total = value.copy()
    for src in range(1, world):
        total += recv(src)
    return total

'''
# the right collectives, the reference's own (right_gather is its gather, for the forged runner above)
NOTEBOOK += "\n\n".join(
    [inspect.getsource(f) for f in (solution.reduce_scatter, solution.all_gather, solution.scatter)]
    + [inspect.getsource(solution.gather).replace("def gather(", "def right_gather(", 1)]
)


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Path:
    """The probe's output folder, written by ``probe.main`` in a process of its own."""
    folder = tmp_path_factory.mktemp("isolation")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK)]), folder / "nb.ipynb")
    checks = [
        {"check": name, "functions": list(hidden.HIDDEN[name].functions), "args": hidden.HIDDEN[name].args(args)}
        for name, args in CHECKS.items()
    ]
    spec = {"notebook": str(folder / "nb.ipynb"), "out": str(folder), "memory_bytes": resource.RLIM_INFINITY}
    (folder / "spec.json").write_text(json.dumps({**spec, "checks": checks}))
    driver = "import sys\nfrom labkit.grading.judge import probe\nprobe.main([sys.argv[1]])\n"
    run = subprocess.run(
        [sys.executable, "-c", driver, str(folder / "spec.json")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return folder


def verdict(folder: Path, name: str):
    return hidden.judge(name, CHECKS[name], folder)


def test_a_later_checks_code_cannot_write_an_earlier_checks_result(probed):
    v = verdict(probed, "lab4_ring_allreduce")
    assert not v.ok and "the workers sent" in v.reason, v.reason
    assert verdict(probed, "lab4_identical_pairs").ok  # its own answer is right, and judged


def test_an_earlier_checks_code_cannot_replace_what_a_later_check_runs(probed):
    v = verdict(probed, "lab4_collective")
    assert not v.ok and "gather: worker 0 returns the average" in v.reason, v.reason


def test_the_probe_leaves_only_its_outputs(probed):
    names = {p.name for p in probed.iterdir()}
    assert {f"{c}.npz" for c in CHECKS} | {"status.json"} <= names and ".checks" in names
    assert not list((probed / ".checks").iterdir())  # each check's own folder, read and removed


def test_a_check_that_writes_then_hangs_is_stopped_and_its_writes_undone(tmp_path):
    """The grader stops a probe past its time with SIGTERM: the probe kills the hanging check's
    process and writes every finished check's output again, over what the hanging code wrote."""
    import os
    import signal
    import time

    import psutil

    hang = "    (out / 'forged').write_text(str(os.getpid()))\n    time.sleep(600)\n    counts = {}\n"
    source = NOTEBOOK.replace("    counts = {}\n", hang).replace("import sys, json\n", "import sys, json, os, time\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), tmp_path / "nb.ipynb")
    names = ["lab4_ring_allreduce", "lab4_identical_pairs"]
    checks = [
        {"check": n, "functions": list(hidden.HIDDEN[n].functions), "args": hidden.HIDDEN[n].args(CHECKS[n])}
        for n in names
    ]
    spec = {"notebook": str(tmp_path / "nb.ipynb"), "out": str(tmp_path), "memory_bytes": resource.RLIM_INFINITY}
    (tmp_path / "spec.json").write_text(json.dumps({**spec, "checks": checks}))
    driver = "import sys\nfrom labkit.grading.judge import probe\nprobe.main([sys.argv[1]])\n"
    proc = subprocess.Popen([sys.executable, "-c", driver, str(tmp_path / "spec.json")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "forged").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        hanging = int((tmp_path / "forged").read_text())
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        proc.kill()
    assert not psutil.pid_exists(hanging) or psutil.Process(hanging).status() == psutil.STATUS_ZOMBIE
    v = verdict(tmp_path, "lab4_ring_allreduce")
    assert not v.ok and "the workers sent" in v.reason, v.reason
    assert "lab4_identical_pairs" not in json.loads((tmp_path / "status.json").read_text())
