"""``python -m provision.node_check``: what the node_check role installs as ``provision-node-check``."""

import sys

from provision.node_check.on_node import main

sys.exit(main())
