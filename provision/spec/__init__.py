"""The cluster spec: schema, loader with located errors, derived thresholds."""

from provision.spec.issues import Location, SpecError, SpecIssue
from provision.spec.loader import LoadedSpec, load_spec
from provision.spec.model import ClusterSpec

__all__ = ["ClusterSpec", "LoadedSpec", "Location", "SpecError", "SpecIssue", "load_spec"]
