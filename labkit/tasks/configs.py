"""Several configurations in one task process: TensorFlow's start-up (import, server, strategy)
paid once per cluster.

A program takes ``--configs`` (``add_configs_option``): a JSON list of configurations, each a
name and the arguments it changes; ``configurations`` checks them as the command line is
checked. Each runs inside ``TaskRuntime.configuration(config)`` (``scope`` here), which gives it
fresh ``metrics``/``steps``/``timings``/``series``, names its marks ``"<name>: <label>"`` in the
samples, emits ``config_started``/``config_done`` events (``labkit.wire.events``), and writes its own
result file when it ends (``results.configuration_file``; the samples over its window and the
process's baseline then, ``results.configuration_part``), so a task killed later keeps the
configurations it finished. The program makes everything else fresh per configuration (graphs,
variables, datasets, checkpoints); what a process cannot make twice is said where it is made.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
import traceback
from dataclasses import dataclass

from labkit.wire import events
from labkit.wire.results import configuration_file, configuration_part
from labkit.tasks.files import IDENTITY_KEYS, per_second, write_json

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Configuration:
    """One configuration a task runs: its place in the list, its name (None: the task's only one,
    whose results are the process's own) and the program's arguments with its own on top."""

    index: int
    count: int
    name: str | None
    args: argparse.Namespace

    def describe(self) -> dict:
        return {"index": self.index, "count": self.count, "name": self.name}


def add_configs_option(parser: argparse.ArgumentParser, varying: tuple[str, ...]) -> None:
    """``--configs JSON``: the configurations to run one after the other in this process."""
    parser.add_argument(
        "--configs",
        default=None,
        metavar="JSON",
        help="several configurations, one after the other in this process (TensorFlow starts "
        "once): a JSON list of objects, each with 'name' (its result files are "
        "NAME.<task>.json in the run directory) and any of: " + ", ".join(varying),
    )


def configurations(
    parser: argparse.ArgumentParser, args: argparse.Namespace, varying: tuple[str, ...], check=None
) -> list[Configuration]:
    """The configurations of ``--configs`` (see ``add_configs_option``), each checked with
    ``check(parser, args)`` as the command line is; without it, one: the command line's."""
    if args.configs is None:
        return [Configuration(0, 1, None, args)]
    try:
        items = json.loads(args.configs)
    except json.JSONDecodeError as e:
        parser.error(f"--configs is not JSON ({e})")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        parser.error('--configs must be a JSON list of objects, e.g. [{"name": "b50", "batch_size": 50}]')
    out, names = [], set()
    for index, item in enumerate(items):
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name) or name in names:
            parser.error(
                f"configuration {index + 1} of --configs needs a 'name' of its own, one path component of "
                f"letters, digits, '_', '-' or '.'; got {name!r}"
            )
        names.add(name)
        unknown = sorted(set(item) - {"name"} - set(varying))
        if unknown:
            parser.error(
                f"configuration {name!r} sets {unknown}, which must be the same for every configuration "
                f"of a cluster; a configuration may set: {', '.join(varying)}"
            )
        merged = argparse.Namespace(**{**vars(args), **{k: v for k, v in item.items() if k != "name"}, "configs": None})
        if check is not None:
            check(parser, merged)
        out.append(Configuration(index, len(items), name, merged))
    return out


def parse_with_configs(parser: argparse.ArgumentParser, argv, varying: tuple[str, ...], check) -> argparse.Namespace:
    """A task program's arguments: ``parser`` with ``--configs`` added, the command line checked
    with ``check(parser, args)``, and the configurations to run in ``args.plan``."""
    add_configs_option(parser, varying)
    args = parser.parse_args(argv)
    check(parser, args)
    args.plan = configurations(parser, args, varying, check)
    return args


def mnist_for(args, cache: dict):
    """The MNIST split ``args`` names (``train_limit``, ``test_limit``, ``seed``), loaded once per
    split into ``cache``: a process's configurations that train on the same split share its arrays."""
    from labkit.datasets.loaders import load_mnist

    key = (args.train_limit, args.test_limit, args.seed)
    if key not in cache:
        cache[key] = load_mnist(limit=args.train_limit, test_limit=args.test_limit, seed=args.seed)
    return cache[key]


@contextlib.contextmanager
def scope(rt, config: Configuration):
    """``rt`` running ``config`` (``TaskRuntime.configuration``: see the module docstring). An
    exception is recorded in the configuration's result file and raised on (the task fails). A
    configuration without a name is the process's only one: its results are the process's own."""
    if config.name is None:
        yield rt
        return
    base = rt.process_result
    rt.result = {
        **{k: base[k] for k in IDENTITY_KEYS},
        "args": {k: v for k, v in vars(config.args).items() if k != "configs"},
        "configuration": config.describe(),
        "metrics": {},
        "steps": {},
        "timings": {},
        "series": {},
    }
    rt.bind(rt.result)
    rt.config = config
    started = rt.result["configuration_started_epoch"] = time.time()
    rt.log(f"configuration {config.index + 1}/{config.count} {config.name}: start")
    rt.emit(events.ConfigStarted(index=config.index, count=config.count, name=config.name))
    rt.mark("start")
    status = "error"
    try:
        yield rt
        status = "ok"
    except BaseException:
        rt.result["error"] = traceback.format_exc()
        raise
    finally:
        rt.mark("end")
        _write(rt, config, started, status)
        rt.emit(events.ConfigDone(index=config.index, count=config.count, name=config.name, status=status))
        rt.config = None
        rt.bind(base)
        base.setdefault("configurations", []).append(
            {"name": config.name, "status": status, "started_epoch": started, "ended_epoch": time.time()}
        )
    rt.log(f"configuration {config.index + 1}/{config.count} {config.name}: done")


def _write(rt, config: Configuration, started: float, status: str) -> None:
    """The configuration's result file, as a task's own: its results, and the samples over its window."""
    out, ended = rt.result, time.time()
    out.update(status=status, shutdown="finished", ended_epoch=ended)
    out["timings"]["total_s"] = ended - started
    per_second(out)
    if rt.sampler is not None:
        rt.sampler.sample_now()
        out.update(configuration_part(rt.sampler.to_dict(), started, ended, prefix=f"{config.name}: "))
    write_json(rt.run_dir / configuration_file(config.name, rt.task.type, rt.task.index), out)
