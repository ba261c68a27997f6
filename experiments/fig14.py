"""Regenerates fig14 of the paper's evaluation into experiments/results: the same as
`smile experiment fig14` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "fig14", *sys.argv[1:]]))
