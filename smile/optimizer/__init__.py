"""Sharing optimizer: SPJ parsing, DPD/DPT dynamic programming, admission, global plan.

Pure: a catalog snapshot in, a plan out; no import of psycopg, stomp or pyspark here (issue 4).
"""
