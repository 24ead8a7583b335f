"""A term's loop for Lab 1, as an instructor and two TAs run it, with no scripting by hand.

Thirty students submit Lab 1 on Canvas: honest work (three answer styles), two byte-for-byte
copies of a classmate's notebook, late work (one with an earlier upload), notebooks under other
names, notebooks that crash on their first cell, the kit handed in unfilled and empty files. Four
notebooks run all the way (the costly part); the crashing ones stop at once. The copied notebook
is one that crashes: the similarity report reads what was submitted, not what ran, so its copies
cost no full runs. The instructor grades
Canvas's download as it came, with the course roster; two TAs score the answers in the CSVs
`grade-answers` writes, and one TA's late file disagrees with a score the other gave: the merge
refuses it and names the conflict, and the instructor's one decision (``--prefer``) resolves it.
Then a student who never submitted hands in late, is graded into the same folder (the class
stays whole), and the Canvas export lists what changed since the first export. Every step is a
``python -m labkit`` command; the only choice made by a person is the conflict's.

The rubric is the repository's, with Lab 1's parameters cut (2 epochs on 5000 images, no idle
baselines) and its accuracy bars set for that, so an honest run takes about half its usual time.
"""

from __future__ import annotations

import csv
import json
import sys
import subprocess
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from _lms import CanvasFile, canvas_roster, canvas_zip
import helpers
from helpers import read_csv
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.judge import answers
from labkit.grading.kit.release import release_notebook
from labkit.grading.run.sandbox import SANDBOXES

REPO = Path(__file__).resolve().parents[2]
NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.notebook,
    pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)"),
]

NOTEBOOK = "01_single_node_lr.ipynb"
LASTS = ["abbott", "baker", "chen", "diaz", "evans", "fox"]
FIRSTS = ["ann", "ben", "cara", "dev", "eli"]
NAMES = [f"{last}{first}" for last in LASTS for first in FIRSTS]  # Canvas's names: 30 students
HONEST, COPIED, LATE, MISNAMED = (0, 1, 6), (2, 3), (4, 5), (6, 7, 8)
ORIGINAL = 9  # the classmate whose notebook 2 and 3 hand in
# two plain crashes beside the late one (5) and the misnamed one (8): more would run kernels that test nothing new
CRASHING, UNFILLED, EMPTY = (5, 7, 8, ORIGINAL, 13), range(15, 17), (10, 11, 12, 14, *range(17, 30))
RUN_THROUGH = [*HONEST, 4]  # late 5 and misnamed 7 and 8 crash
MISNAMES = {6: "01_single_node_lr (1).ipynb", 7: "lab1 final version.ipynb", 8: "01_Single_Node_LR.ipynb"}
ANSWER_CELLS = {
    "answer: audit of report 000's 97%": "lab1-audit-answer",
    "answer Q1": "lab1-29",
    "answer Q2": "lab1-31",
    "answer Q3": "lab1-33",
}
STYLES = [  # three ways of answering; each student adds a sentence of their own
    {
        "lab1-audit-answer": "The best full-test accuracy stays below 94%, so 97% was a lucky batch of 50 images.",
        "lab1-29": "The minibatch gradient is noisy and the learning rate is fixed, so the weights keep moving.",
        "lab1-31": "CPU rises to about one core while training and falls back between the runs.",
        "lab1-33": "Nothing is sent over a network: one process holds the data, the weights and the gradients.",
    },
    {
        "lab1-audit-answer": "97% holds for a share of the 50-image batches only; the whole test set never reaches it.",
        "lab1-29": "Each step sees 50 images; their gradient points near the minimum, never exactly at it.",
        "lab1-31": "One busy core during each run, the host line shows other load, memory stays flat.",
        "lab1-33": "All of it is local: memory and one process, so the network plot is flat.",
    },
    {
        "lab1-audit-answer": "The report quoted a batch, not the test set: our best epoch is well under 97%.",
        "lab1-29": "Stochastic steps with a constant rate bounce around the optimum instead of settling.",
        "lab1-31": "The process uses about 100% CPU (one core) and its memory grows once when data loads.",
        "lab1-33": "No cluster is involved, so there is no communication cost at all.",
    },
]


def small_rubric(root: Path) -> Path:
    """The repository's rubric, Lab 1 cut to 2 epochs on 5000 images, with a late penalty."""
    return helpers.small_rubric(
        root,
        [
            (
                'notebook = "01_single_node_lr.ipynb"\n',
                'notebook = "01_single_node_lr.ipynb"\nlate_penalty = { per_day = 0.1, max = 0.5 }\n',
            )
        ],
    )


def honest(i: int):
    nb = nbformat.read(str(REPO / "labkit" / "labs" / "lab1" / NOTEBOOK), as_version=4)
    for c in nb.cells:
        if c.get("id") in STYLES[0]:
            c.source = f"{STYLES[i % 3][c.id]} ({NAMES[i]}: checked against my own run.)"
    return nb


def crashing(i: int):
    nb = honest(i)
    next(c for c in nb.cells if c.get("id") == "lab1-04").source = "import labkit.plotz  # a typo: the run stops here"
    return nb


def submissions() -> list[CanvasFile]:
    """The class as Canvas's download holds it (user ids 5000 + i, attachment ids 90000 + ...)."""

    def data(nb) -> bytes:
        return nbformat.writes(nb).encode()

    files = []
    for i, name in enumerate(NAMES):
        uid, aid = 5000 + i, 90000 + 10 * i
        filename = MISNAMES.get(i, NOTEBOOK)
        if i in COPIED:
            nb = crashing(ORIGINAL)  # byte for byte the classmate's
        elif i in RUN_THROUGH:
            nb = honest(i)
        elif i in CRASHING:
            nb = crashing(i)
        elif i in UNFILLED:
            nb = release_notebook(
                nbformat.read(str(REPO / "labkit" / "labs" / "lab1" / NOTEBOOK), as_version=4), NOTEBOOK
            )[0]
        else:
            nb = nbformat.v4.new_notebook()
        if i == 4:  # uploaded a crashing version on time, then the real one late
            files.append(CanvasFile(name, uid, aid - 5, NOTEBOOK, data(crashing(i))))
            filename = "01_single_node_lr-1.ipynb"
        files.append(CanvasFile(name, uid, aid, filename, data(nb), late=i in LATE))
    return files


def login(i: int) -> str:
    return f"{NAMES[i]}@uni.edu" if i < len(NAMES) else "zhaozoe@uni.edu"


def cli(*args, timeout=1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def score_answers(path: Path, out: Path, pick) -> Path:
    """A TA's copy of an exported answers CSV, every answered row scored by ``pick(row)``."""
    rows = read_csv(path)
    for r in rows:
        if r["student"] not in answers.NOTE_ROWS and r["answer"].strip():
            r["score"], r["comment"] = pick(r)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root = tmp_path_factory.mktemp("term")
    rubric = small_rubric(root)
    people = [(f"{n[:-3].title()}, {n[-3:].title()}", 5000 + i, f"S{1000 + i}", login(i)) for i, n in enumerate(NAMES)]
    roster = canvas_roster(
        root / "roster.csv",
        people + [("Zhao, Zoe", 5030, "S1030", login(30))],
        assignment="Lab 1 (901)",
        points=f"{load_rubric(rubric).labs['lab1'].max_points:g}",
    )
    download = canvas_zip(root / "submissions.zip", submissions())
    out = root / "out"
    t0 = time.monotonic()
    steps = {"grade": cli("grade", download, "--out", out, "--rubric", rubric, "--roster", roster)}
    steps["grade"].seconds = time.monotonic() - t0
    return {"root": root, "out": out, "rubric": rubric, "roster": roster, "steps": steps, "t0": t0}


def rows_of(out: Path) -> dict:
    return {(r["student"], r["check"]): r for r in read_csv(out / "grades.csv") if r["lab"] == "lab1"}


def test_the_download_is_graded_as_it_came(term):
    r, out = term["steps"]["grade"], term["out"]
    assert r.returncode == 0, r.stderr[-3000:]
    assert "imported 30 notebook(s) of 30 student(s) from Canvas's download submissions.zip" in r.stdout
    rows = rows_of(out)
    assert {s for s, _ in rows} == {login(i) for i in range(30)}  # named as the gradebook names them
    for i in RUN_THROUGH:
        assert rows[(login(i), "execution")]["status"] == "ok", (i, rows[(login(i), "execution")])
        assert rows[(login(i), "core accuracy")]["status"] == "pass", (i, rows[(login(i), "core accuracy")])
        assert rows[(login(i), "sgd_step on the grader's batches")]["status"] == "pass"
    for i in MISNAMED:
        assert f"submitted as {MISNAMES[i]!r}" in rows[(login(i), "execution")]["reason"]
    for i in (*CRASHING, *COPIED):
        run = rows[(login(i), "execution")]
        assert run["status"] == "error" and "ModuleNotFoundError" in run["reason"], run
    for i in UNFILLED:
        assert "NotImplementedError" in rows[(login(i), "execution")]["reason"]
    for i in EMPTY:
        assert rows[(login(i), "execution")]["status"] == "unreadable"
    for i in LATE:
        assert (
            rows[(login(i), "late")]["status"] == "late" and "Canvas's LATE mark" in rows[(login(i), "late")]["reason"]
        )
    possible = sum(c.points for c in load_rubric(term["rubric"]).labs["lab1"].checks)
    assert float(rows[(login(4), "late")]["points"]) == pytest.approx(-0.1 * possible)  # 1 day (Canvas's mark) at 10%
    assert float(rows[(login(5), "late")]["points"]) == 0  # nothing earned yet: nothing to take
    assert "the latest of 2 files for this lab" in rows[(login(4), "execution")]["reason"]
    assert (login(12), "late") not in rows
    summary = (out / "summary.md").read_text()
    assert "## Late work (2)" in summary and "| Zhao, Zoe | zhaozoe@uni.edu | lab1 |" in summary
    pairs = {(p["student_a"], p["student_b"]) for p in read_csv(out / "similarity.csv") if p["kind"] == "answers"}
    assert tuple(sorted((login(ORIGINAL), login(2)))) in pairs and tuple(sorted((login(2), login(3)))) in pairs
    assert (out / "summary.html").read_text().count("data:image/png;base64,") == 2
    # the roster's assignment is not titled as the lab: no canvas.csv until its column is named, and it says how
    assert not (out / "canvas.csv").exists() and "--column lab1='Title (id)'" in r.stdout


def test_two_tas_score_the_answers_and_their_one_conflict_is_resolved(term):
    out, root = term["out"], term["root"]
    r = cli("grade-answers", "--out", out)
    assert r.returncode == 0, r.stderr
    exported = {check: out / "answers" / "lab1" / f"{answers.slug(check)}.csv" for check in ANSWER_CELLS}
    # TA 1 takes the audit and Q1; TA 2 takes Q2 and Q3, and also, from the same export, regrades Q1 of one student
    ta1 = [
        score_answers(exported[c], root / f"ta1-{answers.slug(c)}.csv", lambda row: ("1", ""))
        for c in ("answer: audit of report 000's 97%", "answer Q1")
    ]
    r = cli("grade-merge", *ta1, "--out", out)
    assert r.returncode == 0, r.stderr
    ta2 = [
        score_answers(exported[c], root / f"ta2-{answers.slug(c)}.csv", lambda row: ("0.5", "say why"))
        for c in ("answer Q2", "answer Q3")
    ]
    rows = read_csv(exported["answer Q1"])
    regrade = [r for r in rows if r["student"] == login(1)]
    regrade[0]["score"], regrade[0]["comment"] = "0.5", "the noise argument is half the answer"
    q1_by_ta2 = root / "ta2-answer-q1.csv"
    with open(q1_by_ta2, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(regrade)
    before = (out / "grades.csv").read_text()
    r = cli("grade-merge", *ta2, q1_by_ta2, "--out", out)
    assert r.returncode == 2 and "1 conflict(s), nothing merged" in r.stderr, r.stderr
    assert f"lab1/answer Q1/{login(1)}: ta2-answer-q1.csv row 2 gives 0.5" in r.stderr
    assert "ta_scores.csv holds 1 (from ta1-answer-q1.csv" in r.stderr and "--prefer FILE" in r.stderr
    assert (out / "grades.csv").read_text() == before
    # the one decision a person makes: TA 2's regrade stands
    r = cli("grade-merge", *ta2, q1_by_ta2, "--out", out, "--prefer", q1_by_ta2)
    assert r.returncode == 0, r.stderr
    assert "1 conflict(s) won (--prefer)" in r.stdout
    rows = rows_of(out)
    assert (rows[(login(1), "answer Q1")]["points"], rows[(login(0), "answer Q1")]["points"]) == ("0.5", "1")
    assert rows[(login(0), "answer Q2")]["reason"] == "scored by a TA: say why"
    assert not [k for k, v in rows.items() if v["status"] == "pending"]


def test_the_canvas_export_needs_no_hand_edit_and_a_late_student_joins_the_class(term):
    out, root = term["out"], term["root"]
    r = cli("grade-export", "--out", out, "--roster", term["roster"], "--column", "lab1=Lab 1 (901)")
    assert r.returncode == 0, r.stderr
    with open(out / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 1 (901)"]
    assert lines[1][0].strip() == "Points Possible" and len(lines) == 2 + 30
    grades = {ln[3]: ln for ln in lines[2:]}
    assert all(ln[5] != "" for ln in grades.values())  # every grade is there: nothing awaits
    assert grades[login(0)][1] == "5000" and float(grades[login(0)][5]) > 10
    rows = rows_of(out)
    for i in LATE:  # the late penalty is in the grade Canvas gets
        earned = sum(
            float(r["points"]) for (s, c), r in rows.items() if s == login(i) and c not in ("execution", "late")
        )
        assert float(grades[login(i)][5]) == pytest.approx(earned + float(rows[(login(i), "late")]["points"]))
        possible = sum(c.points for c in load_rubric(term["rubric"]).labs["lab1"].checks)
        assert float(rows[(login(i), "late")]["points"]) == pytest.approx(-0.1 * possible)  # now 6 has points to lose
    assert float(grades[login(13)][5]) > 0 and grades[login(25)][5] == "0"  # a crash keeps its answers' scores
    # Zoe hands in late, alone, in a folder of her own, into the class's folder
    late_one = root / "zoe"
    (late_one / login(30)).mkdir(parents=True)
    nbformat.write(honest(3), str(late_one / login(30) / NOTEBOOK))
    r = cli("grade", late_one, "--out", out, "--rubric", term["rubric"])
    assert r.returncode == 0, r.stderr
    assert "[1/1] zhaozoe@uni.edu/01_single_node_lr.ipynb" in r.stdout
    assert len({s for s, _ in rows_of(out)}) == 31
    r = cli("grade-export", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "1 grade(s) changed since the export of" in r.stdout and f"{login(30)} lab1: not exported ->" in r.stdout
    with open(out / "canvas.csv", newline="") as f:
        assert len(list(csv.reader(f))) == 2 + 31
    summary = (out / "summary.md").read_text()
    assert "## Did not submit (0 on the roster)" in summary and "| zhaozoe@uni.edu | lab1 | (not exported) |" in summary


def test_the_pages_go_back_to_canvas(term):
    out = term["out"]
    r = cli("grade-deliver", "--out", out)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(out / "deliver" / "canvas" / "lab1.zip") as zf:
        names = zf.namelist()
    assert len(names) == 30 and f"{NAMES[5]}_LATE_5005_90050_feedback-lab1.html" in names
    assert f"{NAMES[4]}_LATE_5004_90040_feedback-lab1.html" in names  # the graded upload, not the first
    assert len(list((out / "deliver" / "students").glob("*@uni.edu.zip"))) == 31
    seconds = time.monotonic() - term["t0"]
    record = json.dumps({"class_run_seconds": round(seconds), "grade_seconds": round(term["steps"]["grade"].seconds)})
    print(f"\nclass run (grading, merges, exports, late student, delivery): {record}")
    (out / "class-run.json").write_text(record)
