"""Files written whole: a temporary file beside the target, then a rename over it.

A reader (a TA opening grades.csv, Canvas importing canvas.csv, a second command) sees either
the old file or the new one, never half of one, and a writer killed mid-write leaves the old
file in place and a hidden ``.<name>.<pid>.<random>.tmp`` beside it, never a torn target. Each
writer's temporary name is its own, so two writers (threads or processes) never share one; the
file gets the mode a plain ``open`` would give it (0666 less the umask). Imports nothing from
labkit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


@contextlib.contextmanager
def replacing(path, mode: str = "w", encoding: str | None = "utf-8"):
    """An open file (``mode`` "w" or "wb") that becomes ``path`` when the block ends without an
    exception; on an exception the temporary file is removed and ``path`` is left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode {mode!r}: give 'w' or 'wb'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with open(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path, text: str, encoding: str = "utf-8") -> None:
    """``path`` holds ``text``, written whole."""
    with replacing(path, "w", encoding) as f:
        f.write(text)


def write_bytes(path, data: bytes) -> None:
    """``path`` holds ``data``, written whole."""
    with replacing(path, "wb") as f:
        f.write(data)
