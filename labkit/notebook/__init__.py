"""What a notebook calls: record (read back by the grader) and checking (make check)."""
