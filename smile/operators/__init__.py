"""Set-based SQL operators that advance one vertex to a timestamp in one transaction
(docs/design/semantics.md §4): the library the agents (and capture, for shadow copies) run on a
machine's database."""
