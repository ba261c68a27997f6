"""Regenerates fig10 of the paper's evaluation into experiments/results: the same as
`smile experiment fig10` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "fig10", *sys.argv[1:]]))
