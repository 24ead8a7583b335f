"""A lab's student API: the names its notebook may use, declared in one place and nothing deeper.

A lab's ``__init__`` declares its API as ``Surface``s, one per kit module its notebook uses, each
listing the names the notebook may reach through it::

    API = {"lr": Surface("labkit.learning.lr", "train_core train_keras compare")}
    __getattr__, __dir__, __all__ = exports(__name__, API)

``from labkit.labs.lab1 import lr`` then gives a namespace whose listed names resolve to the kit's
objects on first use (nothing is imported before), and whose other names raise an error that
points at docs/student-api.md. The kit may move a module: only the ``Surface``'s target changes,
and every notebook written against the lab keeps working. ``API_VERSION`` counts changes of the
contract; tests/labs/test_student_api.py holds it against the notebooks and docs/student-api.md.
"""

from __future__ import annotations

import importlib

API_VERSION = 1  # raised when a name leaves a lab's API; adding a name keeps it


class Surface:
    """The names of one kit module (``target``) that a lab's notebook may use."""

    def __init__(self, target: str, names: str, lab: str = "", alias: str = ""):
        self._target, self._names = target, tuple(names.split())
        self._lab, self._alias = lab, alias

    def bind(self, lab: str, alias: str) -> Surface:
        """The same surface, named as the lab exports it (for its messages)."""
        return Surface(self._target, " ".join(self._names), lab, alias)

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    @property
    def target(self) -> str:
        return self._target

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in self._names:
            raise AttributeError(
                f"{self._alias or self._target!r} of {self._lab or 'this lab'} has no {name!r}: its names are "
                f"{', '.join(self._names)} (docs/student-api.md lists every lab's)"
            )
        value = getattr(importlib.import_module(self._target), name)
        setattr(self, name, value)  # found directly next time
        return value

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<{self._lab} API {self._alias}: {' '.join(self._names)}>"


def exports(module: str, api: dict):
    """``__getattr__``, ``__dir__`` and ``__all__`` for the lab package ``module`` with this API.

    A ``Surface`` entry is a namespace; a ``"module:attribute"`` string is one object, imported on
    first use (the lab's own functions, or a class the notebook calls directly)."""
    lab = module.rsplit(".", 1)[-1]
    bound = {k: v.bind(lab, k) if isinstance(v, Surface) else v for k, v in api.items()}
    for k, v in api.items():  # the lab's own module of that name (its self-checks): the module itself,
        if isinstance(v, Surface) and v.target == f"{module}.{k}":  # which importing it binds here anyway
            bound[k] = v.target

    def __getattr__(name: str):
        if name not in bound:
            raise AttributeError(
                f"{module} has no {name!r}: it exports {', '.join(sorted(bound))} (docs/student-api.md)"
            )
        entry = bound[name]
        if isinstance(entry, str):
            target, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(target), attr) if attr else importlib.import_module(target)
        return entry

    def __dir__() -> list[str]:
        return sorted(bound)

    return __getattr__, __dir__, sorted(bound)


def surface_of(lab_module) -> dict[str, tuple[str, tuple[str, ...]]]:
    """A lab's API as data: exported name -> (target, names) (names empty for a single object)."""
    out = {}
    for name, entry in lab_module.API.items():
        out[name] = (entry.target, entry.names) if isinstance(entry, Surface) else (entry, ())
    return out


def document() -> str:
    """docs/student-api.md's table of every lab's API, as the labs declare it now."""
    from labkit import EXPORTS
    from labkit.labs import api, names

    lines = [f"API version {API_VERSION}.", "", "From `labkit` itself, in every lab:", ""]
    lines += [f"- `{name}`" for name in EXPORTS]
    for lab in names():
        lines += ["", f"### `labkit.labs.{lab}`", "", "| name | what it gives |", "|---|---|"]
        for name, (target, attrs) in surface_of(api(lab)).items():
            what = ", ".join(f"`{a}`" for a in attrs) if attrs else "one object"
            lines.append(f"| `{name}` | {what} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m labkit.labs.surface > the table (run as the module, not __main__'s copy)
    from labkit.labs import surface

    print(surface.document(), end="")
