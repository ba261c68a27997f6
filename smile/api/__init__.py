"""REST API and dashboards (FastAPI) for sharings, machines and plans (issue 6)."""
