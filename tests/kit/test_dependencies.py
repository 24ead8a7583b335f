"""labkit's dependencies, including those written as strings, point one way.

tests/kit/test_imports.py reads the import statements. A module can also depend on another through a
string: a registry's ``"labkit.x:Name"`` reference, a task program ``"labkit.tasks.ps_sgd"`` run
with ``-m``, a name handed to ``importlib``. Here those count as edges too, and a module name
built at run time (``importlib.import_module(f"labkit.{name}")``) is an error: no tool can see it.
Also: no module name appears twice in the package (someone new finds a module by its name).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers import cycles

PACKAGE = Path(__file__).resolve().parents[2] / "labkit"
REFERENCE = re.compile(r"labkit(\.\w+)+(:[\w.]+)?")  # "labkit.x.y" or "labkit.x.y:attr", the whole string
BUILT = re.compile(r"labkit(\.\w+)*\.$")  # f"labkit.tasks.{name}": a name made at run time
IMPORTERS = {"import_module", "__import__"}
# Modules that import names they are handed: the registry resolves the "module:attribute" references
# other modules write (edges of those modules); the fork server imports what its ``preload`` reads
# from the task programs' source (the programs registry's entries, and the modules they import).
# The hidden checks' declarations import the checks module of each lab folder they find: the engines
# name no lab. The student API's namespaces (labs.surface), the lab finder (labs) and the earlier
# kits' names (compat) import the modules their tables name, which count as those tables' edges.
RESOLVERS = {
    "labkit.core.registry",
    "labkit.distributed.launchers.forkserver",
    "labkit.labs.declare",
    "labkit.labs",
    "labkit.labs.surface",
    "labkit.compat",
}
# The one dependency that points up, on purpose and written down: a reference implementation stands
# in for the student's own function, which the notebook (above the whole kit) passes in; the
# solutions import the kit. Only core.reference, the grader (above everything) and a lab's own
# modules name them (a lab's checks judge with its solution).
MAY_NAME_SOLUTIONS = ("labkit.core.reference", "labkit.grading")


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _module_of(dotted: str, known) -> str | None:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return None


def _registry_strings(tree: ast.AST) -> set[int]:
    """The constant strings of ``Registry(..., builtin={name: "module:attr"})`` calls."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Registry":
            for kw in node.keywords:
                if kw.arg == "builtin":
                    ids |= {id(c) for c in ast.walk(kw.value) if isinstance(c, ast.Constant)}
    return ids


def dependencies(name: str, path: Path, known) -> tuple[set[str], set[str], list[str], list[str]]:
    """What ``name`` depends on: the labkit modules it imports (import statements at any level, and
    strings that name a module), the modules its registries name as built-in entries (imported when
    an entry is first asked for), the places where it builds a module name at run time, and the
    module references it writes that name no module (stale)."""
    tree = ast.parse(path.read_text())
    docs, registered = _docstrings(tree), _registry_strings(tree)
    found, lazy, hidden, stale = set(), set(), [], []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from package import module`` depends on that module; a name defined in the package
            # (its ``__init__``) is a dependency on the package
            subs = [f"{node.module}.{a.name}" for a in node.names]
            targets = [s for s in subs if s in known] + [node.module] * any(s not in known for s in subs)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if REFERENCE.fullmatch(node.value):
                module = _module_of(node.value.partition(":")[0], known)
                if module is None or (":" in node.value and module != node.value.partition(":")[0]):
                    stale.append(f"{name}:{node.lineno}: {node.value!r} names no module of labkit")
                elif id(node) in registered:
                    lazy.add(module)
                else:
                    targets = [module]
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            if BUILT.fullmatch(str(node.values[0].value)):
                hidden.append(f"{name}:{node.lineno}: a module name built at run time, {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and name not in RESOLVERS:
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if called in IMPORTERS and node.args and not isinstance(node.args[0], ast.Constant):
                hidden.append(f"{name}:{node.lineno}: {called} of a name made at run time, {ast.unparse(node)}")
        found |= {t for t in targets if t in known and t != name and not name.startswith(t + ".")}
    return found, lazy - {name}, hidden, stale


@functools.lru_cache(maxsize=None)
def graph(root: Path = PACKAGE):
    """(imports, registry references, names built at run time, stale references) of the package."""
    known = modules(root)
    edges, lazy, hidden, stale = {}, {}, [], []
    for name, path in known.items():
        edges[name], lazy[name], h, st = dependencies(name, path, known)
        hidden += h
        stale += st
    return edges, lazy, hidden, stale


def _is_solution(module: str) -> bool:
    return module.startswith("labkit.labs.") and module.endswith(".solution")


def _lab(module: str) -> str | None:
    """The lab folder ``module`` is in (``labkit.labs.lab2``), or None."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["labkit", "labs"] and len(parts) > 3 else None


def test_no_cycle_counting_dependencies_written_as_strings():
    """Imports, module names written as strings, and a registry's built-in entries: a registry
    names its implementations, so it sits above them (``labkit.distributed.launchers``,
    ``labkit.grading.run``, ``labkit.tasks``), and the reference answers build only on modules
    that name no reference (``learning.ops``, ``learning.costargs``). No exemption."""
    edges, lazy, *_ = graph()
    assert "labkit.labs.lab1.solution" in lazy["labkit.core.reference"]  # the references are counted
    assert "labkit.grading.run.runner" in lazy["labkit.grading.run"]
    assert cycles({m: edges[m] | lazy[m] for m in edges}) == []


def test_only_the_reference_module_and_the_grader_name_the_solutions():
    edges, lazy, *_ = graph()
    edges = {m: edges[m] | lazy[m] for m in edges}
    naming = sorted(m for m, ts in edges.items() if any(_is_solution(t) and _lab(t) != _lab(m) for t in ts))
    assert [m for m in naming if not m.startswith(MAY_NAME_SOLUTIONS)] == []
    assert "labkit.core.reference" in naming  # it names them: the dependency is written down


def test_no_module_name_is_built_at_run_time():
    assert graph()[2] == []


def test_every_module_written_as_a_string_exists():
    """A registry's "module:attr" or a task program's "labkit.tasks.x" names a module of labkit:
    a moved or renamed module leaves no stale reference behind."""
    assert graph()[3] == []


def _place(path: Path) -> str:
    """Where ``path`` is, with a lab's folder as ``labs/*`` (each lab has its experiment, checks ...)."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    in_a_lab = len(rel.parts) > 2 and rel.parts[0] == "labs" and (PACKAGE / "labs" / rel.parts[1]).is_dir()
    return str(Path("labs", "*", *rel.parts[2:]) if in_a_lab else rel)


def test_no_module_name_appears_twice():
    """A lab's folder has the files every lab's has (``labs/<lab>/experiment``): their name counts once."""
    modules = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    packages = [p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]
    places = {_place(p) for p in modules + packages}
    assert "labs/*/experiment" in places
    names = Counter(Path(place).name for place in places)
    assert [n for n, k in names.items() if k > 1] == []


@pytest.mark.parametrize(
    "source, found",
    [
        ('X = Registry("x", builtin={"a": "labkit.b:thing"})', {"labkit.b"}),
        ('RUN = "labkit.b"', {"labkit.b"}),
        ('"""Uses labkit.b."""\nimport os', set()),
        ("def f():\n    from labkit.b import g", {"labkit.b"}),
        ("from labkit import b", {"labkit.b"}),
    ],
)
def test_the_checker_sees_string_references(tmp_path, source, found):
    root = tmp_path / "labkit"
    root.mkdir()
    for n in ("__init__", "a", "b"):
        (root / f"{n}.py").write_text("")
    (root / "a.py").write_text(source)
    edges, lazy, *_ = graph(root)
    assert edges["labkit.a"] | lazy["labkit.a"] == found


def test_the_checker_sees_names_built_at_run_time(tmp_path):
    root = tmp_path / "labkit"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text('import importlib\ndef f(n):\n    return importlib.import_module(f"labkit.{n}")\n')
    assert len(graph(root)[2]) == 2  # the f-string and the call


def test_the_checker_sees_stale_references(tmp_path):
    root = tmp_path / "labkit"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text('X = Registry("x", builtin={"b": "labkit.gone:thing"})\n')
    assert len(graph(root)[3]) == 1


def _own_pins(path: Path) -> tuple[dict[str, str], list[str]]:
    """A requirements file's own ``name==version`` lines (names normalized), and the files it
    includes with ``-r``."""
    from packaging.utils import canonicalize_name

    pins, included = {}, []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            included.append(line[3:].strip())
        elif line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins, included


def test_the_test_extra_installs_what_requirements_test_pins():
    """``pip install .[test]`` then ``make test`` works: the ``test`` extra names every tool
    requirements-test.txt pins (pytest-xdist and pytest-timeout included: make test and the
    suite's timeout use them), in bounds the pins meet, and the other requirement files it
    includes as the extras of the same name."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = PACKAGE.parent
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    wanted = {canonicalize_name(r.name): r for r in map(Requirement, extra) if r.name != "labkit"}
    extras_named = {e for r in map(Requirement, extra) if r.name == "labkit" for e in r.extras}
    pins, included = _own_pins(root / "requirements-test.txt")
    assert {"pytest", "pytest-xdist", "pytest-timeout"} <= set(pins)
    assert sorted(wanted) == sorted(pins), "the test extra and requirements-test.txt name different tools"
    unmet = {n: (pins[n], str(r.specifier)) for n, r in wanted.items() if not r.specifier.contains(pins[n])}
    assert unmet == {}, f"pinned versions outside the test extra's bounds: {unmet}"
    assert extras_named == {f.removeprefix("requirements-").removesuffix(".txt") for f in included}


# Modules outside the labs that may name a lab: the table of moved names says where an earlier
# kit's modules went; the benchmarks time the labs' own clusters and sit above them, as the
# command line does. Lab-specific code the grader still holds is listed apart, to move into its
# lab's folder.
MAY_NAME_A_LAB = ("labkit.compat", "labkit.bench")
GRADER_CODE_TO_MOVE = ()


def _lab_of(module: str) -> str | None:
    """The lab folder ``module`` is in (``labkit.labs.lab2.experiment`` -> ``lab2``), or None."""
    parts = module.split(".")
    if len(parts) > 2 and parts[:2] == ["labkit", "labs"] and (PACKAGE / "labs" / parts[2]).is_dir():
        return parts[2]
    return None


def lab_crossings(edges: dict[str, set[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """(a lab's module naming another lab's, {module outside the labs: the lab modules it names}).
    A lab's solution, which only the reference module and the grader may name, is left to
    ``test_only_the_reference_module_and_the_grader_name_the_solutions``."""
    across, engines = [], {}
    for module, targets in edges.items():
        named = sorted(t for t in targets if _lab_of(t) and not t.endswith(".solution"))
        if _lab_of(module):
            across += [f"{module} -> {t}" for t in named if _lab_of(t) != _lab_of(module)]
        elif named:
            engines[module] = named
    return across, engines


def test_a_lab_names_no_other_lab_and_no_engine_names_a_lab():
    """Imports point down: a lab's modules import the layers (and its own folder), never another
    lab; the engines (grading, experiments, distributed ...) import no lab, neither by an import
    statement nor by a module name written as a string."""
    edges, lazy, *_ = graph()
    edges = {m: edges[m] | lazy[m] for m in edges}
    assert "labkit.experiments" in edges["labkit.labs.lab2.experiment"]  # the walk sees a lab's imports
    across, engines = lab_crossings(edges)
    assert across == []
    assert [m for m in engines if not m.startswith(MAY_NAME_A_LAB + GRADER_CODE_TO_MOVE)] == []


def test_the_lab_check_sees_a_lab_naming_another_and_an_engine_naming_a_lab():
    edges = {
        "labkit.labs.lab2.experiment": {"labkit.experiments", "labkit.labs.lab2.traces_util"},
        "labkit.labs.lab3.experiment": {"labkit.labs.lab2.experiment"},
        "labkit.experiments.shared": {"labkit.labs.lab3.experiment"},
        "labkit.core.reference": {"labkit.labs.lab1.solution"},
    }
    across, engines = lab_crossings(edges)
    assert across == ["labkit.labs.lab3.experiment -> labkit.labs.lab2.experiment"]
    assert engines == {"labkit.experiments.shared": ["labkit.labs.lab3.experiment"]}
