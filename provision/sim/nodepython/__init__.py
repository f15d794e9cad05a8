"""The simulated node's Python: the folder put on a simulated node's `PYTHONPATH`, whose `sitecustomize` installs
the rank faults in the burn-in's workers. Not imported as a package by the controller.
"""
