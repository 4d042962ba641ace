"""Judging, metrics and the coverage experiment."""
