"""The model of a host's hardware built from a spec's hardware profile: its PCIe devices (GPUs, HCAs, the
switches and bridges between them, with their ACS capability) and their configuration space byte for byte.

Pure: the spec validates fault targets against it (which bridges carry ACS), and the simulator writes a
host's sysfs and answers its vendor tools from it.
"""
