"""An executed notebook and the task that renders its feedback page, for the page renderer's tests
and the grader processes they start."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from labkit.grading.pages import feedback, render


def _executed(path, rows: int = 30):
    """An executed notebook: Markdown with math, code, and a Markdown table output of ``rows`` formulas."""
    table = "\n".join(["| i | value |", "|---|---|"] + [f"| {i} | $x_{{{i}}}^2$ |" for i in range(rows)])
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Lab\nThe loss is $\\ell(w) = \\log(1 + e^{-y w^T x})$."),
            new_code_cell("print('hi')", outputs=[new_output("stream", name="stdout", text="hi\n")], execution_count=1),
            new_code_cell(
                "show()",
                outputs=[new_output("display_data", data={"text/markdown": table})],
                execution_count=2,
            ),
        ]
    )
    nb.metadata.language_info = {"name": "python", "pygments_lexer": "ipython3"}
    nbformat.write(nb, str(path))
    return path


def _task(tmp_path, name: str, executed, timeout=None) -> render.Task:
    """The render task of one student's feedback page of ``executed``, written to ``tmp_path``/``name``.html."""
    rows = [{"student": "s", "lab": "l", "check": "done", "points": 1.0, "max": 1.0, "status": "pass", "reason": ""}]
    return render.Task(
        feedback.write_feedback,
        {"executed": str(executed), "rows": rows, "path": str(tmp_path / f"{name}.html"), "title": "s: l"},
        tmp_path / f"{name}.html",
        lambda why: feedback.plain_page(rows, "s: l", why),
        tmp_path / "logs" / f"{name}.log",
        timeout=timeout,
    )
