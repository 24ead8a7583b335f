"""What a run leaves in the output folder, cut to a size the class can keep.

A notebook that floods its outputs would leave an executed notebook of hundreds of MB in the
output folder, for every student. Once a run is scored (the grader has read what it needs),
its stored executed notebook is cut as its feedback page is: each output, and each cell's
text, to the rubric's ``page_output_kb``, with a note in the notebook where something was cut
(``notebook_view``'s cutting); then the whole notebook to ``MAX_STORED_BYTES``, the last
outputs left out first, with a note. An executed notebook too large to read at all (over
``scoring.MAX_EXECUTED_BYTES``) is replaced by the submitted notebook, with a note that says
how large the outputs were. So a run's folder (the executed notebook, its page, whose outputs
are cut alike, and its log, capped by ``logcap``) has a bound whatever the notebook printed.
"""

from __future__ import annotations

import json
from pathlib import Path

from labkit.core import atomic

MAX_STORED_BYTES = 16 * 2**20


def note(text: str) -> dict:
    """A note in the stored notebook, as an output every viewer shows."""
    return {"output_type": "stream", "name": "stderr", "text": f"[labkit grader: {text}]\n"}


def cut(executed: Path, source: Path, output_kb: float, most: int = MAX_STORED_BYTES) -> str:
    """Cut the stored ``executed`` notebook (see the module docstring); returns what was done ('' when nothing)."""
    from labkit.grading.pages.notebook_view import kb
    from labkit.grading.judge.scoring import MAX_EXECUTED_BYTES

    try:
        size = executed.stat().st_size
    except OSError:
        return ""
    limit = int(output_kb * 1024)
    if size > MAX_EXECUTED_BYTES:
        return _replace(
            executed,
            source,
            f"the executed notebook was {kb(size)} of output, over the "
            f"{kb(MAX_EXECUTED_BYTES)} the grader reads; its outputs were not kept",
        )
    if size <= min(limit, most):
        return ""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    changed = sum(_fit_cell(c, limit) for c in cells if isinstance(c, dict))
    text = json.dumps(nb, ensure_ascii=False)
    dropped = 0
    while len(text.encode()) > most and _drop_last(cells):
        dropped += 1
        text = json.dumps(nb, ensure_ascii=False)
    if dropped:
        first = next((c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"), None)
        if first is not None:
            first.setdefault("outputs", []).insert(
                0,
                note(
                    f"this notebook's outputs came to {kb(size)}; the stored copy keeps at most {kb(most)}: the last "
                    f"{dropped} output(s) were left out"
                ),
            )
            text = json.dumps(nb, ensure_ascii=False)
    if not changed and not dropped:
        return ""
    _write(executed, text)
    return (
        f"the stored executed notebook was cut from {kb(size)} to {kb(len(text.encode()))} (each output to "
        f"{kb(limit)}, the rubric's page_output_kb" + (f"; {dropped} output(s) left out" if dropped else "") + ")"
    )


def _fit_cell(cell: dict, limit: int) -> int:
    """Cut ``cell``'s outputs to ``limit`` characters each, a note after each cut; returns how many."""
    from labkit.grading.pages.notebook_view import _cut, _fit_output, kb

    outs, cuts = [], 0
    for out in cell.get("outputs") or []:
        if not isinstance(out, dict):
            continue
        if out.get("output_type") == "stream":  # TensorFlow's start-up lines stay as they were
            text = out.get("text", "")
            text = text if isinstance(text, str) else "".join(map(str, text))
            if len(text) > limit:
                cuts += 1
                outs += [
                    {**out, "text": _cut(text, limit)},
                    note(
                        f"this output is {kb(len(text))}; the stored notebook keeps its first {kb(limit)} "
                        f"(the rubric's page_output_kb)"
                    ),
                ]
            else:
                outs.append(out)
            continue
        fitted = _fit_output(out, limit)
        notes = [o for o in fitted if "labkit_note" in (o.get("metadata") or {})]
        cuts += bool(notes)
        outs += [o for o in fitted if o not in notes]
        outs += [
            note(n["metadata"]["labkit_note"]["summary"].replace("the page shows", "the stored notebook keeps"))
            for n in notes
        ]
    if cuts:
        cell["outputs"] = outs
    return cuts


def _drop_last(cells: list) -> bool:
    for cell in reversed(cells):
        if isinstance(cell, dict) and cell.get("outputs"):
            cell["outputs"].pop()
            return True
    return False


def _replace(executed: Path, source: Path, why: str) -> str:
    try:
        nb = json.loads(source.read_text(encoding="utf-8"))
        code = [c for c in nb.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]
        if code:
            code[0]["outputs"] = [note(why)]
        text = json.dumps(nb, ensure_ascii=False)
    except (OSError, ValueError, AttributeError):
        text = json.dumps({"cells": [], "metadata": {"labkit": why}, "nbformat": 4, "nbformat_minor": 5})
    _write(executed, text)
    return why


def _write(path: Path, text: str) -> None:
    atomic.write_text(path, text)
