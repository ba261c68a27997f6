"""Regenerates fig12pairs of the paper's evaluation into experiments/results: the same as
`smile experiment fig12pairs` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "fig12pairs", *sys.argv[1:]]))
