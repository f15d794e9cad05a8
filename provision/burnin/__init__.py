"""The burn-in: a campaign's stages on every node (``phase``), from preflight (``preflight``) through the node
stage (``node_stage``), DCGM (``dcgm``), pairs (``pairs``), the collectives (``collectives``) and training
(``training``) to the soak (``soak``); what a launch's workers said, read (``records``); the verdicts they reach
(``verdict``), the group testing that isolates the nodes that stopped a launch (``isolation``), and the
rechecks of returned nodes and cables (``recheck``). A node is admitted only on its own measurements.
"""
