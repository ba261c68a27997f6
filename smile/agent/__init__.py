"""Agents: one per machine, running CopyDelta / Join / Union / DeltaToRel on its PostgreSQL
(issue 5)."""
