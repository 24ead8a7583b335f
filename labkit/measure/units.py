"""How the labs write numbers: bytes in decimal units, rates, and tables formatted by column name.

Bytes use decimal units (1 KB = 1000 B), as the course reports did. ``table(frame)`` formats
every column by its name (``RULES``, first match wins: ``_bytes_per_s`` as ``1.2 MB/s``,
``_accuracy`` as ``91.20%``, ``speedup`` as ``1.87x`` ...), so a notebook shows any of the kit's
frames with one call instead of a hand-written ``.style.format({...})`` map;
``table(frame, {column: format})`` adds or overrides. Imports nothing of labkit.

More in docs/internals.md, section labkit.measure (the table of rules).
"""

from __future__ import annotations

import math
import numbers

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def fmt_bytes(n, digits: int = 1) -> str:
    """``1234567 -> '1.2 MB'``; ``512 -> '512 B'``; None or NaN -> 'n/a'."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    n = float(n)
    sign, n = ("-" if n < 0 else ""), abs(n)
    i = 0
    while n >= 1000 and i < len(_UNITS) - 1:
        n /= 1000
        i += 1
    return f"{sign}{n:.0f} B" if i == 0 else f"{sign}{n:.{digits}f} {_UNITS[i]}"


def fmt_rate(n, digits: int = 1) -> str:
    """Bytes per second: ``1234567 -> '1.2 MB/s'``; None or NaN -> 'n/a'."""
    text = fmt_bytes(n, digits)
    return text if text == "n/a" else text + "/s"


def _fmt(text):
    """A cell formatter from a format string or function that leaves non-numbers (a label) as they are."""
    call = text.format if isinstance(text, str) else text

    def fmt(v):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return "-" if v is None else str(v)
        return "-" if isinstance(v, float) and math.isnan(v) else call(v)

    return fmt


def fmt_seconds(v: float) -> str:
    """Three significant digits, without exponents: 0.0312, 1.87, 12.3, 123, 1,234."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def fmt_ratio(v: float) -> str:
    return f"{v:,.0f}x" if abs(v) >= 100 else f"{v:.3g}x"


# (test on the column name, cell formatter); the first that matches wins.
RULES = (
    (lambda c: c.endswith("_bytes_per_s"), _fmt(fmt_rate)),
    (lambda c: "bytes" in c and "_over_" not in c, _fmt(fmt_bytes)),
    (lambda c: c.endswith("_pct") or c.startswith("cpu_") or "_cpu_" in c, _fmt("{:.1f}")),
    (lambda c: c.endswith("_accuracy"), _fmt("{:.2%}")),
    (lambda c: c.endswith(("_loss", "_logloss")), _fmt("{:.4f}")),
    (lambda c: c in ("deviation", "rel_error") or c.endswith("_deviation"), _fmt("{:+.1%}")),
    (lambda c: c.endswith("_error"), _fmt("{:.1%}")),
    (lambda c: c.endswith(("_share", "efficiency")), _fmt("{:.0%}")),
    (lambda c: c.endswith(("speedup", "_ratio")), _fmt(fmt_ratio)),
    (lambda c: "_over_" in c, _fmt("{:.2f}")),
    (lambda c: c.endswith("_per_s"), _fmt("{:,.0f}")),
    (lambda c: c.endswith(("_s", "_ms")), _fmt(fmt_seconds)),
)
_WHOLE = _fmt("{:,.0f}")


def formats(frame) -> dict:
    """{column: cell formatter} for ``frame``'s columns: by ``RULES``, else whole numbers
    without decimals (a float column of counts, say, that a missing value made float)."""
    out = {}
    for c in frame.columns:
        name = str(c)
        rule = next((fmt for test, fmt in RULES if test(name)), None)
        if rule is None and frame[c].dtype.kind in "if":
            values = frame[c].dropna()
            if len(values) and (values == values.round()).all():
                rule = _WHOLE
        if rule is not None:
            out[c] = rule
    return out


def table(frame, extra: dict | None = None, hide_index: bool = False):
    """``frame.style`` with every column formatted by its name (``RULES``), plus ``extra``
    ({column: format string or function}, which wins); ``hide_index`` drops the index. A
    Series is shown as a one-column frame."""
    if not hasattr(frame, "columns"):
        frame = frame.to_frame()
    extra = {c: _fmt(f) for c, f in (extra or {}).items()}
    styler = frame.style.format({**formats(frame), **extra}, na_rep="-")
    return styler.hide(axis="index") if hide_index else styler
