"""``python -m labkit``: the command line. Each subcommand parses its arguments here and
calls one function of the module that does the work."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _data(args) -> int:
    from labkit import data

    names = args.dataset or ["mnist"]
    try:
        for name in names:
            if args.action == "fetch":
                where = data.fetch(name, dest=args.dest, mirror=args.mirror, force=args.force, log=print)
            else:
                where = data.locate(name, fetch_missing=False)
            print(f"{name}: verified in {where}")
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets (MNIST, Fashion-MNIST, a9a)")
    p.add_argument("action", choices=["fetch", "verify"])
    p.add_argument("--dataset", action="append", help="mnist (default), fashion-mnist or a9a; repeatable")
    p.add_argument("--dest", help="directory to fetch into (default data/<dataset>/)")
    p.add_argument("--mirror", help="local directory or base URL (default $LABKIT_DATA_MIRROR, "
                                    "else the public mirrors)")
    p.add_argument("--force", action="store_true", help="replace files already in place")
    p.set_defaults(func=_data)


def _add_bench(sub) -> None:
    from labkit import bench

    p = sub.add_parser("bench", help="run the benchmarks (ratios measured side by side) into out/bench/")
    p.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(bench.BENCHMARKS)})")
    p.add_argument("--out", default="out/bench")
    p.add_argument("--quick", action="store_true", help="small sizes, to check that each benchmark runs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark")
    p.set_defaults(func=lambda a: bench.run_all(a.names or list(bench.BENCHMARKS), Path(a.out), a.quick, a.timeout))


def _add_monitor(sub) -> None:
    def run(a):
        from labkit import monitor

        if a.command_args and a.command_args[0] == "--":
            a.command_args = a.command_args[1:]
        try:
            return monitor.monitor_command(a.command_args or None, pid=a.pid, interval=a.interval, out=a.out,
                                           duration=a.duration, timeout=a.timeout, dstat=a.dstat)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    p = sub.add_parser("monitor", help="sample CPU, memory, network and disk of a command or pid (replaces dstat)",
                       description="python -m labkit monitor [options] -- CMD ...   or   --pid PID [--duration S]")
    p.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="command to run and sample")
    p.add_argument("--pid", type=int, help="sample this running process (and its children) instead")
    p.add_argument("--duration", type=float, help="with --pid: stop after S seconds (default: when it exits)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    p.add_argument("--out", default="out/monitor", help="directory for monitor.csv/.json/.png (default out/monitor)")
    p.add_argument("--dstat", action="store_true", help="write monitor.csv in dstat's --output layout")
    p.add_argument("--timeout", type=float, default=3600, help="stop the command after S seconds (default 3600)")
    p.set_defaults(func=run)


def _grade(args) -> int:
    from labkit.grading import grade

    return grade.main(args)


def _release(args) -> int:
    from labkit.grading import release

    return release.main(args)


def _add_grade(sub) -> None:
    p = sub.add_parser("grade", help="run notebooks in isolation, check them against the rubric, write reports")
    p.add_argument("submissions", nargs="?", help="folder of DIR/<student>/<lab notebook>.ipynb "
                                                  "(default: the reference notebooks in --notebooks)")
    p.add_argument("--out", default="out/grade", help="output folder (cleared first; default out/grade)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="notebooks run at a time (default 1)")
    p.add_argument("--rubric", default="notebooks/rubric.toml")
    p.add_argument("--notebooks", default="notebooks", help="the reference notebooks' folder")
    p.add_argument("--lab", action="append", help="grade only this lab (rubric key or notebook name); repeatable")
    p.set_defaults(func=_grade)


def _add_release(sub) -> None:
    p = sub.add_parser("release", help="student versions of the notebooks (solutions removed) into --out")
    p.add_argument("--out", default="release")
    p.add_argument("--notebooks", default="notebooks")
    p.set_defaults(func=_release)


# Each entry adds one subcommand; they are listed in the order `--help` shows them.
REGISTRARS = [_add_data, _add_bench, _add_monitor, _add_grade, _add_release]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labkit",
                                     description="labkit: distributed TensorFlow labs, measured")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in REGISTRARS:
        add(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)
