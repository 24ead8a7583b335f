"""Grading, stage 3: judge a run: the rubric, the grader's checks and hidden checks, scoring, the TAs'
answer scores, similarity flags."""
