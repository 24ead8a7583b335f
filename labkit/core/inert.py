r"""Text a student wrote, made inert for a terminal, a CSV or a Markdown file.

Names, answers, file names and exception messages are the student's, and the grader prints them
and writes them to its CSVs and summary.md. There a control character acts: ESC starts a terminal
sequence that moves the cursor and rewrites earlier lines, CR returns to the line's start, and
Unicode's bidi controls reorder what follows ("0/19" shown as "91/0"). ``visible`` writes each such
character as an escape (``\x1b``, ``\u202e``): the text reads as it was written and does nothing.
The set: C0 and C1 controls and DEL, the bidi controls (embeddings, overrides, isolates, marks)
and the invisible format characters that no name or sentence needs (zero-width space, word
joiner, BOM, soft hyphen, tags...). Kept: every script's letters, and the zero-width joiners that
Persian, the Indic scripts and emoji need. ``keep`` names the controls a place allows (newline,
tab). ``escape``/``unescape`` are the reversible form, for files the grader reads back: a
backslash run before something that reads as an escape is doubled. ``console`` applies
``visible`` to everything a command prints, a line per message.
"""

from __future__ import annotations

import contextlib
import re
import sys

UNSAFE = (
    "\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f"
)
_UNSAFE = re.compile(f"[{UNSAFE}]")
_LOOKS_ESCAPED = r"x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}"
_ESCAPE = re.compile(rf"(\\+)({_LOOKS_ESCAPED}|[{UNSAFE}])?|([{UNSAFE}])")
_UNESCAPE = re.compile(rf"(\\+)({_LOOKS_ESCAPED})?")  # the whole run, always: no retry inside it
LINE = "\t"  # what one line keeps
TEXT = "\n\t"  # what text of several lines keeps


def _code(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def visible(text, keep: str = TEXT) -> str:
    """``text`` with every unsafe character but those in ``keep`` written as its escape."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _code(m.group()), str(text))


def is_inert(text: str, keep: str = TEXT) -> bool:
    """Whether ``text`` holds no unsafe character but those in ``keep``."""
    return all(m.group() in keep for m in _UNSAFE.finditer(text))


def escape(text: str, keep: str = TEXT) -> str:
    """``visible``, reversibly: ``unescape(escape(t, keep)) == t`` for every text."""

    def one(m: re.Match) -> str:
        run, after, bare = m.groups()
        if bare is not None:
            return bare if bare in keep else _code(bare)
        if after is None or after in keep:
            return run + (after or "")
        return run * 2 + (after if len(after) > 1 else _code(after))

    return _ESCAPE.sub(one, text)


def unescape(text: str) -> str:
    """The inverse of ``escape``. An odd run of backslashes before the escape of an unsafe
    character is that character; an even run before anything that reads as an escape is halved;
    the rest (``\\x41`` typed by hand, say) stays as it is."""

    def one(m: re.Match) -> str:
        run, code = m.groups()
        if code is None:
            return run
        if len(run) % 2 == 0:
            return run[: len(run) // 2] + code
        ch = chr(int(code[1:], 16)) if int(code[1:], 16) <= sys.maxunicode else ""
        return run[: len(run) // 2] + ch if ch and _UNSAFE.fullmatch(ch) else m.group()

    return _UNESCAPE.sub(one, text)


class _Inert:
    """A text stream that writes what it is given through ``visible``, one line per write: the
    grader prints each message whole, so a newline inside one (a file name's) is shown, not
    followed, and cannot start a line that reads as the grader's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        body = text[:-1] if text.endswith("\n") else text
        self._stream.write(visible(body, LINE) + text[len(body) :])
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def say(text: str, file=None) -> None:
    """Print a message of the kit's own that has several lines (an error listing its problems), a
    write per line, so that ``console`` keeps its lines: only a newline inside one write is shown."""
    for line in str(text).splitlines() or [""]:
        print(line, file=file or sys.stdout)


@contextlib.contextmanager
def console():
    """While it lasts, what this process prints (``sys.stdout``, ``sys.stderr``) goes out inert;
    a program it starts writes to its own descriptors, untouched."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Inert(saved[0]), _Inert(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
