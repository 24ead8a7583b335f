"""The labs: one folder each."""
