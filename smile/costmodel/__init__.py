"""Cost model: time per operator (a + b·tuples), what a plan costs per second (the ledger),
COST with its M/M/1 penalty, and the lazy executor's push period.

Pure. Must not: import psycopg, stomp or pyspark (a test scans the imports), or know plans.
"""
