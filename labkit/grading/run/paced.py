"""Papermill's engine for a graded run, with its saves paced and its progress kept apart.

Papermill saves the whole executed notebook (copied, validated, serialized) as every cell starts
and as it ends: a run's saving costs its cells times its size, so 1,100 raw cells added to a Lab 1
notebook would hold its run for the whole notebook timeout (the notebook takes 42 s). Here the
notebook is saved when the run starts and ends and, in between, as a cell starts or ends only
once the time since the last save is at least ``SAVE_FACTOR`` times what that save took (and
``MIN_SAVE_S``): saving takes a bounded share of a run, however many cells it has, and a cell
that does nothing (raw, Markdown, empty) costs next to nothing.

What the grader needs of a run it stops (the cell it was in) is told as each cell starts to
``started`` (the runner's: a small progress file, ``runner.Progress``), so reading it costs the
grader nothing, however large the executed notebook.
"""

from __future__ import annotations

import time

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

NAME = "labkit-paced"  # the engine's name in papermill's registry
MIN_SAVE_S = 1.0  # the fewest seconds between two saves in a run
SAVE_FACTOR = 4.0  # ... and at least this many times what the last save took: saving is at most 1/5 of a run


class PacedManager(NotebookExecutionManager):
    """Papermill's manager of a run's state, saving at a pace (see the module docstring);
    ``started(index)`` is called as each cell starts, with its index in the executed notebook."""

    def __init__(self, nb, started=None, **kwargs):
        super().__init__(nb, **kwargs)
        self.started = started
        self.forced, self.took, self.saved_at = True, 0.0, 0.0

    def save(self, **kwargs):
        now = time.monotonic()
        if not self.forced and now - self.saved_at < max(MIN_SAVE_S, SAVE_FACTOR * self.took):
            if kwargs.get("nb") is not None:  # what papermill's own save does first (``catch_nb_assignment``)
                self.nb = kwargs["nb"]
            return
        super().save(**kwargs)
        self.saved_at = time.monotonic()
        self.took = self.saved_at - now

    def notebook_start(self, **kwargs):
        self._forced_save(super().notebook_start, **kwargs)

    def notebook_complete(self, **kwargs):
        self._forced_save(super().notebook_complete, **kwargs)

    def cell_start(self, cell, cell_index=None, **kwargs):
        if self.started is not None and cell_index is not None:
            self.started(cell_index)
        return super().cell_start(cell, cell_index, **kwargs)

    def _forced_save(self, step, **kwargs):
        self.forced = True
        try:
            step(**kwargs)
        finally:
            self.forced = False


class PacedEngine(NBClientEngine):
    """nbclient's engine with ``PacedManager``; ``started`` is its keyword."""

    @classmethod
    def execute_notebook(
        cls,
        nb,
        kernel_name,
        output_path=None,
        progress_bar=True,
        log_output=False,
        autosave_cell_every=30,
        started=None,
        **kwargs,
    ):
        manager = PacedManager(
            nb,
            started=started,
            output_path=output_path,
            progress_bar=progress_bar,
            log_output=log_output,
            autosave_cell_every=autosave_cell_every,
        )
        manager.notebook_start()
        try:
            cls.execute_managed_notebook(manager, kernel_name, log_output=log_output, **kwargs)
        finally:
            manager.cleanup_pbar()
            manager.notebook_complete()
        return manager.nb


papermill_engines.register(NAME, PacedEngine)
