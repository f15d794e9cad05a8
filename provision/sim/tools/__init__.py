"""The vendor tools' stand-ins on a simulated host's `PATH` (`nvidia-smi`, `ibstat`, `dcgmi`, ...): each prints
what the real tool prints for the simulated hardware, in the real tool's format, faults included.
"""
