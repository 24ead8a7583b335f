"""Grading, stage 1: submissions in (Canvas and Gradescope downloads laid out, late work)."""
