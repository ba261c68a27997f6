"""Regenerates the long run (issue 13) into experiments/results: the same as
`smile experiment longrun` (--full for the paper's scale, --out DIR elsewhere)."""

import sys

from smile.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "longrun", *sys.argv[1:]]))
