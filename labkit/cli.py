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


# Each entry adds one subcommand; they are listed in the order `--help` shows them.
REGISTRARS = [_add_data, _add_bench]


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
