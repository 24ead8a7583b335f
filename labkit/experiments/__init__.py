"""What the labs' experiment modules (``labkit.labs.<lab>.experiment``) share: one shape for all.

A lab makes its clusters with ``make_cluster`` (the spec, the run's name and folder, the
``labkit.distributed.launch.Cluster``) and follows them through their tasks' events
(``labkit.wire.events``), never their logs. Its sweep runs a list of configurations and returns a
``Sweep``: ``runs`` (one ``Run`` per configuration, a dataclass of the configuration's fields and
``result``, the ``ClusterResult`` that ran it), ``settings`` (the sweep's arguments, JSON-able),
``find(...)``, the lab's tables (pandas DataFrames) and ``records(...)``/``record(...)`` (what the
notebook records for the grader). Labs 2, 4 and 5 run the configurations of one cluster shape one
after the other in one cluster (``shared``); Lab 3's runs of one cluster share its ``result``.
``traces`` reads the runs the kit recorded, which each lab ships in its ``traces/`` folder.
"""

from __future__ import annotations

import inspect
import numbers
import textwrap
import types
from dataclasses import dataclass, field, fields

from labkit.wire import events
from labkit.core import paths
from labkit.wire.results import ClusterResult, TaskOutcome


def make_cluster(
    lab: str,
    program: str,
    spec,
    *,
    name: str,
    run: str | None = None,
    tensorboard: bool = False,
    args: dict | None = None,
    **kwargs,
):
    """A (not yet started) ``labkit.distributed.launch.Cluster`` running ``program`` on ``spec``, in
    ``runs/<lab>/<run>``: the one way the labs make a cluster. ``run`` defaults to
    ``paths.run_name(name)`` (``<sweep>/<run>`` for a sweep's); ``tensorboard``: the tasks'
    ``tensorboard_dir`` is ``<run dir>/tensorboard``. ``args`` and the keywords that are not the
    Cluster's options (``cluster_options``) are the program's arguments: a lab's wrapper passes
    both flat, and this is the one place that tells them apart."""
    from labkit.distributed.launch import Cluster

    options = {k: kwargs.pop(k) for k in cluster_options() & set(kwargs)}
    run = run or paths.run_name(name)
    program_args = {**(args or {}), **kwargs}
    if tensorboard:
        program_args["tensorboard_dir"] = paths.run_dir(lab, run) / "tensorboard"
    return Cluster(spec, program, program_args, lab=lab, run=run, **options)


def cluster_options() -> set[str]:
    """The names of the Cluster's own keyword options (its signature's keyword-only parameters)."""
    import inspect

    from labkit.distributed.launch import Cluster

    params = inspect.signature(Cluster.__init__).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def describe(e: events.Event) -> str:
    """An event in a line for a lab's printout: the lab's words, whatever the task's log says."""
    if isinstance(e, events.Epoch):
        val = f" val_loss {e.val_loss:.4f} val_acc {e.val_accuracy:.4f}" if e.val_loss is not None else ""
        return (
            f"epoch {e.epoch}/{e.epochs}: train_loss {e.train_loss:.4f}{val} {e.images_per_s:.0f} img/s "
            f"{e.seconds:.1f} s"
        )
    if isinstance(e, events.Resumed):
        return f"resumed from the checkpoint of epoch {e.start_epoch}: {e.start_epoch} of {e.epochs} epochs done"
    figures = ", ".join(f"{k} {v:.4f}" for k, v in getattr(e, "metrics", {}).items() if isinstance(v, (int, float)))
    if isinstance(e, events.Eval):
        return f"global step {e.global_step}: {figures}"
    if isinstance(e, events.Done):
        return f"done: {e.local_steps} local steps, global step {e.global_steps}" + (f", {figures}" if figures else "")
    return e.kind


def printer(log, kinds: tuple[str, ...]):
    """``on_event(event, label)`` that logs the chief's events of ``kinds`` as ``"<label> | ..."``
    (``describe``); None without ``log``."""
    if not log:
        return None

    def on_event(e: events.Event, label: str) -> None:
        if e.chief and e.kind in kinds:
            log(f"{label} | {describe(e)}")

    return on_event


def config_printer(log, kinds: tuple[str, ...]):
    """``shared.run``'s ``on_event(config, event)``: ``printer``'s lines, labelled with each
    configuration's label; None without ``log``."""
    say = printer(log, kinds)
    return (lambda config, e: say(e, config.label) if config is not None else None) if say else None


def positive_ints(name: str, values, example: str = "(1, 2, 3)") -> tuple[int, ...]:
    """One positive integer or several (numpy's too) as a tuple of ints: a sweep's axis. Anything
    else raises a ValueError that names ``name`` and shows ``example``."""
    if isinstance(values, numbers.Integral):
        values = (values,)
    items = tuple(values) if hasattr(values, "__iter__") and not isinstance(values, (str, bytes)) else ()
    if not items or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in items):
        raise ValueError(f"{name} must be positive integers, e.g. {example}; got {values!r}")
    return tuple(int(v) for v in items)


def function_source(fn, name: str, signature: str, what: str) -> str:
    """The source of the notebook's function ``name`` (a ``def`` at the top level of a cell), to
    send to the tasks, which define it and train with it (``tasks.common.define_function``).
    ``what``: the argument that took it, for the error."""
    if not callable(fn) or getattr(fn, "__name__", None) != name:
        raise ValueError(f"{what} must be a function named {name}{signature}, got {fn!r}")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ValueError(
            f"cannot read the source of {name}; define it with `def` at the top level of a "
            f"notebook cell or a module ({e})"
        ) from None
    return "".join(line + "\n" for line in _module_imports(fn)) + source


def _module_imports(fn) -> list[str]:
    """``import`` lines for the modules the function uses by a global name (``tf``, ``np``), as
    the notebook imported them, so the source defines the same function in a task's process."""
    names, codes = set(), [getattr(fn, "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    lines = []
    for n in sorted(names):
        module = getattr(fn, "__globals__", {}).get(n)
        if isinstance(module, types.ModuleType):
            lines.append(f"import {module.__name__}" + (f" as {n}" if module.__name__ != n else ""))
    return lines


class Run:
    """One configuration and the cluster that ran it (subclasses: dataclasses whose fields are
    the configuration, then ``result``)."""

    result: ClusterResult

    @property
    def config(self) -> dict:
        """The configuration: every field but ``result`` (and fields the constructor does not take)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name != "result"}

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.config.items())

    @property
    def chief(self) -> TaskOutcome:
        """The task that led the training and measured it (``ClusterResult.chief``)."""
        return self.result.chief()

    @property
    def train(self) -> dict:
        """``train_loop.train``'s result on the chief (runs of ``strategy_train`` tasks)."""
        return self.chief.training

    def matches(self, *values, **config) -> bool:
        """Whether this run's configuration has ``values`` (in field order) and ``config``;
        None matches anything."""
        names = list(self.config)
        if len(values) > len(names):
            raise TypeError(
                f"{type(self).__name__} has {len(names)} configuration fields ({', '.join(names)}); "
                f"got {len(values)} values"
            )
        wanted = {**dict(zip(names, values)), **config}
        unknown = set(wanted) - set(names)
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no configuration field {sorted(unknown)}; fields: {', '.join(names)}"
            )
        return all(v is None or self.config[k] == v for k, v in wanted.items())


@dataclass
class Sweep:
    """The runs of a list of configurations, the settings they ran with, and the lab's tables."""

    runs: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def find(self, *values, **config) -> Run:
        """The first run whose configuration has ``values`` (in the run's field order) and
        ``config`` (None matches anything); a KeyError listing the runs if none has."""
        for r in self.runs:
            if r.matches(*values, **config):
                return r
        wanted = ", ".join([*map(repr, values), *(f"{k}={v!r}" for k, v in config.items())])
        raise KeyError(f"no run matches {wanted}; runs: {', '.join(r.label for r in self.runs) or 'none'}")

    def configs(self) -> list[dict]:
        """Every run's configuration, in run order."""
        return [r.config for r in self.runs]

    def records(self, **kwargs) -> dict:
        """What the notebook records for the grader: {name: JSON-able value}."""
        raise NotImplementedError(f"{type(self).__name__} defines no records")

    def record(self, **kwargs) -> dict:
        """``records(**kwargs)``, each recorded in the notebook (``labkit.notebook.record``); returns them."""
        from labkit.notebook.record import record

        out = self.records(**kwargs)
        for name, value in out.items():
            record(name, value)
        return out
