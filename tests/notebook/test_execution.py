"""labkit.notebook.execution: the one place a notebook is cleaned, run and read back."""

import json
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from labkit.notebook import execution


def _submitted():
    code = new_code_cell("x = 1", execution_count=7, outputs=[new_output("stream", text="1\n")])
    code.metadata.update({"tags": ["parameters"], "scrolled": True, "papermill": {"status": "completed"}, "trusted": 1})
    md = new_markdown_cell("An answer", metadata={"tags": ["analysis"], "papermill": {"duration": 1.0}})
    nb = new_notebook(cells=[code, md])
    md["outputs"] = [new_output("stream", text="smuggled\n")]  # a result forged into a Markdown cell
    md["execution_count"] = 3
    nb.metadata.update(
        {"kernelspec": {"name": "evil", "display_name": "evil"}, "papermill": {"x": 1}, "widgets": {}},
        language_info={"name": "python", "version": "3.11.7"},
    )
    return nb


def test_a_clean_notebook_keeps_its_sources_tags_and_nothing_a_run_produced():
    nb = execution.clean(_submitted(), kernel="python3")
    code, md = nb.cells
    assert (code.source, code.outputs, code.execution_count) == ("x = 1", [], None)
    assert code.metadata == {"tags": ["parameters"]} and md.metadata == {"tags": ["analysis"]}
    assert "outputs" not in md and "execution_count" not in md and md.source == "An answer"
    assert nb.metadata == {
        "kernelspec": {"name": "python3", "language": "python", "display_name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    kept = execution.clean(_submitted())  # no kernel given: the notebook's own stays (a release)
    assert kept.metadata.kernelspec.name == "evil" and kept.metadata.language_info == {"name": "python"}


def test_a_runs_progress_and_each_cells_state_come_from_papermills_record(tmp_path):
    cells = [new_code_cell(str(i)) for i in range(4)]
    cells[0].metadata.papermill = {"start_time": "t", "end_time": "t", "exception": False}
    cells[1].metadata.papermill = {"start_time": "t", "end_time": "t", "exception": True}
    cells[2].metadata.papermill = {"start_time": "t", "end_time": None}
    cells[3].metadata.papermill = {"start_time": None, "end_time": None, "status": "pending"}
    nb = new_notebook(cells=cells)
    assert [execution.state(c) for c in nb.cells] == ["ran", "failed", "ran", "not-run"]
    saved = tmp_path / "out.ipynb"
    assert execution.cells_done(saved) is None  # not written yet
    nbformat.write(nb, str(saved))
    assert execution.cells_done(saved) == 2
    saved.write_text(saved.read_text()[:100])  # caught mid-write
    assert execution.cells_done(saved) is None


def test_labkit_checks_bar_reads_the_notebook_only_when_papermill_saved_it_again(tmp_path, monkeypatch):
    import io
    import os

    from tqdm import tqdm

    from labkit.notebook import checking

    cells = [new_code_cell(str(i)) for i in range(3)]
    cells[0].metadata.papermill = {"start_time": "t", "end_time": "t"}
    saved, bar = tmp_path / "out.ipynb", tqdm(total=3, file=io.StringIO())
    assert checking._advance(bar, saved, None) is None and bar.n == 0  # not written yet
    nbformat.write(new_notebook(cells=cells), str(saved))
    seen = checking._advance(bar, saved, None)
    assert bar.n == 1 and seen is not None
    parsed = []
    monkeypatch.setattr(execution, "cells_done", lambda path: parsed.append(path) or 3)
    assert checking._advance(bar, saved, seen) == seen and parsed == [] and bar.n == 1  # unchanged: not parsed
    os.utime(saved, ns=(0, saved.stat().st_mtime_ns + 10**9))  # papermill saved it again
    assert checking._advance(bar, saved, seen) != seen and len(parsed) == 1 and bar.n == 3


@pytest.mark.kernel
def test_a_run_in_a_child_of_its_own_names_how_it_ended(tmp_path):
    nb = new_notebook(
        cells=[new_code_cell("n = 1", metadata={"tags": ["parameters"]}), new_code_cell("import time; time.sleep(60)")]
    )
    nb = execution.clean(nb, kernel="python3")
    source = tmp_path / "in.ipynb"
    nbformat.write(nb, str(source))
    spec = tmp_path / "run.json"
    output = tmp_path / "out.ipynb"
    spec.write_text(
        json.dumps(
            {
                "source": str(source),
                "output": str(output),
                "parameters": {"n": 2},
                "kernel": "python3",
                "cwd": str(tmp_path),
                "cell_timeout": 2,
                "start_timeout": 120,
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "labkit.notebook.isolated", str(spec)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 1 and "CellTimeoutError" in done.stderr, done.stderr[-2000:]
    ran = nbformat.read(str(output), as_version=4)
    assert [execution.added(c) for c in ran.cells] == [False, True, False]  # papermill's injected parameters
    assert [execution.state(c) for c in ran.cells if c.cell_type == "code"] == ["ran", "ran", "ran"]
