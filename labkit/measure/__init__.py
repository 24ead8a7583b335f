"""Measuring a run: resources (psutil, dstat's CSV), bytes on the wire, sample summaries, TensorBoard
scalars, units, progress bars and every figure."""
