"""Node lifecycle, the SQLite state store, the cluster lock and where state lives."""

from provision.state.lifecycle import NodeState, TransitionError
from provision.state.lock import ClusterLock, LockHeld
from provision.state.store import NodeRecord, StateStore, StoreError

__all__ = ["ClusterLock", "LockHeld", "NodeRecord", "NodeState", "StateStore", "StoreError", "TransitionError"]
