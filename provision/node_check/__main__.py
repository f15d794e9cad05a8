"""``python -m provision.node_check``: what the node_check role installs as ``provision-node-check``.

Guarded, because the node runtime's role imports every module of the package to compile its bytecode: imported,
this module must not run the checks and exit."""

import sys

from provision.node_check.on_node import main

if __name__ == "__main__":
    sys.exit(main())
