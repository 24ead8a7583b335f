"""Record a lab's key results inside the executed notebook, for the grader, and read them back.

``record(name, value)`` displays the value under labkit's own MIME type, so it is saved
in the notebook's outputs by Jupyter and papermill alike; ``read_records`` gets the
values back from an ``.ipynb`` with nbformat, and ``lookup`` reads a path inside them
(``history.accuracy.-1``). Values must be JSON-able; numpy scalars and arrays and pandas
frames are converted.

Only a code cell's outputs are records: nbformat has no outputs on Markdown or raw cells,
so a record pasted into one (``pre_baked`` finds them) is never read. The cell helpers the
grader, the release and ``make check`` share (``cell_tags``, ``named_cells``, ``figure_count``,
``cell_name``: the number a student sees) live here too, with the notebook's records. Imports
nothing from labkit.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

MIME = "application/vnd.labkit.record+json"
MIN_FIGURE_PIXELS = 100  # a figure is at least this wide and tall (matplotlib's default is 640 x 480)


def to_jsonable(value):
    """Convert numpy/pandas values to plain JSON types (NaN and inf become None)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a hard dependency
        np = None
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # pandas DataFrame
        return [to_jsonable(r) for r in value.to_dict(orient="records")]
    if hasattr(value, "to_dict") and hasattr(value, "index"):  # pandas Series
        return {str(k): to_jsonable(v) for k, v in value.to_dict().items()}
    if np is not None:
        if isinstance(value, np.ndarray):
            return [to_jsonable(v) for v in value.tolist()]
        if isinstance(value, np.generic):
            value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise TypeError(
        f"record(): {type(value).__name__} is not JSON-able; pass numbers, strings, lists, "
        f"dicts, numpy values or a pandas frame"
    )


def record(name: str, value):
    """Save ``value`` under ``name`` in the notebook's outputs; returns the JSON-able value."""
    if not isinstance(name, str) or not name:
        raise ValueError("record(): name must be a non-empty string")
    data = to_jsonable(value)
    text = json.dumps(data)
    bundle = {
        MIME: {"name": name, "value": data},
        "text/plain": f"[labkit record] {name} = {text if len(text) < 200 else text[:197] + '...'}",
    }
    show(bundle)
    return data


def show(bundle: dict) -> None:
    """``bundle`` (MIME type -> data) as the cell's output in a kernel, its text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(bundle, raw=True)
    else:
        print(bundle["text/plain"])


def read_records(notebook) -> dict:
    """All records in the code cells of an executed notebook (a path or an nbformat node), by
    name; the last one wins. A payload that is not ``{"name": str, "value": ...}`` is skipped."""
    nb = _notebook(notebook)
    found = {}
    for cell in code_cells(nb):
        for out in cell.get("outputs") or []:
            payload = (out.get("data") or {}).get(MIME) if isinstance(out, dict) else None
            if isinstance(payload, dict) and isinstance(payload.get("name"), str) and "value" in payload:
                found[payload["name"]] = payload["value"]
    return found


def _notebook(notebook):
    import nbformat

    return nbformat.read(str(notebook), as_version=4) if isinstance(notebook, (str, Path)) else notebook


# ---------------------------------------------------------------------------------------------
# Cells


def cell_name(index: int) -> str:
    """A cell as the student finds it: JupyterLab's "Cell 5/42" counts from 1 (``index`` from 0)."""
    return f"cell {index + 1}"


def cell_tags(cell) -> list:
    """A cell's tags; a student's notebook may carry ``"tags": null`` or no metadata at all."""
    tags = (cell.get("metadata") or {}).get("tags") or []
    return tags if isinstance(tags, list) else []


def code_cells(nb) -> list:
    """The notebook's code cells: the only cells whose outputs the grader reads."""
    return [c for c in nb.cells if c.get("cell_type") == "code"]


def named_cells(nb, name: str) -> list:
    """Cells tagged ``name``, or the cell whose id is ``name``."""
    return [cell for cell in nb.cells if name in cell_tags(cell) or cell.get("id") == name]


def figure_count(cell) -> int:
    """Figures a code cell showed in this run (only code cells have outputs to read)."""
    if cell.get("cell_type") != "code":
        return 0
    return sum(1 for out in cell.get("outputs") or [] if isinstance(out, dict) and is_figure(out.get("data") or {}))


def is_figure(data: dict) -> bool:
    """An image of at least MIN_FIGURE_PIXELS on each side (a 1-pixel PNG is not a figure)."""
    import base64
    import binascii
    import io

    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            raw = data[mime]
            try:
                blob = base64.b64decode("".join(raw) if isinstance(raw, list) else raw, validate=False)
                from PIL import Image

                with Image.open(io.BytesIO(blob)) as im:  # reads the header only
                    w, h = im.size
            except (binascii.Error, OSError, ValueError, TypeError):
                return False
            return w >= MIN_FIGURE_PIXELS and h >= MIN_FIGURE_PIXELS
    svg = data.get("image/svg+xml")
    if svg:
        text = "".join(svg) if isinstance(svg, list) else str(svg)
        return "<svg" in text and text.count("<path") >= 5
    return False


def pre_baked(nb) -> list[str]:
    """What a submitted notebook carries that only a run should produce: outputs stored in code
    cells, and outputs or records put into Markdown or raw cells. One line per cell."""
    found = []
    for i, cell in enumerate(nb.cells):
        outs = cell.get("outputs") or []
        if cell.get("cell_type") == "code":
            if outs:
                found.append(f"{cell_name(i)}: {len(outs)} stored output(s)")
        elif outs or "outputs" in cell:
            found.append(f"{cell_name(i)} ({cell.get('cell_type')}): outputs in a non-code cell")
        elif MIME in json.dumps(cell.get("source", "")):
            found.append(f"{cell_name(i)} ({cell.get('cell_type')}): a record pasted into its text")
    return found


# ---------------------------------------------------------------------------------------------
# Lookups into records


class Missing(LookupError):
    """A record (or a key inside one) is absent."""


def lookup(records: dict, ref: str):
    """The value at ``ref``: a record name, optionally followed by ``.key`` or ``.index``
    parts into its JSON value (``steps.worker0``, ``history.accuracy.-1``). The longest
    prefix that names a record wins, so record names may contain dots."""
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        if name in records:
            value = records[name]
            for p in parts[cut:]:
                value = _step(value, p, ref)
            if value is None:
                raise Missing(f"record {ref!r} is null (NaN or None was recorded)")
            return value
    raise Missing(f"record {ref!r} not found")


def _step(value, part: str, ref: str):
    if isinstance(value, dict) and part in value:
        return value[part]
    if isinstance(value, list) and re.fullmatch(r"-?\d+", part):
        i = int(part)
        if -len(value) <= i < len(value):
            return value[i]
    raise Missing(f"record {ref!r}: no {part!r} in the recorded value")
