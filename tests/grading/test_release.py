"""The student kit (``make release``) and its ``make check``.

- The public rubric holds what a student may know, and nothing of the grader's own checks.
- The kit has a README, a Makefile and a CLI for students: no instructor target or command, no
  grader internals, no path the kit lacks.
- ``make check`` on a small lab: it names what is missing in the released notebook, passes the
  completed one, names the file the grader expects, reports a cell past its time limit, and a
  notebook that calls ``labkit.check()`` does not rerun itself.
- A fresh clone of the released kit runs its README's commands in order, as a student would:
  ``make setup``, ``make data``, ``make lab`` (JupyterLab serves the notebooks), and ``make check``
  on Lab 1 as released (it names what is missing) and completed (it passes).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_notebook

from helpers import cell, wait_until
from labkit.notebook import checking
from labkit.grading.kit import public, release
from labkit.grading.judge.rubric import load_rubric

REPO = Path(__file__).resolve().parents[2]
RUBRIC = REPO / "notebooks" / "rubric.toml"
GRADER_COMMANDS = ("grade", "grade-answers", "grade-merge", "grade-export", "release", "bench")
INSTRUCTOR_WORDS = (
    "make grade",
    "make test",
    "make bench",
    "make release",
    "grade-",
    "SUBMISSIONS",
    "hidden.py",
    "evidence",
    "verifier",
    "sandbox",
    "Trust model",
    "unverified",
    "tests/",
    "labkit/grading",
    "solution.py",
)


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The student kit, released from this checkout."""
    out = tmp_path_factory.mktemp("kit") / "release"
    release.release(REPO / "notebooks", out, log=lambda m: None)
    return out


def hidden_checks(lab):
    """The checks of ``lab`` the public rubric only counts."""
    return [c for c in lab.checks if not c.manual and (c.kind not in public.PUBLIC_KINDS or c.verify is not None)]


# ---------------------------------------------------------------------------------------------
# The public rubric


def test_the_public_rubric_names_no_hidden_check_and_holds_no_input_or_answer_key(kit):
    text = (kit / "notebooks" / "rubric.toml").read_text()
    data = tomllib.loads(text)
    # the bounds are looked for outside the [labs.*.parameters] tables, which students need (Lab 1's idle_s
    # 0.5 is a parameter, not Lab 4's hidden bound of the same value)
    outside = re.sub(r"(?ms)^\[labs\.[^]]*\.parameters\]\n.*?(?=^\[)", "", text)
    assert "idle_s" not in outside and "idle_s" in text
    rubric = load_rubric(RUBRIC)
    assert data["format"] == checking.FORMAT and set(data["labs"]) == set(rubric.labs)
    for key, lab in rubric.labs.items():
        mine = data["labs"][key]
        secret = hidden_checks(lab)
        assert secret, key
        assert mine["hidden_checks"] == len(secret) and mine["hidden_points"] == sum(c.points for c in secret)
        assert mine["points"] + mine["answer_points"] == lab.max_points
        assert mine["parameters"] == lab.parameters and mine["notebook_timeout"] == lab.notebook_timeout
        for c in secret:
            assert c.name not in text, c.name
            if c.kind == "hidden":
                assert c.spec["check"] not in text
            for k in ("right", "total", "min", "max", "factor", "tolerance"):  # reference values and bounds
                v = c.spec.get(k)
                if isinstance(v, float) and not v.is_integer():
                    assert repr(v) not in outside, (c.name, k, v)
            if c.verify:
                assert c.verify["name"] not in text
        for table in mine["checks"]:
            assert set(table) <= {"name", "kind", "points", "records", "cells", "questions", "min", "placeholder"}
        # the answer key: no sentence of a reference answer
        ref = nbformat.read(str(lab.reference(REPO / "notebooks")), as_version=4)
        for c in [c for c in lab.checks if c.manual]:
            for name in c.spec.get("cells", []):
                for answer in (x for x in ref.cells if x.get("id") == name):
                    words = " ".join(answer.source.split()[:8])
                    assert words not in " ".join(text.split()), words
    for forbidden in ("args", "verify", "evidence", "check_timeout", "expected_s"):
        assert not re.search(rf"^{forbidden}\s*=", text, re.M), forbidden


def test_exercises_and_self_checks_come_from_the_reference_notebooks(kit):
    data = tomllib.loads((kit / "notebooks" / "rubric.toml").read_text())
    for key, lab in load_rubric(RUBRIC).labs.items():
        ref = nbformat.read(str(lab.reference(REPO / "notebooks")), as_version=4)
        released = {c.get("id"): c for c in nbformat.read(str(kit / "notebooks" / lab.notebook), as_version=4).cells}
        with_regions = [c.get("id") for c in ref.cells if c.cell_type == "code" and public.BEGIN in c.source]
        exercises = data["labs"][key]["exercises"]
        assert [e["cell"] for e in exercises] == with_regions, key
        for e in exercises:
            assert e["stub"] in released[e["cell"]].source and e["defines"], e
            if "self_check" in e:  # a function's self-check: a later cell that runs it
                assert any(re.search(rf"\b{n}\b", released[e["self_check"]].source) for n in e["defines"]), e
    lab1 = {e["cell"]: e for e in data["labs"]["lab1"]["exercises"]}
    assert lab1["lab1-06"]["defines"] == ["sgd_step"] and lab1["lab1-06"]["self_check"] == "lab1-08"


@pytest.mark.parametrize(
    "value",
    [
        {"a": 'q"uote\\ and ünïcode \U0001f600', "b": [1, 2.5, True, []], "c": {"x": -1}},
        {"labs": {"l": {"p": {"n": True}, "items": [{"k": "v"}, {"k": "w"}]}}},
    ],
)
def test_to_toml_reads_back_equal(value):
    assert tomllib.loads(public.to_toml(value)) == value


def test_to_toml_refuses_a_value_toml_cannot_hold():
    with pytest.raises(ValueError, match="no TOML form"):
        public.to_toml({"a": None})


# ---------------------------------------------------------------------------------------------
# The kit's README, Makefile, docs and CLI


def test_the_kit_is_written_for_students(kit):
    readme, makefile = (kit / "README.md").read_text(), (kit / "Makefile").read_text()
    docs = (kit / "docs" / "cluster.md").read_text()
    assert readme != (REPO / "README.md").read_text() and makefile != (REPO / "Makefile").read_text()
    for word in INSTRUCTOR_WORDS:
        assert word not in readme, word
        assert word not in docs, word
    assert "instructor-only" not in docs and "## 9. Slurm" in docs and "## Troubleshooting" in docs
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    assert targets == {"setup", "data", "lab", "check", "cluster-setup", "cloudlab-update", "clean"}, targets
    # each lab's file, points and time limit, from the rubric
    for key, lab in load_rubric(RUBRIC).labs.items():
        auto = sum(c.points for c in lab.checks if not c.manual)
        answers = sum(c.points for c in lab.checks if c.manual)
        assert re.search(rf"\| `{re.escape(lab.notebook)}` \| {auto:g} \| {answers:g} \|", readme), key
        late = lab.late_penalty.describe() if lab.late_penalty else "none"  # the late policy, as the grader applies it
        assert re.search(rf"\| `{re.escape(lab.notebook)}` \|.*\| {re.escape(late)} \|$", readme, re.M), key
    # every path the README names is in the kit (or made by running it: data/, out/, runs/)
    for path in re.findall(r"`([\w./<>-]+)`|\]\(([^)]+)\)", readme):
        path = path[0] or path[1]
        if (
            "/" not in path
            and not path.endswith(".ipynb")
            or path.startswith(("/", "~", "out/", "data/"))
            or "<" in path
            or "runs/" in path
        ):
            continue
        target = kit / path if "/" in path else kit / "notebooks" / path
        assert target.exists(), path
    assert (kit / ".gitignore").read_text().count(".venv/") == 1


def test_the_readme_gives_each_labs_late_policy():
    """A rubric's late_penalty reaches the student's README as the grader words it; none is 'none'."""
    from labkit.grading.submissions.late import Policy

    labs = {
        "lab1": {
            "notebook": "01.ipynb",
            "title": "t",
            "points": 10,
            "answer_points": 5,
            "notebook_timeout": 600,
            "late_penalty": Policy(per_day=0.1, max=0.5).describe(),
        },
        "lab2": {
            "notebook": "02.ipynb",
            "title": "t",
            "points": 8,
            "answer_points": 2,
            "notebook_timeout": 45,
            "late_penalty": "none",
        },
    }
    readme = release.student_readme("$labs_table\n$points_table\n$lab_example", {"labs": labs})
    assert "| `01.ipynb` | 10 | 5 | 10 min | 10% of the lab's points per day late, at most 50% |" in readme
    assert "| `02.ipynb` | 8 | 2 | 45 s | none |" in readme


def recipes(makefile: str) -> dict[str, list[str]]:
    """Each rule's target and its recipe lines, and each variable's definition (as ``NAME=``)."""
    out, target = {}, None
    for line in makefile.splitlines():
        if line.startswith("\t") and target:
            out[target].append(line)
        elif m := re.match(r"^(\S+):(?!=)", line):
            target = m.group(1)
            out[target] = [line]
        elif m := re.match(r"^(\w+)\s*[?:]?=", line):
            target = None
            out[m.group(1) + "="] = [line]
    return out


def test_the_kits_makefile_installs_as_the_instructors_does(kit):
    """The targets both Makefiles have build the same venv and fetch the same data, the same way."""
    student, instructor = recipes((kit / "Makefile").read_text()), recipes((REPO / "Makefile").read_text())
    same = ("PYTHON=", "VENV=", "PY=", "STAMP=", "setup", "$(STAMP)", "data", "lab", "cluster-setup", "HOSTS=")
    for name in (*same, "cloudlab-update", "REPOSITORY="):
        assert student[name] == instructor[name], name


def test_the_kit_cli_lists_no_grader_command(kit):
    student = (
        f"import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        f"sys.path.insert(0, {str(kit)!r})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", student + "from labkit.cli import main\nsys.exit(main(['--help']))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=kit,
    )
    assert out.returncode == 0, out.stderr
    listed = set(re.findall(r"^    (\S+)", out.stdout, re.M))
    assert {"check", "data", "cluster", "run", "nodes", "monitor"} <= listed, listed
    assert not listed & set(GRADER_COMMANDS), listed
    here = subprocess.run([sys.executable, "-m", "labkit", "--help"], capture_output=True, text=True, timeout=120)
    assert set(GRADER_COMMANDS) <= set(re.findall(r"^    (\S+)", here.stdout, re.M))


# ---------------------------------------------------------------------------------------------
# make check on a small lab

LAB_RUBRIC = """
[labs.fix]
notebook = "fix.ipynb"
title = "A small lab"
cell_timeout = 60
notebook_timeout = 120
evidence = []

[labs.fix.parameters]
n = 3

[[labs.fix.checks]]
name = "results recorded"
points = 1
kind = "record"
records = ["doubled", "guess"]

[[labs.fix.checks]]
name = "doubled right"
points = 2
kind = "threshold"
record = "doubled"
min = 5.5

[[labs.fix.checks]]
name = "figures"
points = 1
kind = "figures"
cells = ["plot"]

[[labs.fix.checks]]
name = "answer Q1"
points = 1
kind = "analysis"
cells = ["fix-answer"]
"""

PLOT = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(3, 3), dpi=72)\nax.plot([1, 2], [3, n])"


def small_lab(folder: Path) -> Path:
    """A lab with an exercise function and its self-check, a prediction, records, a figure, an answer."""
    folder.mkdir(parents=True)
    cells = [
        cell("n = 2", ["parameters"], id="fix-params"),
        cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION", id="fix-ex"),
        cell("assert double(3) == 6, 'double(3) is not 6'\nprint('double passes')", id="fix-check"),
        cell(
            "### BEGIN SOLUTION\nguess = 6\n### END SOLUTION\nfrom labkit import record\nrecord('guess', guess)",
            id="fix-predict",
        ),
        cell("record('doubled', double(n))", id="fix-rec"),
        cell(PLOT, ["plot"], id="fix-plot"),
        cell("**Q1.** Why?", markdown=True, id="fix-q"),
        cell("Because 2 x 3 is 6.", ["analysis"], markdown=True, id="fix-answer"),
    ]
    nbformat.write(new_notebook(cells=cells), str(folder / "fix.ipynb"))
    (folder / "rubric.toml").write_text(LAB_RUBRIC)
    return folder


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(reference folder, student kit folder with the public rubric and the released notebook)."""
    root = tmp_path_factory.mktemp("small")
    ref = small_lab(root / "ref")
    student = root / "student" / "notebooks"
    student.mkdir(parents=True)
    (student / "rubric.toml").write_text(public.to_toml(public.public_rubric(ref / "rubric.toml")))
    nb, _ = release.release_notebook(nbformat.read(str(ref / "fix.ipynb"), as_version=4))
    nbformat.write(nb, str(student / "fix.ipynb"))
    return ref, student


def check(files, rubric, out, labs=None):
    lines = []
    ok = checking.check_all(files, labs, rubric=rubric, out=out, log=lines.append)
    return ok, "\n".join(lines)


@pytest.mark.notebook
def test_check_names_what_the_released_notebook_lacks(small, tmp_path):
    _, student = small
    ok, text = check([student / "fix.ipynb"], student / "rubric.toml", tmp_path / "out")
    assert not ok
    assert "ok    file        fix.ipynb: the name the grader expects" in text
    assert "FAIL  run         stopped at cell 3" in text and "NotImplementedError" in text
    assert (
        "FAIL  exercises   0 of 2 written: double (cell 2) still raises NotImplementedError; "
        "guess (cell 4) still raises NotImplementedError" in text
    )
    assert "FAIL  self-checks 0 of 1 passed: double's self-check (cell 3): NotImplementedError" in text
    assert "FAIL  records     0 of 2 present; missing: doubled, guess (the run stopped at cell 3" in text
    assert "FAIL  figures     0 of 1 shown: none in plot (cell 6)" in text
    assert "FAIL  answers     0 of 1 filled: still YOUR ANSWER HERE or empty: answer Q1 (cell 8)" in text
    assert "answer in cell 8: replace YOUR ANSWER HERE with your answer, in the same cell" in text
    assert "info  hidden      the grader adds 1 check of its own (2 of the 4 automatic points)" in text
    assert "doubled right" not in text and "5.5" not in text  # the hidden check: counted, never named
    assert "1. write double in cell 2" in text and "Restart Kernel and Run All Cells" in text
    assert (tmp_path / "out" / "fix" / "fix.ipynb").is_file()


@pytest.mark.notebook
def test_check_passes_the_completed_notebook_whatever_calls_it(small, tmp_path):
    """The reference passes; a ``labkit.check()`` cell in it does nothing in the check's own run."""
    ref, student = small
    nb = nbformat.read(str(ref / "fix.ipynb"), as_version=4)
    nb.cells.insert(3, cell("import labkit\nprint(labkit.check())", id="fix-self"))
    nbformat.write(nb, str(tmp_path / "fix.ipynb"))
    ok, text = check([tmp_path / "fix.ipynb"], student / "rubric.toml", tmp_path / "out")
    assert ok, text
    assert not re.search(r"^  (FAIL|warn)", text, re.M), text
    assert "ok    records     all 2 records the grader reads are present" in text
    assert "ok    self-checks 1 of 1 passed" in text and "Ready to submit: upload fix.ipynb" in text
    executed = nbformat.read(str(tmp_path / "out" / "fix" / "fix.ipynb"), as_version=4)
    said = "".join(o.get("text", "") for o in executed.cells[4].outputs)  # after the injected parameters
    assert "skipped in a headless run" in said and "None" in said


@pytest.mark.notebook
def test_check_names_the_file_the_grader_expects_and_a_cell_past_its_limit(small, tmp_path):
    ref, student = small
    rubric = tmp_path / "rubric.toml"
    rubric.write_text((student / "rubric.toml").read_text().replace("cell_timeout = 60.0", "cell_timeout = 3.0"))
    nb = nbformat.read(str(ref / "fix.ipynb"), as_version=4)
    nb.cells[4].source += "\nimport time\ntime.sleep(60)"
    copy = tmp_path / "fix (1).ipynb"  # as a browser saves a second download
    nbformat.write(nb, str(copy))
    t0 = time.monotonic()
    ok, text = check([copy], rubric, tmp_path / "out")
    assert not ok and time.monotonic() - t0 < 50, text
    assert "FAIL  file        the grader expects fix.ipynb; this file is 'fix (1).ipynb'" in text
    assert "save it as fix.ipynb" in text
    assert "FAIL  run         stopped at cell 5" in text and "3 s cell limit" in text
    assert not list(Path(tmp_path / "out").rglob("*.pid"))


def test_answers_are_found_where_the_grader_finds_them(small):
    """By the answer cell's id; else the cell below its question, as the grader reads it (a warning);
    an answer that keeps the placeholder is not an answer."""
    ref, student = small
    lab = checking.load(student / "rubric.toml")["fix"]
    nb = nbformat.read(str(ref / "fix.ipynb"), as_version=4)
    assert checking.answers_line(lab, nb).status == "ok"
    nb.cells[7].source = "Because 2 x 3 is 6.\n\nYOUR ANSWER HERE"
    line = checking.answers_line(lab, nb)
    assert line.status == "FAIL" and "still YOUR ANSWER HERE or empty: answer Q1 (cell 8)" in line.text
    nb.cells[7] = cell("Because it doubles.", markdown=True)  # a new cell, with a new id, below the question
    line = checking.answers_line(lab, nb)
    assert line.status == "warn" and "read answer Q1 from cell 8, below its question" in line.text, line.text
    nb.cells.pop()
    line = checking.answers_line(lab, nb)
    assert line.status == "FAIL" and "no answer cell: answer Q1" in line.text
    assert line.todo == ["write the answer to answer Q1 in a Markdown cell right below its question"]


def test_labkit_check_from_a_cell_checks_the_notebook_jupyterlab_has_open(monkeypatch, tmp_path):
    """JupyterLab tells its kernels their notebook (JPY_SESSION_NAME); the public rubric is beside it,
    the runs go to the kit's out/check/; in the check's own run (or the grader's) it does nothing."""
    seen = {}
    monkeypatch.setattr(
        checking, "check_all", lambda files, labs, **kw: seen.update(files=files, labs=labs, **kw) or True
    )
    notebook = tmp_path / "kit" / "notebooks" / "fix.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(notebook))
    assert checking.check() is True
    assert seen == {
        "files": [notebook],
        "labs": None,
        "rubric": notebook.parent / "rubric.toml",
        "out": tmp_path / "kit" / "out" / "check",
        "again": "labkit.check()",
    }
    for variable in (checking.SELF, "LABKIT_GRADED"):
        with monkeypatch.context() as m:
            m.setenv(variable, "1")
            seen.clear()
            assert checking.check() is None and not seen


def test_check_refuses_the_graders_rubric_and_an_unknown_lab(small, tmp_path):
    ref, student = small
    with pytest.raises(checking.RubricFileError, match="not a public rubric"):
        checking.load(ref / "rubric.toml")
    with pytest.raises(ValueError, match="no lab 'lab9': say one of fix"):
        check([], student / "rubric.toml", tmp_path, labs=["lab9"])


# ---------------------------------------------------------------------------------------------
# A fresh clone, as a student uses it


def readme_commands(readme: str) -> list[str]:
    """The commands of the README's ``sh`` blocks, in order (``bash`` blocks need a cluster)."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", readme, re.S | re.M):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def shell(command: str, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_lab(command: str, cwd: Path, env: dict, tmp: Path) -> list[str]:
    """Run ``make lab`` (JupyterLab told through its config folder to stay headless on a free port),
    wait until it serves, return the notebooks it lists, and stop it with everything it started."""
    port, token = free_port(), os.urandom(8).hex()
    config = tmp / "jupyter-config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {
                    "port": port,
                    "port_retries": 0,
                    "ip": "127.0.0.1",
                    "open_browser": False,
                    "allow_root": True,
                },  # CI runs as root
                "IdentityProvider": {"token": token},
            }
        )
    )
    env = {
        **env,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "jupyter-ws"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "jupyter-settings"),
    }
    log = tmp / "lab.log"
    with open(log, "wb") as f:
        server = subprocess.Popen(
            command, shell=True, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def contents():  # the served folder's listing, once JupyterLab answers
            assert server.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=5) as r:
                    listing = json.load(r)
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as r:
                    assert r.status == 200 and b"JupyterLab" in r.read()
                return listing
            except OSError:
                return None

        listing = wait_until(contents, 180, 1, lambda: f"JupyterLab to answer:\n{log.read_text()[-3000:]}")
        return [item["name"] for item in listing["content"]]
    finally:
        stop_group(server)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group ``proc`` leads (make, JupyterLab), SIGKILL what is left after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # every process of the group has ended
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    proc.wait(10)


def completed(reference: Path) -> nbformat.NotebookNode:
    """Lab 1 as a student who wrote the reference's code and answers hands it in."""
    nb = nbformat.read(str(reference), as_version=4)
    nb.cells = [c for c in nb.cells if release.SOLUTION_ONLY not in c.get("metadata", {}).get("tags", [])]
    return nb


@pytest.mark.slow
@pytest.mark.notebook
def test_a_fresh_clone_of_the_student_kit_runs_its_readme(tmp_path):
    """``make release``, a clone of it, then its README's commands in order.

    What it reuses, to stay fast: the packages already installed for this checkout. The student's
    venv is a new one with no packages of its own and a ``.pth`` line that puts this venv's
    site-packages on its path (a path only: this checkout's editable labkit is not imported
    there), so ``make setup``'s pip finds every pinned requirement installed, and installs
    only the clone's labkit (editable). ``make data`` copies from ``LABKIT_DATA_MIRROR``."""
    mirror = os.environ.get("LABKIT_DATA_MIRROR")
    if not mirror or not shutil.which("make") or not shutil.which("git"):
        pytest.skip("needs make, git and LABKIT_DATA_MIRROR (the datasets' local mirror)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    made = shell(
        f"make -C {shlex.quote(str(REPO))} release RELEASE={shlex.quote(str(tmp_path / 'release'))} "
        f"VENV={shlex.quote(os.path.relpath(sys.prefix, REPO))}",  # relative: make splits a path with a space
        REPO,
        env,
        600,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    git = "git -c user.name=instructor -c user.email=instructor@example.org"
    for command, where in (
        (f"{git} init -q && {git} add -A && {git} commit -qm 'student kit'", tmp_path / "release"),
        (f"{git} clone -q release student", tmp_path),
    ):
        done = shell(command, where, env, 120)
        assert done.returncode == 0, done.stderr
    kit = tmp_path / "student"
    assert not (kit / "labkit" / "grading").exists() and (kit / "Makefile").is_file()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    here = [p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)]
    (site / "instructor-packages.pth").write_text("\n".join(here) + "\n")
    env.update(VENV=str(venv), LABKIT_DATA_MIRROR=mirror, PIP_DISABLE_PIP_VERSION_CHECK="1")

    commands = readme_commands((kit / "README.md").read_text())
    assert [c.split()[:2] for c in commands] == [
        ["make", "setup"],
        ["make", "data"],
        ["make", "lab"],
        ["make", "check"],
    ], commands
    lab1 = load_rubric(RUBRIC).labs["lab1"]
    for command in commands:
        if command == "make lab":
            listed = serve_lab(command, kit, env, tmp_path)
            assert {lab.notebook for lab in load_rubric(RUBRIC).labs.values()} <= set(listed), listed
            continue
        if command.startswith("make check"):
            assert command == "make check LAB=1", command
            check_lab1(command, kit, env, lab1)
            continue
        done = shell(command, kit, env, 900)
        assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if command == "make setup":  # the clone's labkit, and the CLI and targets a student has
            where = subprocess.run(
                [str(venv / "bin" / "python"), "-c", "import labkit; print(labkit.__file__)"],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=120,
            )
            assert where.stdout.strip() == str(kit / "labkit" / "__init__.py"), where.stdout + where.stderr
            helped = shell(f"{venv}/bin/python -m labkit --help", kit, env, 120)
            assert not set(re.findall(r"^    (\S+)", helped.stdout, re.M)) & set(GRADER_COMMANDS), helped.stdout
            for target in ("test", "bench", "grade", "release"):
                assert shell(f"make -n {target}", kit, env, 30).returncode != 0, target


def check_lab1(command: str, kit: Path, env: dict, lab) -> None:
    """``make check LAB=1`` names what the released notebook lacks, then passes the completed one."""
    secret = hidden_checks(lab)
    answers = [c for c in lab.checks if c.manual]
    first = shell(command, kit, env, 900)
    text = first.stdout + first.stderr
    assert first.returncode != 0, text
    assert f"ok    file        {lab.notebook}: the name the grader expects" in text
    assert "FAIL  exercises" in text and "sgd_step (cell" in text and "NotImplementedError" in text
    assert f"FAIL  answers     0 of {len(answers)} filled" in text
    assert f"the grader adds {len(secret)} checks of its own ({sum(c.points for c in secret):g} of" in text
    for c in secret:
        assert c.name not in text, c.name
    assert "Not ready to submit" in text and "make check LAB=1" in text

    nbformat.write(completed(lab.reference(REPO / "notebooks")), str(kit / "notebooks" / lab.notebook))
    second = shell(command, kit, env, 900)
    text = second.stdout + second.stderr
    assert second.returncode == 0, text
    report = text[text.index(f"{lab.key}: {lab.title}") :]
    assert not re.search(r"^  FAIL", report, re.M), report
    for line in (
        "ok    run         top to bottom in",
        "ok    exercises",
        "ok    self-checks",
        "ok    records",
        "ok    figures",
        f"ok    answers     {len(answers)} of {len(answers)} filled",
        "Ready to submit",
    ):
        assert line in report, line
    assert (kit / "out" / "check" / lab.key / lab.notebook).is_file()
