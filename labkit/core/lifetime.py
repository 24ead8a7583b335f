"""``with thing:`` for what has ``start()`` and ``stop()``: started on the way in, stopped on the
way out whatever happened (an exception goes on, it is not swallowed)."""

from __future__ import annotations

from typing import Self


class StartStop:
    """A mixin for a class with ``start()`` (returning the object) and ``stop()``."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False
