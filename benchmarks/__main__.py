"""``python -m benchmarks list | run NAME [--processes N] [--set key=value ...] [--out DIR]``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import harness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", allow_abbrev=False,
                                     description="hookmagic's benchmarks: one runner, one schema")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the benchmarks and what each measures")
    run = sub.add_parser("run", help="run a benchmark in fresh processes and write its result")
    run.add_argument("name")
    run.add_argument("--processes", type=int, default=3)
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a parameter (JSON value, or text)")
    run.add_argument("--out", type=Path, default=harness.RESULTS)
    one = sub.add_parser("measure", help=argparse.SUPPRESS)  # one process; used by `run`
    one.add_argument("name")
    one.add_argument("--params", default="{}")
    args = parser.parse_args(argv)
    if args.cmd == "list":
        for name in sorted(harness.REGISTRY):
            mod = harness.module(name)
            print(f"{name:14s} {mod.DESCRIPTION}  (needs: {', '.join(mod.NEEDS) or 'nothing'})")
        return 0
    if args.cmd == "measure":
        metrics = harness.measure_here(args.name, json.loads(args.params))
        print(json.dumps(metrics))
        return 0
    params = {}
    for item in args.set:
        key, _, value = item.partition("=")
        params[key] = harness.parse_value(value)
    result = harness.run(args.name, args.processes, params, args.out)
    if result:
        print(harness.markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
