"""``python -m chaos [--trials N] [--seed S]``: run the chaos trials; exit 1 on any violation."""

from __future__ import annotations

import argparse
import sys

from chaos.runner import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.exit(main(args.trials, args.seed))
