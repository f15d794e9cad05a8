"""Code that runs on the nodes: collectives, pairwise bandwidth, the training smoke test.

Only the standard library and torch may be imported here: these modules are
shipped to GPU hosts that have the controller's dependencies nowhere near them.
"""
