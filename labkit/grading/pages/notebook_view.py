"""The executed notebook as its feedback page shows it (``displayable``).

- Cells carry the number JupyterLab shows ("Cell 5/42", from 1; ``cell_numbers``): the cells
  papermill adds (the injected parameters, its error banners) have none, and the banners go.
- An output, or a cell's text, longer than the rubric's ``page_output_kb`` is cut (an image or a
  formula, which means nothing in part, is left out), with the grader's note after it.
- TensorFlow's start-up lines on stderr (absl's I/W log lines, oneDNN's and the CPU-feature
  notices) are folded into a note, so they do not look like an error; the rest of stderr stays.
- What needs a script (widget state and views, JavaScript, mermaid) is left out.

Notes are outputs with ``metadata.labkit_note``; a student's output cannot carry one (it is
removed first), so only the grader's notes look like notes.
"""

from __future__ import annotations

import copy
import re

from labkit.notebook.record import cell_tags

# TensorFlow's start-up lines on stderr: absl's log format (I/W severity), and its notices
TF_NOISE = re.compile(
    r"[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] .*"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
    r"|E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] Unable to register cu(DNN|FFT|BLAS) factory.*"
    r"|[EW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] failed call to cuInit.*"
)


def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, ended at a line break where there is one near."""
    head = text[:limit]
    nl = head.rfind("\n")
    return head[: nl + 1] if nl > limit // 2 else head


def _note(summary: str, text: str = "") -> dict:
    """An output the page shows as the grader's note (``labkit_note``)."""
    return {"output_type": "display_data", "data": {}, "metadata": {"labkit_note": {"summary": summary, "text": text}}}


def _size(value) -> int:
    return len(value) if isinstance(value, str) else len(str(value))


def kb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def _fit_output(out: dict, limit: int) -> list[dict]:
    """``out`` as the page shows it: cut to ``limit`` characters per MIME type, with a note when cut."""
    kind = out.get("output_type")
    if kind == "stream":
        text = out.get("text", "")
        text = text if isinstance(text, str) else "".join(text)
        notes = []
        if out.get("name") == "stderr":
            lines = text.splitlines(keepends=True)
            noise = [ln for ln in lines if TF_NOISE.fullmatch(ln.rstrip("\n"))]
            if noise:
                text = "".join(ln for ln in lines if not TF_NOISE.fullmatch(ln.rstrip("\n")))
                notes.append(
                    _note(
                        f"TensorFlow's start-up messages ({len(noise)} line(s) on stderr; not errors, "
                        f"also in the run's log)",
                        _cut("".join(noise), limit),
                    )
                )
        if len(text) > limit:
            notes.append(
                _note(
                    f"This output is {kb(len(text))}; the page shows its first {kb(limit)} (the "
                    f"rubric's page_output_kb)."
                )
            )
            text = _cut(text, limit)
        return ([{**out, "text": text}] if text.strip() else []) + notes
    if kind == "error":
        tb = list(out.get("traceback") or [])
        if sum(map(len, tb)) > limit:
            kept, total = [], 0
            for line in tb:
                total += len(line)
                if total > limit:
                    break
                kept.append(line)
            return [
                {**out, "traceback": kept},
                _note(
                    f"This traceback is longer than {kb(limit)}; the page shows "
                    f"its start (the rubric's page_output_kb)."
                ),
            ]
        return [out]
    data = out.get("data")
    if not isinstance(data, dict):
        return [out]
    big = {m: _size(v) for m, v in data.items() if _size(v) > limit}
    if not big:
        return [out]
    data = dict(data)
    for mime in big:
        if mime in ("text/plain", "text/html", "text/markdown"):
            data[mime] = _cut(data[mime] if isinstance(data[mime], str) else "".join(data[mime]), limit)
        else:  # an image or a formula cut in half means nothing: left out
            data.pop(mime)
    if not data:
        data["text/plain"] = ""
    what = ", ".join(f"{m} {kb(n)}" for m, n in big.items())
    return [
        {**out, "data": data},
        _note(
            f"This output is over the {kb(limit)} a page shows of one output (the "
            f"rubric's page_output_kb): {what}; cut, or left out where a part would "
            f"mean nothing (images, formulas)."
        ),
    ]


def cell_numbers(nb, source_ids: list | None) -> list:
    """Per cell of the executed ``nb``: its number in the submitted notebook (from 1), or None
    for a cell the grader's run added (papermill's parameters and error cells). By cell id when
    the submission has them, else by position."""
    added = ("injected-parameters", "papermill-error-cell-tag")
    if source_ids and all(source_ids):
        where = {cid: i + 1 for i, cid in enumerate(source_ids)}
        return [where.get(c.get("id")) for c in nb.cells]
    out, n = [], 0
    for c in nb.cells:
        if any(t in cell_tags(c) for t in added):
            out.append(None)
        else:
            n += 1
            out.append(n)
    return out


def displayable(nb, limit: int, numbers: list):
    """A copy of ``nb`` as the page shows it: papermill's error banners and what needs a script
    (widgets, JavaScript) left out, every output and cell text cut to ``limit`` characters
    (with a note), each cell with its number (``metadata.labkit``)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    drop = (
        "application/javascript",
        "application/vnd.jupyter.widget-view+json",
        "application/vnd.jupyter.widget-state+json",
        "text/vnd.mermaid",
    )
    cells = []
    for cell, number in zip(nb.cells, numbers):
        if "papermill-error-cell-tag" in cell_tags(cell):
            continue
        meta = cell.setdefault("metadata", {})
        meta["labkit"] = {"number": number, "injected": "injected-parameters" in cell_tags(cell), "cut": ""}
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        if len(source) > limit:
            cell["source"] = _cut(source, limit)
            meta["labkit"]["cut"] = (
                f"This cell's text is {kb(len(source))}; the page shows its first "
                f"{kb(limit)} (the rubric's page_output_kb)."
            )
        outputs = []
        for out in cell.get("outputs") or []:
            (out.get("metadata") or {}).pop("labkit_note", None)  # a note is the grader's to write
            data = out.get("data")
            if isinstance(data, dict):
                for mime in drop:
                    data.pop(mime, None)
                if not data and out.get("output_type") in ("display_data", "execute_result"):
                    data["text/plain"] = ""
            outputs += _fit_output(out, limit)
        if cell.get("cell_type") == "code":
            cell["outputs"] = outputs
        cells.append(cell)
    nb.cells = cells
    return nb
