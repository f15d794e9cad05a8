"""The burn-in: a campaign's stages on every node (``phase``), from preflight (``preflight``) through the node
stage, DCGM (``dcgm``), pairs (``pairs``), the collectives and training to the soak (``soak``); the verdicts they
reach (``verdict``), the group testing that isolates the nodes that stopped a launch (``isolation``), and the
rechecks of returned nodes and cables (``recheck``). A node is admitted only on its own measurements.
"""
