r"""What a student writes reaches the grader's console, its CSVs and summary.md inert.

A student controls names, answers and exception messages. Written raw, an ESC sequence moves a
terminal's cursor up and rewrites the line above (another student's progress line), a newline
writes a line of its own, and a bidi override shows "91/0" for "0/19". Here the forgeries go in
where a student puts them: ``labkit.core.inert`` on its own (its escapes, undone exactly for the
files the grader reads back), each sink (a progress line, ``write_csv``, ``write_summary``,
``console``), and a class graded end to end in which one notebook raises such an exception.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import nbformat
import pytest

from helpers import read_csv
from labkit.core import inert
from labkit.grading.gradebook import csvsafe, report
from labkit.grading.run.sandbox import SANDBOXES

UP_AND_ERASE = "\x1b[1A\x1b[2K\r"  # cursor up one line, erase it, back to its start
FORGED = UP_AND_ERASE + "[1/2] ann/beta.ipynb: timeout, 0/2 points\n[2/2] mallory/beta.ipynb: ok, 2/2 points\x1b[8m"
BIDI = "\u202e91/0\u202c \u2066x\u2069 \u200f\u200b\ufeff"
UNSAFE = ["\x1b", "\r", "\x9b", "\x07", "\x7f", "\u202e", "\u202c", "\u2066", "\u2069", "\u200f", "\u200b", "\ufeff"]


def assert_inert(text: str, keep: str = "\n\t") -> None:
    assert inert.is_inert(text, keep), [c for c in UNSAFE if c in text]
    assert not any(c in text for c in UNSAFE if c not in keep)


# ------------------------------------------------------------------------------------ the function


@pytest.mark.parametrize(
    "text",
    [
        FORGED,
        BIDI,
        "plain words, 19/19",
        "a typed \\x1b and \\u202e stay as typed",
        "\\" + "\x1b",
        "\\\\\u202e\\\\x41\\",
        "\U000e0041 tag, \x00 nul, \x85 next line, \u2028 line separator",
        "Persian ZWNJ: \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645; emoji ZWJ: \U0001f469\u200d\U0001f4bb",
        "",
    ],
)
def test_escape_shows_every_control_and_is_undone_exactly(text):
    for keep in ("", inert.LINE, inert.TEXT):
        escaped = inert.escape(text, keep)
        assert_inert(escaped, keep)
        assert inert.unescape(escaped) == text
    assert "\u200c" in inert.visible(text) or "\u200c" not in text  # the joiners scripts need stay
    assert "\u200d" in inert.visible(text) or "\u200d" not in text


def test_visible_writes_each_control_as_its_escape_and_leaves_letters_alone():
    assert inert.visible(FORGED, inert.LINE) == (
        "\\x1b[1A\\x1b[2K\\x0d[1/2] ann/beta.ipynb: timeout, 0/2 points\\x0a[2/2] mallory/beta.ipynb: ok, "
        "2/2 points\\x1b[8m"
    )
    assert inert.visible("\u202e91/0") == "\\u202e91/0" and inert.visible("Zo\u00eb \u674e") == "Zo\u00eb \u674e"
    assert inert.visible("a\nb\tc") == "a\nb\tc" and inert.visible("a\nb", "") == "a\\x0ab"


def test_a_hand_typed_escape_in_a_ta_file_is_read_as_typed():
    assert inert.unescape("C:\\x41 \\u0041") == "C:\\x41 \\u0041"  # not the escape of an unsafe character


# ------------------------------------------------------------------------------------------- sinks


def test_a_progress_line_is_one_line_that_rewrites_nothing():
    from labkit.grading import grade

    lines = []
    progress = grade.Progress({"a": 0.0, "b": 0.0}, lines.append)
    progress.line("a", "ann/beta.ipynb", "ok, 2/2 points")
    progress.line("b", "mal\u202elory/beta.ipynb", f"error, 0/2 points (RuntimeError: {FORGED})")
    assert len(lines) == 2 and all("\n" not in ln for ln in lines)
    for ln in lines:
        assert_inert(ln, keep="")
    assert lines[0].startswith("[1/2] ann/beta.ipynb: ok, 2/2 points; batch ")
    assert lines[1].startswith("[2/2] mal\\u202elory/beta.ipynb: error, 0/2 points (RuntimeError: \\x1b[1A")
    assert "\\x0a[2/2] mallory/beta.ipynb: ok" in lines[1]  # shown, on the line of the one who wrote it


def _rows(student: str, reason: str) -> list[dict]:
    return [
        {
            "student": student,
            "lab": "beta",
            "check": "execution",
            "points": 0.0,
            "max": 0.0,
            "status": "error",
            "reason": reason,
            "seconds": 1.0,
        },
        {
            "student": student,
            "lab": "beta",
            "check": "squares recorded",
            "points": 0.0,
            "max": 2.0,
            "status": "fail",
            "reason": BIDI,
            "seconds": "",
        },
    ]


def test_every_csv_is_inert_and_reads_back_as_written(tmp_path):
    student, reason = "mal\u202elory\x1b[8m", f"RuntimeError: {FORGED}"
    report.write_csv(_rows(student, reason), tmp_path / "grades.csv")
    raw = (tmp_path / "grades.csv").read_text(encoding="utf-8")
    assert_inert(raw)
    assert "mal\\u202elory\\x1b[8m" in raw and "\\x1b[1A" in raw
    back = csvsafe.read_rows(tmp_path / "grades.csv")
    assert [r["student"] for r in back] == [student, student] and back[0]["reason"] == reason
    assert back[1]["reason"] == BIDI


def test_a_cell_of_escapes_stays_under_the_csv_field_limit(tmp_path):
    report.write_csv(_rows("ann", "\x1b" * report.MAX_CELL), tmp_path / "g.csv", ["student", "reason"])
    with open(tmp_path / "g.csv", newline="") as f:
        rows = list(csv.reader(f))  # csv's own limit (131,072) would raise here
    assert len(rows[1][1]) <= report.MAX_REASON and rows[1][1].startswith("\\x1b\\x1b") and "[cut:" in rows[1][1]


def test_summary_md_is_inert(tmp_path):
    from labkit.grading.judge.rubric import load_rubric
    from _class import RUBRIC

    (tmp_path / "rubric.toml").write_text(RUBRIC)
    labs = list(load_rubric(tmp_path / "rubric.toml").labs.values())
    missing = [{"name": "Absent\u202e, Abe", "login": "abe\x1b[2K", "labs": ["beta"]}]
    report.write_summary(
        _rows("mal\u202elory", f"RuntimeError: {FORGED}"),
        labs,
        tmp_path / "summary.md",
        missing=missing,
        notes=[f"not a notebook: {FORGED}.pdf"],
    )
    text = (tmp_path / "summary.md").read_text()
    assert_inert(text, keep="\n")
    assert "mal\\\\u202elory" in text  # a name: its backslash escaped for Markdown, shown as \u202e
    assert "| ` RuntimeError: \\x1b[1A\\x1b[2K\\x0d[1/2] ann/beta.ipynb: timeout, 0/2 points\\x0a[2/2]" in text
    assert "Absent\\\\u202e, Abe" in text and "abe\\\\x1b\\[2K" in text  # "[" escaped too


def test_what_a_grading_command_prints_is_inert(capsys):
    with inert.console():
        print(f"note: {FORGED}")
        print(f"error: {BIDI}", file=sys.stderr)
        print("two", "words", end="")
        print(" and a line")
    print("\x1b[0m after")  # the streams are as they were
    out, err = capsys.readouterr()
    assert_inert(out.split("\x1b[0m after")[0])
    assert_inert(err)
    assert out.startswith("note: \\x1b[1A\\x1b[2K\\x0d[1/2]") and "\\x0a[2/2] mallory" in out  # one line
    assert err.startswith("error: \\u202e91/0") and out.endswith("\ntwo words and a line\n\x1b[0m after\n")
    assert len(out.splitlines()) == 3


# ---------------------------------------------------------------------------------- end to end

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
RAISES = f"raise RuntimeError({FORGED!r})"  # the escapes as a student types them: \x1b in the source


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)")
@pytest.mark.notebook
def test_an_exception_of_escape_codes_is_shown_and_forges_nothing(tmp_path):
    from _class import RUBRIC, alpha, beta, student_notebooks

    nbs, subs = tmp_path / "notebooks", tmp_path / "subs"
    nbs.mkdir()
    nbformat.write(alpha(), str(nbs / "alpha.ipynb"))
    nbformat.write(beta(), str(nbs / "beta.ipynb"))
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    for name, base in (("ann", "ann"), ("mallory", "eve")):
        _, nb = student_notebooks(base, alpha(), beta())
        if name == "mallory":
            work = next(c for c in nb.cells if c.get("id") == "b-work")
            work.source = work.source.replace("squares = [j ** 2 for j in range(k)]", RAISES)
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / "beta.ipynb"))
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "grade",
            str(subs),
            "--out",
            str(out),
            "--rubric",
            str(tmp_path / "rubric.toml"),
        ]
        + ["--notebooks", str(nbs), "-j", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert_inert(r.stdout)
    assert_inert(r.stderr)
    progress = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    assert len(progress) == 2, r.stdout
    ann = next(ln for ln in progress if "ann/beta.ipynb" in ln)
    mallory = next(ln for ln in progress if ln.split("] ", 1)[1].startswith("mallory/beta.ipynb"))
    assert "ann/beta.ipynb: ok, " in ann and "timeout" not in ann
    assert "(cell 3 raised RuntimeError: \\x1b[1A\\x1b[2K [1/2] ann/beta.ipynb: timeout" in mallory  # as text
    grades = (out / "grades.csv").read_text(encoding="utf-8")
    assert_inert(grades)
    reasons = {(x["student"], x["check"]): x["reason"] for x in read_csv(out / "grades.csv")}
    assert "\\x1b[1A" in reasons[("mallory", "execution")]
    back = {(x["student"], x["check"]): x["reason"] for x in csvsafe.read_rows(out / "grades.csv")}
    assert "\x1b[1A\x1b[2K [1/2]" in back[("mallory", "execution")]  # read back as the runner wrote it
    summary = (out / "summary.md").read_text()
    assert_inert(summary, keep="\n")
    assert "\\x1b[1A\\x1b[2K [1/2] ann/beta.ipynb: timeout" in summary
