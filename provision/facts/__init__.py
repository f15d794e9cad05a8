"""Facts: each command a host is asked (or file it is read from) beside its pure parser, and what every session
speaks to run them (`session`). Node-side: what `node-check` reads on a node is read by the same parsers.
"""
