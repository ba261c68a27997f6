"""Cost model: time per operator (a + b·tuples), dollar cost, M/M/1 penalty.

Pure: no import of psycopg, stomp or pyspark here (issue 4).
"""
