"""The REST API and the dashboard (FastAPI)."""
