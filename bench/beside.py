"""bench.serve of this checkout beside another commit's, in interleaved rounds on one machine.

    OPENBLAS_NUM_THREADS=1 python3 -m bench.beside --base DIR [--rounds 4] [--up-args "..."]
        [--base-up-args "..."] -- --shards-list 1,3 --concurrency 1,8,32

DIR is a checkout of the other commit with its native kernels built (`pip install -e .` in a
venv of its own; --base-python, default DIR/.venv/bin/python). Each round runs
`python -m bench.serve ARGS --no-gateway --no-llamacpp` once on each side, the order reversed
every other round (ABBA), so a shared machine's drift falls on both alike: a single run of each
side back to back differs by 25% at C=32 on two cores. The summary gives, for every stack and
concurrency, the median over the rounds of tokens/s and of inter-token latency p50 on each side
and their ratio. --up-args go to this checkout's `llmbus up` only (e.g. options the base lacks,
or `--insecure` where the base had no keyed bus); --base-up-args to the base's.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
# A stack row of bench.serve: engine, C, requests, errors, tok/s, TTFT p50, p99, ITL p50.
ROW = re.compile(r"^(llmbus \d+-shard(?: x\d+)?)\s+(\d+)\s+\d+\s+(\d+)\s+([\d.]+)\s+\S+\s+\S+\s+([\d.]+)ms")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="checkout of the commit compared")
    ap.add_argument("--base-python", type=Path, default=None, help="default: BASE/.venv/bin/python")
    ap.add_argument("--python", type=Path, default=Path(sys.executable), help="this side's python")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--up-args", default="", help="`llmbus up` options for this checkout's stacks")
    ap.add_argument("--base-up-args", default="", help="`llmbus up` options for the base's stacks")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for one bench.serve run")
    ap.add_argument("--keep", type=Path, default=None, help="folder for each run's whole output")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then bench.serve's options")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.serve_args = [a for a in args.serve_args if a != "--"]
    args.base_python = args.base_python or args.base / ".venv" / "bin" / "python"
    if not args.base_python.exists():
        ap.error(f"no python at {args.base_python} (make BASE's venv, or pass --base-python)")
    return args


def rows(text: str) -> dict[tuple[str, int], tuple[int, float, float]]:
    """(engine, C) -> (errors, tok/s, ITL p50 ms) of every stack row in bench.serve's output."""
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            out[(m.group(1), int(m.group(2)))] = (int(m.group(3)), float(m.group(4)), float(m.group(5)))
    return out


def run_side(python: Path, cwd: Path, serve_args: list[str], up_args: str, timeout: float) -> str:
    cmd = [str(python), "-m", "bench.serve", *serve_args, "--no-gateway", "--no-llamacpp"]
    if up_args:
        cmd += ["--up-args", up_args]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    env.pop("PYTHONPATH", None)            # each side imports its own tree
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"bench.serve in {cwd} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def summary(runs: dict[str, list[dict]]) -> list[str]:
    """Per (engine, C): the median of each side's tok/s and ITL p50 over its rounds, and the
    ratios this/base. A row missing from any run of either side is left out, and said so."""
    keys = sorted(set.intersection(*(set(r) for side in runs.values() for r in side)))
    lines = [f"{'stack':16s} {'C':>3s} {'tok/s base':>10s} {'this':>7s} {'ratio':>6s}   "
             f"{'ITL p50 base':>12s} {'this':>7s} {'ratio':>6s}   errors base/this"]
    for key in keys:
        med = {side: (statistics.median(r[key][1] for r in rs), statistics.median(r[key][2] for r in rs),
                      sum(r[key][0] for r in rs)) for side, rs in runs.items()}
        (bt, bi, be), (tt, ti, te) = med["base"], med["this"]
        lines.append(f"{key[0]:16s} {key[1]:3d} {bt:10.1f} {tt:7.1f} {tt / bt:6.2f}   "
                     f"{bi:10.1f}ms {ti:5.1f}ms {ti / bi:6.2f}   {be}/{te}")
    every = set.union(*(set(r) for side in runs.values() for r in side))
    if every - set(keys):
        lines.append(f"rows not in every run, left out: {sorted(every - set(keys))}")
    return lines


def main(argv=None) -> int:
    args = parse(argv)
    sides = {"base": (args.base_python, args.base.resolve(), args.base_up_args),
             "this": (args.python, HERE, args.up_args)}
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    print(f"# bench.serve {shlex.join(args.serve_args)}: this checkout beside {args.base}, "
          f"{args.rounds} rounds ABBA; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
          flush=True)
    for r in range(args.rounds):
        for side in ("base", "this") if r % 2 == 0 else ("this", "base"):
            python, cwd, up = sides[side]
            text = run_side(python, cwd, args.serve_args, up, args.timeout)
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{side}-{r + 1}.txt").write_text(text)
            got = rows(text)
            runs[side].append(got)
            print(f"round {r + 1} {side:4s}: " + ", ".join(
                f"{e.split()[1]} C={c} {v[1]:.1f} tok/s ITL {v[2]:.1f}ms" for (e, c), v in sorted(got.items())),
                flush=True)
    print("\n".join(summary(runs)))
    print(f"# load at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
