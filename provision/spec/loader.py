"""Load a cluster spec file: YAML → typed model → cross-field checks, all errors at once."""

from __future__ import annotations

import hashlib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from provision.spec.issues import Location, SpecError, SpecIssue, did_you_mean, dotted
from provision.spec.model import FABRIC_ONLY_SECTIONS, ClusterSpec, FabricSpec
from provision.spec.semantics import Problem, ResolvedNode, resolve
from provision.spec.source import MAX_SPEC_BYTES, Path_, SourceMap, read_document
from topology.design import FabricDimensions

#: Keys that would hold a secret in the clear. Credentials come from env vars or
#: files only, so a plain string here is refused before anything else looks at it.
SECRET_KEYS = {"password", "passwd", "secret", "token", "api_key", "private_key", "become_password"}


@dataclass(frozen=True)
class LoadedSpec:
    spec: ClusterSpec
    path: Path
    sha256: str
    text: str
    nodes: list[ResolvedNode]
    fabric: FabricDimensions | None
    source: SourceMap

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]


@dataclass(frozen=True)
class LoadedFabricSpec:
    """What the topology commands need of a spec: the cluster's name and its fabric section, from a spec of the
    fabric alone or from a whole cluster spec (``cluster_spec``, when there is one)."""

    spec: FabricSpec
    path: Path
    sha256: str
    cluster_spec: LoadedSpec | None

    @property
    def cabling_file(self) -> Path | None:
        found = self.spec.fabric.cabling_file
        return (self.path.parent / found).expanduser() if found is not None else None


def load_spec(path: str | Path) -> LoadedSpec:
    """Return the validated spec or raise :class:`SpecError` listing every problem."""
    raw, data, source = _read_mapping(Path(path))
    if _fabric_only(data):
        raise SpecError([SpecIssue(source.locate(()), "", "this spec describes only a fabric (cluster, fabric): "
                                   "this command needs a cluster spec with nodes, hardware and software",
                                   "the topology commands (audit, flaps, draw) take a fabric-only spec")])
    return _load_cluster_spec(Path(path), raw, data, source)


def load_fabric_spec(path: str | Path) -> LoadedFabricSpec:
    """A spec holding only ``cluster`` and ``fabric`` (the fabric then is its cabling file), or a cluster spec."""
    path = Path(path)
    raw, data, source = _read_mapping(path)
    if not _fabric_only(data):
        loaded = _load_cluster_spec(path, raw, data, source)
        return LoadedFabricSpec(FabricSpec(cluster=loaded.spec.cluster, fabric=loaded.spec.fabric), path,
                                loaded.sha256, loaded)
    issues = _inline_secrets(data, (), source)
    try:
        spec = FabricSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(issues + _pydantic_issues(error, source, FabricSpec)) from None
    if spec.fabric.cabling_file is None:
        issues.append(SpecIssue(source.locate(("fabric",)), "fabric", "a spec without nodes needs "
                                "fabric.cabling_file: a fat tree designed from parameters names its host ports "
                                "after the nodes", "give cabling_file: <plan.csv or .ndt>, or the whole cluster spec"))
    elif not (path.parent / spec.fabric.cabling_file).expanduser().is_file():
        issues.append(SpecIssue(source.locate(("fabric", "cabling_file")), "fabric.cabling_file",
                                f"file {str(spec.fabric.cabling_file)!r} not found (relative to the spec's folder)"))
    if issues:
        raise SpecError(issues)
    return LoadedFabricSpec(spec, path, hashlib.sha256(raw).hexdigest(), None)


def _fabric_only(data: dict[str, Any]) -> bool:
    """``cluster`` and ``fabric`` and nothing else (a spec of ``cluster`` alone is an incomplete cluster spec)."""
    return "fabric" in data and set(data) <= FABRIC_ONLY_SECTIONS


def _read_mapping(path: Path) -> tuple[bytes, dict[str, Any], SourceMap]:
    shown = str(path)
    try:
        if path.is_dir():
            raise SpecError([SpecIssue(Location(shown, 1, 1), "", "is a directory, not a spec file")])
        size = path.stat().st_size
        with path.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)  # never read a 50 MB mistake into memory
    except OSError as error:
        raise SpecError([SpecIssue(Location(shown, 1, 1), "", f"cannot read: {error.strerror or error}")]) from None
    data, source = read_document(raw, shown, size=size)
    if data is None:
        raise SpecError([SpecIssue(source.locate(()), "", "the document is empty")])
    if not isinstance(data, dict):
        raise SpecError([SpecIssue(source.locate(()), "", f"a spec is a mapping of sections, not a "
                                                          f"{_type_name(data)}")])
    return raw, data, source


def _load_cluster_spec(path: Path, raw: bytes, data: dict[str, Any], source: SourceMap) -> LoadedSpec:
    issues = _inline_secrets(data, (), source)
    secret_paths = {issue.path for issue in issues}
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as error:
        issues += [issue for issue in _pydantic_issues(error, source) if issue.path not in secret_paths]
        failed = {detail["loc"][0] for detail in error.errors() if detail["loc"]}
        partial = _partial_spec(data, failed)
        if partial is not None:  # still report what the sections that did validate say
            issues += _located(resolve(partial, path.parent).problems, source)
        raise SpecError(issues) from None
    if issues:
        raise SpecError(issues)
    resolution = resolve(spec, path.parent)
    issues += _located(resolution.problems, source)
    if issues:
        raise SpecError(issues)
    text = raw.decode("utf-8")
    return LoadedSpec(spec, path, hashlib.sha256(raw).hexdigest(), text, resolution.nodes, resolution.fabric, source)


def _partial_spec(data: dict[str, Any], failed: set[Any]) -> ClusterSpec | None:
    """The sections that did validate, so cross-field checks can still run on them."""
    sections = {}
    for name, field in ClusterSpec.model_fields.items():
        if name in failed or name not in data or field.annotation is None:
            continue
        try:
            sections[name] = TypeAdapter(field.annotation).validate_python(data[name])
        except ValidationError:
            return None
    return ClusterSpec.model_construct(**{name: sections.get(name) for name in ClusterSpec.model_fields})


def _located(problems: list[Problem], source: SourceMap) -> list[SpecIssue]:
    return [
        SpecIssue(
            source.column_inside(problem.path, problem.column) if problem.column else source.locate(problem.path),
            dotted(problem.path),
            problem.message,
            problem.hint,
        )
        for problem in problems
    ]


def _inline_secrets(data: Any, path: Path_, source: SourceMap) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    if isinstance(data, dict):
        for key, value in data.items():
            child = (*path, key)
            if key.lower() in SECRET_KEYS and not isinstance(value, dict | type(None)):
                issues.append(SpecIssue(source.locate(child, prefer_key=True), dotted(child),
                                        "inline credentials are not allowed in the spec",
                                        f"write {key}: {{env: VARIABLE}} or {key}: {{file: /path/to/secret}}"))
            else:
                issues += _inline_secrets(value, child, source)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            issues += _inline_secrets(item, (*path, index), source)
    return issues


def _pydantic_issues(error: ValidationError, source: SourceMap,
                     model: type[BaseModel] = ClusterSpec) -> list[SpecIssue]:
    issues = []
    for detail in error.errors(include_input=False, include_url=False):
        kind = detail["type"]
        loc = _data_path(detail["loc"], keep_last=kind == "extra_forbidden")
        message = detail["msg"].removeprefix("Value error, ")
        hint = ""
        if kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            message = f"unknown key {loc[-1]!r}"
            hint = did_you_mean(str(loc[-1]), allowed)
            location = source.locate(loc, prefer_key=True)
        elif kind == "missing":
            message = "required key is missing"
            location = source.locate(loc[:-1])
        else:
            location = source.locate(loc)
        issues.append(SpecIssue(location, dotted(loc), message, hint))
    return issues


def _data_path(loc: tuple[int | str, ...], *, keep_last: bool) -> Path_:
    """The path into the user's data: pydantic's own labels (``function-after[...]``, union members) dropped.

    The last part of an ``extra_forbidden`` location is the user's key itself, kept whatever it holds: a key
    typed with a bracket (``clu[ster``) is still the key to name and locate.
    """
    head = loc[:-1] if keep_last and loc else loc
    kept = tuple(part for part in head if isinstance(part, int) or "[" not in str(part))
    return (*kept, loc[-1]) if keep_last and loc else kept


def _allowed_keys(model: type[BaseModel], path: Path_) -> list[str]:
    """Field names of the model that sits at ``path``, for "did you mean"."""
    current: Any = model
    for part in path:
        current = _model_at(current, part)
        if current is None:
            return []
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def _model_at(annotation: Any, part: str | int) -> Any:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        return _unwrap(field.annotation) if field else None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            annotation = options[0] if len(options) == 1 else annotation
            if len(options) != 1:
                return annotation
        else:
            return annotation


def _type_name(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(value), "value")
