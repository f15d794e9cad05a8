"""The fleet's standing beyond one run: an operator's moves (`operator`), each node's story read back
(`history`), the baseline every campaign adds to (`baselines`), and whether the admitted nodes meet the delivery
(`capacity`).
"""
