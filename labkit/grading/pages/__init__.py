"""Grading, stage 4: the pages a student and a TA read: feedback, the notebook as shown, statistics;
rendered in a process of their own and sanitized last."""
