"""Sharing optimizer: SPJ parsing, DPD/DPT dynamic programming, admission, the global plan and
its hill-climbing (docs/design/optimizer.md has the module map).

Pure: a catalog snapshot in, a plan out. Must not: import psycopg, stomp or pyspark (a test
scans the imports).
"""
