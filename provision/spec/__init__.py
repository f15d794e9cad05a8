"""The cluster spec: schema, loader with located errors, derived thresholds."""

from provision.spec.issues import Location, SpecError, SpecIssue
from provision.spec.loader import LoadedFabricSpec, LoadedSpec, load_fabric_spec, load_spec
from provision.spec.model import ClusterSpec

__all__ = ["ClusterSpec", "LoadedFabricSpec", "LoadedSpec", "Location", "SpecError", "SpecIssue", "load_fabric_spec",
           "load_spec"]
