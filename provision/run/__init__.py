"""One run of a mutating command: its record on disk (`record`), the one lifecycle every mutating command runs in
(`context`: lock, store row, events, the end), and what a pipeline phase is (`phases`).
"""
