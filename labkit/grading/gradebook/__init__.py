"""Grading, stage 5: the books: grades.csv and summary.md, the LMS exports, every report rebuilt
from a batch, the feedback packed for delivery."""
