"""Lab 4's hidden ``ring_allreduce`` check is decided outside the student's process: the probe (a
process of its own, as the grader starts it) writes the sums, the bytes and the gradients as the
function left them; the judge, here, where no student code ran, compares each with its own
rebuilt cases. A function that replaces NumPy's comparisons or the check's own functions in its
process changes no verdict: a ring that sums into its inputs still fails, a right one still passes."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.grading.judge import hidden

ARGS = {"seed": 4}  # the rubric's
ROOT = Path(__file__).resolve().parents[3]

RING = '''
import numpy as np

def ring_allreduce(grads):
    """The ring's sums and its schedule's bytes, summed by hand; ATTACK as below."""
    import sys
    ATTACK
    n = len(grads)
    sizes = [len(c) * 4 for c in np.array_split(grads[0], n)]
    sent = [sum(sizes[(w - s) % n] + sizes[(w + 1 - s) % n] for s in range(n - 1)) for w in range(n)]
    total = grads[0] if IN_PLACE else grads[0].copy()
    for g in grads[1:]:
        total += g
    return [total.copy() for _ in grads], sent
'''
PATCHES = """for name in ("array_equal", "allclose", "array_equiv"):
        setattr(np, name, lambda *a, **k: EQUAL)  # every comparison in this process answers EQUAL
    checks = sys.modules.get("labkit.labs.lab4.checks")
    if checks is not None:  # the check's own judge, as this process holds it
        checks.judge_ring_allreduce = lambda *a, **k: None"""
STEPS = {
    "in_place": RING.replace("ATTACK", "pass").replace("IN_PLACE", "True"),
    "in_place_patched": RING.replace("ATTACK", PATCHES.replace("EQUAL", "True")).replace("IN_PLACE", "True"),
    "right": RING.replace("ATTACK", "pass").replace("IN_PLACE", "False"),
    "right_patched": RING.replace("ATTACK", PATCHES.replace("EQUAL", "False")).replace("IN_PLACE", "False"),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    """Each ring's probe output folder, written by ``probe.main`` in a process of its own."""
    root = tmp_path_factory.mktemp("ring")
    specs, folders = [], {}
    h = hidden.HIDDEN["lab4_ring_allreduce"]
    for name, source in STEPS.items():
        folder = folders[name] = root / name
        folder.mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), folder / "nb.ipynb")
        check = {"check": h.name, "functions": list(h.functions), "args": h.args(ARGS)}
        spec = {"notebook": str(folder / "nb.ipynb"), "out": str(folder), "memory_bytes": resource.RLIM_INFINITY}
        (folder / "spec.json").write_text(json.dumps({**spec, "checks": [check]}))
        specs.append(str(folder / "spec.json"))
    driver = "import sys\nfrom labkit.grading.judge import probe\nfor s in sys.argv[1:]:\n    probe.main([s])\n"
    run = subprocess.run([sys.executable, "-c", driver, *specs], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return folders


def verdict(folder):
    return hidden.judge("lab4_ring_allreduce", ARGS, folder)


@pytest.mark.parametrize("name", ["in_place", "in_place_patched"])
def test_a_ring_that_sums_into_its_inputs_fails_whatever_it_patches(probed, name):
    v = verdict(probed[name])
    assert not v.ok and "changed the gradients it was given" in v.reason, v.reason


@pytest.mark.parametrize("name", ["right", "right_patched"])
def test_a_right_ring_passes_whatever_it_patches(probed, name):
    v = verdict(probed[name])
    assert v.ok, v.reason
