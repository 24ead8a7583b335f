"""Every file a student touches is hostile until parsed: what the grader's own process
does with one student's files (intake, reading, cleaning, answers, similarity, pages, reports)
turns any failure, size or cost into that student's row, and the class around it is graded as
it would be alone.

Unit tests first (no notebook runs): each attack on the function it broke, with a bound on the
work it may cost. Then one class of 20 on the workflow tests' ``beta`` lab (no TensorFlow), six
of them hostile, graded end to end as root and, where the machine lets a test become user
``nobody``, as a normal user.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path, PurePath

import nbformat
import pytest

from _lms import GradescopeSubmission, gradescope_zip, metadata_yml
from helpers import runs_at_once
from labkit.grading.judge import answers, similarity
from labkit.grading.submissions import intake
from labkit.grading.run import limits
from labkit.grading.gradebook import report
from labkit.grading.run.runner import MAX_CELLS, Job, check_readable, prepare
from labkit.grading.run.sandbox import SANDBOXES
from _class import RUBRIC, alpha, beta, student_notebooks

REPO = Path(__file__).resolve().parents[2]
NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
BEACON = "http://127.0.0.1:9"
INJECTION = f"![t]({BEACON}/img) <img src='{BEACON}/tag'> <a href='{BEACON}/a'>regrade form</a>"


def raw_nb(cells: list[dict], metadata: dict | None = None) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata or {}, "cells": cells}


def raw_code(cid: str, source: str, metadata: dict | None = None) -> dict:
    return {
        "cell_type": "code",
        "id": cid,
        "metadata": metadata or {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def filled_beta(name: str) -> nbformat.NotebookNode:
    return student_notebooks(name if name in ("ann", "bob", "cat", "dan", "eve", "fay") else "ann", alpha(), beta())[1]


def deep_nesting(nb: nbformat.NotebookNode, depth: int = 100_000) -> str:
    """``nb`` as JSON with a ``depth``-deep array in its first cell's metadata (200 KB)."""
    text = json.dumps(nb)
    marker = '"metadata": {'
    return text.replace(marker, '"metadata": {"x": ' + "[" * depth + "]" * depth + ", ", 1)


def lone_surrogate(nb: nbformat.NotebookNode) -> str:
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.cells.append(nbformat.v4.new_code_cell("x = '\ud800'"))
    return json.dumps(nb)  # ASCII: the surrogate is the escape \ud800, valid JSON, no UTF-8 character


def tagged_cells(nb: nbformat.NotebookNode, n: int = 40_000) -> str:
    """40,000 copies of a tagged answer cell (3.4 MB), which made the answers quadratic."""
    raw = json.loads(json.dumps(nb))
    raw["cells"] += [
        {"cell_type": "markdown", "id": f"t{i}", "metadata": {"tags": ["analysis"]}, "source": "copy " * 10}
        for i in range(n)
    ]
    return json.dumps(raw)


def periodic(nb: nbformat.NotebookNode, cells: int = 6, size: int = 270_000) -> str:
    """Six code cells of periodic text (1.6 MB), which made the similarity report quadratic."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # one list literal a cell: it runs at once
    nb.cells += [nbformat.v4.new_code_cell("v = [" + "0, " * (size // 3) + "]") for _ in range(cells)]
    return json.dumps(nb)


def injector(nb: nbformat.NotebookNode) -> str:
    """A run that raises with Markdown and HTML in its message, and an answer with a missing attachment."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    nb.cells.insert(3, nbformat.v4.new_code_cell(f"raise ValueError({INJECTION!r})"))
    for c in nb.cells:
        if c.get("id") == "b-ans1":
            c.source = "Here is my figure: ![x](attachment:nope.png) and my words: 0 + 1 + 4 = 5."
    return json.dumps(nb)


# ------------------------------------------------------------------------- reading and cleaning


def _job(tmp: Path, text: str, labs) -> Job:
    src = tmp / "subs" / "s" / "beta.ipynb"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(text)
    out = tmp / "out" / "s"
    return Job(
        "s",
        labs["beta"],
        src,
        out / "beta.ipynb",
        tmp / "work" / "s",
        out / "beta.log",
        private=tmp / "out" / ".grader" / "s",
    )


@pytest.fixture
def labs(tmp_path):
    from labkit.grading.judge.rubric import load_rubric

    (tmp_path / "rubric.toml").write_text(RUBRIC)
    return load_rubric(tmp_path / "rubric.toml").labs


@pytest.mark.parametrize(
    "attack, status, words",
    [
        (deep_nesting, "refused", "nested deeper than the 64-level cap"),
        (lone_surrogate, "unreadable", "holds a lone UTF-16 surrogate"),
        (tagged_cells, "refused", f"40005 cells, over the {MAX_CELLS}-cell cap"),
    ],
)
def test_a_hostile_notebook_is_its_own_row_before_any_expensive_work(tmp_path, labs, attack, status, words):
    job = _job(tmp_path, attack(filled_beta("ann")), labs)
    t0 = time.process_time()
    got = prepare(job)
    assert got is not None and got.status == status and words in got.reason, got
    assert time.process_time() - t0 < 10  # a 200 KB nesting or 3.4 MB of cells: parsed once, no validation
    assert not job.clean_input.exists() if job.private and job.private.exists() else True


def test_an_honest_notebook_passes_the_caps_and_is_cleaned(tmp_path, labs):
    job = _job(tmp_path, json.dumps(filled_beta("ann")), labs)
    assert prepare(job) is None and job.clean_input.is_file()


def test_a_surrogate_the_reading_missed_is_still_a_row(tmp_path, labs, monkeypatch):
    """clean_copy's own failure (UnicodeEncodeError, as the surrogate raised) is the student's row."""
    import labkit.grading.run.runner as runner

    monkeypatch.setattr(runner, "check_readable", lambda path: None)
    got = prepare(_job(tmp_path, lone_surrogate(filled_beta("ann")), labs))
    assert got.status == "unreadable" and "UnicodeEncodeError" in got.reason, got


def test_nesting_too_deep_for_python_itself_is_refused(tmp_path):
    p = tmp_path / "x.ipynb"
    p.write_text('{"nbformat": 4, "cells": [], "metadata": ' + "[" * 10**6 + "]" * 10**6 + "}")
    assert "nested deeper" in check_readable(p)


# --------------------------------------------------------------------------------------- answers


def test_forty_thousand_tagged_cells_are_read_in_linear_time_with_capped_notes():
    nb = nbformat.from_dict(json.loads(tagged_cells(filled_beta("ann"))))
    qs = {
        "answer Q1": answers.Question(
            "beta", "answer Q1", 1.0, ["b-ans1"], answer_ids=["b-ans1"], question_ids=["b-q1"]
        )
    }
    t0 = time.process_time()
    found = answers.locate(nb, qs)["answer Q1"]
    assert time.process_time() - t0 < 10  # it was 1,278 s, quadratic
    assert len(found.cells) == 40_001 and len(found.notes) == answers.MAX_NOTES + 1
    assert found.notes[-1] == f"... and {40_000 - answers.MAX_NOTES} more note(s) like these"
    assert len(answers.score(qs["answer Q1"], found, None).reason) < 2000


def test_an_unreadable_shape_leaves_the_answers_not_found_with_the_reason():
    class Broken:
        @property
        def cells(self):
            raise RecursionError("maximum recursion depth exceeded")

    got = answers.locate(Broken(), {"q": answers.Question("beta", "q", 1.0, ["b-ans1"])})
    assert not got["q"].found and "RecursionError" in got["q"].notes[0]


def test_an_answer_csv_always_merges_back(tmp_path):
    """1,100 copied cells put 147 KB into one note, past csv's field limit, and nothing merged."""
    q = answers.Question("beta", "answer Q1", 1.0, ["b-ans1"])
    items = [
        {
            "student": s,
            "lab": "beta",
            "records": {},
            "scores": {"answer Q1": answers.score(q, a, None)},
            "answers": {"answer Q1": a},
        }
        for s, a in [
            ("ann", answers.Answer("words", [4], [], True)),
            ("mal", answers.Answer("x" * 300_000, [4], ["n" * 200] * 1100, True)),
        ]
    ]
    answers.export(tmp_path, items, {("beta", "answer Q1"): q})
    path = tmp_path / "answers" / "beta" / "answer-q1.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows[2:]] == ["ann", "mal"]
    assert len(rows[3]["notes"]) <= report.MAX_REASON and "more characters]" in rows[3]["answer"]
    rows[2]["score"], rows[3]["score"] = "1", "0"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    current = {
        ("beta", "answer Q1", "ann"): items[0]["answers"]["answer Q1"].sha,
        ("beta", "answer Q1", "mal"): items[1]["answers"]["answer Q1"].sha,
    }
    merged = answers.merge(tmp_path, [path], {("beta", "answer Q1"): q}, current)
    assert "2 score(s) merged" in merged[0]


def test_a_missing_attachment_breaks_only_its_own_answer(tmp_path):
    from labkit.grading.pages.feedback import markdown_html

    bad = markdown_html("![x](attachment:nope.png)")
    assert "could not be rendered" in bad and "attachment:nope.png" in bad
    q = answers.Question("beta", "answer Q1", 1.0, ["b-ans1"], text="**Q1.** What?")
    rows = [
        {
            "student": s,
            "status": "pending",
            "score": "",
            "max": "1",
            "answer": text,
            "notes": "",
            "flags": [],
            "values": [],
        }
        for s, text in [("ann", "It is **five**."), ("mal", "![x](attachment:nope.png)")]
    ]
    page = tmp_path / "q.html"
    answers.write_page(str(page), json.loads(json.dumps(q.__dict__)), rows)
    html = page.read_text()
    assert "<strong>five</strong>" in html and "could not be rendered" in html  # ann's still Markdown
    assert "shown as plain text" not in html


# ------------------------------------------------------------------------------------ similarity


def test_periodic_code_is_compared_in_linear_time():
    text = json.loads(periodic(filled_beta("ann")))
    assert len(text["cells"]) == 11 and len(json.dumps(text)) > 1_600_000
    sources = ["".join(c["source"]) for c in text["cells"] if c["cell_type"] == "code"]
    t0 = time.process_time()
    docs = [similarity.fingerprint(similarity.code_doc(s, sources), "code") for s in ("a", "b")]
    pairs = similarity.compare(docs, "code", "beta", set(), 0.5)
    for p in pairs:
        similarity.matches(p)
    assert time.process_time() - t0 < 30  # it spun 5 CPU-minutes
    assert len(docs[0].tokens) <= similarity.MAX_TOKENS
    assert all(len(ps) <= similarity.MAX_REPEATS for ps in docs[0].prints.values())


def test_a_page_shows_periodic_code_as_plain_text_and_the_rest_highlighted(tmp_path):
    from labkit.grading.pages import feedback

    nb = json.loads(periodic(filled_beta("ann")))
    executed = tmp_path / "executed.ipynb"
    executed.write_text(json.dumps(nb))
    page = tmp_path / "page.html"
    feedback.write_feedback(str(executed), [], str(page), "beta")  # it ran past its 180 s limit
    text = page.read_text()
    assert text.count("v = [0, 0, 0, ") == 6  # each long cell whole, as escaped text
    assert '<span class="mi">0</span>' not in text  # no span per number: Pygments took 9 s a cell
    assert '<span class="k">' in text or '<span class="kn">' in text  # the short cells keep their colours


def test_copied_code_is_still_found_with_its_passages():
    code = [
        "def f(values):\n    total = 0\n    for v in values:\n        total += 2 * v * v\n"
        "    return total / len(values)\n",
        "result = [f([i, i + 1, i * 3]) for i in range(10)]\nprint(result)\n",
    ]
    other = [
        "import math\nprint(math.pi * 2)\nfor k in range(3):\n    print(k ** 3 - k)\n",
        "data = {'a': 1, 'b': 2}\nfor key in sorted(data):\n    print(key, data[key] * 7)\n",
    ]
    docs = [
        similarity.fingerprint(similarity.code_doc(s, c, ["cell 1", "cell 2"]), "code")
        for s, c in (("a", code), ("b", code), ("c", other))
    ]
    pairs = similarity.compare(docs, "code", "x", set(), 0.5)
    assert [(p.a.student, p.b.student) for p in pairs] == [("a", "b")]
    found = similarity.matches(pairs[0])
    assert found and similarity.parts(docs[0], [x for x, _ in found]) == ["cell 1", "cell 2"]


def test_fingerprints_most_of_a_class_has_are_dropped():
    shared = ["for i in range(10):\n    total = total + i * i - 3\n    print(total, i, i ** 2)\n"]
    docs = [similarity.fingerprint(similarity.code_doc(f"s{n}", shared), "code") for n in range(30)]
    assert set(docs[0].prints) <= similarity._common(docs)
    assert similarity.compare(docs, "code", "x", set(), 0.5) == []


# --------------------------------------------------------------------------------------- reports


def test_student_text_in_summary_md_renders_nothing(tmp_path):
    class Lab:
        key, notebook, max_points = "beta", "beta.ipynb", 2.0

    rows = [
        {
            "student": "mal<img src=x>",
            "lab": "beta",
            "check": "execution",
            "points": 0.0,
            "max": 0.0,
            "status": "error",
            "reason": f"cell 2 raised ValueError: {INJECTION} `tick` | pipe",
            "seconds": 1,
        },
        {
            "student": "ann",
            "lab": "beta",
            "check": "execution",
            "points": 0.0,
            "max": 0.0,
            "status": "ok",
            "reason": "",
            "seconds": 1,
        },
    ]
    report.write_summary(
        rows, [Lab()], tmp_path / "summary.md", notes=[f"mal: not graded: {INJECTION}.ipynb (matches no lab)"]
    )
    text = (tmp_path / "summary.md").read_text()
    # outside code spans, none of it is Markdown or HTML any more
    bare = re.sub(r"(`+) .*? \1", "", text)
    assert "![" not in bare and "<img" not in bare and "<a " not in bare and BEACON not in bare, bare
    assert "&lt;img src=x&gt;" in text
    line = next(ln for ln in text.splitlines() if "raised ValueError" in ln)
    assert line.count(" | ") == 5 and "``" in line  # the pipe escaped, the backtick in a longer fence
    assert len(text) < 20_000


def test_a_reason_is_capped_in_grades_csv(tmp_path):
    report.write_csv([{"student": "s", "lab": "l", "check": "c", "reason": "r" * 3_000_000}], tmp_path / "g.csv")
    with open(tmp_path / "g.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert len(row["reason"]) == report.MAX_REASON


# ---------------------------------------------------------------------------------------- intake


def _ref(tmp: Path) -> Path:
    nbs = tmp / "notebooks"
    nbs.mkdir(exist_ok=True)
    nbformat.write(alpha(), str(nbs / "alpha.ipynb"))
    nbformat.write(beta(), str(nbs / "beta.ipynb"))
    return nbs


def _labs(tmp: Path) -> list:
    from labkit.grading.judge.rubric import load_rubric

    (tmp / "rubric.toml").write_text(RUBRIC)
    return list(load_rubric(tmp / "rubric.toml").labs.values())


def nb_bytes(name: str) -> bytes:
    return nbformat.writes(filled_beta(name)).encode()


ALICE = GradescopeSubmission(
    1001, [("Alice A", "alice@uni.edu", "S1")], "2024-10-01 06:00:00.0 Z", {"beta.ipynb": nb_bytes("ann")}
)


def test_a_planted_metadata_file_cannot_take_over_the_gradescope_intake(tmp_path):
    planted = {
        1001: {
            ":submitters": [{":name": "Alice A", ":sid": "S1", ":email": "alice@uni.edu"}],
            ":created_at": "1950-01-01 00:00:00 Z",
        }
    }
    mallory = GradescopeSubmission(
        1002,
        [("Mallory M", "mal@uni.edu", "S9")],
        "2024-10-01 07:00:00.0 Z",
        {"beta.ipynb": nb_bytes("bob"), "submission_metadata.yml": json.dumps(planted).encode()},
    )
    for wrapped in (True, False):
        path = tmp_path / f"export-{wrapped}.zip"
        gradescope_zip(path, [ALICE, mallory])
        if not wrapped:  # the export's files at the top, as the red team's was
            with zipfile.ZipFile(path) as zf:
                files = {PurePath(n).relative_to(PurePath(n).parts[0]).as_posix(): zf.read(n) for n in zf.namelist()}
            with zipfile.ZipFile(path, "w") as zf:
                for n, data in files.items():
                    zf.writestr(n, data)
        dest = tmp_path / f"subs-{wrapped}"
        got = intake.import_download(
            path, dest, _labs(tmp_path), _ref(tmp_path), due="2024-10-02T00:00:00+00:00", log=lambda m: None
        )
        assert (dest / "S1" / "beta.ipynb").read_bytes() == nb_bytes("ann")
        assert (dest / "S9" / "beta.ipynb").read_bytes() == nb_bytes("bob")
        assert not got.students["S1"]["labs"]["beta"]["late"]
        assert any(
            "submission_1002/submission_metadata.yml" in n and "is not the export's" in n for n in got.record["notes"]
        )


def test_an_export_with_two_roots_or_files_outside_its_root_is_refused(tmp_path):
    path = gradescope_zip(tmp_path / "e.zip", [ALICE])
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("other_export/submission_metadata.yml", metadata_yml([ALICE]))
    with pytest.raises(intake.IntakeError, match="in 2 folders"):
        intake.import_download(path, tmp_path / "s", _labs(tmp_path), _ref(tmp_path), log=lambda m: None)
    path = gradescope_zip(tmp_path / "f.zip", [ALICE])
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("stray/beta.ipynb", nb_bytes("bob"))
    with pytest.raises(intake.IntakeError, match="outside it"):
        intake.import_download(path, tmp_path / "s", _labs(tmp_path), _ref(tmp_path), log=lambda m: None)


def test_two_submitters_with_one_sid_are_never_merged(tmp_path):
    mallory = GradescopeSubmission(
        1002, [("Mallory M", "mal@uni.edu", "S1")], "2024-10-01 09:00:00.0 Z", {"beta.ipynb": nb_bytes("bob")}
    )
    got = intake.import_download(
        gradescope_zip(tmp_path / "e.zip", [ALICE, mallory]),
        tmp_path / "subs",
        _labs(tmp_path),
        _ref(tmp_path),
        log=lambda m: None,
    )
    assert len(got.students) == 2
    graded = {s: (tmp_path / "subs" / s / "beta.ipynb").read_bytes() for s in got.students}
    assert sorted(graded.values()) == sorted([nb_bytes("ann"), nb_bytes("bob")])
    for s in got.students.values():
        assert any("flagged: :sid S1 is given by 2 different submitters" in n for n in s["labs"]["beta"]["notes"])


def test_a_yaml_alias_bomb_and_oversized_fields_are_refused_at_once(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
    )
    t0 = time.process_time()
    with pytest.raises(intake.IntakeError, match="YAML alias"):
        intake.read_metadata(bomb.encode())
    assert time.process_time() - t0 < 2  # 31 s and 964 MB before
    huge = GradescopeSubmission(
        1003, [("x" * 5000, "big@uni.edu", "S5")], "2024-10-01 06:00:00.0 Z", {"beta.ipynb": nb_bytes("cat")}
    )
    got = intake.import_download(
        gradescope_zip(tmp_path / "e.zip", [ALICE, huge]),
        tmp_path / "subs",
        _labs(tmp_path),
        _ref(tmp_path),
        log=lambda m: None,
    )
    assert list(got.students) == ["S1"]
    assert any("submission_1003" in n and ":name is not a text of at most 200" in n for n in got.record["notes"])


def test_a_zip_bomb_is_refused_on_its_sizes_and_extras_are_listed_not_copied(tmp_path, monkeypatch):
    big = GradescopeSubmission(
        1004,
        [("Zed Z", "zed@uni.edu", "S4")],
        "2024-10-01 06:00:00.0 Z",
        {"beta.ipynb": nb_bytes("dan"), **{f"x{i}.ipynb": b"{" + b" " * (8 * 2**20) + b"}" for i in range(30)}},
    )
    path = gradescope_zip(tmp_path / "bomb.zip", [ALICE, big])
    assert path.stat().st_size < 2 * 2**20
    got = intake.import_download(path, tmp_path / "subs", _labs(tmp_path), _ref(tmp_path), log=lambda m: None)
    assert [p.name for p in (tmp_path / "subs" / "S4").iterdir()] == ["beta.ipynb"]  # nothing else copied
    listed = [n for n in got.record["notes"] if "S4: not graded" in n]
    capped = [n for n in got.record["notes"] if f"over the {intake.MAX_FILES} files read" in n]
    assert len(listed) + len(capped) == 30 and capped
    monkeypatch.setattr(intake, "MAX_READ_BYTES", 64 * 2**20)
    with pytest.raises(intake.IntakeError, match="GB uncompressed"):
        intake.import_download(path, tmp_path / "subs2", _labs(tmp_path), _ref(tmp_path), log=lambda m: None)


def test_dot_dot_entries_are_noted(tmp_path):
    path = gradescope_zip(tmp_path / "e.zip", [ALICE])
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("assignment_4242_export/submission_1001/../../../evil.ipynb", b"{}")
        zf.writestr("../up.ipynb", b"{}")
    got = intake.import_download(path, tmp_path / "subs", _labs(tmp_path), _ref(tmp_path), log=lambda m: None)
    noted = [n for n in got.record["notes"] if "a path out of the archive" in n]
    assert len(noted) == 2 and any("../up.ipynb" in n for n in noted)


# ---------------------------------------------------------------------------- a grader as a user


def test_runs_that_would_share_their_limits_are_one_at_a_time(monkeypatch):
    from labkit.grading.run.executor import ExecutorError
    from labkit.grading.run.runner import LocalExecutor, Setup

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    why = limits.shared("rlimit")
    assert "RLIMIT_NPROC" in why and "another's forks" in why and limits.shared("cgroup1") == ""
    setup = Setup(sandbox=SANDBOXES["none"], backend="rlimit")
    with pytest.raises(ExecutorError, match="-j 2 refused: as user 1000"):
        LocalExecutor(setup, parallel=2)
    assert LocalExecutor(setup, parallel=1).slots == 1
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert LocalExecutor(setup, parallel=2).slots == 2  # root: each run has a uid of its own


# ------------------------------------------------------------------------------ a class of twenty

HONEST = 14
BETA_RUBRIC = RUBRIC.split("[labs.alpha]")[0] + "[labs.beta]" + RUBRIC.split("[labs.beta]")[1]
HOSTILE = {
    "deep": deep_nesting,
    "surrogate": lone_surrogate,
    "tagged": tagged_cells,
    "periodic1": periodic,
    "periodic2": periodic,
    "injector": injector,
}


def honest(n: int) -> str:
    nb = filled_beta("ann")
    for c in nb.cells:
        if c.get("id") == "b-ans1":
            c.source = f"Student {n} adds them: 0 + 1 + 4 = 5, in words of their own number {n}."
    return json.dumps(nb)


def write_class(root: Path, students: dict) -> Path:
    subs = root / "subs"
    for name, text in students.items():
        (subs / name).mkdir(parents=True)
        (subs / name / "beta.ipynb").write_text(text)
    (root / "rubric.toml").write_text(BETA_RUBRIC)
    nbs = root / "notebooks"
    nbs.mkdir(exist_ok=True)
    nbformat.write(beta(), str(nbs / "beta.ipynb"))
    return subs


def the_class() -> dict:
    students = {f"honest{n:02d}": honest(n) for n in range(HONEST)}
    students.update({name: attack(filled_beta("ann")) for name, attack in HOSTILE.items()})
    return students


def _rows(out: Path) -> dict:
    with open(out / "grades.csv", newline="") as f:
        return {(r["student"], r["check"]): r for r in csv.DictReader(f)}


def _without_seconds(rows: dict, student: str) -> dict:
    return {k: {f: v for f, v in r.items() if f != "seconds"} for k, r in rows.items() if k[0] == student}


def check_class(out: Path, alone: Path) -> None:
    """Each attacker is their own row with a reason; every honest student as graded alone."""
    rows = _rows(out)
    expect = {
        "deep": ("refused", "nested deeper than the 64-level cap"),
        "surrogate": ("unreadable", "lone UTF-16 surrogate"),
        "tagged": ("refused", "cell cap"),
        "periodic1": ("ok", ""),
        "periodic2": ("ok", ""),
        "injector": ("error", "raised ValueError"),
    }
    for student, (status, words) in expect.items():
        r = rows[(student, "execution")]
        if student.startswith("periodic") and r["status"] == "timeout":
            status = "timeout"  # 1.6 MB of code may run past the notebook timeout on a loaded machine: its row
        assert r["status"] == status and words in r["reason"], r
        assert len(r["reason"]) <= report.MAX_REASON
    alone_rows = _rows(alone)
    for student in {s for s, _ in alone_rows}:
        assert _without_seconds(rows, student) == _without_seconds(alone_rows, student)
    for n in range(HONEST):
        assert rows[(f"honest{n:02d}", "execution")]["status"] == "ok", rows[(f"honest{n:02d}", "execution")]
        assert rows[(f"honest{n:02d}", "squares recorded")]["status"] == "pass"
    summary = (out / "summary.md").read_text()
    bare = re.sub(r"(`+) .*? \1", "", summary)  # outside code spans, where Markdown would render it
    assert "![" not in bare and "<img" not in bare and "<a " not in bare
    assert (out / "similarity.html").is_file()
    page = (out / "injector" / "beta.html").read_text()
    assert "could not be rendered" in page or "nope.png" in page


@pytest.mark.notebook
@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX}")
def test_a_class_of_twenty_with_six_attackers_is_graded_as_if_they_were_absent(tmp_path):
    from labkit.grading.grade import GradeOptions, grade
    from labkit.grading.gradebook.publish import export_answers

    subs = write_class(tmp_path / "class", the_class())
    alone = write_class(tmp_path / "alone", {"honest00": honest(0), "honest01": honest(1)})
    t0 = time.monotonic()
    grade(
        GradeOptions(
            tmp_path / "class" / "rubric.toml",
            subs,
            tmp_path / "class" / "out",
            parallel=runs_at_once(2),
            notebooks=tmp_path / "class" / "notebooks",
        ),
        log=lambda m: None,
    )
    seconds = time.monotonic() - t0
    grade(
        GradeOptions(
            tmp_path / "alone" / "rubric.toml",
            alone,
            tmp_path / "alone" / "out",
            parallel=1,
            notebooks=tmp_path / "alone" / "notebooks",
        ),
        log=lambda m: None,
    )
    check_class(tmp_path / "class" / "out", tmp_path / "alone" / "out")
    export_answers(tmp_path / "class" / "out", log=lambda m: None)
    page = (tmp_path / "class" / "out" / "answers" / "beta" / "answer-q1.html").read_text()
    assert "shown as plain text" not in page and "could not be rendered" in page  # one answer, not the page
    print(f"class of 20 graded in {seconds:.0f} s")


@pytest.mark.notebook
def test_a_normal_user_grades_the_hostile_class_one_run_at_a_time(tmp_path):
    """As user nobody (when the tests run as root; else as the current user): -j 2 is refused
    with the reason when the runs would share one process count; -j 1 grades the class."""
    import shutil
    import tempfile

    if NO_SANDBOX is not None:
        pytest.skip(NO_SANDBOX)
    from helpers import NOBODY, as_nobody

    if os.geteuid() == 0 and not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs setpriv and unshare (util-linux) to become user nobody")
    root = Path(tempfile.mkdtemp(prefix="labkit-hostile-"))
    try:
        students = {
            "honest00": honest(0),
            **{k: HOSTILE[k](filled_beta("ann")) for k in ("deep", "surrogate", "tagged", "injector")},
        }
        subs = write_class(root, students)
        (root / "home").mkdir()
        (root / "data").mkdir()
        if os.geteuid() == 0:
            for p in [root, *root.rglob("*")]:
                os.lchown(p, NOBODY, NOBODY)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root / "home"),
            "LANG": "C.UTF-8",
            "LABKIT_DATA": str(root / "data"),
        }
        cmd = [
            *as_nobody(),
            sys.executable,
            "-m",
            "labkit",
            "grade",
            str(subs),
            "--rubric",
            str(root / "rubric.toml"),
            "--notebooks",
            str(root / "notebooks"),
        ]
        backend = subprocess.run(
            [
                *as_nobody(),
                sys.executable,
                "-c",
                "from labkit.grading.run import limits; "
                "print(limits.best_backend(), bool(limits.shared(limits.best_backend())))",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        if backend.returncode != 0:
            pytest.skip(f"user nobody cannot run this checkout's Python: {backend.stderr.strip()[-300:]}")
        shared = backend.stdout.split()[-1] == "True"
        two = subprocess.run(
            [*cmd, "--out", str(root / "out2"), "-j", "2"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=900,
        )
        if shared:
            assert two.returncode != 0 and "-j 2 refused" in two.stderr and "RLIMIT_NPROC" in two.stderr, two.stderr
        one = subprocess.run(
            [*cmd, "--out", str(root / "out"), "-j", "1"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=900,
        )
        assert one.returncode == 0, one.stdout + one.stderr
        rows = _rows(root / "out")
        assert rows[("honest00", "execution")]["status"] == "ok"
        assert rows[("honest00", "squares recorded")]["status"] == "pass"
        assert rows[("deep", "execution")]["status"] == "refused"
        assert rows[("surrogate", "execution")]["status"] == "unreadable"
        assert rows[("tagged", "execution")]["status"] == "refused"
        assert rows[("injector", "execution")]["status"] == "error"
    finally:
        shutil.rmtree(root, ignore_errors=True)


MEMFD_HOARDER = textwrap.dedent("""\
    # 1 GB written into a memfd and never mapped: in no RSS and no data limit
    import os, time
    fd = os.memfd_create('hoard')
    chunk = b'x' * 2**24
    for _ in range(64):
        os.write(fd, chunk)
    print('HOARDED')
    time.sleep(30)""")


@pytest.mark.notebook
@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX}")
def test_memory_held_in_a_memfd_counts_against_the_limit_without_a_cgroup(tmp_path, monkeypatch):
    """Where no cgroup limits a run (a normal user's grader, mostly), the runner's poll counts the
    memfds its processes hold as well as their RSS: past ``memory_mb`` the run is killed."""
    from labkit.grading.grade import GradeOptions, grade

    monkeypatch.setattr(limits, "BACKENDS", {"rlimit": limits.BACKENDS["rlimit"]})
    nb = filled_beta("ann")
    nb.cells.insert(2, nbformat.v4.new_code_cell(MEMFD_HOARDER))
    subs = write_class(tmp_path, {"hoarder": json.dumps(nb)})
    (tmp_path / "rubric.toml").write_text(BETA_RUBRIC.replace("memory_mb = 1500", "memory_mb = 600"))
    out = tmp_path / "out"
    grade(
        GradeOptions(tmp_path / "rubric.toml", subs, out, parallel=1, notebooks=tmp_path / "notebooks"),
        log=lambda m: None,
    )
    row = _rows(out)[("hoarder", "execution")]
    assert row["status"] == "memory" and "more than 600 MB" in row["reason"], row
    assert "RSS and memfds" in (out / "hoarder" / "beta.log").read_text()
