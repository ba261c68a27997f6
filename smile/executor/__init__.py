"""The sharing executor (paper §8): lazy pushes, staleness, the snapshot auditor."""
