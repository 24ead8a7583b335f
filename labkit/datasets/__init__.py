"""Datasets: locate, fetch, verify and parse them (loaders); Lab 3's synthetic click data."""
