"""Per-row cost of moving 1M rows between two local clusters: `db.pipe` over psycopg's COPY
iteration, the iteration alone, and a psql process feeding the destination's COPY.

    .venv/bin/python docs/results/bench_push/pipe_1m.py SRC_DSN DST_DSN

(two machines of `smile up`, their DSNs in the state directory's cloud.json; it creates and
drops `pipe_src` and `pipe_dst`)."""

import resource
import subprocess
import sys
import time

import psycopg

from smile.db import pipe

SRC, DST = sys.argv[1], sys.argv[2]
Q = "SELECT k, pa, pb, pc FROM pipe_src"
FILL = ("CREATE UNLOGGED TABLE pipe_src AS SELECT i AS k, md5(i::text) AS pa, "
        "md5((i + 1)::text) AS pb, md5((i + 2)::text) AS pc FROM generate_series(1, 1000000) i")


def cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


with psycopg.connect(SRC, autocommit=True) as s, psycopg.connect(DST, autocommit=True) as d:
    s.execute("DROP TABLE IF EXISTS pipe_src")
    s.execute(FILL)
    d.execute("DROP TABLE IF EXISTS pipe_dst")
    d.execute("CREATE UNLOGGED TABLE pipe_dst (k int, pa text, pb text, pc text)")
    for _ in range(2):
        d.execute("TRUNCATE pipe_dst")
        c0, w0 = cpu(), time.perf_counter()
        with s.cursor().copy(f"COPY ({Q}) TO STDOUT") as r, \
                d.cursor().copy("COPY pipe_dst FROM STDIN") as w:
            moved = pipe(r, w)
        c1, w1 = cpu(), time.perf_counter()
        print(f"pipe:    wall {w1 - w0:.2f} s, own CPU {c1[0] - c0[0]:.2f} s, "
              f"{moved / 1e6:.0f} MB")
        c0, w0 = cpu(), time.perf_counter()
        with s.cursor().copy(f"COPY ({Q}) TO STDOUT") as r:
            n = sum(1 for _ in r)
        c1, w1 = cpu(), time.perf_counter()
        print(f"iterate: wall {w1 - w0:.2f} s, own CPU {c1[0] - c0[0]:.2f} s, {n} messages")
        d.execute("TRUNCATE pipe_dst")
        c0, w0 = cpu(), time.perf_counter()
        p = subprocess.Popen(["psql", SRC, "-X", "-q", "-c", f"COPY ({Q}) TO STDOUT"],
                             stdout=subprocess.PIPE)
        assert p.stdout is not None
        with d.cursor().copy("COPY pipe_dst FROM STDIN") as w:
            while b := p.stdout.read(1 << 20):
                w.write(b)
        p.wait()
        c1, w1 = cpu(), time.perf_counter()
        print(f"psql:    wall {w1 - w0:.2f} s, own CPU {c1[0] - c0[0]:.2f} s, "
              f"psql CPU {c1[1] - c0[1]:.2f} s")
        print("rows", d.execute("SELECT count(*) FROM pipe_dst").fetchone())
    s.execute("DROP TABLE pipe_src")
    d.execute("DROP TABLE pipe_dst")
