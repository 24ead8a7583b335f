"""Every lab fits in four hours by the stated model (labkit.grading.kit.hours), and each notebook's first
Markdown cell states the model's own numbers for it."""

import shutil

import nbformat
import pytest

from labkit import labs
from labkit.grading.kit.release import release_notebook
from labkit.grading.kit import hours


@pytest.mark.parametrize("lab", labs.names())
def test_a_lab_fits_in_four_hours_and_says_so(lab):
    h = hours.estimate(lab)
    assert h.total <= hours.LIMIT_H, f"{lab}: {hours.table([lab])}\nmerge or cut written answers where they overlap"
    nb = nbformat.read(hours.notebook(lab), as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    stated = hours.OPENING.search(first.source)
    assert stated, (
        f"{lab}: its first Markdown cell states no estimate; python -m labkit.grading.kit.hours --write {lab}"
    )
    assert stated.group(0) == h.line(), f"{lab}: states {stated.group(0)!r}, the model gives {h.line()!r}"


@pytest.mark.parametrize("lab", labs.names())
def test_every_region_a_student_fills_counts_once(lab):
    """An exercise (a code cell's solution region) or a written answer (an analysis cell), never both:
    together they are what the release replaces."""
    h = hours.estimate(lab)
    _, regions = release_notebook(nbformat.read(hours.notebook(lab), as_version=4))
    assert h.exercises_n + h.answers_n == regions
    assert h.exercises == h.exercises_n * hours.EXERCISE_MIN and h.answers == h.answers_n * hours.ANSWER_MIN
    assert h.reading == pytest.approx(h.words / hours.READING_WPM)
    assert h.runs == pytest.approx(h.run_s / 60 * hours.RERUNS)


def test_the_line_goes_after_the_title_and_is_replaced_in_place():
    source = "# Lab 9: a title\n\nThe first paragraph."
    once = hours.with_line(
        source, "About 1.5 hours: reading 10 min, exercises 30 min, written answers 45 min, runs 5 min"
    )
    assert once.startswith("# Lab 9: a title\n\nAbout 1.5 hours: reading 10 min,") and once.endswith(
        "runs 5 min.\n\nThe first paragraph."
    )
    twice = hours.with_line(
        once, "About 2.0 hours: reading 12 min, exercises 45 min, written answers 60 min, runs 3 min"
    )
    assert (
        twice.count("About") == 1
        and "About 2.0 hours" in twice
        and twice.endswith("runs 3 min.\n\nThe first paragraph.")
    )


def test_a_lab_without_a_measured_run_is_told_how_to_measure_it(tmp_path, monkeypatch):
    folder = tmp_path / "lab1"
    folder.mkdir()
    shutil.copy(hours.FOLDER / "lab1" / "lab.toml", folder)
    shutil.copy(hours.notebook("lab1"), folder)
    monkeypatch.setattr(hours, "FOLDER", tmp_path)
    with pytest.raises(FileNotFoundError, match="default_run_s = <its wall seconds>"):
        hours.estimate("lab1")
    (folder / hours.TIMING_FILE).write_text('default_run_s = "a minute"\n')
    with pytest.raises(ValueError, match="must be the run's wall seconds"):
        hours.estimate("lab1")
    (folder / hours.TIMING_FILE).write_text("default_run_s = 600\n")
    assert hours.estimate("lab1").runs == 600 / 60 * hours.RERUNS
    with pytest.raises(ValueError, match="no lab 'lab9'"):
        hours.estimate("lab9")
