"""Grading without kernels: the rubric (validation, every check kind, partial credit), record
lookups, the release transformation, notebook readability, and the reports."""

from __future__ import annotations

import textwrap

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from helpers import cell, read_csv
from labkit.grading.kit import release
from labkit.grading.gradebook import report
from labkit.grading.judge.rubric import Missing, RubricError, evaluate, load_rubric, lookup
from labkit.grading.run.runner import check_readable, source_index
from labkit.grading.judge import verify
from labkit.notebook.record import MIME, cell_tags

RUBRIC = """
[defaults]
cell_timeout = 30
[labs.a]
notebook = "a.ipynb"
title = "Lab A"
memory_mb = 512
[labs.a.parameters]
epochs = 2
[[labs.a.checks]]
name = "has acc"
kind = "record"
points = 1
records = ["acc", "loss"]
[[labs.a.checks]]
name = "acc high"
kind = "threshold"
points = 4
record = "acc"
min = 0.9
partial_min = 0.5
[[labs.a.checks]]
name = "sync steps equal"
kind = "all_equal"
points = 1
record = "steps"
[[labs.a.checks]]
name = "async steps add up"
kind = "sum_equals"
points = 1
record = "local"
total = "global"
[[labs.a.checks]]
name = "ring cheaper"
kind = "compare"
points = 1
left = "bytes.ring"
op = "<"
right = "bytes.ps"
[[labs.a.checks]]
name = "plots"
kind = "figures"
points = 2
cells = ["fig-a", "fig-b"]
[[labs.a.checks]]
name = "answers"
kind = "analysis"
points = 2
"""


def write(tmp_path, text, name="rubric.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def record_output(name, value):
    return new_output("display_data", data={MIME: {"name": name, "value": value}, "text/plain": name})


def png(width=320, height=240) -> str:
    """A real PNG of that size, base64 as a notebook stores it."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 80, 40)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def notebook(records: dict, figs=("fig-a", "fig-b"), answers=("A long enough answer here.",), image=None):
    png_out = new_output("display_data", data={"image/png": image or png(), "text/plain": ""})
    return new_notebook(
        cells=[
            new_code_cell("x = 1", outputs=[record_output(k, v) for k, v in records.items()]),
            *(cell("plot()", [tag], outputs=[png_out]) for tag in figs),
            *(cell(a, ["analysis"], markdown=True) for a in answers),
        ]
    )


GOOD = {
    "acc": 0.95,
    "loss": 0.2,
    "steps": [10, 10, 10],
    "local": {"w0": 7, "w1": 5},
    "global": 12,
    "bytes": {"ring": 1.0, "ps": 2.0},
}


def scores(rub, nb, records):
    """Every check's score; the analysis answers as they stand before a TA has scored them."""
    from labkit.grading.judge import answers

    lab = rub.labs["a"]
    qs = answers.questions(lab, None)
    found = answers.locate(nb, qs)
    return {
        c.name: answers.score(qs[c.name], found[c.name], None) if c.manual else evaluate(c, nb, records)
        for c in lab.checks
    }


def test_rubric_loads_with_defaults_and_overrides(tmp_path):
    rub = load_rubric(write(tmp_path, RUBRIC))
    lab = rub.labs["a"]
    assert (lab.cell_timeout, lab.memory_mb, lab.notebook_timeout) == (30.0, 512.0, 900.0)
    assert lab.parameters == {"epochs": 2} and lab.max_points == 12 and rub.lab_for("a.ipynb") is lab


def test_every_kind_passes_on_a_good_notebook(tmp_path):
    rub = load_rubric(write(tmp_path, RUBRIC))
    got = scores(rub, notebook(GOOD), GOOD)
    assert {n: s.status for n, s in got.items()} == {**dict.fromkeys(got, "pass"), "answers": "pending"}
    assert sum(s.points for s in got.values()) == rub.labs["a"].max_points - 2  # the answers await a TA


def test_failures_and_partial_credit(tmp_path):
    rub = load_rubric(write(tmp_path, RUBRIC))
    bad = {"acc": 0.7, "steps": [10, 9, 10], "local": [7, 4], "global": 12, "bytes": {"ring": 3, "ps": 2}}
    got = scores(rub, notebook(bad, figs=["fig-a"], answers=["YOUR ANSWER HERE", "short", "x" * 30]), bad)
    assert (got["has acc"].status, got["has acc"].points) == ("partial", 0.5)
    assert "missing: 'loss'" in got["has acc"].reason
    assert (got["acc high"].status, got["acc high"].points) == ("partial", 2.0)  # halfway from 0.5 to 0.9
    assert "below 0.9" in got["acc high"].reason
    assert got["sync steps equal"].status == "fail" and "[10, 9, 10]" in got["sync steps equal"].reason
    assert got["async steps add up"].status == "fail" and "= 11" in got["async steps add up"].reason
    assert got["ring cheaper"].status == "fail" and "bytes.ring < bytes.ps" in got["ring cheaper"].reason
    assert (got["plots"].status, got["plots"].points) == ("partial", 1.0)
    assert "no cell tagged 'fig-b'" in got["plots"].reason
    a = got["answers"]  # length earns nothing: a TA reads what is there (the placeholder is left out)
    assert (a.status, a.points) == ("pending", 0.0) and a.value == answers_sha("short\n\n" + "x" * 30)


def answers_sha(text):
    from labkit.grading.judge.answers import answer_sha

    return answer_sha(text)


def test_null_tags_in_a_submission_are_no_tags(tmp_path):
    """Jupyter front ends can save ``"tags": null``; the checks read that as untagged."""
    rub = load_rubric(write(tmp_path, RUBRIC))
    nb = notebook(GOOD)
    nb.cells[1].metadata["tags"] = None  # the fig-a cell
    nb.cells.insert(0, new_code_cell("epochs = 9"))
    nb.cells[0].metadata["tags"] = None  # (new_code_cell would refuse it: nbformat validates)
    got = scores(rub, nb, GOOD)
    assert (got["plots"].status, got["plots"].points) == ("partial", 1.0)
    assert "no cell tagged 'fig-a'" in got["plots"].reason


def test_a_check_that_breaks_on_a_notebook_costs_that_row_not_the_batch(tmp_path, monkeypatch):
    from labkit.grading.judge import scoring
    from labkit.grading.run.runner import Job, RunResult

    rub = load_rubric(write(tmp_path, RUBRIC))
    executed = tmp_path / "a.ipynb"
    nbformat.write(notebook(GOOD), str(executed))
    job = Job("s", rub.labs["a"], executed, executed, tmp_path, tmp_path / "log")
    real = scoring.evaluate

    def evaluate(check, nb, records):
        if check.name == "ring cheaper":
            raise KeyError("bytes")
        return real(check, nb, records)

    monkeypatch.setattr(scoring, "evaluate", evaluate)
    rows = scoring.score(job, RunResult("ok")).rows
    by = {r["check"]: r for r in rows}
    assert by["ring cheaper"]["status"] == "grader-error" and by["ring cheaper"]["points"] == 0
    assert by["ring cheaper"]["reason"] == "the grader could not check this notebook: KeyError: 'bytes'"
    assert by["acc high"]["status"] == "pass" and by["answers"]["status"] == "pending"


def test_missing_records_are_their_own_status(tmp_path):
    rub = load_rubric(write(tmp_path, RUBRIC))
    got = scores(rub, notebook({}, figs=[], answers=[]), {})
    assert got["acc high"].status == "missing" and "record 'acc' not found" in got["acc high"].reason
    assert got["has acc"].status == "missing"
    assert got["answers"].status == "pending" and "no cell tagged 'analysis'" in got["answers"].reason


def test_threshold_below_partial_floor_and_tolerances(tmp_path):
    rub = load_rubric(
        write(
            tmp_path,
            RUBRIC
            + """
[[labs.a.checks]]
name = "close enough"
kind = "all_equal"
points = 1
record = "steps"
tolerance = 0.2
""",
        )
    )
    recs = {**GOOD, "acc": 0.4, "steps": [10, 9, 11]}
    got = scores(rub, notebook(recs), recs)
    assert (got["acc high"].status, got["acc high"].points) == ("fail", 0.0)
    assert got["close enough"].status == "pass" and got["sync steps equal"].status == "fail"


def test_lookup_paths():
    recs = {"h": {"acc": [0.1, 0.5]}, "a.b": 3, "n": None}
    assert lookup(recs, "h.acc.-1") == 0.5 and lookup(recs, "a.b") == 3
    for ref, msg in [("h.loss", "no 'loss'"), ("zz", "not found"), ("n", "null"), ("h.acc.5", "no '5'")]:
        with pytest.raises(Missing, match=msg):
            lookup(recs, ref)


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('kind = "threshold"', 'kind = "histogram"', "kind must be one of"),
        ("min = 0.9\npartial_min = 0.5", "", "a threshold needs min and/or max"),
        ("points = 4", "points = 0", "points must be a positive number"),
        ("points = 4", 'points = 4\nverify = "no_such_verifier"', "unknown verifier 'no_such_verifier'"),
        ("points = 4", 'points = 4\ncolour = "red"', "unknown key(s) ['colour']"),
        ("partial_min = 0.5", "partial_min = 0.95", "partial_min needs a min above it"),
        ('left = "bytes.ring"', "left = 3", "left must be a record name"),
        ('name = "plots"', 'name = "acc high"', "two checks are named 'acc high'"),
        ('cells = ["fig-a", "fig-b"]', 'cells = ["fig-a", "fig-b"]\nmin = 0', "min is the number of figures"),
        ("memory_mb = 512", 'memory_mb = 512\nexpected_s = "long"', "expected_s must be the seconds a run takes"),
    ],
)
def test_rubric_errors_name_what_to_fix(tmp_path, old, new, message):
    assert old in RUBRIC
    with pytest.raises(RubricError) as e:
        load_rubric(write(tmp_path, RUBRIC.replace(old, new, 1)))
    assert message in str(e.value) and "[labs.a]" in str(e.value)


def test_rubric_file_errors(tmp_path):
    with pytest.raises(RubricError, match="not found"):
        load_rubric(tmp_path / "nope.toml")
    with pytest.raises(RubricError, match="not valid TOML"):
        load_rubric(write(tmp_path, "[labs.a\n"))
    with pytest.raises(RubricError, match="unknown key 'cell_timout'"):
        load_rubric(write(tmp_path, "[defaults]\ncell_timout = 3\n"))
    with pytest.raises(RubricError, match="notebook must be a file name"):
        load_rubric(write(tmp_path, '[labs.a]\nnotebook = "a.py"\n'))


def test_the_repo_rubric_is_valid():
    from pathlib import Path

    import ast

    rub = load_rubric(Path(__file__).parents[2] / "notebooks" / "rubric.toml")
    for lab in rub.labs.values():
        path = lab.reference(Path(__file__).parents[2] / "notebooks")
        assert lab.checks and path.exists(), lab.notebook
        # papermill injects any name; one the parameters cell never sets changes nothing it claims to pin
        cell = next(c for c in nbformat.read(str(path), as_version=4).cells if "parameters" in cell_tags(c))
        names = {
            t.id
            for node in ast.parse(cell.source).body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        assert set(lab.parameters) <= names, (lab.key, sorted(set(lab.parameters) - names))


# ---------------------------------------------------------------------------------------------
# release


def test_strip_solutions_keeps_indentation_and_plumbing():
    src = "def step(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\nprint(step)"
    out, n = release.strip_solutions(src, code=True, where="t")
    assert n == 1
    assert out == "def step(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\nprint(step)"
    md, n = release.strip_solutions("Q?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", code=False, where="t")
    assert (md, n) == ("Q?\nYOUR ANSWER HERE", 1)


@pytest.mark.parametrize(
    "src, msg",
    [
        ("### BEGIN SOLUTION\nx", "without ### END"),
        ("x\n### END SOLUTION", "without a ### BEGIN"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION", "a second"),
    ],
)
def test_unbalanced_markers_are_errors(src, msg):
    with pytest.raises(ValueError, match=msg):
        release.strip_solutions(src, code=True, where="lab.ipynb cell 4")


def test_release_notebook_clears_outputs_and_drops_solution_only_cells(tmp_path):
    cells = [
        cell(
            "a = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION",
            execution_count=3,
            outputs=[new_output("stream", name="stdout", text="hi")],
        ),
        cell("check_my_solution()", ["solution-only"]),
        cell("A model answer, long enough.", ["analysis"], markdown=True),
    ]
    cells[0].metadata.papermill = {"duration": 1}
    (tmp_path / "nb").mkdir()
    nbformat.write(new_notebook(cells=cells), str(tmp_path / "nb" / "x.ipynb"))
    (tmp_path / "nb" / "rubric.toml").write_text(  # the kit's public rubric is made from it
        '[labs.x]\nnotebook = "x.ipynb"\n[[labs.x.checks]]\nname = "answer"\npoints = 1\nkind = "analysis"\n'
    )
    [(dest, regions)] = release.release(tmp_path / "nb", tmp_path / "rel", log=lambda m: None)
    nb = nbformat.read(str(dest), as_version=4)
    assert regions == 3 and len(nb.cells) == 2
    assert nb.cells[0].source == "a = 1\n# YOUR CODE HERE\nraise NotImplementedError()"
    assert nb.cells[0].outputs == [] and nb.cells[0].execution_count is None and "papermill" not in nb.cells[0].metadata
    assert nb.cells[1].source == "YOUR ANSWER HERE" and nb.cells[1].metadata.tags == ["analysis"]


def test_the_student_kit_leaves_out_the_solutions_and_the_grader(tmp_path):
    """``make release``: notebooks, the package without the labs' solutions and labkit.grading, and the
    project files; in it the kit's references say what to pass instead, and grading is no command."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).parents[2]
    written = release.release(repo / "notebooks", tmp_path / "kit", log=lambda m: None)
    kit = tmp_path / "kit"
    assert {p.name for p, _ in written} == {p.name for p in (repo / "labkit" / "labs").glob("*/*.ipynb")}
    assert all(p.parent == kit / "notebooks" for p, _ in written)
    assert (kit / "labkit" / "learning" / "lr.py").is_file() and (kit / "pyproject.toml").is_file()
    assert not (kit / "labkit" / "grading").exists() and (kit / "labkit" / "labs" / "lab1" / "checks.py").is_file()
    labs = sorted(p.name for p in (repo / "labkit" / "labs").glob("lab*/solution.py"))
    assert labs and not list((kit / "labkit" / "labs").glob("*/solution.py"))  # no lab's reference answers
    assert not list(kit.rglob("__pycache__"))
    # as a student's install: the kit first on the path, this checkout's editable finder gone
    student = (
        f"import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        f"sys.path.insert(0, {str(kit)!r})\n"
    )
    probe = (
        student
        + "import labkit, labkit.learning.lr as lr, labkit.learning.costmodel as cm, labkit.core.reference as ref\n"
        "print(labkit.__file__)\n"
        "for get in (lambda: lr.sgd_step, lambda: cm.critical_path('ring', 1, 2),\n"
        "            lambda: ref.solution('lab3', 'sparse_gradient', 'gradient=sparse_lr_gradient')):\n"
        "    try:\n        get()\n    except LookupError as e:\n        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == str(kit / "labkit" / "__init__.py")
    assert "not part of the student kit; pass step=sgd_step" in lines[1]
    assert "not part of the student kit; pass terms=comm_terms" in lines[2]
    assert "not part of the student kit; pass gradient=sparse_lr_gradient" in lines[-1]
    graded = subprocess.run(
        [sys.executable, "-c", student + "from labkit.cli import main\nsys.exit(main(['grade']))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert graded.returncode == 2 and "invalid choice: 'grade'" in graded.stderr  # not a command of this kit


# ---------------------------------------------------------------------------------------------
# runner helpers that need no kernel


def test_check_readable(tmp_path):
    cases = {"bad.ipynb": '{"cells": [', "list.ipynb": "[1, 2]", "bin.ipynb": b"\xff\xfe\x00"}
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert "invalid JSON" in check_readable(tmp_path / "bad.ipynb")
    assert "not a version-4 notebook" in check_readable(tmp_path / "list.ipynb")
    assert "not UTF-8" in check_readable(tmp_path / "bin.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell("1")]), str(tmp_path / "ok.ipynb"))
    assert check_readable(tmp_path / "ok.ipynb") is None


def test_source_index_undoes_the_injected_parameters_cell(tmp_path):
    params = cell("n = 1", ["parameters"])
    nbformat.write(
        new_notebook(cells=[new_code_cell("import x"), params, new_code_cell("y")]), str(tmp_path / "a.ipynb")
    )
    # executed: 0 import, 1 parameters, 2 injected, 3 y
    assert [source_index(tmp_path / "a.ipynb", i) for i in range(4)] == [0, 1, None, 2]
    nbformat.write(new_notebook(cells=[new_code_cell("import x")]), str(tmp_path / "b.ipynb"))
    assert [source_index(tmp_path / "b.ipynb", i) for i in range(2)] == [None, 0]  # injected at the top


def test_task_steps_reads_result_files_and_skips_hello_files(tmp_path):
    """The documented glob ``worker-*.json`` also matches the tasks' ``worker-N.hello.json``
    start-up files (no step counts in them); they must not make the check unverifiable."""
    import json

    run = tmp_path / "runs" / "lab2" / "r1"
    run.mkdir(parents=True)
    for i, steps in enumerate((7, 5)):
        (run / f"worker-{i}.json").write_text(json.dumps({"task": f"worker:{i}", "steps": {"local": steps}}))
        (run / f"worker-{i}.hello.json").write_text(json.dumps({"task": f"worker:{i}", "pid": 1}))
    (run / "ps-0.json").write_text(json.dumps({"task": "ps:0", "steps": {"global_final": 12}}))
    spec = {"name": "task_steps", "results": "{run_dir}/worker-*.json", "field": "steps.local", "key": "task"}

    def check(claimed):
        records = {"run_dir": "runs/lab2/r1", "steps": claimed}
        return verify.run(spec, verify.Context(workdir=tmp_path, records=records, params={}, claimed=claimed))

    assert check({"worker:0": 7, "worker:1": 5}) == verify.Verdict(True, value={"worker:0": 7, "worker:1": 5})
    bad = check({"worker:0": 7, "worker:1": 6})
    assert not bad.ok and "task result files say {'worker:0': 7, 'worker:1': 5}" in bad.reason
    for f in run.glob("worker-?.json"):
        f.unlink()
    with pytest.raises(verify.Unverifiable, match="no task result files match"):
        check({"worker:0": 7})


# ---------------------------------------------------------------------------------------------
# reports


def test_reports(tmp_path):
    rows = [
        {
            "student": "al|ce",
            "lab": "a",
            "check": "execution",
            "points": 0.0,
            "max": 0.0,
            "status": "error",
            "reason": "cell 3 raised ValueError: boom",
            "seconds": 4.2,
        },
        {
            "student": "al|ce",
            "lab": "a",
            "check": "acc",
            "points": 1.5,
            "max": 2.0,
            "status": "partial",
            "reason": "acc = 0.7 is below 0.9",
            "seconds": "",
        },
    ]
    rub = load_rubric(write(tmp_path, RUBRIC))
    report.write_csv(rows, tmp_path / "g.csv")
    back = read_csv(tmp_path / "g.csv")
    assert back[0]["reason"] == "cell 3 raised ValueError: boom" and back[1]["points"] == "1.5"
    report.write_summary(rows, list(rub.labs.values()), tmp_path / "s.md")
    text = (tmp_path / "s.md").read_text()
    assert "| al\\|ce | 1.5/2 | 1.5/2 |" in text and "cell 3 raised ValueError: boom" in text
    from labkit.grading.pages.feedback import write_feedback

    write_feedback(None, rows, tmp_path / "f.html", "al|ce: a")
    page = (tmp_path / "f.html").read_text()
    assert "1.5/2 points" in page and "ValueError: boom" in page


def test_a_bad_job_count_is_refused_before_the_output_is_cleared(tmp_path):
    from labkit.grading.grade import GradeError, GradeOptions, grade

    out = tmp_path / "out"
    out.mkdir()
    (out / "grades.csv").write_text("last week's grades\n")
    with pytest.raises(GradeError, match="-j 0: give how many notebooks to run at a time"):
        grade(GradeOptions(write(tmp_path, RUBRIC), None, out, parallel=0))
    assert (out / "grades.csv").read_text() == "last week's grades\n"


def test_only_notebooks_the_rubric_never_names_are_noted_as_ungraded(tmp_path):
    from labkit.grading.grade import find_jobs

    lab = load_rubric(write(tmp_path, RUBRIC)).labs["a"]
    for name in ("a.ipynb", "b.ipynb", "scratch.ipynb"):
        (tmp_path / name).write_text("{}")
    jobs, notes, refused, _ = find_jobs(
        [lab], tmp_path / "out", None, tmp_path, known={"a.ipynb", "b.ipynb"}
    )  # --lab a
    assert [j.source.name for j in jobs] == ["a.ipynb"]
    assert notes == ["not graded: notebooks/scratch.ipynb has no rubric section"] and refused == []


def test_a_verifier_reads_only_files_inside_the_run_folder(tmp_path):
    work = tmp_path / "work"
    (work / "artifacts").mkdir(parents=True)
    (work / "artifacts" / "w.npz").write_bytes(b"x")
    (tmp_path / "secret").write_text("another student's")
    (work / "artifacts" / "link").symlink_to(tmp_path / "secret")
    with open(work / "artifacts" / "big", "wb") as f:
        f.truncate(verify.MAX_ARTIFACT_BYTES + 1)
    ctx = verify.Context(workdir=work, records={}, params={}, claimed=None)
    assert ctx.path("artifacts/w.npz") == (work / "artifacts" / "w.npz").resolve()
    assert ctx.path(str(work / "artifacts" / "w.npz")) == (work / "artifacts" / "w.npz").resolve()  # absolute, inside
    for rel, message in [
        (str(tmp_path / "secret"), "leads out of the run's folder"),
        ("artifacts/../../secret", "without '..'"),
        ("artifacts/link", "a link that leads out"),
        ("artifacts/big", "over the 64 MB"),
        ("artifacts/none.npz", "was not saved"),
    ]:
        with pytest.raises(verify.Unverifiable, match=message):
            ctx.path(rel)


# ---------------------------------------------------------------------------------------------
# hidden checks' judges, on outputs made here (the probe's side runs in test_grading_attacks.py)


def test_hidden_check_judges_tell_right_from_wrong(tmp_path):
    import json

    import numpy as np

    from labkit.grading.judge import hidden
    from labkit.labs.lab1 import checks as lab1_checks
    from labkit.labs.lab2 import checks as lab2_checks
    from labkit.labs.lab3 import checks as lab3_checks
    from labkit.labs.lab1 import solution as lab1_solution
    from labkit.labs.lab3 import solution as lab3_solution

    def lr_outputs(sign):
        arrays = {}
        for t, c in enumerate(lab1_checks.inputs_lr_step(seed=3)):
            W, b, loss = lab1_solution.reference_lr_step(c["x"], c["y"], c["W"], c["b"], sign * c["learning_rate"])
            for mode in ("eager", "graph"):
                arrays.update(
                    {
                        f"{t}_{mode}_W": W.astype(np.float32),
                        f"{t}_{mode}_b": b.astype(np.float32),
                        f"{t}_{mode}_loss": np.asarray(loss),
                    }
                )
        (tmp_path / lab1_checks.GRAPH_FILE).write_bytes(b"")  # the traced graph: an empty GraphDef calls no Python
        return arrays

    assert hidden.decide("lab1_sgd_step", {"seed": 3}, lr_outputs(1), tmp_path).ok
    wrong = hidden.decide("lab1_sgd_step", {"seed": 3}, lr_outputs(-1), tmp_path)
    assert not wrong.ok and "the update's sign" in wrong.reason

    def sparse_outputs(dense: bool):
        arrays = {}
        for t, c in enumerate(lab3_checks.inputs_sparse_gradient(seed=4)):
            loss, grad = lab3_solution.reference_sparse_gradient(c)
            idx = np.arange(len(grad)) if dense else np.unique(c["indices"][:, 1])
            for mode in ("eager", "graph"):
                arrays.update(
                    {f"{t}_{mode}_loss": np.asarray(loss), f"{t}_{mode}_indices": idx, f"{t}_{mode}_values": grad[idx]}
                )
        case = lab3_checks.batch_sparse_scaling(4, lab3_checks.settings_sparse_scaling())  # the scaling check's batch
        case["y"] = lab3_checks.labels_sparse_scaling(5, len(case["y"]))  # the labels of the last timed call
        loss, grad = lab3_solution.reference_sparse_gradient(case)
        idx = np.unique(case["indices"][:, 1])
        for mode in ("eager", "graph"):  # as long with w of 10^8 features as of 10^4
            arrays.update(
                {f"scale_{mode}_outcome": np.asarray("ok"), f"scale_{mode}_at": np.asarray(10**8)}
                | {f"scale_{mode}_{size}_cpu_s": np.asarray(1e-3) for size in ("small", "large")}
                | {
                    f"scale_{mode}_draw": np.asarray(5),
                    f"scale_{mode}_loss": np.asarray(loss),
                    f"scale_{mode}_indices": idx,
                    f"scale_{mode}_values": grad[idx],
                }
            )
        return arrays

    assert hidden.decide("lab3_sparse_gradient", {"seed": 4}, sparse_outputs(False), tmp_path).ok
    dense = hidden.decide("lab3_sparse_gradient", {"seed": 4}, sparse_outputs(True), tmp_path)
    assert not dense.ok and "one row per unique feature" in dense.reason
    slow = sparse_outputs(False) | {"scale_graph_large_cpu_s": np.asarray(0.2)}  # 200x the CPU with w of 10^8 features
    slow = hidden.decide("lab3_sparse_gradient", {"seed": 4}, slow, tmp_path)
    assert not slow.ok and "traced 200x (200 ms against 1 ms)" in slow.reason, slow.reason

    cases = lab1_checks.inputs_best_reading(seed=5)
    from labkit.labs.lab1.solution import chance_best_reading

    right = np.asarray([chance_best_reading(**c) for c in cases])
    assert hidden.decide("lab1_best_reading", {"seed": 5}, {"chances": right}, tmp_path).ok
    one = np.asarray([chance_best_reading(**{**c, "n": 1}) for c in cases])  # a single reading, not the best of n
    wrong = hidden.decide("lab1_best_reading", {"seed": 5}, {"chances": one}, tmp_path)
    assert not wrong.ok and "the best of n binomial batch readings" in wrong.reason

    # Lab 2's round: the tasks' files as the probe's cluster leaves them
    settings = lab2_checks.settings_sync_round(rounds=4, train_limit=600, test_limit=100, seed=2)
    run = tmp_path / "runs" / "lab2" / "hidden-sync"
    run.mkdir(parents=True)
    arrays = {"run_dir": np.asarray("runs/lab2/hidden-sync")}

    def workers(steps, W, b):  # the ps reads the global step and the weights; the workers count their steps
        for i, local in enumerate(steps):
            data = {"task": f"worker:{i}", "steps": {"local": local, "global_at_exit": max(steps)}}
            (run / f"worker-{i}.json").write_text(json.dumps(data))
        ps = {"task": "ps:0", "steps": {"global_final": max(steps)}, "weights": {"W": W.tolist(), "b": b.tolist()}}
        (run / "ps-0.json").write_text(json.dumps(ps))

    W, b = lab2_checks.reference_sync_weights(settings, 2)
    args = {"rounds": 4, "train_limit": 600, "test_limit": 100, "seed": 2}
    workers((4, 4), W.astype(np.float32), b.astype(np.float32))
    assert hidden.decide("lab2_sync_round", args, arrays, tmp_path).ok
    W2, b2 = lab2_checks.reference_sync_weights({**settings, "learning_rate": 2 * settings["learning_rate"]}, 2)
    workers((4, 4), W2, b2)  # the sum of two gradients, not their mean
    verdict = hidden.decide("lab2_sync_round", args, arrays, tmp_path)
    assert not verdict.ok and "the mean of all 2 gradients" in verdict.reason
    workers((4, 3), W, b)  # one worker made a step fewer: not one gradient per worker per round
    verdict = hidden.decide("lab2_sync_round", args, arrays, tmp_path)
    assert not verdict.ok and "every worker makes one step" in verdict.reason


def test_a_batch_starts_the_longest_notebooks_first(tmp_path):
    """Longest expected first: a lab's median seconds in earlier batches in this output folder,
    else the rubric's expected_s; ties keep the batch's order. expected_s changes no outcome, so
    it is not part of the fingerprint that decides what runs again."""
    import dataclasses
    import json
    from types import SimpleNamespace

    from labkit.grading.run import ledger
    from labkit.grading.grade import expected_seconds, longest_first

    base = load_rubric(write(tmp_path, RUBRIC)).labs["a"]
    labs = {
        k: dataclasses.replace(base, key=k, expected_s=e) for k, e in (("l1", 10), ("l2", 40), ("l3", 0), ("l4", 0))
    }
    jobs = [SimpleNamespace(lab=labs[k], name=f"{s}-{k}", key=(s, k)) for s in ("ann", "bob") for k in labs]
    assert [j.name for j in longest_first(jobs, expected_seconds(jobs, {}))] == [
        "ann-l2",
        "bob-l2",
        "ann-l1",
        "bob-l1",
        "ann-l3",
        "ann-l4",
        "bob-l3",
        "bob-l4",
    ]
    for student, lab, secs in (("ann", "l4", 50.0), ("bob", "l4", 70.0), ("cat", "l4", 90.0), ("ann", "l1", "")):
        job = SimpleNamespace(student=student, lab=labs[lab], private=tmp_path / "out" / ".grader" / student / lab)
        ledger.save_outcome(job, {"rows": [{"lab": lab, "check": "execution", "seconds": secs}]})
    forged = tmp_path / "out" / ".grader" / "eve" / "l1" / ledger.OUTCOME  # not signed by the grader: not counted
    forged.parent.mkdir(parents=True)
    forged.write_text(json.dumps({"rows": [{"lab": "l1", "check": "execution", "seconds": 9999.0}]}))
    measured = ledger.measured_seconds(tmp_path / "out")
    assert measured == {"l4": 70.0}  # the median; a run without seconds (never ran) says nothing
    assert [j.name for j in longest_first(jobs, expected_seconds(jobs, measured))][:4] == [
        "ann-l4",
        "bob-l4",
        "ann-l2",
        "bob-l2",
    ]
    assert ledger.lab_hash(labs["l1"]) == ledger.lab_hash(dataclasses.replace(labs["l1"], expected_s=999))
    assert ledger.lab_hash(labs["l1"]) != ledger.lab_hash(dataclasses.replace(labs["l1"], memory_mb=1024))


def test_eta_weighs_the_notebooks_left_by_their_expected_seconds(monkeypatch):
    """Longest first, the count of notebooks left would promise a late end; their expected
    seconds do not. With any notebook of unknown length, the count it is."""
    from labkit.grading import grade as grading

    clock = iter([0.0, 60.0, 60.0, 80.0])
    monkeypatch.setattr(grading.time, "monotonic", lambda: next(clock))
    lines = []
    weighted = grading.Progress({"a": 60.0, "b": 10.0, "c": 10.0}, lines.append)
    weighted.line("a", "A", "ok")  # 60 s for 60 expected: 20 left
    by_count = grading.Progress({"a": 60.0, "b": 0.0}, lines.append)
    by_count.line("a", "A", "ok")  # 20 s for one of two notebooks
    assert lines[0].endswith("[1/3] A: ok; batch 1:00, ETA 0:20") and lines[1].endswith("batch 0:20, ETA 0:20")
