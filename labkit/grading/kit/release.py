"""``make release``: the student kit, i.e. the kit without its solutions (the nbgrader conventions),
with a README, a Makefile and a rubric of its own.

``release(notebooks, out)`` writes into ``out/`` the student versions of the lab notebooks with
the *public* rubric (``labkit.grading.kit.public``) that ``make check`` runs them with; the
package without its instructor-only parts (every lab's ``solution.py``, ``LAB_INSTRUCTOR_ONLY``;
``labkit.grading`` and ``labkit.bench``, ``INSTRUCTOR_ONLY``), which is also exactly what the
grader's sandbox shows a student's code (``student_package``); a README, Makefile and
``.gitignore`` written for students; and ``docs/`` without its instructor-only passages.

In a reference notebook, code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes a
stub, answer cells tagged ``analysis`` become ``YOUR ANSWER HERE``, cells tagged
``solution-only`` go, and outputs are cleared. Pick regions that teach and leave the plumbing:
a released notebook must still run up to the first region. More in README.md, section "The
student kit", and docs/internals.md, section labkit.grading.
"""

from __future__ import annotations

import re
import shutil
import string
from pathlib import Path

from labkit.labs import stamp
from labkit.notebook import execution
from labkit.notebook.checking import short_name
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.kit.public import BEGIN, CODE_STUB, END, public_rubric, to_toml
from labkit.notebook.record import cell_tags

ANSWER_STUB = "YOUR ANSWER HERE"
SOLUTION_ONLY = "solution-only"
ANALYSIS = "analysis"
INSTRUCTOR_ONLY = ("grading", "bench")  # subpackages of labkit the student kit leaves out
# files of each lab's folder (labkit/labs/<lab>/) it leaves out: the reference answers, the rubric
# section (hidden checks' inputs, answer keys), the reference notebook (released on its own, stripped)
# and what running that notebook in JupyterLab left there
LAB_INSTRUCTOR_ONLY = ("solution.py", "lab.toml", "hours.toml", "*.ipynb", "runs", "artifacts", ".ipynb_checkpoints")
PROJECT_FILES = ("pyproject.toml", "requirements.txt", "requirements-profile.txt")  # files, or folders copied whole
# the CloudLab profile at the kit's top level, where a repository-based profile has it (docs/cluster.md)
PROFILE_FILES = ("profile.py", "startup.sh", "rspec.py")
STUDENT_FILES = {"README.md": "README.md", "Makefile": "Makefile", "gitignore": ".gitignore"}  # template: kit
TEMPLATES = Path(__file__).parents[1] / "templates" / "student"
INSTRUCTOR_ONLY_MD = [  # what student_docs removes: a block between marker lines, or a line holding the marker
    re.compile(r"^[ \t]*<!-- instructor-only -->[ \t]*\n.*?^[ \t]*<!-- /instructor-only -->[ \t]*\n", re.S | re.M),
    re.compile(r"^.*<!-- instructor-only -->.*\n", re.M),
]
PACKAGE = Path(__file__).resolve().parents[2]


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

    nb = execution.clean(copy.deepcopy(nb))
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
        cells.append(cell)
    nb.cells = cells
    stamp.stamp(nb)
    return nb, regions


def student_package(dest: Path) -> Path:
    """Copy labkit without its instructor-only parts (every lab's solution, the grader) to
    ``dest/labkit``; returns that folder."""
    target = Path(dest) / "labkit"
    if target.exists():
        shutil.rmtree(target)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")

    def ignore(folder, names):
        dropped = set(skip(folder, names))
        if Path(folder).resolve() == PACKAGE:
            dropped |= {n for n in names if n in INSTRUCTOR_ONLY}
        if Path(folder).resolve().parent == PACKAGE / "labs":
            dropped |= set(shutil.ignore_patterns(*LAB_INSTRUCTOR_ONLY)(folder, names))
        return dropped

    shutil.copytree(PACKAGE, target, ignore=ignore)
    return target


def release(notebooks="notebooks", out="release", rubric=None, log=print) -> list[tuple[Path, int]]:
    """Write the student kit to ``out`` (see the module docstring): every notebook in ``notebooks``
    in its student version, the public rubric of ``rubric`` (default ``notebooks/rubric.toml``),
    the package without its instructor-only parts, and the student's README, Makefile and docs."""
    import nbformat

    src_dir, out = Path(notebooks), Path(out)
    rubric = Path(rubric) if rubric is not None else src_dir / "rubric.toml"
    placed = [lab.reference(src_dir) for lab in load_rubric(rubric).labs.values() if lab.folder]
    sources = sorted({*src_dir.glob("*.ipynb"), *placed}, key=lambda p: p.name)  # a lab folder's notebook too
    if not sources:
        raise ValueError(f"no notebooks in {src_dir}/ to release")
    public = public_rubric(rubric, src_dir)
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    written = []
    for src in sources:
        nb, regions = release_notebook(nbformat.read(str(src), as_version=4), src.name)
        nbformat.validate(nb)
        dest = out / "notebooks" / src.name
        nbformat.write(nb, str(dest))
        written.append((dest, regions))
        log(
            f"{dest}: {regions} solution region(s) removed"
            + ("" if regions else " (WARNING: none; students get the full solution)")
        )
    (out / "notebooks" / "rubric.toml").write_text(to_toml(public))
    log(
        f"{out / 'notebooks' / 'rubric.toml'}: the public rubric ({len(public['labs'])} labs; no hidden check, "
        f"verifier input, reference value or answer key)"
    )
    student_package(out)
    log(
        f"{out / 'labkit'}: the package without {', '.join('labkit.' + n for n in INSTRUCTOR_ONLY)} "
        f"and each lab's {', '.join(LAB_INSTRUCTOR_ONLY)}"
    )
    for name in PROJECT_FILES:
        src = PACKAGE.parent / name
        if src.is_dir():
            shutil.copytree(src, out / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, out / name)
    for name in PROFILE_FILES:
        shutil.copy2(PACKAGE.parent / "cloudlab" / name, out / name)
    log(f"{out}: a CloudLab profile repository ({', '.join(PROFILE_FILES)} at its top level)")
    for template, name in STUDENT_FILES.items():
        text = (TEMPLATES / template).read_text()
        (out / name).write_text(student_readme(text, public) if name == "README.md" else text)
    student_docs(PACKAGE.parent / "docs", out / "docs")
    log(f"{out}: README.md, Makefile and .gitignore for students; docs/ without its instructor-only passages")
    return written


def student_readme(template: str, public: dict) -> str:
    """The student README: ``template`` with the labs' tables from the public rubric."""
    labs = public["labs"]
    rows = ["| lab | notebook | what it shows |", "|---|---|---|"]
    rows += [f"| {short_name(key)} | `notebooks/{lab['notebook']}` | {lab['title']} |" for key, lab in labs.items()]
    points = [
        "| lab | submit this file | automatic points | answer points (scored by TAs) | the grader's time limit "
        "| late work costs |",
        "|---|---|---|---|---|---|",
    ]
    points += [
        f"| {short_name(key)} | `{lab['notebook']}` | {lab['points']:g} | {lab['answer_points']:g} | "
        f"{_minutes(lab['notebook_timeout'])} | {lab.get('late_penalty', 'none')} |"
        for key, lab in labs.items()
    ]
    first = next(iter(labs))
    return string.Template(template).substitute(
        labs_table="\n".join(rows), points_table="\n".join(points), lab_example=short_name(first)
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def student_docs(src: Path, dest: Path) -> None:
    """Copy the docs folder, each Markdown file without its instructor-only passages."""
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.suffix == ".md":
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            for marked in INSTRUCTOR_ONLY_MD:
                text = marked.sub("", text)
            target.write_text(text)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def main(args) -> int:
    """The ``release`` subcommand; with ``--public-rubric FILE``, only the public rubric (``make check``
    in the instructor's kit runs the reference notebooks with it)."""
    import sys

    try:
        if args.public_rubric:
            dest = Path(args.public_rubric)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(to_toml(public_rubric(Path(args.notebooks) / "rubric.toml", args.notebooks, placed=True)))
        else:
            release(args.notebooks, args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
