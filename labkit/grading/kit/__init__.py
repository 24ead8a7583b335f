"""The student kit (make release): the kit without its solutions, and the public rubric."""
