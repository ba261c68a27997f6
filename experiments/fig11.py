"""Regenerates fig11 of the paper's evaluation into experiments/results: the same as
`smile experiment fig11` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "fig11", *sys.argv[1:]]))
