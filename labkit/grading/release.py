"""``make release``: the student kit, i.e. the kit without its solutions (the nbgrader conventions).

``release(notebooks, out)`` writes ``out/notebooks/`` (the student versions of the lab
notebooks), ``out/labkit/`` (the package without the grader-only subpackages,
``GRADER_ONLY``: ``labkit.solutions``, the reference implementations of the exercises, and
``labkit.grading``, the grader and its hidden checks) and the project files a student installs
it with. ``student_package`` is the same package on its own: the grader's sandbox shows a
student's code exactly this view of the kit.

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
import shutil
from pathlib import Path

from labkit.record import cell_tags

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
ANSWER_STUB = "YOUR ANSWER HERE"
SOLUTION_ONLY = "solution-only"
ANALYSIS = "analysis"
GRADER_ONLY = ("solutions", "grading")     # subpackages of labkit the student kit leaves out
PROJECT_FILES = ("pyproject.toml", "requirements.txt", "README.md", "Makefile", "docs")
PACKAGE = Path(__file__).resolve().parents[1]


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


def student_package(dest: Path) -> Path:
    """Copy labkit without its grader-only subpackages to ``dest/labkit``; returns that folder."""
    target = Path(dest) / "labkit"
    if target.exists():
        shutil.rmtree(target)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")

    def ignore(folder, names):
        dropped = set(skip(folder, names))
        if Path(folder).resolve() == PACKAGE:
            dropped |= {n for n in names if n in GRADER_ONLY}
        return dropped

    shutil.copytree(PACKAGE, target, ignore=ignore)
    return target


def release(notebooks="notebooks", out="release", log=print) -> list[tuple[Path, int]]:
    """Write the student kit to ``out``: every notebook in ``notebooks`` in its student version
    (``out/notebooks/``), the package without its solutions and grader, and the project files."""
    import nbformat

    src_dir, out = Path(notebooks), Path(out)
    sources = sorted(src_dir.glob("*.ipynb"))
    if not sources:
        raise ValueError(f"no notebooks in {src_dir}/ to release")
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources:
        nb, regions = release_notebook(nbformat.read(str(src), as_version=4), src.name)
        nbformat.validate(nb)
        dest = out / "notebooks" / src.name
        nbformat.write(nb, str(dest))
        written.append((dest, regions))
        log(f"{dest}: {regions} solution region(s) removed" + ("" if regions else
            " (WARNING: none; students get the full solution)"))
    student_package(out)
    for name in PROJECT_FILES:
        src = PACKAGE.parent / name
        if src.is_dir():
            shutil.copytree(src, out / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, out / name)
    log(f"{out / 'labkit'}: the package without {', '.join('labkit.' + n for n in GRADER_ONLY)}")
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
