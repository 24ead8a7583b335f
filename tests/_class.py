"""The workflow tests' fixture class: two tiny labs (alpha and beta, which import no TensorFlow),
their rubric, six students' ways of filling them in, and the class as Canvas knows it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from labkit.grading.judge import answers
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.kit.release import release_notebook


def _md(cid, text, tags=()):
    """A Markdown cell with id ``cid`` and ``tags``."""
    c = new_markdown_cell(text, id=cid)
    if tags:
        c.metadata.tags = list(tags)
    return c


def _code(cid, text, tags=()):
    """A code cell with id ``cid`` and ``tags``."""
    c = new_code_cell(text, id=cid)
    if tags:
        c.metadata.tags = list(tags)
    return c


KEY_A1 = "It is twice a mean of squares, and a square is never negative: $2x^2 \\ge 0$ for every sample."
KEY_A2 = "More samples average more squares, so the recorded `slope` settles near its expectation, 2."
KEY_B1 = "The squares of 0, 1 and 2 add up to 5, the recorded `squares` summed."


def alpha(
    solution="rng = np.random.default_rng(seed)\nx = rng.normal(size=n)\nslope = float(2 * (x * x).mean())",
    a1=KEY_A1,
    a2=KEY_A2,
):
    """Lab alpha's reference notebook: a recorded slope, a figure and two answers (the keys by default)."""
    nb = new_notebook(
        cells=[
            _md(
                "a-intro",
                "# Alpha lab\n\nThe loss is\n\n$$L(w) = \\frac{1}{n}\\sum_{i=1}^{n} (w x_i - y_i)^2$$\n\n"
                "and its slope at $w = 1$ is what we measure. <p>Inline HTML is rendered, not shown.</p>",
            ),
            _code("a-params", "n = 50\nseed = 0", ["parameters"]),
            _code("a-setup", "import numpy as np\nfrom labkit.notebook.record import record"),
            _code(
                "a-work", f"### BEGIN SOLUTION\n{solution}\n### END SOLUTION\nrecord('slope', slope)\nrecord('n', n)"
            ),
            _code(
                "a-fig",
                "import matplotlib.pyplot as plt\nplt.plot(x, 2 * x * x, '.')\nplt.title('2 x^2')\nplt.show()",
                ["fig-a"],
            ),
            _md("a-q1", "**Q1.** Why is the recorded `slope` positive?"),
            _md("a-ans1", a1, ["analysis"]),
            _md("a-q2", "**Q2.** What does a larger `n` change?"),
            _md("a-ans2", a2, ["analysis"]),
        ]
    )
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def beta(b1=KEY_B1):
    """Lab beta's reference notebook: recorded squares and one answer."""
    nb = new_notebook(
        cells=[
            _md("b-intro", "# Beta lab\n\nEuler: $e^{i\\pi} + 1 = 0$."),
            _code("b-params", "k = 3", ["parameters"]),
            _code(
                "b-work",
                "from labkit.notebook.record import record\n### BEGIN SOLUTION\nsquares = [i * i for i in range(k)]\n"
                "### END SOLUTION\nrecord('squares', squares)",
            ),
            _md("b-q1", "**Q1.** What do the `squares` add up to?"),
            _md("b-ans1", b1, ["analysis"]),
        ]
    )
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


RUBRIC = """
[defaults]
cell_timeout = 60
notebook_timeout = 180
start_timeout = 90
memory_mb = 1500

[labs.alpha]
notebook = "alpha.ipynb"
title = "Alpha"
[[labs.alpha.checks]]
name = "slope recorded"
kind = "threshold"
points = 2
record = "slope"
min = 0
[[labs.alpha.checks]]
name = "figure"
kind = "figures"
points = 1
cells = ["fig-a"]
[[labs.alpha.checks]]
name = "answer Q1"
kind = "analysis"
points = 2
cells = ["a-ans1"]
[[labs.alpha.checks]]
name = "answer Q2"
kind = "analysis"
points = 1
cells = ["a-ans2"]

[labs.beta]
notebook = "beta.ipynb"
title = "Beta"
[[labs.beta.checks]]
name = "squares recorded"
kind = "record"
points = 1
record = "squares"
[[labs.beta.checks]]
name = "answer Q1"
kind = "analysis"
points = 1
cells = ["b-ans1"]
"""

# Six ways students write the same exercise; bob is ann with other names and comments.
CODE = {
    "ann": """\
        def mean_square_slope(values):
            total = 0.0
            for v in values:
                total += 2 * v * v
            return total / len(values)

        rng = np.random.default_rng(seed)
        x = rng.normal(size=n)
        slope = mean_square_slope(x)""",
    "bob": """\
        # my helper: twice the mean square
        def avg_sq(vals):
            acc = 0.0   # running sum
            for item in vals:
                acc += 2 * item * item
            return acc / len(vals)

        gen = np.random.default_rng(seed)
        x = gen.normal(size=n)
        slope = avg_sq(x)""",
    "cat": """\
        rng = np.random.default_rng(seed)
        x = rng.normal(size=n)
        squares = np.square(x)
        slope = float(np.mean(squares) * 2)""",
    "dan": """\
        x = np.random.default_rng(seed).normal(size=n)
        slope, i = 0.0, 0
        while i < len(x):
            slope = slope + 2 * x[i] ** 2 / len(x)
            i = i + 1""",
    "eve": """\
        import math
        x = np.random.default_rng(seed).normal(size=n)
        slope = math.fsum(2 * float(v) ** 2 for v in x) / n""",
    "fay": """\
        x = np.random.default_rng(seed).normal(size=n)
        slope = float(sum(map(lambda t: 2 * t * t, x)) / x.size)""",
}
PROSE = {
    "ann": (
        "Each term of the mean is two times a squared sample, and squares cannot be negative, so the "
        "average of them is positive unless every sample is exactly zero.",
        "With more samples the average of the squares has less noise and approaches two.",
    ),
    "bob": (
        "Each term of the mean is two times a squared sample, and squares cannot be negative, so the "
        "average of them is positive unless every sample is zero.",
        "A bigger n gives a smoother estimate.",
    ),
    "cat": ("Squaring removes the sign of every draw.", "The variance of the estimate falls like one over n."),
    "dan": ("Only non-negative numbers are summed here.", "It converges to the second moment times two."),
    "eve": ("Because x squared is at least zero.", "Less noise."),
    "fay": ("The mean of positive terms is positive.", "Law of large numbers."),
}


def student_notebooks(name: str, ref_alpha, ref_beta):
    """The released notebooks as ``name`` filled them in (each in a way the grader must cope with)."""
    a, _ = release_notebook(ref_alpha, "alpha.ipynb")
    b, _ = release_notebook(ref_beta, "beta.ipynb")
    cells = {c.id: c for c in a.cells}
    cells["a-work"].source = cells["a-work"].source.replace(
        "# YOUR CODE HERE\nraise NotImplementedError()", textwrap.dedent(CODE[name])
    )
    a1, a2 = PROSE[name]
    cells["a-ans1"].source, cells["a-ans2"].source = a1, a2
    bcells = {c.id: c for c in b.cells}
    bcells["b-work"].source = bcells["b-work"].source.replace(
        "# YOUR CODE HERE\nraise NotImplementedError()", "squares = [j ** 2 for j in range(k)]"
    )
    bcells["b-ans1"].source = f"{name} says: 0 + 1 + 4 = 5."
    if name == "cat":  # deleted the tag of an answer cell
        cells["a-ans1"].metadata.pop("tags")
    elif name == "dan":  # duplicated the answer cell, answered in the copy, left the original as it was
        cells["a-ans1"].source = answers.PLACEHOLDER
        copy = _md("dan-copy", a1, ["analysis"])
        a.cells.insert(a.cells.index(cells["a-ans1"]) + 1, copy)
    elif name == "eve":  # retyped the second answer cell as code: the run stops there, the answer counts
        i = a.cells.index(cells["a-ans2"])
        a.cells[i] = _code("a-ans2", a2)
    elif name == "fay":  # deleted the answer cell and answered in a new one; left beta's placeholder
        i = a.cells.index(cells["a-ans1"])
        a.cells[i] = _md("fay-own", a1)
        bcells["b-ans1"].source = answers.PLACEHOLDER
    return a, b


STUDENTS = list(CODE)


def make_class(root: Path, students=STUDENTS, labs=("alpha", "beta")) -> dict:
    """``root``: the fixture labs' reference notebooks and rubric, and a folder per student with
    their notebook of each of ``labs``."""
    nbs, subs = root / "notebooks", root / "subs"
    nbs.mkdir(parents=True)
    ref_a, ref_b = alpha(), beta()
    nbformat.write(ref_a, str(nbs / "alpha.ipynb"))
    nbformat.write(ref_b, str(nbs / "beta.ipynb"))
    for name in students:
        (subs / name).mkdir(parents=True)
        for lab, nb in zip(("alpha", "beta"), student_notebooks(name, ref_a, ref_b)):
            if lab in labs:
                nbformat.write(nb, str(subs / name / f"{lab}.ipynb"))
    (root / "rubric.toml").write_text(RUBRIC)
    return {"root": root, "notebooks": nbs, "subs": subs, "rubric": root / "rubric.toml", "out": root / "out"}


# RUBRIC with a late penalty on alpha: a quarter of its points a day late, at most half.
LATE_RUBRIC = RUBRIC.replace("[labs.alpha]\n", "[labs.alpha]\nlate_penalty = { per_day = 0.25, max = 0.5 }\n")


def nb_bytes(nb) -> bytes:
    """``nb`` as the bytes of its file."""
    return nbformat.writes(nb).encode()


def labs_of(tmp: Path, text: str = RUBRIC) -> list:
    """The labs of rubric ``text``, written to ``tmp``/rubric.toml and loaded."""
    (tmp / "rubric.toml").write_text(text)
    return list(load_rubric(tmp / "rubric.toml").labs.values())


def reference_notebooks(tmp: Path) -> Path:
    """``tmp``/notebooks holding both labs' reference notebooks."""
    nbs = tmp / "notebooks"
    nbs.mkdir(exist_ok=True)
    nbformat.write(alpha(), str(nbs / "alpha.ipynb"))
    nbformat.write(beta(), str(nbs / "beta.ipynb"))
    return nbs


def filled(name: str, lab: str = "alpha") -> bytes:
    """The bytes of ``name``'s notebook of ``lab``, as ``student_notebooks`` fills it in."""
    a, b = student_notebooks(name, alpha(), beta())
    return nb_bytes(a if lab == "alpha" else b)


# The class in Canvas's roster: (display name, Canvas id, SIS id, login); Abe Absent hands nothing in.
PEOPLE = [
    ("Smith, John", 12345, "S1001", "jsmith"),
    ("Doe, Jane", 12346, "S1002", "jdoe"),
    ("Roe, Rick", 12347, "S1003", "rroe"),
    ("Lee, Lou", 12348, "S1004", "llee"),
    ("Kim, Kay", 12349, "S1005", "kkim"),
    ("Absent, Abe", 12350, "S1006", "aabsent"),
]


# Canvas's group set: (name, Canvas id, SIS id, login, group); Kay Kim is in no group.
GROUPS = [
    ("John Smith", 12345, "S1001", "jsmith", "Group 3"),
    ("Rick Roe", 12347, "S1003", "rroe", "Group 3"),
    ("Lou Lee", 12348, "S1004", "llee", "Group 3"),
    ("Jane Doe", 12346, "S1002", "jdoe", "Group 4"),
]
