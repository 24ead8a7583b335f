"""``make check``: run a lab notebook as the grader will, before you submit it, and say what is missing.

The student kit's ``notebooks/rubric.toml`` is the public part of the grader's rubric (``make
release`` writes it). For each notebook, ``check_notebook`` says whether the file is named as
the grader expects, runs it as saved (outputs cleared, fresh kernel, headless, in an owned
process, with the grader's parameters and timeouts) in a fresh ``out/check/<lab>/``, and reports
each public check (exercises, self-checks, records, figures, answers, time and memory against
the grader's limits), counts the hidden checks, and says what to do next.

``check()`` does the same from a notebook cell (``labkit.check()``). In a headless run (``make
check`` itself, papermill, the grader) it does nothing, so a notebook that calls it never reruns
itself. Nothing here imports ``labkit.grading``: the student kit has no grader.
More in docs/internals.md, section labkit.notebook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from labkit.notebook import execution
from labkit.notebook.record import Missing, figure_count, lookup, named_cells, read_records
from labkit.notebook.verdicts import read_verdicts

FORMAT = "labkit public rubric 1"  # the public rubric's `format`: what labkit.grading.kit.public writes
SELF = "LABKIT_CHECK_RUN"  # set in the check's own kernel: labkit.check() there does nothing
SHOW = 8  # names listed per line before "and N more"
NOT_CHECKED = (
    "not checked here: your functions on the grader's own cases, and your predictions and results "
    "against its measurements"
)


class RubricFileError(ValueError):
    """The public rubric is missing or is not one; the message says what to do."""


@dataclass(frozen=True)
class Lab:
    """One lab of the public rubric (``labkit.grading.kit.public`` documents each key)."""

    key: str
    notebook: str
    title: str
    kernel: str
    cell_timeout: float
    notebook_timeout: float
    start_timeout: float
    memory_mb: float
    points: float
    answer_points: float
    hidden_checks: int
    hidden_points: float
    records: list
    parameters: dict
    checks: list
    exercises: list
    folder: str = ""  # where the notebook is, in the instructor's kit (a lab folder); "": the notebooks folder

    @property
    def short(self) -> str:
        return short_name(self.key)

    def known_ids(self) -> set:
        """The ids of the cells this rubric names: exercises, self-checks and answers."""
        ids = {e["cell"] for e in self.exercises} | {e["self_check"] for e in self.exercises if "self_check" in e}
        return ids | {i for c in self.checks if c["kind"] == "analysis" for i in c["cells"]}


def short_name(key: str) -> str:
    """A lab as ``make check LAB=`` names it: ``lab1`` is ``1``."""
    return key[3:] if re.fullmatch(r"lab\d+", key) else key


def load(path) -> dict[str, Lab]:
    """The labs of the public rubric at ``path``."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RubricFileError(
            f"{path} not found: make check reads the public rubric next to the notebooks "
            f"(notebooks/rubric.toml in the kit)"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise RubricFileError(f"{path} is not valid TOML ({e}): take it again from the kit as released") from None
    if raw.get("format") != FORMAT:
        raise RubricFileError(
            f"{path} is not a public rubric (no format = {FORMAT!r}). In the instructor's kit "
            f"`make check` writes one first (python -m labkit release --public-rubric FILE)"
        )
    names = {f.name for f in fields(Lab)} - {"key", "folder"}
    labs = {}
    for key, table in raw.get("labs", {}).items():
        missing = names - set(table)
        if missing:
            raise RubricFileError(
                f"{path}: [labs.{key}] lacks {', '.join(sorted(missing))}: take the file again from the kit as released"
            )
        labs[key] = Lab(key=key, folder=str(table.get("folder", "")), **{k: table[k] for k in names})
    return labs


def find_lab(labs: dict[str, Lab], name) -> Lab:
    """The lab ``name`` means: its key (``lab1``), number (``1``), notebook file or stem."""
    name = str(name).strip()
    for lab in labs.values():
        if name in (lab.key, lab.short, lab.notebook, Path(lab.notebook).stem) or (
            name.isdigit() and lab.short.isdigit() and int(name) == int(lab.short)
        ):
            return lab
    raise ValueError(
        f"no lab {name!r}: say one of {', '.join(lab.short for lab in labs.values())}, or a notebook's file name"
    )


def lab_of(labs: dict[str, Lab], path: Path, nb) -> Lab | None:
    """The lab a notebook is: by its file name, else by the ids of the cells the rubric names."""
    named = next((lab for lab in labs.values() if lab.notebook == path.name), None)
    if named is not None:
        return named
    ids = {c.get("id") for c in nb.cells}
    best = max(labs.values(), key=lambda lab: len(lab.known_ids() & ids), default=None)
    return best if best is not None and best.known_ids() & ids else None


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Run:
    """How a headless run of a notebook ended."""

    status: str  # ok | error | timeout | dead-kernel | crashed
    seconds: float
    peak_bytes: int
    executed: Path
    log: Path
    cell: int | None = None  # where it stopped: index in the submitted notebook
    error: str = ""  # "NotImplementedError: ..." or what went wrong
    cells: list = field(default_factory=list)  # per submitted code cell: completed, failed, stopped, not-run
    slowest: tuple = (0.0, None)  # (seconds, cell index) of the longest cell
    verdicts: dict = field(default_factory=dict)  # submitted cell index -> the self-check verdicts it showed

    @property
    def executed_nb(self):
        import nbformat

        try:
            return nbformat.read(str(self.executed), as_version=4)
        except (OSError, ValueError):
            return None


def run(lab: Lab, notebook: Path, folder: Path) -> Run:
    """Run ``notebook`` as the grader does, in a fresh ``folder``: outputs cleared, the lab's kernel
    and parameters, its cell timeout (papermill's) and notebook timeout (here: the process tree is
    killed). The run's own files are in ``folder/work`` (its working directory) and ``folder/.check``."""
    import nbformat

    from labkit.core.proc import OwnedProcess, tree_rss

    folder = Path(folder).resolve()
    if folder.exists():
        shutil.rmtree(folder)
    private, work = folder / ".check", folder / "work"
    private.mkdir(parents=True)
    work.mkdir()
    clean, spec = private / "input.ipynb", private / "run.json"
    nb = execution.clean(nbformat.read(str(notebook), as_version=4), lab.kernel)
    nbformat.write(nb, str(clean))
    executed, logfile = folder / lab.notebook, folder / "run.log"
    spec.write_text(
        json.dumps(
            {
                "source": str(clean),
                "output": str(executed),
                "parameters": lab.parameters,
                "kernel": lab.kernel,
                "cwd": str(work),
                "cell_timeout": lab.cell_timeout,
                "start_timeout": lab.start_timeout,
            }
        )
    )
    cmd = [sys.executable, "-m", "labkit.notebook.isolated", spec]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPY_") and k != "LABKIT_LIVE"}
    env.update({SELF: "1", "LABKIT_RUNS": str(work / "runs"), "PYTHONUNBUFFERED": "1"})
    peak, timed_out = 0, False
    bar = _progress(len(nb.cells), f"{lab.notebook} (the grader's parameters)")
    saved = None  # the executed notebook's last save that moved the bar
    with OwnedProcess(cmd, logfile, env=env, cwd=folder) as proc:
        t0 = time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - t0 > lab.notebook_timeout:
                proc.kill()
                timed_out = True
                break
            peak = max(peak, tree_rss(proc.pid))
            saved = _advance(bar, executed, saved)
            time.sleep(0.5)
        seconds = time.monotonic() - t0
        returncode = proc.poll()
    _advance(bar, executed, saved)
    bar.close()
    return _ended(lab, nb, Run("crashed", round(seconds, 1), peak, executed, logfile), returncode, timed_out)


def _progress(total: int, desc: str):
    """A bar of the cells run: a widget in JupyterLab, text in a terminal, nothing in a log."""
    from labkit.measure.progress import is_live, tqdm

    return tqdm(total=total, desc=desc, unit="cell", **({} if is_live() else {"disable": None}))


def _advance(bar, executed: Path, saved):
    """Move ``bar`` to the cells the run has ended, as papermill records them in ``executed`` (its
    injected parameters cell among them). The notebook is parsed only when papermill has saved it
    since ``saved`` (a large one takes a while to parse); returns the save now read."""
    try:
        stamp = executed.stat()
    except OSError:  # not written yet
        return saved
    stamp = (stamp.st_mtime_ns, stamp.st_size)
    if stamp == saved:
        return saved
    done = execution.cells_done(executed)
    if done is None:  # mid-write: read it again next time
        return saved
    done = min(done, bar.total)
    if done > bar.n:
        bar.update(done - bar.n)
    return stamp


def _ended(lab: Lab, submitted, out: Run, returncode: int | None, timed_out: bool) -> Run:
    """``out`` filled in from the executed notebook (papermill saves it as each cell starts and
    ends: a cell that never started has no start time), the runner's exit code and its log."""
    from labkit.core.proc import tail

    nb = out.executed_nb
    index = [i for i, c in enumerate(submitted.cells) if not execution.added(c)]
    ran = [c for c in nb.cells if not execution.added(c)] if nb is not None else []
    if nb is None or len(ran) != len(index):
        last = next((ln for ln in reversed(tail(out.log, 30).splitlines()) if ln.strip()), "no output")
        out.error = f"the notebook did not run: {last.strip()}"
        return out
    out.cells = [None] * len(submitted.cells)
    for i, cell in zip(index, ran):
        if cell.get("cell_type") == "code":
            out.cells[i] = {"failed": "failed", "ran": "completed", "not-run": "not-run"}[execution.state(cell)]
            if read_verdicts(cell):
                out.verdicts[i] = read_verdicts(cell)
            duration = ((cell.get("metadata") or {}).get("papermill") or {}).get("duration") or 0
            if duration > out.slowest[0]:
                out.slowest = (round(duration, 1), i)
    started = [i for i, s in enumerate(out.cells) if s in ("failed", "completed")]
    failed = next((i for i, s in enumerate(out.cells) if s == "failed"), None)
    log_text = tail(out.log, 60)
    if failed is not None and not timed_out:
        out.status, out.cell, out.error = "error", failed, _error(ran[index.index(failed)])
    elif timed_out or returncode != 0:
        out.cell = started[-1] if started else None
        out.status = (
            "timeout"
            if timed_out or "CellTimeoutError" in log_text
            else "dead-kernel"
            if "DeadKernelError" in log_text
            else "crashed"
        )
        out.error = (
            f"the run passed the grader's {lab.notebook_timeout:g} s limit"
            if timed_out
            else f"the cell passed the grader's {lab.cell_timeout:g} s cell limit"
            if out.status == "timeout"
            else "the kernel died (out of memory?)"
            if out.status == "dead-kernel"
            else next((ln.strip() for ln in reversed(log_text.splitlines()) if ln.strip()), "it ended here")
        )
        if out.cell is not None:
            out.cells[out.cell] = "stopped"
    else:
        out.status = "ok"
    return out


def _error(cell) -> str:
    """``Name: message``, the message's line that says most: TensorFlow wraps an error raised in a
    tf.function in a traceback of its own that ends with the original exception's line."""
    for o in cell.get("outputs") or []:
        if o.get("output_type") == "error":
            name, lines = (
                o.get("ename", "an error"),
                [ln.strip() for ln in str(o.get("evalue", "")).splitlines() if ln.strip()],
            )
            last = lines[-1] if lines else ""
            message = last[len(name) + 1 :].strip() if last.startswith(name + ":") else lines[0] if lines else ""
            message = message if len(message) <= 160 else message[:157] + "..."
            return f"{name}: {message}" if message else name
    return "an error"


# ---------------------------------------------------------------------------------------------
# The report


@dataclass
class Line:
    """One line of the report: ok, FAIL, warn or info; what it checked; what it found."""

    status: str
    what: str
    text: str
    todo: list = field(default_factory=list)  # what to do next, for the steps at the end

    def __str__(self) -> str:
        return f"  {self.status:<5} {self.what:<11} {self.text}"


def report(lab: Lab, path: Path, nb, result: Run) -> list[Line]:
    """Every public check of ``lab`` on notebook ``nb`` (read from ``path``) and its run."""
    executed = result.executed_nb
    records = read_records(executed) if executed is not None else {}
    return [
        file_line(lab, path),
        run_line(lab, result),
        *exercise_lines(lab, nb, result),
        records_line(lab, records, result),
        *figure_lines(lab, nb, executed, result),
        answers_line(lab, nb),
        hidden_line(lab),
    ]


def file_line(lab: Lab, path: Path) -> Line:
    if path.name == lab.notebook:
        return Line("ok", "file", f"{path.name}: the name the grader expects")
    return Line(
        "FAIL",
        "file",
        f"the grader expects {lab.notebook}; this file is {path.name!r}",
        [f"save it as {lab.notebook} (File > Save Notebook As...), the name the grader looks for"],
    )


def run_line(lab: Lab, r: Run) -> Line:
    limits = (
        f"the grader stops a run at {lab.notebook_timeout:g} s and a cell at {lab.cell_timeout:g} s; "
        f"peak memory about {_mb(r.peak_bytes)} of its {lab.memory_mb:g} MB"
    )
    if r.status == "ok":
        slow = f" (the slowest cell, {_cell(r.slowest[1])}, {r.slowest[0]:g} s)" if r.slowest[1] is not None else ""
        status = "warn" if r.seconds > lab.notebook_timeout / 2 or r.peak_bytes > lab.memory_mb * 2**20 else "ok"
        todo = (
            [f"the run is close to the grader's limits ({limits}): make the slow cells faster"]
            if status == "warn"
            else []
        )
        return Line(status, "run", f"top to bottom in {r.seconds:g} s{slow}; {limits}", todo)
    where = f" at {_cell(r.cell)}" if r.cell is not None else ""
    todo = [
        f"fix {_cell(r.cell)}: it raised {r.error} (open {r.executed} for its traceback)"
        if r.status == "error"
        else f"the run stopped{where}: {r.error} (see {r.log})"
    ]
    return Line("FAIL", "run", f"stopped{where} after {r.seconds:g} s: {r.error}; {limits}", todo)


def exercise_lines(lab: Lab, nb, r: Run) -> list[Line]:
    """Exercises written (the stub gone), and each one's self-check passed in the run: the
    properties its verdicts name (``labkit.notebook.verdicts``, shown in any cell), else its
    self-check cell ran to the end."""
    if not lab.exercises:
        return []
    ids = {c.get("id"): i for i, c in enumerate(nb.cells)}
    written, notes, todo = 0, [], []
    checks, check_notes, check_todo = [], [], []
    for e in lab.exercises:
        label = ", ".join(e["defines"]) or "the exercise"
        i, j = _exercise_cell(nb, ids, e), ids.get(e.get("self_check"))
        then = f", then run {_cell(j)}, its self-check, until it passes" if j is not None else ""
        done = i is not None and e["stub"] not in nb.cells[i].source
        written += done
        if i is None:
            notes.append(f"{label} is gone (no cell {e['cell']}, and no code cell defines it)")
            todo.append(f"put {label} back (the grader looks for it by name){then}")
        elif not done:
            notes.append(f"{label} ({_cell(i)}) still raises NotImplementedError")
            todo.append(f"write {label} in {_cell(i)} (replace raise NotImplementedError() with your code){then}")
        shown = [(k, v) for k, vs in sorted(r.verdicts.items()) for v in vs if v.subject in e["defines"]]
        if "self_check" not in e and not shown:
            continue
        checks.append(", ".join(dict.fromkeys(v.subject for _, v in shown)) or label)
        failed = [(k, v) for k, v in shown if not v.passed]
        why = (
            "; ".join(f"{v.subject} fails its self-check ({_cell(k)}) on: {'; '.join(v.failed)}" for k, v in failed)
            if failed
            else None
            if shown and (j is None or r.cells[j : j + 1] == ["completed"])
            else _not_passed(r, j)
        )
        if why:
            check_notes.append(why if failed else f"{label}'s self-check ({_cell(j)}): {why}")
            if failed:
                check_todo += [f"fix {v.subject} until its self-check, {_cell(k)}, passes" for k, v in failed]
            elif done and j is not None:
                check_todo.append(f"fix {label} until its self-check, {_cell(j)}, passes")
    n = len(lab.exercises)
    lines = [
        Line(
            "ok" if written == n else "FAIL",
            "exercises",
            f"{written} of {n} written" + (": " + "; ".join(notes) if notes else ""),
            todo,
        )
    ]
    if checks:
        lines.append(
            Line(
                "FAIL" if check_notes else "ok",
                "self-checks",
                f"{len(checks) - len(check_notes)} of {len(checks)} passed"
                + (": " + f"\n{'':20}".join(check_notes) if check_notes else f" ({', '.join(checks)})"),
                check_todo,
            )
        )
    return lines


def _not_passed(r: Run, j: int | None) -> str | None:
    """Why self-check cell ``j`` did not pass, or None when it ran to the end."""
    if j is None:
        return "its cell is gone"
    if r.cells[j : j + 1] == ["completed"]:
        return None
    if r.cell == j:
        return r.error
    return "not reached: the run stopped before it" if r.cell is not None else "did not run"


def _exercise_cell(nb, ids: dict, exercise: dict) -> int | None:
    """The exercise's cell: by its id, else the code cell that defines its function."""
    if exercise["cell"] in ids:
        return ids[exercise["cell"]]
    names = [re.escape(n) for n in exercise["defines"]]
    return next(
        (
            i
            for i, c in enumerate(nb.cells)
            if c.get("cell_type") == "code" and names and re.search(rf"^\s*def ({'|'.join(names)})\(", c.source, re.M)
        ),
        None,
    )


def records_line(lab: Lab, records: dict, r: Run) -> Line:
    missing = []
    for ref in lab.records:
        try:
            lookup(records, ref)
        except Missing:
            missing.append(ref)
    have = len(lab.records) - len(missing)
    if not missing:
        return Line("ok", "records", f"all {have} records the grader reads are present")
    cut = (
        ""
        if r.status == "ok"
        else f" (the run stopped at {_cell(r.cell)}; later cells record the rest)"
        if r.cell is not None
        else " (the run did not get that far)"
    )
    todo = (
        []
        if r.status != "ok"
        else [f"record {_names(missing)}: the notebook's record(...) lines for them were changed or removed"]
    )
    return Line("FAIL", "records", f"{have} of {len(lab.records)} present; missing: {_names(missing)}{cut}", todo)


def figure_lines(lab: Lab, nb, executed, r: Run) -> list[Line]:
    lines = []
    for check in [c for c in lab.checks if c["kind"] == "figures"]:
        names, need = check["cells"], check["min"]
        if not names:
            count = sum(figure_count(c) for c in executed.cells) if executed is not None else 0
            ok = count >= need
            lines.append(Line("ok" if ok else "FAIL", "figures", f"{count} shown, of at least {need}"))
            continue
        shown = {
            n: sum(figure_count(c) for c in named_cells(executed, n)) if executed is not None else 0 for n in names
        }
        short = [n for n in names if shown[n] < need]
        where = {n: _cell(next((i for i, c in enumerate(nb.cells) if c in named_cells(nb, n)), None)) for n in short}
        text = f"{len(names) - len(short)} of {len(names)} shown" + (
            ": none in " + ", ".join(f"{n} ({where[n]})" for n in short) if short else ""
        )
        if short and r.status != "ok":
            text += " (the run stopped first)"
        todo = (
            [f"show the figure in {where[n]}, tagged {n!r} (keep the plotting call, and the cell's tag)" for n in short]
            if r.status == "ok"
            else []
        )
        lines.append(Line("ok" if not short else "FAIL", "figures", text, todo))
    return lines


def answers_line(lab: Lab, nb) -> Line:
    """Every answer cell filled (text, and no placeholder), found as the grader finds it: by its id,
    else the cell right below its question, which the grader reads with a note for the TA."""
    asked = [c for c in lab.checks if c["kind"] == "analysis"]
    if not asked:
        return Line("info", "answers", "this lab has no answer cells")
    ids = {c.get("id"): i for i, c in enumerate(nb.cells)}
    known = {a for q in asked for a in q["cells"]}
    empty, moved, gone = {}, [], []
    for q in asked:
        found = []
        for aid, qid in zip(q["cells"], q.get("questions") or [""] * len(q["cells"])):
            below = ids[qid] + 1 if qid in ids else len(nb.cells)
            if aid in ids:
                found.append(ids[aid])
            elif below < len(nb.cells) and nb.cells[below].get("id") not in known:
                found.append(below)
                moved.append(f"{q['name']} from {_cell(below)}, below its question")
        texts = [nb.cells[i].source for i in found]
        if not found:
            gone.append(q["name"])
        elif any(q["placeholder"].lower() in t.lower() for t in texts) or not any(t.strip() for t in texts):
            empty.setdefault(q["placeholder"], []).append((q["name"], found[0]))
    unfilled = [a for names in empty.values() for a in names]
    notes = [
        f"still {mark} or empty: " + ", ".join(f"{name} ({_cell(i)})" for name, i in names)
        for mark, names in empty.items()
    ]
    notes += [f"no answer cell: {', '.join(gone)}"] if gone else []
    notes += [f"read {', '.join(moved)} (its answer cell is gone; the grader reads it there too)"] if moved else []
    todo = [
        f"answer in {_cells([i for _, i in names])}: replace {mark} with your answer, in the same cell"
        for mark, names in empty.items()
    ]
    todo += [f"write the answer to {name} in a Markdown cell right below its question" for name in gone]
    filled = len(asked) - len(unfilled) - len(gone)
    status = "FAIL" if unfilled or gone else "warn" if moved else "ok"
    return Line(
        status, "answers", f"{filled} of {len(asked)} filled" + (": " + "; ".join(notes) if notes else ""), todo
    )


def hidden_line(lab: Lab) -> Line:
    checks = f"{lab.hidden_checks} check{'s' if lab.hidden_checks != 1 else ''}"
    return Line(
        "info",
        "hidden",
        f"the grader adds {checks} of its own ({lab.hidden_points:g} of the "
        f"{lab.points:g} automatic points): hidden, and {NOT_CHECKED}",
    )


def _cell(i) -> str:
    return f"cell {i + 1}" if i is not None else "a cell"


def _cells(indices: list[int]) -> str:
    return _cell(indices[0]) if len(indices) == 1 else "cells " + ", ".join(str(i + 1) for i in indices)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOW} more" if len(names) > SHOW else ""
    return ", ".join(names[:SHOW]) + more


# ---------------------------------------------------------------------------------------------
# Checking notebooks


def check_notebook(lab: Lab, path: Path, out: Path, command: str, log=print) -> bool:
    """Check one notebook; print its report and next steps; True when every public check passes."""
    import nbformat

    log(f"\n{lab.key}: {lab.title}\n  {path}, as last saved; cells are counted from 1 at the top")
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as e:  # nbformat raises several ValueError kinds for a broken file
        log(
            f"  FAIL  file        not a notebook JupyterLab can open ({type(e).__name__}: {e}): the grader cannot "
            f"run it either; save it again from JupyterLab"
        )
        return False
    result = run(lab, path, out / lab.key)
    lines = report(lab, path, nb, result)
    log("\n".join(str(ln) for ln in lines))
    ok = not any(ln.status == "FAIL" for ln in lines)
    todo = next_steps(lines, result)
    if ok and not todo:
        log(
            f"\n  Ready to submit: upload {lab.notebook} to the lab's assignment. The grader runs it again and adds "
            f"its hidden checks; TAs score the answers.\n  Checked here: {checked(lines)}.\n  Not checked here: "
            f"{not_checked(lab)}.\n  The run's outputs: {result.executed}"
        )
    else:
        steps = todo + [f"in JupyterLab, Kernel > Restart Kernel and Run All Cells, save, then `{command}` again"]
        log(f"\n  {'Ready, with warnings' if ok else 'Not ready to submit'}. Next:")
        log("\n".join(f"  {n}. {step}" for n, step in enumerate(steps, 1)))
        if ok:
            log(f"  Checked here: {checked(lines)}.\n  Not checked here: {not_checked(lab)}.")
        log(f"  The run's outputs: {result.executed}")
    return ok


def checked(lines: list[Line]) -> str:
    """What ``make check`` checked, as its report lines say it (the informational ones left out)."""
    named = {"file": "the file's name", "run": "the run's time and memory against the grader's limits"}
    return "; ".join(
        named.get(ln.what) or f"{ln.what} {ln.text.split(': ')[0].split('; ')[0]}"
        for ln in lines
        if ln.status != "info"
    )


def not_checked(lab: Lab) -> str:
    """What only the grader and the TAs check: the hidden checks, and what the answers say."""
    hidden = f"the grader's {lab.hidden_checks} hidden check{'s' if lab.hidden_checks != 1 else ''}"
    return f"{hidden} ({NOT_CHECKED.split(': ', 1)[1]}); what your answers say (TAs score it)"


def next_steps(lines: list[Line], result: Run) -> list[str]:
    """What to do, exercises first; a run stopped by an exercise not yet written adds no step of its own."""
    unwritten = any(ln.what == "exercises" and ln.status == "FAIL" for ln in lines)
    first = [t for ln in lines if ln.what in ("file", "exercises", "self-checks") for t in ln.todo]
    rest = [
        t
        for ln in lines
        if ln.what not in ("file", "exercises", "self-checks")
        for t in ln.todo
        if not (ln.what == "run" and unwritten and result.error.startswith("NotImplementedError"))
    ]
    return first + rest


def check_all(
    files=(), labs=None, rubric="notebooks/rubric.toml", notebooks="notebooks", out="out/check", log=print, again=None
) -> bool:
    """Check ``files`` (any notebooks) or, without them, the notebooks of ``labs`` (names; default every
    lab) in ``notebooks``; True when every public check of every one passes. ``again``: the command
    the next steps end with (default: ``make check`` for that lab)."""
    import nbformat

    known = load(rubric)
    chosen = [find_lab(known, name) for name in labs or []]
    jobs = []
    for f in map(Path, files):
        try:
            lab = chosen[0] if len(chosen) == 1 else lab_of(known, f, nbformat.read(str(f), as_version=4))
        except (OSError, ValueError):
            lab = chosen[0] if len(chosen) == 1 else next((x for x in known.values() if x.notebook == f.name), None)
        if lab is None:
            raise ValueError(f"{f}: which lab is it? Say --lab (make check LAB=N NOTEBOOK=...)")
        jobs.append((lab, f))
    if not files:
        jobs = [(lab, Path(lab.folder or notebooks) / lab.notebook) for lab in chosen or known.values()]
    results = []
    for lab, f in jobs:
        if not f.is_file():
            log(f"\n{lab.key}: {lab.title}\n  FAIL  file        {f} not found: the grader expects {lab.notebook}")
            results.append(False)
            continue
        command = again or f"make check LAB={lab.short}" + (f" NOTEBOOK={f}" if files else "")
        results.append(check_notebook(lab, f, Path(out), command, log=log))
    if len(results) > 1:
        log(f"\n{sum(results)} of {len(results)} notebooks pass every check make check runs")
    return all(results)


def _headless() -> bool:
    """In the check's own run, the grader's, or any kernel nobody watches (papermill)."""
    from labkit.measure.progress import in_kernel, is_live

    return bool(os.environ.get(SELF) or os.environ.get("LABKIT_GRADED")) or (in_kernel() and not is_live())


def check(notebook=None, lab=None, rubric=None, out=None) -> bool | None:
    """From a notebook cell: check this notebook as last saved (``notebook`` defaults to the one
    JupyterLab has open), as ``make check`` does; True when every public check passes. Does nothing
    in a headless run, so a notebook that calls it does not rerun itself under ``make check`` or the grader."""
    if _headless():
        print("labkit.check(): skipped in a headless run (make check and the grader do not check from inside)")
        return None
    session = notebook or os.environ.get("JPY_SESSION_NAME")
    if not session:
        raise ValueError("labkit.check(): which notebook? labkit.check('01_single_node_lr.ipynb')")
    path = Path(session)
    if not path.is_absolute():
        path = Path.cwd() / (path if notebook else path.name)  # JupyterLab's kernel runs in the notebook's folder
    rubric = Path(rubric) if rubric else path.parent / "rubric.toml"
    out = Path(out) if out else path.resolve().parent.parent / "out" / "check"
    print(f"checking {path.name} as last saved: save it first (Ctrl-S) for your latest changes to count")
    return check_all([path], [lab] if lab else None, rubric=rubric, out=out, again="labkit.check()")


def main(args) -> int:
    """The ``check`` subcommand: 0 when every public check passes, 1 when one fails, 2 on bad input."""
    try:
        ok = check_all(args.files, args.lab, args.rubric, args.notebooks, args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1
