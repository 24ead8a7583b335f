"""Experiments: one function per lab experiment that a notebook calls, returning tidy pandas frames."""
