"""Regenerates fig12live of the paper's evaluation into experiments/results: the same as
`smile experiment fig12live` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "fig12live", *sys.argv[1:]]))
