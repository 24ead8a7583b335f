"""How long a lab takes a student, by a stated model: ``estimate(lab)`` adds four parts, each
counted from the lab's own folder, so the figure moves when the lab does (docs/internals.md).

- reading: the Markdown a student reads (the released notebook, answer cells left out) at
  READING_WPM words a minute, half an ordinary prose rate: dense with formulas, read beside the code;
- exercises: EXERCISE_MIN for each solution region of a code cell: a few lines to write, run
  against the self-check and fix once;
- written answers: ANSWER_MIN for each answer cell (tagged ``analysis``): read the tables and plots
  the question names, then a paragraph;
- runs: the notebook at its default parameters as measured in the lab folder's ``hours.toml``
  (``default_run_s``), times RERUNS: once to see the lab work, once after the exercises are fixed.

A lab fits in LIMIT_H hours and its first Markdown cell says so (``Hours.line``; ``--write LAB``).
It reads the reference notebook and lab.toml: it runs in the kit's sources, not the student kit.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

from labkit import labs
from labkit.grading.kit.public import BEGIN
from labkit.grading.kit.release import ANALYSIS, ANSWER_STUB, release_notebook
from labkit.notebook.record import cell_tags

READING_WPM = 100  # words a minute
EXERCISE_MIN = 15  # minutes per solution region of a code cell
ANSWER_MIN = 15  # minutes per written answer
RERUNS = 2  # whole runs at the default parameters
LIMIT_H = 4.0
TIMING_FILE = "hours.toml"  # in the lab's folder: default_run_s, and how it was measured
FOLDER = Path(labs.__file__).parent  # every lab's folder
OPENING = re.compile(
    r"About (\d+(?:\.\d)?) hours: reading (\d+) min, exercises (\d+) min, written answers (\d+) min, runs (\d+) min"
)


@dataclass(frozen=True)
class Hours:
    """One lab's estimate: what it was counted from, and the minutes of each part."""

    lab: str
    words: int
    exercises_n: int
    answers_n: int
    run_s: float
    reading: float
    exercises: float
    answers: float
    runs: float

    @property
    def total(self) -> float:
        """Hours, all four parts."""
        return (self.reading + self.exercises + self.answers + self.runs) / 60

    def line(self) -> str:
        """The sentence a lab's first Markdown cell opens with (OPENING reads it back)."""
        return (
            f"About {self.total:.1f} hours: reading {self.reading:.0f} min, exercises {self.exercises:.0f} min, "
            f"written answers {self.answers:.0f} min, runs {self.runs:.0f} min"
        )


def notebook(lab: str) -> Path:
    """Lab ``lab``'s reference notebook, as its lab.toml names it."""
    if lab not in labs.names():
        raise ValueError(f"no lab {lab!r} in {FOLDER} (labs: {', '.join(labs.names())})")
    return FOLDER / lab / tomllib.loads((FOLDER / lab / "lab.toml").read_text())["notebook"]


def run_seconds(lab: str) -> float:
    """The notebook's measured run at its default parameters (``default_run_s`` in the lab's hours.toml)."""
    path = FOLDER / lab / TIMING_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: run the lab's notebook at its default parameters "
            f"(papermill NOTEBOOK out.ipynb), then write default_run_s = <its wall seconds> and measured = "
            f'"<machine, load, date, commit>" there'
        )
    seconds = tomllib.loads(path.read_text()).get("default_run_s")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
        raise ValueError(f"{path}: default_run_s must be the run's wall seconds (a number > 0), not {seconds!r}")
    return float(seconds)


def student_words(nb) -> int:
    """Words of the Markdown a student reads: the released notebook's, answer cells left out."""
    student, _ = release_notebook(nb)
    return sum(
        len(c.source.split()) for c in student.cells if c.cell_type == "markdown" and ANSWER_STUB not in c.source
    )


def estimate(lab: str) -> Hours:
    """Lab ``lab``'s hours by the model above."""
    nb = nbformat.read(notebook(lab), as_version=4)
    words = student_words(nb)
    exercises = sum(
        1 for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines() if line.strip() == BEGIN
    )
    answers = sum(1 for c in nb.cells if c.cell_type == "markdown" and ANALYSIS in cell_tags(c))
    run_s = run_seconds(lab)
    return Hours(
        lab=lab,
        words=words,
        exercises_n=exercises,
        answers_n=answers,
        run_s=run_s,
        reading=words / READING_WPM,
        exercises=exercises * EXERCISE_MIN,
        answers=answers * ANSWER_MIN,
        runs=run_s / 60 * RERUNS,
    )


def with_line(source: str, line: str) -> str:
    """A first Markdown cell's ``source`` stating ``line``: in place of the line it states, else as
    the paragraph after its title."""
    if OPENING.search(source):
        return OPENING.sub(line, source, count=1)
    title, _, rest = source.partition("\n")
    return "\n\n".join([title, line + ".", rest.lstrip("\n")])


def write_line(lab: str) -> Hours:
    """Lab ``lab``'s notebook with its estimate stated in its first Markdown cell (the line's own words
    count as reading: written until it states itself)."""
    path = notebook(lab)
    for _ in range(3):
        h = estimate(lab)
        nb = nbformat.read(path, as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "markdown")
        stated = OPENING.search(first.source)
        if stated and stated.group(0) == h.line():
            return h
        first.source = with_line(first.source, h.line())
        nbformat.write(nb, path)
    raise RuntimeError(f"{path}: the estimate did not settle; write the line by hand")


def table(names: list[str] | None = None) -> str:
    """Every lab's estimate, one row each."""
    head = f"{'lab':<6}{'words':>7}{'reading':>9}{'exercises':>11}{'min':>5}{'answers':>9}{'min':>5}{'run s':>7}{'runs':>6}{'hours':>7}"
    rows = [head]
    for name in names or labs.names():
        h = estimate(name)
        rows.append(
            f"{name:<6}{h.words:>7}{h.reading:>9.0f}{h.exercises_n:>11}{h.exercises:>5.0f}{h.answers_n:>9}"
            f"{h.answers:>5.0f}{h.run_s:>7.0f}{h.runs:>6.0f}{h.total:>7.1f}" + ("  over" if h.total > LIMIT_H else "")
        )
    rate = f"{READING_WPM} words/min, {EXERCISE_MIN} min an exercise, {ANSWER_MIN} min an answer, runs x {RERUNS}"
    return "\n".join(rows + [f"(minutes; {rate}; a lab fits in {LIMIT_H:g} hours)"])


def main(argv: list[str]) -> int:
    """``python -m labkit.grading.kit.hours [LAB ...]`` prints the table; ``--write LAB ...`` also states
    each lab's estimate in its notebook."""
    write = "--write" in argv
    names = [a for a in argv if a != "--write"] or None
    if write and not names:
        raise SystemExit("--write needs the labs to write (e.g. --write lab1): it edits their notebooks")
    for name in names if write else []:
        write_line(name)
    print(table(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
