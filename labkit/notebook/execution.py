"""One way for the kit to clean a notebook, run it headless and read how far it got.

``labkit check``, the grader's runner, the student kit's release and the tests all go through here:

- ``clean``: what a run starts from, on nbconvert's ``ClearOutputPreprocessor`` and
  ``ClearMetadataPreprocessor`` (outputs, execution counts, and every metadata key but a cell's
  ``tags``, which mark the ``parameters`` cell and the exercises);
- ``execute``: papermill's run with the kit's settings (in this process, or in a child of its own:
  ``python -m labkit.notebook.isolated SPEC``);
- ``state`` and ``cells_done``: papermill's own per-cell record, which it saves into the executed
  notebook as each cell starts and ends, not its progress bar.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RUN_TAGS = ("injected-parameters", "papermill-error-cell-tag")  # the cells papermill adds to a run
KEPT_CELL_METADATA = {"tags"}
KEPT_NOTEBOOK_METADATA = {"kernelspec", ("language_info", "name"), "labkit"}  # labkit: the kit it was written for


def clean(nb, kernel: str | None = None):
    """``nb`` (an nbformat node) without anything a run produces: outputs, execution counts (also
    where a student put them on a Markdown cell) and metadata but cells' tags and the notebook's
    kernelspec. ``kernel``: run it on that kernel instead of the notebook's own (which is not a
    student's to choose). nbconvert is imported here: it takes seconds, and ``import labkit`` must not."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor, ClearOutputPreprocessor
    from nbformat import from_dict

    ClearOutputPreprocessor().preprocess(nb, {})
    metadata = ClearMetadataPreprocessor(
        preserve_cell_metadata_mask=KEPT_CELL_METADATA, preserve_nb_metadata_mask=KEPT_NOTEBOOK_METADATA
    )
    metadata.preprocess(nb, {})
    for cell in nb.cells:
        if cell.get("cell_type") != "code":  # nbconvert's clears code cells; papermill writes on every cell
            cell.metadata = dict(metadata.nested_filter((cell.get("metadata") or {}).items(), KEPT_CELL_METADATA))
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    if kernel:
        nb.metadata["kernelspec"] = {"name": kernel, "language": "python", "display_name": kernel}
        nb.metadata["language_info"] = {"name": "python"}
    return from_dict(nb)


def execute(source, output, *, parameters: dict, kernel: str, cwd, cell_timeout: float, start_timeout: float, **engine):
    """Run ``source`` into ``output`` under papermill: the kit's settings (no progress bar or echo
    of the outputs: a caller reads ``output``; the kernel shut down at once) and ``engine``'s extra
    keywords (the grader's sandboxed kernel manager). Raises what papermill raises."""
    import papermill as pm

    return pm.execute_notebook(
        str(source),
        str(output),
        parameters=parameters,
        kernel_name=kernel,
        cwd=str(cwd),
        execution_timeout=cell_timeout,
        start_timeout=start_timeout,
        progress_bar=False,
        log_output=False,
        **{"shutdown_kernel": "immediate", **engine},
    )


def state(cell) -> str:
    """What papermill recorded of one executed cell: ``failed`` (it raised), ``ran`` (it started:
    papermill marks a cell stopped by a timeout or a dead kernel as ended too) or ``not-run``."""
    meta = (cell.get("metadata") or {}).get("papermill") or {}
    return "failed" if meta.get("exception") else "ran" if meta.get("start_time") else "not-run"


def added(cell) -> bool:
    """Whether papermill added the cell to the run (the injected parameters, the error banner)."""
    return bool(set(RUN_TAGS) & set((cell.get("metadata") or {}).get("tags") or []))


def cells_done(executed: Path) -> int | None:
    """How many cells of a run in progress have ended, from the notebook papermill saves as each
    cell starts and ends; None while there is none to read (not yet written, or mid-write)."""
    try:
        nb = json.loads(Path(executed).read_text())
    except (OSError, ValueError):
        return None
    return sum(1 for c in nb.get("cells", []) if ((c.get("metadata") or {}).get("papermill") or {}).get("end_time"))


def main(argv: list[str]) -> int:
    """``python -m labkit.notebook.isolated SPEC``: ``execute`` with the keywords in JSON file SPEC,
    for a caller that must be able to kill the whole run; an error's type and text go to stderr."""
    spec = json.loads(Path(argv[0]).read_text())
    try:
        execute(**spec)
    except Exception as e:  # the caller reads the type (CellTimeoutError, DeadKernelError) from the log
        print(f"labkit: the run ended: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
