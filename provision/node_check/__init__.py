"""`provision node-check`: the preflight checks on a node between burn-ins, as Slurm's HealthCheckProgram. Node-side:
`on_node` runs from the burn-in runtime (`python -m provision.node_check`) with only the checks, the facts and the
session protocol; `check_file` is the controller's side, writing each node's expectations from the spec.
"""
