"""The measurement harness that `smile bench` and `smile experiment` share: tweet traffic in a
thread (`traffic`), the admin's way onto a running cloud (`cloud`), how large a live run is
(`scale`), what the cloud's processes hold and take (`footprint`), and where results go
(`output`).

Must not: import `smile.bench` or `smile.experiments` (both import it, and the experiments
the benchmarks: one direction only).
"""
