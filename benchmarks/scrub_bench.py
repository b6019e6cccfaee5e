"""Credential scrubbing on hostile megabytes: the time of each case, to see it stay linear.

    .venv/bin/python benchmarks/scrub_bench.py [--mb 1]

Each case is text a user or a server can send (a URL field, an error string) built to make a
backtracking pattern retry at every position: a run of letters (each could start a URL
scheme), ``a://`` repeated, a scheme followed by a long run, short ``sk-`` keys, an
``authorization`` label followed by spaces. Prints seconds per case at ``--mb`` and at twice
that: linear scrubbing takes about twice the time at twice the size (the quadratic patterns
this replaced took 3.3 s on 20 KB of letters, 2026-12-02, two busy cores).
"""

from __future__ import annotations

import argparse
import time

from planner.credentials import Scrubber


def cases(chars: int) -> dict[str, str]:
    return {
        "letters": "a" * chars,
        "a:// repeated": "a://" * (chars // 4),
        "scheme then a run": "http://" + "a" * chars,
        "short sk- keys": "sk-abc " * (chars // 7),
        "authorization then spaces": "authorization" + " " * chars,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0)
    args = parser.parse_args()
    scrubber = Scrubber(["a-secret-key"])
    size = int(args.mb * 1_000_000)
    print(f"{'case':<28} {args.mb:g} MB (s)   {2 * args.mb:g} MB (s)   ratio")
    for name in cases(1):
        times = []
        for chars in (size, 2 * size):
            text = cases(chars)[name] + " http://user:pw@host/x"
            start = time.perf_counter()
            scrubber.text(text)
            times.append(time.perf_counter() - start)
        print(f"{name:<28} {times[0]:>10.3f} {times[1]:>12.3f} {times[1] / times[0]:>8.2f}")


if __name__ == "__main__":
    main()
