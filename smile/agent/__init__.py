"""Agents: one per machine, running CopyDelta / Join / Union / DeltaToRel on its PostgreSQL
by command of the executor (docs/design/agents.md)."""
