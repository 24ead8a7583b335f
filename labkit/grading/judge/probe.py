"""The student's side of a hidden check: take the student's functions and run them on the grader's cases.

This file runs as a script (``python probe.py SPEC``) in a fresh sandbox that sees the student's view
of the kit (no solutions, no grader) and an empty folder to write to; it is bound there on its own, so
it imports nothing from ``labkit.grading``. For each hidden check in SPEC it takes the named functions
from the notebook's code cells, plain definitions only (``load_functions``, ``plain``: imports, literal
constants, and ``def``/``class`` statements whose definition runs nothing of the student's, decorators
and annotations dropped), runs the check's declared probe on the cases its declaration builds from the
rubric's arguments (``labkit.labs.declare``: each lab's ``checks.py``), and writes what it returned to
``<out>/<check>.npz`` (arrays only) and how it went to ``<out>/status.json``. Each check runs in a
process of its own (``--check``), so one check's functions never run where another's probe measures;
this process runs none of the student's code and writes every file from what it holds (``isolated``).
A check whose probe may end its process (``Check.last``) runs last; ``--child CHECK ...`` runs a
check's child process (``Check.child``). The judge (``labkit.grading.judge.hidden``, another process)
rebuilds the same cases and compares: whatever the student's code does can only change what it returns.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
import resource
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np

from labkit.labs import declare
from labkit.notebook.record import cell_name  # light: json, math, re

declare.probe_script = os.path.abspath(__file__)  # where a probe's child process starts: this engine

# ---------------------------------------------------------------------------------------------
# The student's functions


def load_functions(notebook: Path, names) -> tuple[dict, list[str]]:
    """``({name: function}, notes)`` from the notebook's code cells: imports, plain definitions
    and literal constants (``plain``), in notebook order (a later definition wins); nothing else runs.
    Only the imports that bind a name the functions use run (``used_names``): a check of a NumPy
    function does not pay for the TensorFlow a notebook imports for its other cells."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "student", "__notebook__": str(notebook)}  # where a child process finds them
    notes, taken, bound = [], [], set(namespace)
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError as e:
            notes.append(f"{cell_name(i)}: not Python ({e.msg}, line {e.lineno}); skipped")
            continue
        filename = f"<{cell_name(i)}>"  # the source, for tracebacks and for tf.function's autograph
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        for node in tree.body:
            node, why = plain(node, bound)
            if why:
                notes.append(f"{cell_name(i)} line {why[0]}: {why[1]}")
            if node is not None:
                taken.append((i, filename, node))
                bound.update(_bound(node))
    used = used_names([node for _, _, node in taken], names)
    for i, filename, node in taken:
        for statement in _needed(node, used):
            try:
                exec(compile(ast.Module([statement], []), filename, "exec"), namespace)
            except Exception as e:  # an import the student kit lacks, say: the function may not need it
                notes.append(f"{cell_name(i)} line {statement.lineno}: {type(e).__name__}: {e}")
    return {n: namespace[n] for n in names if callable(namespace.get(n))}, notes


DYNAMIC = {"globals", "vars", "eval", "exec", "__import__", "importlib", "locals"}


def used_names(nodes: list, names) -> set[str] | None:
    """The names the definitions of ``names`` use, directly or through other definitions
    among ``nodes``; None (every import runs) when one looks names up by string (``globals()``)."""
    defines: dict[str, list] = {}
    for node in nodes:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in _bound(node):
                defines.setdefault(name, []).append(node)
    used, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in used:
            continue
        used.add(name)
        for node in defines.get(name, []):
            todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    return None if used & DYNAMIC else used


def _bound(node) -> list[str]:
    """The names a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [_alias_name(a) for a in node.names]
    return []


def _alias_name(alias: ast.alias) -> str:
    """The name ``import a.b``, ``import a.b as c`` or ``from m import a`` binds: ``a``, ``c``, ``a``."""
    return (alias.asname or alias.name).split(".")[0]


def _needed(node, used: set[str] | None) -> list:
    """``node`` to run: a definition always, an import only for the names of it ``used``, one
    name per statement (``from m import a, b`` runs as ``from m import a`` when only ``a`` is)."""
    if used is None or not isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    keep = [a for a in node.names if a.name == "*" or _alias_name(a) in used]
    if not keep:
        return []
    part = ast.Import(names=keep) if isinstance(node, ast.Import) else ast.ImportFrom(node.module, keep, node.level)
    return [ast.copy_location(part, node)]


METHOD_DECORATORS = ("staticmethod", "classmethod", "property")


def plain(node, bound: set[str]):
    """``(statement to run or None, (line, why) or None)``: ``node`` as a plain definition,
    whose execution runs nothing of the student's (see the module docstring), or None with the
    reason when it is not one. A function's decorators and annotations are dropped (noted).
    ``bound``: the names the notebook's statements taken before it bind (a method's decorator
    must be Python's own ``property``, not the notebook's)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return node, None
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return _constant(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        why = _defaults_problem(node)
        if why:
            return None, (node.lineno, f"{why}; not taken")
        dropped = [ast.unparse(d) for d in node.decorator_list]
        node = _strip(node)
        node.decorator_list = []
        return node, (
            (node.lineno, f"{node.name} taken without its decorator(s) @{', @'.join(dropped)}") if dropped else None
        )
    if isinstance(node, ast.ClassDef):
        why = _class(node, bound)
        return (None, (node.lineno, f"{why}; not taken")) if why else (_strip(node), None)
    return None, None


def _constant(node):
    """``NAME = literal`` (an annotation is dropped: it would be evaluated)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
        return None, None
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None, None
    return ast.copy_location(ast.Assign(targets=targets, value=node.value), node), None


def _reference(expr) -> bool:
    """A literal, a name or a dotted name: evaluating it looks a value up and calls nothing."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    if isinstance(expr, ast.Name):
        return True
    try:
        ast.literal_eval(expr)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _defaults_problem(fn) -> str | None:
    args = fn.args
    for value in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if not _reference(value):
            return (
                f"the default value {ast.unparse(value)[:60]!r} of {fn.name} is not a literal or a name "
                f"(a default is evaluated when the function is defined)"
            )
    return None


def _strip(node):
    """``node`` with every annotation of its own definition (not of nested code) removed."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
        node.returns = None
    elif isinstance(node, ast.ClassDef):
        body = []
        for item in node.body:
            if isinstance(item, ast.AnnAssign):
                if item.value is None:
                    continue
                item = ast.copy_location(ast.Assign(targets=[item.target], value=item.value), item)
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                item = _strip(item)
            body.append(item)
        node.body = body or [ast.Pass()]
    return ast.fix_missing_locations(node)


def _class(node, bound: set[str]) -> str | None:
    """Why the class statement ``node`` is not a plain definition (None when it is)."""
    name = node.name
    if node.decorator_list:
        return f"class {name} is decorated (a decorator runs when the class is defined)"
    if node.keywords:
        return f"class {name} has keyword arguments ({ast.unparse(node.keywords[0])[:40]}): a metaclass runs code"
    for base in node.bases:
        if not _reference(base) or isinstance(base, ast.Constant):
            return f"the base {ast.unparse(base)[:40]!r} of class {name} is not a name or a dotted name"
    for item in node.body:
        if isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
            continue  # a docstring
        if isinstance(item, ast.Pass):
            continue
        if isinstance(item, (ast.Assign, ast.AnnAssign)):
            if _constant(item)[0] is None:
                return f"class {name} assigns something other than a literal to a name"
            continue
        if isinstance(item, ast.ClassDef):
            why = _class(item, bound)
            if why:
                return why
            continue
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if item.name == "__init_subclass__":
                return f"class {name} defines __init_subclass__, which would run when a subclass is defined"
            for d in item.decorator_list:
                if not (isinstance(d, ast.Name) and d.id in METHOD_DECORATORS and d.id not in bound):
                    return (
                        f"the method {name}.{item.name} has the decorator @{ast.unparse(d)[:40]}; only "
                        f"{', '.join(METHOD_DECORATORS)} are taken in a class"
                    )
            why = _defaults_problem(item)
            if why:
                return why
            continue
        return f"class {name} runs a statement in its body ({ast.unparse(item).splitlines()[0][:40]})"
    return None


# ---------------------------------------------------------------------------------------------
# Running declarations


def outputs(check: declare.Check, fns: dict, args: dict, out: Path) -> dict:
    """The arrays ``check``'s probe returns for ``fns`` on ``args``: its own probe, or for a
    ``Numbers`` check the student's function on every case, one number each."""
    if check.probe is not None:
        return check.probe(fns, args, out)
    n = check.numbers
    return {n.output: numbers(fns[check.functions[0]], check.functions[0], check.cases(**args), n.order, n.what)}


def numbers(fn, name: str, cases: list, order: tuple[str, ...] | None, what: str) -> np.ndarray:
    """``fn`` called with each case's values in ``order`` (None: the case itself): one number each,
    or a TypeError that says ``name`` must return ``what``."""
    out = []
    for case in cases:
        got = fn(*(case[k] for k in order)) if order is not None else fn(case)
        try:
            out.append(float(got))
        except (TypeError, ValueError):
            raise TypeError(f"{name} must return one number, {what}; got {type(got).__name__}") from None
    return np.asarray(out, np.float64)


def _limit(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))


def main(argv=None) -> int:
    """Every check of the spec, each in a process of its own (``isolated``), in the rubric's order,
    those whose probe may end their process last."""
    spec_path = Path((argv or sys.argv[1:])[0])
    spec = json.loads(spec_path.read_text())
    _limit(int(spec["memory_bytes"]))
    declared = declare.discover()
    names = [c["check"] for c in spec["checks"]]
    names.sort(key=lambda n: n in declared and declared[n].last)
    isolated(spec_path, Path(spec["out"]), names)
    return 0


def isolated(spec_path: Path, out: Path, names: list[str]) -> None:
    """Run each check of ``names`` in a child process (``run_check``), one after the other, and keep
    what each wrote; after each, and when this process is told to stop, write every finished check's
    arrays and the status of all (``_write``) from what this process holds, over anything a later
    check's code wrote there. A child that ends without a status leaves its check without one (the
    judge then says the functions did not finish)."""
    import signal

    from labkit.core.proc import OwnedProcess

    results: dict[str, tuple[dict, dict | None]] = {}
    stop = signal.signal(signal.SIGTERM, _stopped)
    try:
        for name in names:
            work = out / ".checks" / name
            work.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, os.path.abspath(__file__), "--check", str(spec_path), name, str(work)]
            proc = OwnedProcess(cmd, work / "log").start()
            try:
                proc.wait()
            finally:
                proc.kill(grace=0.2)  # its group too: nothing it started outlives it
            sys.stderr.write(_tail(work / "log"))
            found = _result(work)
            shutil.rmtree(work)
            if found is not None:
                results[name] = found
            _write(out, results)
    finally:
        _write(out, results)
        signal.signal(signal.SIGTERM, stop)


class Stopped(Exception):
    """This process was told to stop (SIGTERM): the running check is killed, the files written."""


def _stopped(signum, frame):
    raise Stopped()


RESULT_LIMIT = 64 * 2**20  # bytes of arrays a check may return (the judge reads at most as much)


def _result(work: Path) -> tuple[dict, dict | None] | None:
    """``(status, arrays or None)`` a check's process wrote in ``work``, or None when it wrote no status."""
    status = declare.small_json(work / "status.json")
    if "ok" not in status:
        return None
    if not status["ok"]:
        return {"ok": False, "error": str(status.get("error", "?"))[:800]}, None
    try:
        with np.load(declare.probe_file(work / "arrays.npz", RESULT_LIMIT), allow_pickle=False) as f:
            return {"ok": True}, {k: f[k] for k in f.files}
    except (declare.Unverifiable, OSError, ValueError) as e:
        return {"ok": False, "error": f"the check's output could not be read: {e}"}, None


def _write(out: Path, results: dict) -> None:
    """Every finished check's ``<check>.npz`` and ``status.json``, from ``results``."""
    for name, (_, arrays) in results.items():
        if arrays is not None:
            np.savez(out / f"{name}.npz", **arrays)
    (out / "status.json").write_text(json.dumps({name: status for name, (status, _) in results.items()}))


def _tail(log: Path, limit: int = 20_000) -> str:
    """The end of a check process's log (the student's prints and errors), for this process's log."""
    try:
        text = log.read_bytes()[-limit:].decode("utf-8", "replace")
    except OSError:
        return ""
    return text if text.endswith("\n") or not text else text + "\n"


def run_check(spec_path: Path, name: str, work: Path) -> int:
    """``--check SPEC CHECK WORK``: one check on the student's functions, in this process alone;
    writes ``WORK/arrays.npz`` and ``WORK/status.json``."""
    spec = json.loads(Path(spec_path).read_text())
    check = next(c for c in spec["checks"] if c["check"] == name)
    status = {"ok": False, "error": "the check did not finish"}
    try:
        fns, notes = load_functions(spec["notebook"], check["functions"])
        missing = [f for f in check["functions"] if f not in fns]
        if missing:
            hint = f" ({'; '.join(notes[:3])})" if notes else ""
            raise LookupError(f"no function {', '.join(missing)} defined at the top level of a code cell{hint}")
        arrays = outputs(declare.discover()[name], fns, check.get("args", {}), Path(spec["out"]))
        np.savez(work / "arrays.npz", **arrays)
        status = {"ok": True}
    except BaseException as e:  # the student's code failed: that is the check's result, not the probe's
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{f.filename} line {f.lineno}" for f in reversed(tb) if f.filename.startswith("<cell")), "")
        status = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500] + (f" ({where})" if where else "")}
    (work / "status.json").write_text(json.dumps(status))
    return 0


def child(argv: list[str]) -> int:
    """``--child CHECK ARGS...``: the child process a check's probe started (``declare.child_command``)."""
    return declare.discover()[argv[0]].child(argv[1:], load_functions)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2:]))
    sys.exit(run_check(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])) if sys.argv[1:2] == ["--check"] else main())
