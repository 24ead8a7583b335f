"""What the pages and CSVs say, in pure Python (no notebook runs): CSV cells a spreadsheet
cannot run, feedback a student can act on (the rubric's descriptions, the gate in one line, what
to do next, TensorFlow's start-up lines as a note, outputs cut with a note, one cell number), and
the TA's view (named values, no stray pilcrow, the "not answered" reason kept after a merge,
anonymous codes, flagged pairs, every matching passage)."""

from __future__ import annotations

import csv
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from labkit.grading.judge import answers, similarity
from labkit.grading.gradebook import csvsafe, report
from labkit.grading.pages import feedback
from labkit.grading.judge.rubric import RubricError, load_rubric


# ------------------------------------------------------------------------------------------- CSV


@pytest.mark.parametrize(
    "text",
    [
        '=HYPERLINK("http://x","y")',
        "+1+cmd|' /C calc'!A0",
        "-2+3",
        "@SUM(A1)",
        "\tx",
        "\rx",
        "'=already",
        "''-x",
        "plain",
        "",
        "-1",
        "+2.5",
        "-1e3",
        "'quoted",
    ],
)
def test_escape_is_undone_exactly_and_leaves_numbers_as_numbers(text):
    escaped = csvsafe.escape(text)
    assert csvsafe.unescape(escaped) == text
    assert escaped[:1] not in csvsafe.TRIGGERS or re.fullmatch(r"[+-][\d.e]+", escaped)
    if text in ("-1", "+2.5", "-1e3", "plain", ""):
        assert escaped == text


def test_every_csv_writer_escapes_and_the_grader_reads_its_own_back(tmp_path):
    rows = [
        {
            "student": "ann",
            "lab": "l",
            "check": "=cmd",
            "points": -1.0,
            "max": 2.0,
            "status": "fail",
            "reason": "@SUM(1)",
            "seconds": "",
        }
    ]
    report.write_csv(rows, tmp_path / "g.csv")
    raw = list(csv.reader(open(tmp_path / "g.csv", newline="")))
    assert raw[1] == ["ann", "l", "'=cmd", "-1", "2", "fail", "'@SUM(1)", ""]
    assert csvsafe.read_rows(tmp_path / "g.csv")[0]["check"] == "=cmd"


def _questions():
    return {("l", "answer Q1"): answers.Question("l", "answer Q1", 2.0, ["analysis"])}


def test_merge_reads_escaped_comments_back_and_still_refuses_a_negative_score(tmp_path):
    current = {("l", "answer Q1", "ann"): "shaann", ("l", "answer Q1", "bob"): "shabob"}
    scored = tmp_path / "ta.csv"
    report.write_csv(
        [
            {
                "lab": "l",
                "check": "answer Q1",
                "student": "ann",
                "score": "1",
                "comment": "=explain more",
                "answer_sha": "shaann",
            }
        ],
        scored,
        ["lab", "check", "student", "score", "comment", "answer_sha"],
    )
    assert "'=explain more" in scored.read_text()
    answers.merge(tmp_path, [scored], _questions(), current)
    assert answers.read_scores(tmp_path)[("l", "answer Q1", "ann")]["comment"] == "=explain more"
    assert "'=explain more" in (tmp_path / answers.SCORES_FILE).read_text()  # escaped on disk too
    bad = tmp_path / "bad.csv"
    bad.write_text("lab,check,student,score\nl,answer Q1,bob,-1\nl,answer Q1,bob,'-1\n")
    with pytest.raises(answers.ScoresError) as e:
        answers.merge(tmp_path, [bad], _questions(), current)
    assert "row 2: score -1 is outside 0..2" in str(e.value) and 'row 3: score "\'-1" is not a number' in str(e.value)


def test_the_rubric_validates_page_output_kb(tmp_path):
    base = (
        "[labs.l]\nnotebook = 'l.ipynb'\n{}\n[[labs.l.checks]]\nname = 'r'\nkind = 'record'\npoints = 1\nrecord = 'x'\n"
    )
    (tmp_path / "r.toml").write_text(base.format("page_output_kb = 64"))
    assert load_rubric(tmp_path / "r.toml").labs["l"].page_output_kb == 64
    (tmp_path / "r.toml").write_text(base.format("page_output_kb = -1"))
    with pytest.raises(RubricError, match="page_output_kb must be a positive number"):
        load_rubric(tmp_path / "r.toml")


# -------------------------------------------------------------------------------- feedback pages

TF_STDERR = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1795711228.214059   16667 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. To turn "
    "them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
    "I0000 00:00:1795711228.587953   16667 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.\n"
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.\n"
)


def _row(check, status, reason="", points=0.0, most=1.0):
    return {
        "student": "s",
        "lab": "l",
        "check": check,
        "points": points,
        "max": most,
        "status": status,
        "reason": reason,
        "seconds": "",
    }


GATE = "no points while the lab's evidence does not hold ('sgd_step' is fail); on its own this check was {}"


@pytest.fixture
def run(tmp_path):
    """A submitted notebook of five cells, and its executed copy as papermill leaves it after an
    error in the fourth: the injected parameters cell after the second, error banners on top and above."""
    cells = [
        new_markdown_cell("# Lab", id="c1"),
        new_code_cell("n = 1", id="c2", metadata={"tags": ["parameters"]}),
        new_code_cell("import tensorflow", id="c3"),
        new_code_cell("1 / 0", id="c4"),
        new_markdown_cell("**Q1.** Why?", id="c5"),
    ]
    nb = new_notebook(cells=cells)
    nbformat.write(nb, str(tmp_path / "src.ipynb"))
    ex = nbformat.from_dict(nbformat.reads(nbformat.writes(nb), as_version=4))
    banner = new_markdown_cell(
        "<span style='color:red'>An Exception was encountered</span>",
        id="pm1",
        metadata={"tags": ["papermill-error-cell-tag"]},
    )
    injected = new_code_cell("n = 2", id="inj", metadata={"tags": ["injected-parameters"]})
    banner2 = new_markdown_cell(banner.source, id="pm2", metadata={"tags": ["papermill-error-cell-tag"]})
    ex.cells = [banner, ex.cells[0], ex.cells[1], injected, ex.cells[2], banner2, ex.cells[3], ex.cells[4]]
    ex.cells[4].outputs = [new_output("stream", name="stderr", text=TF_STDERR + "a real warning\n")]
    ex.cells[6].outputs = [
        new_output(
            "error",
            ename="ZeroDivisionError",
            evalue="division by zero",
            traceback=["ZeroDivisionError: division by zero"],
        )
    ]
    nbformat.write(ex, str(tmp_path / "ex.ipynb"))
    return tmp_path


def test_the_page_numbers_cells_as_jupyterlab_and_the_reason_links_there(run):
    rows = [
        _row("execution", "error", "cell 4 raised ZeroDivisionError: division by zero", most=0.0),
        _row("accuracy", "fail", "below 0.9"),
    ]
    feedback.write_feedback(str(run / "ex.ipynb"), rows, str(run / "p.html"), "s: l", source=str(run / "src.ipynb"))
    page = (run / "p.html").read_text()
    prompts = re.findall(r'id="(lk[0-9a-f]{12})-cell-(\d)">([^<]*)<', page)
    assert [(n, label) for _, n, label in prompts] == [(str(i), f"Cell {i}") for i in range(1, 6)]
    nonce = prompts[0][0]
    assert f'<a href="#{nonce}-cell-4">cell 4</a> raised ZeroDivisionError' in page
    assert ">grader<" in page and "An Exception was encountered" not in page


def test_tensorflow_start_up_lines_are_a_note_and_a_real_warning_stays(run):
    rows = [_row("execution", "ok", most=0.0)]
    feedback.write_feedback(str(run / "ex.ipynb"), rows, str(run / "p.html"), "s: l", source=str(run / "src.ipynb"))
    page = (run / "p.html").read_text()
    stderr = re.findall(r'data-mime-type="application/vnd.jupyter.stderr">\s*<pre>(.*?)</pre>', page, re.S)
    assert stderr[0].strip() == "a real warning"
    assert "TensorFlow's start-up messages (4 line(s) on stderr; not errors" in page
    assert re.search(r"<details class=\"labkit-note\"><summary>[^<]*</summary><pre>WARNING: All log messages", page)


def test_the_table_shows_descriptions_folds_the_gate_and_ends_with_what_to_do(tmp_path):
    rows = [
        _row("execution", "ok", most=0.0),
        _row("sgd_step", "fail", "your gradient is off by 2x", most=2.0),
        _row("accuracy", "unverified", GATE.format("pass")),
        _row("speedup", "unverified", GATE.format("pass")),
        _row("figure", "unverified", GATE.format("fail")),
        _row("answer Q1", "pending", "awaiting a TA's score"),
    ]
    feedback.write_feedback(
        None,
        rows,
        str(tmp_path / "p.html"),
        "s: l",
        descriptions={"sgd_step": "your sgd_step against the grader's on fresh inputs"},
    )
    page = (tmp_path / "p.html").read_text()
    assert (
        "your sgd_step against the grader&#39;s on fresh inputs" in page
        or "your sgd_step against the grader's on fresh inputs" in page
    )
    assert page.count("unverified") == 1
    assert (
        "3 checks: accuracy, speedup, figure</td><td>0/3</td>" in page
        and "no points until the lab's evidence holds ('sgd_step' is fail)" in page
    )
    steps = feedback.next_steps(rows)
    assert steps[0].startswith("The grader could not confirm your results ('sgd_step' is fail)")
    assert "Checks that did not pass: sgd_step." in steps[1] and "make check" in steps[2]
    assert steps[-1] == "1 written answer(s) await a TA's score: nothing to do for them."
    assert page.index("What to do next") > page.index("3 checks:")
    assert feedback.next_steps(
        [_row("execution", "ok"), _row("a", "pass", points=1.0), _row("late", "late", "submitted late by 2.0 h")]
    ) == ["Every check the grader scores passed: nothing to do."]


def test_huge_outputs_and_cells_are_cut_with_a_note(tmp_path):
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | x |\n" for i in range(200_000))
    nb = new_notebook(
        cells=[
            new_markdown_cell(table, id="m"),
            new_code_cell(
                "show()",
                id="c",
                outputs=[
                    new_output(
                        "display_data", data={"text/html": "<p>" + "y" * (16 * 2**20) + "</p>", "text/plain": "h"}
                    ),
                    new_output("display_data", data={"text/markdown": table, "text/plain": "t"}),
                    new_output("display_data", data={"image/png": "A" * (2 * 2**20), "text/plain": "a figure"}),
                    new_output("stream", name="stdout", text="z\n" * 2**20),
                ],
            ),
        ]
    )
    nbformat.write(nb, str(tmp_path / "ex.ipynb"))
    feedback.write_feedback(
        str(tmp_path / "ex.ipynb"), [_row("execution", "ok", most=0.0)], str(tmp_path / "p.html"), "s: l", output_kb=64
    )
    page = (tmp_path / "p.html").read_text()
    assert len(page) < 2 * 2**20
    assert page.count("the rubric&#x27;s page_output_kb") + page.count("the rubric's page_output_kb") == 5
    assert "This cell&#x27;s text is" in page or "This cell's text is" in page
    assert "image/png 2.0 MB" in page and "a figure" in page


# ---------------------------------------------------------------------------------- the TA's view


def test_the_students_numbers_are_named_values_never_json_cut_mid_key():
    q = answers.Question("l", "q", 1.0, ["analysis"], records=["history", "rate", "steps"])
    records = {
        "history": {"loss": [float(i) for i in range(50)], "accuracy": [0.5, 0.75]},
        "rate": 0.123456,
        "steps": {f"worker{i}": 100 + i for i in range(20)},
    }
    values = dict(answers.named_values(records, q))
    assert values["history.loss"] == "[0, 1, 2, ..., 48, 49] (50 values)"
    assert values["history.accuracy"] == "[0.5, 0.75]" and values["rate"] == "0.1235"
    assert values["steps.worker0"] == "100" and values["steps"] == "... 8 more key(s)"
    assert answers.numbers(records, q).startswith("history.loss = [0, 1, 2, ..., 48, 49] (50 values); ")


def test_question_headers_carry_no_pilcrow():
    out = str(feedback.markdown_html("## Q1. Why is the loss positive?\n\ntext"))
    assert "¶" not in out and "<h2" in out


def test_a_ta_score_keeps_the_not_answered_reason():
    q = _questions()[("l", "answer Q1")]
    a = answers.Answer(text="", cells=[3], found=True)
    s = answers.score(q, a, {"score": "0", "comment": "", "answer_sha": a.sha})
    assert s.status == "fail" and s.reason.startswith(answers.NOT_ANSWERED) and "scored by a TA" in s.reason


def test_anonymous_codes_are_stable_and_merge_maps_them_back(tmp_path):
    first = answers.codes(tmp_path, ["ann", "bob"])
    assert set(first) == {"ann", "bob"} and all(re.fullmatch(r"S[0-9a-f]{6}", c) for c in first.values())
    again = answers.codes(tmp_path, ["bob", "cat"])
    assert again["ann"] == first["ann"] and again["bob"] == first["bob"] and len(set(again.values())) == 3
    back = answers.students_by_code(tmp_path)
    f = tmp_path / "scores.csv"
    f.write_text(f"lab,check,student,score,comment\nl,answer Q1,{first['bob']},1.5,ok\n")
    answers.merge(tmp_path, [f], _questions(), {("l", "answer Q1", "bob"): "sha"}, aliases=back)
    assert list(answers.read_scores(tmp_path)) == [("l", "answer Q1", "bob")]


def test_flagged_pairs_are_marked_on_the_questions_they_match():
    flags = [
        {
            "lab": "l",
            "kind": "answers",
            "student_a": "ann",
            "student_b": "bob",
            "similarity": "0.92",
            "parts_a": "answer Q1; answer Q2",
            "parts_b": "answer Q1",
        },
        {
            "lab": "l",
            "kind": "code",
            "student_a": "ann",
            "student_b": "cat",
            "similarity": "1.0",
            "parts_a": "cell 4",
            "parts_b": "cell 4",
        },
    ]
    q1 = answers.flag_notes(flags, "l", "answer Q1", str.upper)
    q2 = answers.flag_notes(flags, "l", "answer Q2", str.upper)
    assert q1["ann"] == [
        "flagged: this answer matches BOB's (92% of fingerprints; similarity.html)",
        "flagged: the lab's code matches CAT's (100% of fingerprints; similarity.html)",
    ]
    assert q1["bob"][0].startswith("flagged: this answer matches ANN's")
    assert "bob" not in q2 and len(q2["ann"]) == 2


def test_similarity_shows_every_matching_passage_of_a_pair():
    words = [" ".join(f"w{q}x{i}" for i in range(40)) for q in range(3)]
    a = similarity.fingerprint(similarity.text_doc("ann", words, ["answer Q1", "answer Q2", "answer Q3"]), "answers")
    b = similarity.fingerprint(
        similarity.text_doc("bob", ["intro words here"] + words, ["answer Q0", "answer Q1", "answer Q2", "answer Q3"]),
        "answers",
    )
    pair = similarity.compare([a, b], "answers", "l", set(), similarity.THRESHOLD)[0]
    found = similarity.matches(pair)
    assert len(found) >= 3 and {x[0] for x, _ in found} == {0, 1, 2}
    assert similarity.parts(a, [x for x, _ in found]) == ["answer Q1", "answer Q2", "answer Q3"]
    assert similarity.parts(b, [y for _, y in found]) == ["answer Q1", "answer Q2", "answer Q3"]


def test_a_page_renders_in_its_own_process_from_relative_paths(run, monkeypatch):
    """As ``make grade`` writes them (``--out out/grade``): the render process resolves them alike."""
    from labkit.grading.pages import render

    monkeypatch.chdir(run)
    rows = [_row("execution", "ok", most=0.0)]
    task = render.Task(
        feedback.write_feedback,
        {"executed": "ex.ipynb", "rows": rows, "path": "out/p.html", "title": "s: l", "source": "src.ipynb"},
        run / "out" / "p.html",
        lambda why: feedback.plain_page(rows, "s: l", why),
        run / "logs" / "page.log",
    )
    render.run([task])
    page = (run / "out" / "p.html").read_text()
    assert "is not shown" not in page and "Cell 5" in page
    assert not list((run / "logs").glob(".render-*"))  # its spec is gone with it
