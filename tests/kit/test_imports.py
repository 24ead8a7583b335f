"""labkit's modules import each other without a cycle: a cycle makes import order
matter and one module's edit break another's import. Read statically from the source with ``ast``,
so an import inside a function counts too: it is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import cycles

PACKAGE = Path(__file__).resolve().parents[2] / "labkit"


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imported(name: str, path: Path, known: dict) -> set[str]:
    """The labkit modules ``name`` imports (a package's own ``__init__`` excepted: importing
    ``labkit.x`` runs ``labkit`` first, which is not a dependency of ``labkit.x`` on ``labkit``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".")
            if node.level:
                base = base[: len(base) - node.level + (path.name == "__init__.py")]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name and not name.startswith(t + ".")}
    return found


def test_the_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_labkit_has_no_import_cycle():
    known = modules(PACKAGE)
    assert "labkit.grading.judge.rubric" in known and len(known) > 30
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert "labkit.notebook.record" in graph["labkit.grading.judge.verify"]  # the walk sees from-imports
    assert cycles(graph) == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles(graph))


HEAVY = ("numpy", "pandas", "tensorflow", "keras", "matplotlib")


def _fresh_python(code: str) -> str:
    """``code`` run by a new interpreter (nothing of this process's imports), its stdout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_labkit_loads_nothing_heavy():
    """Every task process imports labkit: the exported names load only when first asked for."""
    loaded = _fresh_python(f"import sys, labkit; print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert loaded.strip() == "[]"


def test_every_exported_name_resolves():
    import json

    import labkit

    assert set(labkit.__all__) == set(labkit.EXPORTS) | {"__version__"}
    assert set(labkit.__all__) <= set(dir(labkit))
    got = json.loads(
        _fresh_python(
            "import json, labkit\n"
            "from labkit import *\n"
            "print(json.dumps({n: getattr(labkit, n).__module__ for n in labkit.EXPORTS}))"
        )
    )
    assert got == {n: labkit.EXPORTS.reference(n).partition(":")[0] for n in labkit.EXPORTS}
    with __import__("pytest").raises(ImportError, match="cannot import name 'no_such_name'"):
        exec("from labkit import no_such_name")


def test_the_notebooks_import_only_exported_names():
    """What a notebook takes from ``labkit`` itself (not a module below it) is an exported name."""
    import json
    import re

    import labkit

    taken = set()
    for nb in (PACKAGE.parent / "labkit" / "labs").glob("*/*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            for names in re.findall(r"^\s*from labkit import ([\w ,]+)", "".join(cell["source"]), re.M):
                taken |= {n.strip() for n in names.split(",")}
    assert {"record", "load_mnist", "ResourceSampler"} <= taken
    submodules = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()}
    assert taken - submodules <= set(labkit.__all__)
