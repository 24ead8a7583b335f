"""Record a lab's key results inside the executed notebook, for the grader.

``record(name, value)`` displays the value under labkit's own MIME type, so it is saved
in the notebook's outputs by Jupyter and papermill alike; ``read_records`` gets the
values back from an ``.ipynb`` with nbformat. Values must be JSON-able; numpy scalars
and arrays and pandas frames are converted.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

MIME = "application/vnd.labkit.record+json"


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
    raise TypeError(f"record(): {type(value).__name__} is not JSON-able; pass numbers, strings, lists, "
                    f"dicts, numpy values or a pandas frame")


def record(name: str, value):
    """Save ``value`` under ``name`` in the notebook's outputs; returns the JSON-able value."""
    if not isinstance(name, str) or not name:
        raise ValueError("record(): name must be a non-empty string")
    data = to_jsonable(value)
    text = json.dumps(data)
    bundle = {MIME: {"name": name, "value": data},
              "text/plain": f"[labkit record] {name} = {text if len(text) < 200 else text[:197] + '...'}"}
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(bundle, raw=True)
    else:
        print(bundle["text/plain"])
    return data


def read_records(notebook) -> dict:
    """All records in an executed notebook (a path or an nbformat node), by name; last one wins."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4) if isinstance(notebook, (str, Path)) else notebook
    found = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            payload = out.get("data", {}).get(MIME)
            if payload is not None:
                found[payload["name"]] = payload["value"]
    return found
