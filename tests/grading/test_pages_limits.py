"""Pages render in a limited process, apart from the batch loop: huge outputs become a page with
a note, a page too slow to render becomes a page that says so, and meanwhile the batch still
enforces every other notebook's timeout.

One batch, four notebooks at once: a 16 MB ``text/html`` output and a 20 MB Markdown table (the
rubric's default ``page_output_kb``: cut, with a note), a Markdown table with a formula in every
row under a ``page_output_kb`` that cuts nothing (its page cannot render within the render
CPU limit, shortened here, and is tried once per command), and a notebook that hangs past its ``notebook_timeout``, whose timeout
must fire while that page is still rendering."""

from __future__ import annotations

from collections import Counter

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from helpers import runs_at_once, runs_share_limits
from labkit.grading.run.sandbox import SANDBOXES

pytestmark = [pytest.mark.notebook, pytest.mark.slow]
NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
HANG_S = 10.0
RENDER_S = 20.0  # the render CPU limit in this test (render.TIMEOUT_S): twice what the 1 MB page takes
RUBRIC = f"""
[defaults]
cell_timeout = 120
notebook_timeout = 180
start_timeout = 90
memory_mb = 1500

[labs.big]
notebook = "big.ipynb"
[[labs.big.checks]]
name = "done"
kind = "record"
points = 1
record = "done"

[labs.slowpage]
notebook = "slowpage.ipynb"
page_output_kb = 65536
[[labs.slowpage.checks]]
name = "done"
kind = "record"
points = 1
record = "done"

[labs.hang]
notebook = "hang.ipynb"
notebook_timeout = {HANG_S}
[[labs.hang.checks]]
name = "done"
kind = "record"
points = 1
record = "done"
"""
RECORD = "from labkit.notebook.record import record\nrecord('done', 1)"
HTML16 = "from IPython.display import HTML, display\ndisplay(HTML('<p>' + 'x' * (16 * 2**20) + '</p>'))"
MD20 = (
    "from IPython.display import Markdown, display\nrows = ['| i | value |', '|---|---|']\n"
    "rows += [f'| {i} | v{i} |' for i in range(20 * 2**20 // 14)]\ndisplay(Markdown(chr(10).join(rows)))"
)
MATH4 = (
    "from IPython.display import Markdown, display\nrows = ['| i | value |', '|---|---|']\n"
    "rows += [f'| {i} | $x_{{{i}}}^2$ |' for i in range(4 * 2**20 // 22)]\ndisplay(Markdown(chr(10).join(rows)))"
)


def _nb(*sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from labkit.grading.pages import render
    from labkit.grading.grade import GradeOptions, grade

    if NO_SANDBOX:
        pytest.skip(f"{NO_SANDBOX} (.ci/run installs it)")
    root = tmp_path_factory.mktemp("limits")
    (root / "rubric.toml").write_text(RUBRIC)
    subs = {
        "html16": ("big", _nb(HTML16, RECORD)),
        "md20": ("big", _nb(MD20, RECORD)),
        "slow": ("slowpage", _nb(MATH4, RECORD)),
        "hangs": ("hang", _nb("import time\ntime.sleep(600)", RECORD)),
    }
    for student, (lab, nb) in subs.items():
        (root / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, str(root / "subs" / student / f"{lab}.ipynb"))
    started, start = Counter(), render.Task.start

    def counted(task):
        started[task.path.relative_to(root / "out").as_posix()] += 1
        return start(task)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render, "TIMEOUT_S", RENDER_S)
        # the CPU limit is what this batch shows: its wall-clock backstop (WALL_FACTOR x the limit) fired
        # first in a run where the page's process had less than a third of a core
        mp.setattr(render, "WALL_FACTOR", 10.0)
        mp.setattr(render.Task, "start", counted)
        outcome = grade(
            GradeOptions(root / "rubric.toml", root / "subs", root / "out", parallel=runs_at_once(4)),
            log=lambda m: None,
        )
    rows = {(r["student"], r["lab"], r["check"]): r for r in outcome.rows}
    return root / "out", rows, started


def test_huge_outputs_become_pages_with_a_cut_note(batch):
    out, rows, _ = batch
    for student in ("html16", "md20"):
        assert rows[(student, "big", "execution")]["status"] == "ok", rows[(student, "big", "execution")]
        # the stored notebook keeps each output to page_output_kb: a flood of output is not kept whole
        assert (out / student / "big.ipynb").stat().st_size < 16 * 2**20
        page = (out / student / "big.html").read_text()
        mime = "text/html 16.0 MB" if student == "html16" else "text/markdown"
        assert (
            "This output is over the 1.0 MB a page shows of one output (the rubric's page_output_kb): "
            f"{mime}" in page.replace("&#x27;", "'")
        ), student
        assert "is not shown" not in page and len(page) < 8 * 2**20, student


def test_a_page_that_cannot_render_in_time_says_so(batch):
    out, rows, started = batch
    assert rows[("slow", "slowpage", "execution")]["status"] == "ok"
    page = (out / "slow" / "slowpage.html").read_text()
    assert f"The executed notebook is not shown: rendering it needed more than {RENDER_S:g} s of CPU time." in page
    assert started["slow/slowpage.html"] == 1  # the final reports do not try it again in the same command
    assert started["html16/big.html"] == 1 and started["md20/big.html"] == 1
    assert "done" in page and "What to do next" in page  # the check table is there all the same


def test_the_batch_enforces_timeouts_while_a_page_renders(batch):
    if runs_share_limits():
        pytest.skip(f"needs the four notebooks at once; this user's grader runs one at a time: {runs_share_limits()}")
    _, rows, _ = batch
    hang, slow = rows[("hangs", "hang", "execution")], rows[("slow", "slowpage", "execution")]
    assert hang["status"] == "timeout" and f"ran past its {HANG_S:g} s limit" in hang["reason"]
    # both started at once; the slow page began rendering when its run ended, before the hanging run
    # was stopped, and rendered for at least RENDER_S (of CPU time, so at least as long on the
    # clock): a loop that waited for it would have stopped the hanging run only after that
    assert slow["seconds"] < hang["seconds"] < HANG_S + 15
    assert hang["seconds"] < slow["seconds"] + RENDER_S
