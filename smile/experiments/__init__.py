"""The paper's evaluation (§9), reproducible: one module per figure or table, each writing
`NAME.csv` (raw points), `NAME.png` (drawn like the paper's figure) and `NAME.json` (headline
numbers beside the paper's). `registry.py` names them; `smile experiment NAME` runs one.

Must not: print the cost model's own output as a measurement; what is measured says so, and
what is modelled is labelled as such.
"""
