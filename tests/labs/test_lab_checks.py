"""Hidden checks are declared in their labs' folders and run by engines that name no lab: every
rubric check is found by discovery, a new lab folder's check runs with no edit elsewhere, nothing
the sandbox runs imports a solution, and the student kit has the checks but no lab's solution."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from labkit.grading.judge import hidden, probe
from labkit.grading.kit.release import student_package
from labkit.labs import declare

REPO = Path(__file__).resolve().parents[2]
LABS = sorted(p.parent.name for p in (REPO / "labkit" / "labs").glob("lab*/__init__.py"))


def test_the_engines_name_no_lab():
    for engine in ("probe.py", "hidden.py"):
        text = (REPO / "labkit" / "grading" / "judge" / engine).read_text()
        assert not re.findall(r"\blab\d|\bLab \d", text), engine
        assert not any(lab in text for lab in LABS), engine


def test_every_hidden_check_of_the_rubric_is_declared_in_its_labs_folder():
    from labkit.grading.judge.rubric import load_rubric

    labs = load_rubric(REPO / "notebooks" / "rubric.toml").labs.values()
    named = {c.spec["check"] for lab in labs for c in lab.checks if c.kind == "hidden"}
    assert len(LABS) >= 5 and named and named <= set(hidden.HIDDEN)
    for name in hidden.HIDDEN:
        check = hidden.HIDDEN[name]
        lab = check.cases.__module__.split(".")[2]
        assert name.startswith(lab + "_") and check.cases.__module__ == f"labkit.labs.{lab}.checks", name


def test_a_new_lab_folder_is_found_and_judged_with_no_edit_elsewhere(tmp_path, monkeypatch):
    """A lab ``labx`` in a folder of its own: its declaration is discovered, the engines probe a
    student's function on its cases and judge it against the lab's solution, imported in the judge only."""
    import labkit.labs

    lab = tmp_path / "labx"
    lab.mkdir()
    (lab / "__init__.py").write_text('"""A lab made by a test."""\n')
    (lab / "solution.py").write_text("def double(x):\n    return 2 * x\n")
    (lab / "checks.py").write_text(
        textwrap.dedent("""\
        from labkit.labs.declare import Numbers, declare, solution

        def inputs(seed=0, cases=5):
            return [{"x": float(seed + i)} for i in range(int(cases))]

        declare("labx_double", ["double"], inputs, numbers=Numbers(
            "y", solution("labkit.labs.labx.solution:double"), 1e-9, 1e-9,
            lambda case, mine: f"double(x={case['x']}) is {mine:g}", order=("x",), what="twice x"))
        """)
    )
    monkeypatch.setattr(labkit.labs, "__path__", [*labkit.labs.__path__, str(tmp_path)])
    try:
        _judge_the_new_lab(tmp_path)
    finally:
        declare.CHECKS.pop("labx_double", None)
        for name in [m for m in sys.modules if m.startswith("labkit.labs.labx")]:
            del sys.modules[name]


def _judge_the_new_lab(tmp_path):
    assert "labx_double" not in hidden.HIDDEN and hidden.HIDDEN is declare.discover()
    assert "labx_double" in hidden.HIDDEN and "lab1_sgd_step" in hidden.HIDDEN
    check = hidden.HIDDEN["labx_double"]
    right = probe.outputs(check, {"double": lambda x: x + x}, {"seed": 3}, tmp_path)
    assert right["y"].tolist() == [6.0, 8.0, 10.0, 12.0, 14.0]
    assert hidden.decide("labx_double", {"seed": 3}, right, tmp_path).ok
    wrong = hidden.decide("labx_double", {"seed": 3}, {"y": right["y"] + 1}, tmp_path)
    assert not wrong.ok and wrong.reason == "double(x=3.0) is 7"
    short = hidden.decide("labx_double", {"seed": 3}, {"y": np.zeros(2)}, tmp_path)
    assert short.reason == "double gave 2 answers for 5 cases"


def test_the_sandboxs_side_imports_no_solution(tmp_path):
    """Discovery and every declared probe's module load without a lab's solution: the probe runs
    in a view of the kit that has none."""
    code = textwrap.dedent("""\
        import sys
        from labkit.labs import declare
        checks = declare.discover()
        print(len(checks), sorted(m for m in sys.modules if m.endswith(".solution")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    count, loaded = out.stdout.split(" ", 1)
    assert int(count) == len(hidden.HIDDEN) and loaded.strip() == "[]"


def test_the_student_kit_has_every_labs_checks_and_no_solution(tmp_path):
    kit = student_package(tmp_path)
    assert sorted(p.parent.name for p in kit.glob("labs/*/checks.py")) == LABS
    assert not list(kit.rglob("solution.py")) and not (kit / "grading").exists()
    student = textwrap.dedent(f"""\
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]
        sys.path.insert(0, {str(tmp_path)!r})
        from labkit.labs import declare
        print(len(declare.discover()))
        for lab in {LABS!r}:
            try:
                __import__(f"labkit.labs.{{lab}}.solution")
                print("imported", lab)
            except ModuleNotFoundError:
                pass
    """)
    out = subprocess.run([sys.executable, "-c", student], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(hidden.HIDDEN))]


def test_a_declaration_needs_a_probe_and_a_judge_and_a_name_of_its_own():
    with pytest.raises(ValueError, match="neither a probe and a judge nor Numbers"):
        declare.Check("labx_half", ("f",), dict, probe=lambda fns, args, out: {})
    with pytest.raises(ValueError, match="'lab1_sgd_step' is declared twice: in labkit.labs.lab1.checks and"):
        declare.declare("lab1_sgd_step", ["f"], lambda seed=0: [], probe=dict, judge=dict)
    assert hidden.HIDDEN["lab1_sgd_step"].cases.__module__ == "labkit.labs.lab1.checks"
