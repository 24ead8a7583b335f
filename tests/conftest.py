"""Fixtures several test files share. (Shared checks are in ``helpers.py``.)"""
import labkit  # noqa: F401  (first: it keeps nbformat's import fast in this process, see labkit/__init__.py)
