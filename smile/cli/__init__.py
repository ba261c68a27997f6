"""The `smile` command line: argument parsing and printing only; the work is done elsewhere."""
