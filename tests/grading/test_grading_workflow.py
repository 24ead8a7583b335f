"""The instructor's workflow after the runs: analysis answers scored by TAs, gradebook exports,
resumable batches, the similarity report and feedback pages that render.

Unit tests first (no notebook runs), then one fixture class of 6 students x 2 labs graded end to
end: a batch killed halfway and resumed (it runs only the rest), the TAs' pages exported and
their scores merged (no notebook runs), the Canvas file exported, one notebook changed and graded
again (it alone runs), and a feedback page opened in headless Chromium. The fixture labs import
no TensorFlow, so the whole module takes about a minute.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import psutil
import pytest

from _class import CODE, KEY_A1, KEY_A2, KEY_B1, PROSE, RUBRIC, STUDENTS, alpha, beta, make_class, student_notebooks
from _ta_scores import _write_rows
from helpers import alive, runs_at_once, read_csv
from labkit.grading.judge import answers, similarity
from labkit.grading.gradebook import exports
from labkit.grading.run.sandbox import SANDBOXES

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LABKIT_CHROMIUM", "/usr/bin/chromium")


# --------------------------------------------------------------------------------------- unit tests


def _questions(tmp: Path, nb_ref):
    from labkit.grading.judge.rubric import load_rubric

    (tmp / "rubric.toml").write_text(RUBRIC)
    nbformat.write(nb_ref, str(tmp / "alpha.ipynb"))
    return answers.questions(load_rubric(tmp / "rubric.toml").labs["alpha"], tmp / "alpha.ipynb")


def test_questions_carry_the_question_the_key_and_the_records_they_name(tmp_path):
    qs = _questions(tmp_path, alpha())
    q1, q2 = qs["answer Q1"], qs["answer Q2"]
    assert (q1.answer_ids, q1.question_ids, q1.max) == (["a-ans1"], ["a-q1"], 2.0)
    assert q1.text == "**Q1.** Why is the recorded `slope` positive?" and q1.key == KEY_A1
    assert q1.records == ["slope"] and q2.records == ["n", "slope"]
    assert answers.numbers({"slope": 2.0512, "n": 50}, q2) == "n = 50; slope = 2.051"


@pytest.mark.parametrize(
    "name, note, text",
    [
        ("ann", "", PROSE["ann"][0]),
        ("cat", "answer cell a-ans1 lost its tag; found by its cell id", PROSE["cat"][0]),
        ("dan", "also read cell", PROSE["dan"][0]),
        ("eve", "", PROSE["eve"][0]),
        ("fay", "answer cell a-ans1 is gone; read the cell after the question (a-q1) instead", PROSE["fay"][0]),
    ],
)
def test_answers_are_found_by_cell_id_and_every_detour_is_noted(tmp_path, name, note, text):
    qs = _questions(tmp_path, alpha())
    a, _ = student_notebooks(name, alpha(), beta())
    found = answers.locate(a, qs)
    assert found["answer Q1"].text == text and found["answer Q1"].found
    assert (note in "; ".join(found["answer Q1"].notes)) if note else found["answer Q1"].notes == []
    if name == "eve":
        assert "a code cell now" in found["answer Q2"].notes[0] and found["answer Q2"].text == PROSE["eve"][1]
    s = answers.score(qs["answer Q1"], found["answer Q1"], None)
    assert (s.status, s.points, s.max) == ("pending", 0.0, 2.0) and s.reason.startswith("awaiting a TA's score")


def test_a_missing_answer_is_reported_not_zero_and_a_placeholder_fails_at_once(tmp_path):
    qs = _questions(tmp_path, alpha())
    a, _ = student_notebooks("ann", alpha(), beta())
    a.cells = [c for c in a.cells if c.id not in ("a-ans1", "a-q1")]
    cells = {c.id: c for c in a.cells}
    cells["a-ans2"].source = answers.PLACEHOLDER
    found = answers.locate(a, qs)
    missing = answers.score(qs["answer Q1"], found["answer Q1"], None)
    assert missing.status == "pending" and "answer cell a-ans1 is not in the notebook" in missing.reason
    empty = answers.score(qs["answer Q2"], found["answer Q2"], None)
    assert (empty.status, empty.points) == ("fail", 0.0) and "placeholder" in empty.reason


def test_a_ta_score_holds_for_the_answer_it_was_given_for(tmp_path):
    qs = _questions(tmp_path, alpha())
    a, _ = student_notebooks("ann", alpha(), beta())
    got = answers.locate(a, qs)["answer Q1"]
    ta = {"score": "1.5", "comment": "say why squares", "answer_sha": got.sha}
    s = answers.score(qs["answer Q1"], got, ta)
    assert (s.status, s.points, s.reason) == ("partial", 1.5, "scored by a TA: say why squares")
    got.text += " Also, the mean of anything non-negative is non-negative."
    s = answers.score(qs["answer Q1"], got, ta)
    assert s.status == "pending" and "a TA scored an earlier version of this answer (1.5/2)" in s.reason


def test_merge_refuses_a_file_with_bad_rows_and_merges_nothing(tmp_path):
    qs = {("alpha", "answer Q1"): answers.Question("alpha", "answer Q1", 2.0, ["a-ans1"])}
    current = {("alpha", "answer Q1", s): "sha" + s for s in ("ann", "bob")}
    tmp = tmp_path
    bad = tmp / "bad.csv"
    bad.write_text(
        "lab,check,student,score,comment\nalpha,answer Q1,ann,1,ok\nalpha,answer Q1,bob,3,\n"
        "alpha,answer Q1,zed,1,\nalpha,answer Q9,ann,1,\nalpha,answer Q1,ann,lots,\n"
    )
    with pytest.raises(answers.ScoresError) as e:
        answers.merge(tmp_path, [bad], qs, current)
    msg = str(e.value)
    for what in (
        "row 3: score 3 is outside 0..2",
        "row 4: no graded notebook of student 'zed'",
        "row 5: no analysis check 'answer Q9'",
        "row 6: score 'lots' is not a number",
        "nothing merged",
    ):
        assert what in msg, what
    assert not (tmp / answers.SCORES_FILE).exists()
    good = tmp / "good.csv"
    good.write_text(
        "lab,check,student,score,comment,answer_sha\nalpha,answer Q1,(question),,,\n"
        "alpha,answer Q1,ann,2,clear,shaann\nalpha,answer Q1,bob,,,shabob\n"
    )
    assert answers.merge(tmp_path, [good], qs, current) == [f"{good}: 1 score(s) merged"]
    assert list(answers.read_scores(tmp_path)) == [("alpha", "answer Q1", "ann")]


def test_winnowing_ignores_names_comments_and_layout_and_finds_the_passages():
    a = similarity.code_doc("a", [textwrap.dedent(CODE["ann"])])
    b = similarity.code_doc("b", [textwrap.dedent(CODE["bob"])])
    c = similarity.code_doc("c", [textwrap.dedent(CODE["dan"])])
    assert a.tokens == b.tokens and a.tokens != c.tokens
    docs = [similarity.fingerprint(d, "code") for d in (a, b, c)]
    pairs = similarity.compare(docs, "code", "alpha", set(), similarity.THRESHOLD)
    assert [(p.a.student, p.b.student, p.similarity) for p in pairs] == [("a", "b", 1.0)]
    runs = similarity.passages(b, pairs[0].shared, similarity.SETTINGS["code"][0])
    assert runs and all(part == 0 for part, _, _ in runs)
    # any match of w + k - 1 tokens shares a fingerprint (the winnowing guarantee)
    k, w = similarity.SETTINGS["code"]
    tokens = [f"t{i}" for i in range(200)]
    other = [f"u{i}" for i in range(50)] + tokens[60 : 60 + w + k - 1] + [f"v{i}" for i in range(50)]
    assert set(similarity.winnow(tokens, k, w)) & set(similarity.winnow(other, k, w))


def test_exports_show_pending_and_leave_it_out_of_canvas():
    class Lab:
        def __init__(self, key, checks):
            self.key, self.title, self.checks = key, key.title(), [type("C", (), {"name": c}) for c in checks]
            self.max_points = 3.0

    labs = [Lab("alpha", ["auto", "answer Q1"])]

    def row(student, check, points, most, status):
        return {
            "student": student,
            "lab": "alpha",
            "check": check,
            "points": points,
            "max": most,
            "status": status,
            "reason": "",
            "seconds": "",
        }

    rows = [
        row("ann", "execution", 0, 0, "ok"),
        row("ann", "auto", 1, 1, "pass"),
        row("ann", "answer Q1", 0, 2, "pending"),
        row("bob", "execution", 0, 0, "ok"),
        row("bob", "auto", 1, 1, "pass"),
        row("bob", "answer Q1", 1.5, 2, "partial"),
    ]
    table, fields = exports.wide(rows, labs)
    assert fields == [
        "student",
        "alpha execution",
        "alpha: auto",
        "alpha: answer Q1",
        "alpha total",
        "total",
        "possible",
        "pending",
        "percent_correct",
        "status",
    ]
    assert [(t["alpha: answer Q1"], t["total"], t["pending"], t["status"]) for t in table] == [
        ("pending", 1.0, 2.0, "pending"),
        (1.5, 2.5, 0.0, "graded"),
    ]
    out, fields, notes = exports.canvas(
        rows,
        labs,
        roster=[
            {"Student": "Ann A", "ID": "11", "SIS User ID": "u1", "SIS Login ID": "ann", "Section": "S1"},
            {"Student": "Bob B", "ID": "12", "SIS User ID": "u2", "SIS Login ID": "bob", "Section": "S1"},
        ],
        columns={"alpha": "Lab A (77)"},
    )
    assert fields == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab A (77)"]
    assert out[0] == {"Student": exports.POINTS_POSSIBLE, "Lab A (77)": "3"}
    assert [(r["ID"], r["Lab A (77)"]) for r in out[1:]] == [("11", ""), ("12", "2.5")]
    assert notes == ["1 lab score(s) left blank: answers await a TA (merge their scores, then export again)"]


def test_feedback_markdown_renders_math_and_drops_what_could_run():
    from labkit.grading.pages.feedback import markdown_html

    out = str(
        markdown_html(
            "# Title\n\nInline $a < b$ and\n\n$$\\frac{1}{2}$$\n\n[link](javascript:alert(1))\n\n"
            "<script>alert(1)</script><img src=x onerror=alert(1)>"
        )
    )
    assert "<h1" in out and out.count("<math") == 2 and "<mfrac>" in out and "$" not in out
    assert "<script" not in out and "onerror" not in out and 'href="javascript' not in out


# -------------------------------------------------------------------------------- the class, end to end

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)")


def _grade_cli(k: dict, *extra) -> list[str]:
    return [
        sys.executable,
        "-u",
        "-m",
        "labkit",
        "grade",
        str(k["subs"]),
        "--out",
        str(k["out"]),
        "--rubric",
        str(k["rubric"]),
        "--notebooks",
        str(k["notebooks"]),
        *extra,
    ]


def _outcomes(out: Path) -> set:
    return {(p.parent.parent.name, p.parent.name) for p in (out / ".grader").glob("*/*/outcome.json")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded by a batch killed halfway (SIGKILL: nothing of it may survive) and resumed."""
    from labkit.grading.grade import GradeOptions, grade

    k = make_class(tmp_path_factory.mktemp("workflow"))
    every = {(s, lab) for s in STUDENTS for lab in ("alpha", "beta")}
    first = subprocess.Popen(
        _grade_cli(k, "-j", str(runs_at_once(2))), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, tree = [], {}
    try:
        for line in first.stdout:  # every process the batch ran so far (at any one line, all may be between jobs)
            lines.append(line)
            tree.update((p.pid, p) for p in psutil.Process(first.pid).children(recursive=True))
            if line.startswith("[6/12]"):
                break
    finally:
        first.kill()
        first.wait(30)
    assert tree, "".join(lines)
    _, left = psutil.wait_procs(list(tree.values()), timeout=30)  # the runners and kernels end with the grader
    assert alive([p.pid for p in left]) == []
    done_before = {(s, Path(lab).name) for s, lab in _outcomes(k["out"])}
    assert 6 <= len(done_before) < 12
    log = []
    resumed = grade(
        GradeOptions(k["rubric"], k["subs"], k["out"], parallel=runs_at_once(2), notebooks=k["notebooks"]),
        log=log.append,
    )
    k.update(first_lines=lines, done_before=done_before, resumed=resumed, resume_log=log, every=every)
    return k


@needs_sandbox
@pytest.mark.notebook
def test_a_killed_batch_resumes_with_only_the_rest(graded):
    ran, kept = set(graded["resumed"].ran), set(graded["resumed"].kept)
    assert kept == graded["done_before"] and ran == graded["every"] - kept and len(ran) >= 1
    progress = [ln for ln in graded["first_lines"] if ln.startswith("[")]
    assert progress[0].startswith("[1/12] ") and "; batch 0:" in progress[0] and ", ETA " in progress[0]
    assert any(ln.startswith(f"[{len(ran)}/{len(ran)}] ") and ln.endswith("done") for ln in graded["resume_log"])
    rows = read_csv(graded["out"] / "grades.csv")
    assert {(r["student"], r["lab"]) for r in rows} == graded["every"] and len(rows) == 6 * (5 + 3)


@needs_sandbox
@pytest.mark.notebook
def test_answers_are_pending_in_every_total_until_scored(graded):
    rows = {(r["student"], r["lab"], r["check"]): r for r in read_csv(graded["out"] / "grades.csv")}
    assert rows[("ann", "alpha", "answer Q1")]["status"] == "pending"
    assert rows[("ann", "alpha", "slope recorded")]["status"] == "pass"
    assert "lost its tag; found by its cell id" in rows[("cat", "alpha", "answer Q1")]["reason"]
    assert "also read cell" in rows[("dan", "alpha", "answer Q1")]["reason"]
    assert rows[("eve", "alpha", "execution")]["status"] == "error"  # the retyped cell raised
    assert rows[("eve", "alpha", "answer Q2")]["status"] == "pending"  # and still counts
    assert rows[("fay", "beta", "answer Q1")]["status"] == "fail"
    summary = (graded["out"] / "summary.md").read_text()
    assert "| ann | 3/6 (+3 pending) | 1/2 (+1 pending) | 4/8 (+4 pending) |" in summary
    assert "## Awaiting a TA" in summary
    wide = {r["student"]: r for r in read_csv(graded["out"] / "final_grades.csv")}
    assert wide["ann"]["alpha: answer Q1"] == "pending" and wide["ann"]["status"] == "pending"
    page = (graded["out"] / "ann" / "alpha.html").read_text()
    assert "3/6 points (2 answers worth 3 points awaiting a TA)" in page


@needs_sandbox
@pytest.mark.notebook
def test_similarity_flags_the_copied_pair_only(graded):
    pairs = read_csv(graded["out"] / "similarity.csv")
    flagged = {(p["kind"], p["student_a"], p["student_b"]) for p in pairs}
    assert ("code", "ann", "bob") in flagged and ("answers", "ann", "bob") in flagged
    assert {(a, b) for _, a, b in flagged} == {("ann", "bob")}, pairs
    page = (graded["out"] / "similarity.html").read_text()
    assert "it changes no points" in page and "def avg_sq(vals):" in page and "def mean_square_slope(values):" in page


@needs_sandbox
@pytest.mark.notebook
def test_feedback_pages_hold_nothing_of_the_key_or_classmates(graded):
    for student in STUDENTS:
        for lab in ("alpha", "beta"):
            page = (graded["out"] / student / f"{lab}.html").read_text()
            assert KEY_A1 not in page and KEY_A2 not in page and KEY_B1 not in page
            assert not any(PROSE[o][0] in page for o in STUDENTS if o != student and PROSE[o][0] != PROSE[student][0])
            assert "cdnjs" not in page and "<script" not in page


@needs_sandbox
@pytest.mark.browser
@pytest.mark.notebook
def test_feedback_page_renders_in_chromium(graded):
    """Headless Chromium (Debian's, through Playwright) opens a feedback page with every request
    outside the page refused: no `<p>` or `$$` shows as text, the equations are laid out as math,
    the figure loads, and the check table is the first thing on the page."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's browser (apt-get install -y chromium)")
    pytest.importorskip("playwright", reason="pip package playwright is not installed (requirements-test.txt)")
    from playwright.sync_api import sync_playwright

    page_path = graded["out"] / "ann" / "alpha.html"
    requests = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri(), wait_until="load")
            text = page.inner_text("body")
            assert "<p>" not in text and "$$" not in text and "$w = 1$" not in text
            assert "Inline HTML is rendered, not shown." in text
            boxes = page.eval_on_selector_all(
                "math",
                "ms => ms.map(m => [m.getAttribute('display'), "
                "m.getBoundingClientRect().width, m.getBoundingClientRect().height])",
            )
            block = [b for b in boxes if b[0] == "block"]
            assert block and block[0][1] > 50 and block[0][2] > 20, boxes  # a fraction with a sum: tall and wide
            assert page.eval_on_selector("math[display=block]", "m => !!m.querySelector('mfrac')")
            imgs = page.eval_on_selector_all("img", "is => is.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
            assert imgs and all(c and w >= 100 and h >= 100 for c, w, h in imgs), imgs
            first = page.evaluate("() => document.querySelector('main').firstElementChild.id")
            assert first.endswith("-grade")
            (REPO / "out" / "browser").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(REPO / "out" / "browser" / "feedback-page.png"), full_page=True)
        finally:
            browser.close()
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []


# last: it changes a submission and merges scores, which the tests above do not expect
@needs_sandbox
@pytest.mark.notebook
def test_ta_workflow_export_merge_canvas_and_regrade_one_notebook(graded):
    from labkit.grading.grade import GradeOptions, grade

    out = graded["out"]
    executed = {p: p.stat().st_mtime_ns for p in out.glob("*/*.ipynb")}
    lacking = {
        (s, lab): (row["status"], row["reason"])
        for s, lab in sorted(graded["every"])
        if not (out / s / f"{lab}.ipynb").is_file()
        for row in graded["resumed"].rows
        if (row["student"], row["lab"], row["check"]) == (s, lab, "execution")
    }
    assert len(executed) == 12, f"no executed notebook for {lacking}; the resumed batch said {graded['resume_log']}"
    r = subprocess.run(
        [sys.executable, "-m", "labkit", "grade-answers", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    q1 = out / "answers" / "alpha" / "answer-q1.csv"
    table = read_csv(q1)
    assert [t["student"] for t in table] == ["(question)", "(answer key)"] + STUDENTS
    assert table[0]["answer"] == "**Q1.** Why is the recorded `slope` positive?" and table[1]["answer"] == KEY_A1
    by = {t["student"]: t for t in table}
    assert by["ann"]["answer"] == PROSE["ann"][0] and by["ann"]["numbers"].startswith("slope = 1.")
    assert by["eve"]["numbers"].startswith("slope = ")  # recorded before the retyped cell stopped eve's run
    page = (out / "answers" / "alpha" / "answer-q1.html").read_text()
    assert (
        "Answer key" in page
        and "<math" in (out / "answers" / "alpha" / "answer-q1.html").read_text()
        and PROSE["dan"][0] in page
    )
    # the TA scores every answer of Q1 (a comment for ann), and only ann's of the other questions
    for t in table[2:]:
        t["score"], t["comment"] = ("1.5", "why is a square non-negative?") if t["student"] == "ann" else ("2", "")
    _write_rows(q1, table)
    others = []
    for path in (out / "answers" / "alpha" / "answer-q2.csv", out / "answers" / "beta" / "answer-q1.csv"):
        t = read_csv(path)
        for row in t:
            if row["student"] == "ann":
                row["score"] = "1"
        _write_rows(path, t)
        others.append(path)
    r = subprocess.run(
        [sys.executable, "-m", "labkit", "grade-merge", str(q1), *map(str, others), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*.ipynb")} == executed  # no notebook ran
    rows = {(r["student"], r["lab"], r["check"]): r for r in read_csv(out / "grades.csv")}
    assert (rows[("ann", "alpha", "answer Q1")]["status"], rows[("ann", "alpha", "answer Q1")]["points"]) == (
        "partial",
        "1.5",
    )
    assert rows[("ann", "alpha", "answer Q1")]["reason"] == "scored by a TA: why is a square non-negative?"
    assert "| ann | 5.5/6 | 2/2 | 7.5/8 |" in (out / "summary.md").read_text()
    assert read_csv(out / "final_grades.csv")[0]["status"] == "graded"
    page = (out / "ann" / "alpha.html").read_text()
    assert "scored by a TA: why is a square non-negative?" in page and "awaiting a TA" not in page
    # bad scores: a clear error, nothing merged, the reports as they were
    bad = out / "bad.csv"
    bad.write_text("lab,check,student,score\nalpha,answer Q1,bob,9\n")
    before = (out / "grades.csv").read_text()
    r = subprocess.run(
        [sys.executable, "-m", "labkit", "grade-merge", str(bad), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "score 9 is outside 0..2" in r.stderr and "nothing merged" in r.stderr
    assert (out / "grades.csv").read_text() == before

    # Canvas: matched through the roster (Canvas's own export), the lab columns named as Canvas knows them
    roster = out.parent / "canvas_export.csv"
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Alpha (901)", "Beta (902)"])
        w.writerow(["    Points Possible", "", "", "", "", "6", "2"])
        for i, s in enumerate(STUDENTS):
            w.writerow([f"{s.title()}, Student", str(100 + i), f"U{i}", s, "Sec 1", "", ""])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "grade-export",
            "--out",
            str(out),
            "--roster",
            str(roster),
            "--column",
            "alpha=Alpha (901)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    with open(out / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Alpha (901)", "Beta (902)"]
    assert lines[1] == ["    Points Possible", "", "", "", "", "6", "2"]
    canvas = {ln[3]: ln for ln in lines[2:]}
    assert canvas["ann"] == ["Ann, Student", "100", "U0", "ann", "Sec 1", "5.5", "2"]
    assert canvas["bob"][5:] == ["", ""]  # bob's Q2 and beta answers await a TA: left blank for Canvas
    assert "left blank: answers await a TA" in r.stdout

    # bob rewrites an answer: grading again runs his notebook alone, and his old score is pending again
    nb = nbformat.read(str(graded["subs"] / "bob" / "alpha.ipynb"), as_version=4)
    next(c for c in nb.cells if c.id == "a-ans1").source = "Squares are non-negative, so their mean is too."
    nbformat.write(nb, str(graded["subs"] / "bob" / "alpha.ipynb"))
    again = grade(
        GradeOptions(graded["rubric"], graded["subs"], out, parallel=runs_at_once(2), notebooks=graded["notebooks"]),
        log=lambda m: None,
    )
    assert again.ran == [("bob", "alpha")] and len(again.kept) == 11
    rows = {(r["student"], r["lab"], r["check"]): r for r in again.rows}
    assert rows[("bob", "alpha", "answer Q1")]["status"] == "pending"
    assert "a TA scored an earlier version of this answer (2/2)" in rows[("bob", "alpha", "answer Q1")]["reason"]
    assert rows[("ann", "alpha", "answer Q1")]["points"] == 1.5  # everyone else's scores stay
    canvas = {ln[3]: ln for ln in csv.reader(open(out / "canvas.csv", newline=""))}
    assert canvas["ann"][5] == "5.5" and canvas["bob"][5] == ""  # the roster and names are kept
