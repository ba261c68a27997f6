"""Housekeeping that runs operators beside a long-running process, off its critical path."""
