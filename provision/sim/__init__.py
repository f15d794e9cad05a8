"""The simulated cluster: hardware roots and vendor-tool stand-ins, nothing above the hardware boundary.

Kept free of heavy imports: every stand-in invocation imports this package.
"""
