"""Named things of one sort, found by name: the kit's one registry idiom.

Launchers, benchmarks, rubric check kinds, verifiers, hidden checks and grading executors are
each a ``Registry``: a mapping from name to entry, filled two ways::

    LAUNCHERS = Registry("launcher", builtin={"srun": "labkit.distributed.launchers.srun:SlurmLauncher"})

    @LAUNCHERS.register("nice")           # an entry defined here and now
    class NiceLauncher(LocalLauncher): ...

A built-in entry is a ``"module:attribute"`` reference, imported on first use, so naming a
registry's entries costs no imports. A built-in entry's name is its module's name; a name it
had before is an alias (``aliases``), which finds the same entry and is not listed. An unknown
name raises ``UnknownName`` (a ``ValueError`` and a ``KeyError``) that lists the known ones. A
registry of classes (``base``) adds each by its ``name``. Imports nothing from labkit.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping


def resolve(reference: str):
    """The object a ``"module:attribute"`` (or ``"module"``) reference names, imported now."""
    module, _, attr = reference.partition(":")
    entry = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        entry = getattr(entry, part)
    return entry


class UnknownName(ValueError, KeyError):
    """A name no entry of the registry has; the message lists those it has."""

    __str__ = ValueError.__str__


class Registry(MutableMapping):
    """Entries of one sort (``what``: "launcher", "verifier" ...) by name (see the module docstring)."""

    def __init__(
        self,
        what: str,
        builtin: dict[str, str] | None = None,
        hint: str = "",
        aliases: dict[str, str] | None = None,
        base: type | None = None,
    ):
        self.what, self.hint, self.base = what, hint, base  # base: what add_subclass takes
        self._refs: dict[str, str] = {}  # name -> "module:attribute", not imported yet
        self._entries: dict[str, object] = {}
        self._order: dict[str, None] = {}  # every name, in the order of registration
        self._aliases: dict[str, str] = {}  # another name -> the entry's name
        for name, reference in (builtin or {}).items():
            self.refer(name, reference)
        for alias, name in (aliases or {}).items():
            self.alias(alias, name)

    def alias(self, alias: str, name: str) -> None:
        """Let ``alias`` (an entry's earlier name, say) find the entry ``name``; not listed."""
        if name not in self._order:
            self[name]  # unknown: the error that lists the known names
        if alias in self._order:
            raise ValueError(f"{alias!r} is a {self.what} of its own, so it cannot also name {name!r}")
        self._aliases[alias] = name

    def canonical(self, name: str) -> str:
        """The name an entry is registered and listed by: ``name`` itself, or what its alias names."""
        return self._aliases.get(name, name)

    def refer(self, name: str, reference: str) -> None:
        """Register ``name`` by reference: ``"module:attribute"`` (or a module), imported on first use."""
        if not isinstance(reference, str) or not reference.partition(":")[0]:
            raise ValueError(f"a {self.what} reference is 'module:attribute' or 'module', got {reference!r}")
        self._entries.pop(name, None)
        self._aliases.pop(name, None)
        self._refs[name] = reference
        self._order.setdefault(name)

    def add(self, name: str, entry):
        """Register ``entry`` as ``name`` (a later one of the same name replaces it); returns ``entry``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a name, got {name!r}")
        self._entries[name] = entry
        self._refs.pop(name, None)
        self._aliases.pop(name, None)
        self._order.setdefault(name)
        return entry

    def register(self, name: str):
        """A decorator: ``@REGISTRY.register("name")`` registers the function or class it decorates."""
        return lambda entry: self.add(name, entry)

    def add_subclass(self, cls: type) -> type:
        """Register ``cls``, a subclass of the registry's ``base``, by its ``name`` attribute: the
        ``register`` class decorator of a registry of classes (the launchers, the grading executors)."""
        base = self.base
        if base is None:
            raise TypeError(f"the {self.what} registry takes no classes by name (it was made without a base)")
        if not (isinstance(cls, type) and issubclass(cls, base)) or not getattr(cls, "name", ""):
            raise ValueError(
                f"register takes a {base.__module__}.{base.__qualname__} subclass with a name, got {cls!r}"
            )
        return self.add(cls.name, cls)

    def names(self) -> list[str]:
        """The entries' names, sorted (aliases not listed)."""
        return sorted(self)

    def reference(self, name: str) -> str:
        """Where a built-in entry lives, ``"module:attribute"`` (its module, unimported: what a
        benchmark's process runs with ``-m``); a ValueError for an entry registered by object."""
        name = self.canonical(name)
        if name not in self._refs:
            self[name]  # unknown: the error that lists the known names
            raise ValueError(f"{self.what} {name!r} was registered as an object, not by reference")
        return self._refs[name]

    def __getitem__(self, name: str):
        name = self.canonical(name)
        if name in self._entries:
            return self._entries[name]
        if name not in self._refs:
            raise UnknownName(
                f"unknown {self.what} {name!r}; choose one of {', '.join(sorted(self)) or 'none'}"
                + (f" ({self.hint})" if self.hint else "")
            )
        entry = resolve(self._refs[name])
        self._entries[name] = entry  # resolved once; its reference stays (``reference``)
        return entry

    def __setitem__(self, name: str, entry) -> None:
        self.add(name, entry)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            self[name]  # the error that lists the known names
        self._entries.pop(name, None)
        self._refs.pop(name, None)
        self._order.pop(name, None)
        self._aliases = {a: n for a, n in self._aliases.items() if n != name and a != name}

    def __contains__(self, name) -> bool:
        return name in self._order or name in self._aliases

    def __iter__(self):
        """Names in the order they were registered."""
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self)})"
