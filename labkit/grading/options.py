"""What one grading batch is asked to do: built once, from the command line or a caller, checked once.

``make grade`` passes its variables to ``python -m labkit grade`` (cli.py declares the flags);
``GradeOptions.from_args`` turns them into one value, and every stage of the batch reads that.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path


class GradeError(ValueError):
    """The batch cannot start (bad folder, bad rubric, no sandbox, options that do not fit); the
    message says what to fix."""


@dataclass(frozen=True)
class GradeOptions:
    """One batch: the reference notebooks (``submissions`` None) or a class's submissions (a
    folder, or Canvas's or Gradescope's download), graded into ``out``.

    ``parallel``: notebooks at a time (None: one per core within memory). ``labs``: the labs to
    grade (default: those submitted; the reference run: all). ``sandbox``: None (bubblewrap; the
    reference may run without it), "bwrap" or "none". ``force``: run everything again.
    ``slurm``: a partition to run the notebooks in as job arrays, ``slurm_args`` for ``sbatch``.
    ``similar``: the similarity report's threshold. ``roster``: Canvas's gradebook export.
    ``due``: Gradescope's due date (ISO 8601). ``groups``: Canvas's group set CSV. ``student``:
    regrade that one student, everyone else staying as graded."""

    rubric: str | Path = "notebooks/rubric.toml"
    submissions: str | Path | None = None
    out: str | Path = "out/grade"
    parallel: int | None = None
    labs: list[str] | None = None
    notebooks: str | Path = "notebooks"
    sandbox: str | None = None
    force: bool = False
    slurm: str | None = None
    slurm_args: tuple[str, ...] = ()
    similar: float | None = None
    roster: str | None = None
    due: str | None = None
    groups: str | None = None
    student: str | None = None

    def __post_init__(self):
        if self.student is not None and self.submissions is None:
            raise GradeError(
                f"--student {self.student}: regrading one student needs the class's submissions "
                f"(make grade SUBMISSIONS=... STUDENT={self.student})"
            )
        if self.similar is not None and not 0 < self.similar <= 1:
            raise GradeError(
                f"--similar {self.similar!r}: give the share of fingerprints that flags a pair, above 0 and at most 1"
            )
        p = self.parallel
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 1):
            raise GradeError(f"-j {p!r}: give how many notebooks to run at a time, 1 or more")
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "notebooks", Path(self.notebooks))
        object.__setattr__(self, "slurm_args", tuple(self.slurm_args))

    @property
    def sub(self) -> Path | None:
        """The submissions as a path (None: the reference notebooks)."""
        return Path(self.submissions) if self.submissions else None

    @classmethod
    def from_args(cls, args, out: str | Path) -> GradeOptions:
        """The options of the ``grade`` subcommand's parsed ``args`` (``out`` already defaulted)."""
        return cls(
            rubric=args.rubric,
            submissions=args.submissions,
            out=out,
            parallel=args.jobs,
            labs=args.lab,
            notebooks=args.notebooks,
            sandbox="none" if args.no_sandbox else None,
            force=args.force,
            slurm=args.slurm,
            slurm_args=tuple(shlex.split(args.slurm_args or "")),
            similar=args.similar,
            roster=args.roster,
            due=args.due,
            groups=args.groups,
            student=getattr(args, "student", None),
        )
