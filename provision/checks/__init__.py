"""The judgements: one pure function per check of what a node's facts say against what the spec expects
(preflight, node-side), the node stage's and DCGM's judgements over their records, the soak's trends, and a
node's figures against the fleet's baseline. Nothing here runs a command: facts bring the evidence in.
"""
