"""Sharing executor: staleness tracking, lazy push scheduling, snapshot auditor (issue 6)."""
