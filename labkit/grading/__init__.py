"""Grading: run notebooks in isolation, score them against the rubric, verify claims, report."""
