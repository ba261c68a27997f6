"""The paper's evaluation (§9), reproducible: one module per figure or table (or per run
that writes several), each writing `NAME.csv` (raw points), `NAME.png` (drawn like the paper's
figure) and `NAME.json` (headline numbers beside the paper's). `registry.py` names them;
`smile experiment NAME` runs one. A live one runs on the cloud `smile up` started (`live.py`),
at the scale it is asked for (its table of `harness.scale.Scale`s), with the harness's traffic
and outputs.

Must not: print the cost model's own output as a measurement; what is measured says so, and
what is modelled is labelled as such.
"""
