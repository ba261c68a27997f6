"""Benchmarks that print their figures as JSON, each against a baseline measured in the same run."""
