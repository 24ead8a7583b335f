"""``make check``'s report on a lab notebook as if it had run to the end, its cells having shown
given self-check verdicts: built without running the notebook."""

from __future__ import annotations

import nbformat

from helpers import NOTEBOOKS
from labkit.notebook import checking
from labkit.notebook import verdicts as selfchecks


def _executed(nb, verdicts: dict, failed_cell: str | None = None):
    """``nb`` as papermill leaves it: every code cell ran, ``verdicts`` (cell id -> Verdicts) shown."""
    out = nbformat.from_dict(nbformat.reads(nbformat.writes(nb), as_version=4))
    for c in out.cells:
        if c.cell_type == "code":
            c.metadata["papermill"] = {"start_time": "t", "end_time": "t", "exception": c.id == failed_cell}
            c.outputs = [
                nbformat.v4.new_output("display_data", data=selfchecks.bundle(v)) for v in verdicts.get(c.id, [])
            ]
    return out


def _report(lab, nb, executed, tmp_path):
    """``make check``'s run of ``lab`` ended with ``executed`` as its output, and its exercise lines."""
    path = tmp_path / lab.notebook
    nbformat.write(executed, str(path))
    run = checking._ended(lab, nb, checking.Run("crashed", 1.0, 0, path, tmp_path / "run.log"), 0, False)
    return run, checking.exercise_lines(lab, nb, run)


def public_lab(key: str):
    """Lab ``key`` as ``make check`` reads it from the public rubric."""
    from labkit.grading.kit import public
    from labkit.notebook import checking

    table = public.public_rubric(NOTEBOOKS / "rubric.toml")["labs"][key]
    return checking.Lab(
        key=key, **{f: table[f] for f in checking.Lab.__dataclass_fields__ if f != "key" and f in table}
    )


def make_check_lines(key: str, notebook, verdicts: dict, tmp_path):
    """``make check``'s exercise lines for ``notebook`` run to the end, each cell of ``verdicts``
    (id -> Verdicts) having shown them; and the notebook, for its cells' numbers."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    tmp_path.mkdir(parents=True, exist_ok=True)
    _, lines = _report(public_lab(key), nb, _executed(nb, verdicts), tmp_path)
    return lines, {c.id: i + 1 for i, c in enumerate(nb.cells)}


def make_check_report(nb, notebook, lab: str, tmp_path, cuts=()) -> tuple[str, str]:
    """``make check LAB=lab`` on ``nb`` (a changed copy of the lab's ``notebook``) in a student's
    folder, against the public rubric of the course's rubric at test size (``cuts`` applied): the
    check fails, the run went top to bottom (no self-check stopped it); returns what it printed and
    its self-checks part."""
    from helpers import small_rubric
    from labkit.grading.kit import public

    student = tmp_path / "notebooks"
    student.mkdir()
    nbformat.write(nb, str(student / notebook.name))
    (tmp_path / "grader").mkdir()
    rubric = small_rubric(tmp_path / "grader", cuts=cuts)
    (student / "rubric.toml").write_text(public.to_toml(public.public_rubric(rubric, notebook.parent)))
    lines = []
    ok = checking.check_all(
        [], [lab], rubric=student / "rubric.toml", notebooks=student, out=tmp_path / "out", log=lines.append
    )
    text = "\n".join(lines)
    assert not ok, text
    assert "ok    run         top to bottom in" in text, text
    return text, text[text.index("self-checks") : text.index("records")]
