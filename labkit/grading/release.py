"""``make release``: the student versions of the lab notebooks (the nbgrader conventions).

In a reference notebook:

- code between a ``### BEGIN SOLUTION`` line and a ``### END SOLUTION`` line is replaced by
  ``# YOUR CODE HERE`` and ``raise NotImplementedError()``, at the marker's indentation;
  in a Markdown cell the region becomes ``YOUR ANSWER HERE``;
- a Markdown cell tagged ``analysis`` (an answer cell) with no markers becomes ``YOUR ANSWER HERE``
  and keeps its tag, which is how the rubric's ``analysis`` checks find it;
- a cell tagged ``solution-only`` is removed;
- outputs, execution counts and papermill metadata are cleared.

Pick regions that teach (the training step, the gradient, the sweep, the analysis) and leave
the plumbing in place: a released notebook must still run up to the first region.
"""
from __future__ import annotations

import re
from pathlib import Path

from labkit.grading.rubric import cell_tags

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
ANSWER_STUB = "YOUR ANSWER HERE"
SOLUTION_ONLY = "solution-only"
ANALYSIS = "analysis"


def strip_solutions(source: str, code: bool, where: str) -> tuple[str, int]:
    """``source`` with every solution region replaced by the stub; and how many regions there were."""
    out, inside, regions = [], False, 0
    for line in source.splitlines():
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError(f"{where}: a second {BEGIN} before {END}; close the first region")
            inside, regions = True, regions + 1
            indent = re.match(r"\s*", line).group(0)
            out += [indent + s for s in CODE_STUB] if code else [indent + ANSWER_STUB]
        elif marker == END:
            if not inside:
                raise ValueError(f"{where}: {END} without a {BEGIN} before it")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: {BEGIN} without {END}; close the region")
    return "\n".join(out), regions


def release_notebook(nb, name: str = "notebook"):
    """A student copy of nbformat node ``nb``; returns (new node, number of regions replaced)."""
    import copy

    nb = copy.deepcopy(nb)
    cells, regions = [], 0
    for i, cell in enumerate(nb.cells):
        tags = cell_tags(cell)
        if SOLUTION_ONLY in tags:
            regions += 1
            continue
        src, n = strip_solutions(cell.source, cell.cell_type == "code", f"{name} cell {i}")
        if n == 0 and cell.cell_type == "markdown" and ANALYSIS in tags:
            src, n = ANSWER_STUB, 1
        cell.source, regions = src, regions + n
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        for key in ("papermill", "execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("papermill", None)
    return nb, regions


def release(notebooks="notebooks", out="release", log=print) -> list[tuple[Path, int]]:
    """Write the student version of every notebook in ``notebooks`` to ``out``."""
    import nbformat

    src_dir, out = Path(notebooks), Path(out)
    sources = sorted(src_dir.glob("*.ipynb"))
    if not sources:
        raise ValueError(f"no notebooks in {src_dir}/ to release")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources:
        nb, regions = release_notebook(nbformat.read(str(src), as_version=4), src.name)
        nbformat.validate(nb)
        dest = out / src.name
        nbformat.write(nb, str(dest))
        written.append((dest, regions))
        log(f"{dest}: {regions} solution region(s) removed" + ("" if regions else
            " (WARNING: none; students get the full solution)"))
    return written


def main(args) -> int:
    """The ``release`` subcommand."""
    import sys

    try:
        release(args.notebooks, args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
