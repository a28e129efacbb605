"""Scoring finished runs: the scoring step, its evaluators and metrics."""
