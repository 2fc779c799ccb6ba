"""Models -> CustomResourceDefinitions, so the API server refuses what the models refuse.

pydantic describes spec and status as JSON Schema; the API server wants a *structural* OpenAPI v3 schema:
a type on every node, no $ref, no unions, no `additionalProperties: false` next to `properties`, exclusive
bounds as booleans, no null defaults. `structural` translates one into the other and raises on anything
without a translation, so a model the API server could not accept fails here, not at `kubectl apply`.

The files in crds/ are rendered from gymsandbox.api.resources.RESOURCES; `gymsandbox crds --check` and
tests/unit/test_crds_drift.py fail when they drift from the models.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from gymsandbox.api.names import API_VERSION, CATEGORY, GROUP, VERSION
from gymsandbox.api.resources import RESOURCES, CustomResource, PrinterColumn

Schema = dict[str, Any]

GENERATED_HEADER = (
    "# Generated from the models in operator/gymsandbox/api by `gymsandbox crds`; do not edit by hand.\n"
    "# Regenerate with `gymsandbox crds --output-dir crds` (make crds).\n"
)

# Keywords that mean the same in JSON Schema and in the Kubernetes OpenAPI subset.
_KEPT = frozenset(
    {
        "type",
        "format",
        "description",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
    }
)
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_UNIONS = ("anyOf", "oneOf", "allOf")
_NULL = {"type": "null"}
_NO_WRAP = 1 << 16  # long patterns and CEL rules stay on one line


@dataclass(frozen=True)
class _Scope:
    """Where the walk is: $defs to inline from, the path for messages, the definitions being inlined."""

    defs: Mapping[str, Any]
    path: str = ""
    inlining: tuple[str, ...] = ()

    def at(self, step: str) -> _Scope:
        return replace(self, path=self.path + step)

    def error(self, problem: str) -> ValueError:
        return ValueError(f"{self.path or '<root>'}: {problem}")


def model_schema(model: type[BaseModel], mode: JsonSchemaMode) -> Schema:
    """The structural schema of `model` on the wire (camelCase aliases)."""
    return structural(model.model_json_schema(by_alias=True, mode=mode))


def structural(schema: Mapping[str, Any]) -> Schema:
    """Translate a pydantic JSON Schema (root with $defs) into a structural Kubernetes schema.

    $refs are inlined, `X | None` becomes X (omitted rather than null), Literal becomes enum, arrays without
    a list type become atomic. Raises ValueError, naming the path, for anything with no structural form.
    """
    return _translate(schema, _Scope(defs=schema.get("$defs", {})))


def _translate(node: Mapping[str, Any], scope: _Scope) -> Schema:
    node, scope = _flatten(node, scope)
    out: Schema = {}
    for key, value in node.items():
        out.update(_keyword(key, value, scope))
    return _finish(out, scope)


def _flatten(node: Mapping[str, Any], scope: _Scope) -> tuple[Mapping[str, Any], _Scope]:
    """Inline $refs and collapse optional unions until one plain node is left.

    The node's own keys (description, default, schema extensions) win over those of what it points to.
    """
    while True:
        if "$ref" in node:
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            if name in scope.inlining:
                raise scope.error(f"{name} contains itself; a structural schema cannot be recursive")
            scope = replace(scope, inlining=(*scope.inlining, name))
            node = {**scope.defs[name], **_without(node, "$ref")}
        elif union := next((key for key in _UNIONS if key in node), None):
            branches = [branch for branch in node[union] if branch != _NULL]
            if len(branches) != 1:
                raise scope.error(f"{union} of {len(branches)} schemas has no structural form")
            node = {**branches[0], **_without(node, union)}
        else:
            return node, scope


def _without(node: Mapping[str, Any], key: str) -> Schema:
    return {k: v for k, v in node.items() if k != key}


def _keyword(key: str, value: Any, scope: _Scope) -> Schema:
    if key in _KEPT or key.startswith("x-kubernetes-"):
        # A copy: a definition inlined twice must not share lists (YAML would render them as aliases).
        return {key: copy.deepcopy(value)}
    translate = _TRANSLATIONS.get(key)
    if translate is None:
        raise scope.error(f"JSON Schema keyword {key!r} has no structural equivalent")
    return translate(value, scope)


def _finish(node: Schema, scope: _Scope) -> Schema:
    if node.get("type") not in _TYPES:
        raise scope.error(f"type {node.get('type')!r}: a structural schema needs one of {sorted(_TYPES)}")
    if node["type"] == "array":
        node.setdefault("x-kubernetes-list-type", "atomic")
    return node


def _properties(properties: Mapping[str, Any], scope: _Scope) -> Schema:
    return {"properties": {name: _translate(sub, scope.at(f".{name}")) for name, sub in properties.items()}}


def _items(items: Mapping[str, Any], scope: _Scope) -> Schema:
    return {"items": _translate(items, scope.at("[]"))}


def _additional_properties(value: Any, scope: _Scope) -> Schema:
    if value is False:
        # Closed is the default: the API server prunes unknown fields, and refuses `false` next to properties.
        return {}
    if isinstance(value, Mapping):
        return {"additionalProperties": _translate(value, scope.at(".*"))}
    raise scope.error("an open object needs x-kubernetes-preserve-unknown-fields; give it a model instead")


def _default(value: Any, _scope: _Scope) -> Schema:
    # An optional field is omitted, not null: a null default would not validate against its own schema.
    return {} if value is None else {"default": _without_nulls(value)}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _dropped(_value: Any, _scope: _Scope) -> Schema:
    return {}


_TRANSLATIONS: Mapping[str, Callable[[Any, _Scope], Schema]] = {
    "properties": _properties,
    "items": _items,
    "additionalProperties": _additional_properties,
    "default": _default,
    "const": lambda value, _scope: {"enum": [value]},
    "exclusiveMinimum": lambda bound, _scope: {"minimum": bound, "exclusiveMinimum": True},
    "exclusiveMaximum": lambda bound, _scope: {"maximum": bound, "exclusiveMaximum": True},
    "title": _dropped,
    "$defs": _dropped,  # inlined where referenced
}


def openapi_schema(resource: CustomResource) -> Schema:
    """The CRD's openAPIV3Schema: spec as users write it (required), status as the operator writes it."""
    return {
        "type": "object",
        "description": resource.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": f"Versioned schema of this object: {API_VERSION}.",
            },
            "kind": {"type": "string", "description": f"Kind of this object: {resource.kind}."},
            "metadata": {"type": "object"},
            "spec": model_schema(resource.spec, "validation"),
            "status": model_schema(resource.status, "serialization"),
        },
    }


def _column(column: PrinterColumn) -> Schema:
    return {"name": column.name, "type": column.type, "jsonPath": column.json_path}


def custom_resource_definition(resource: CustomResource) -> Schema:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of `resource`."""
    version: Schema = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [_column(column) for column in resource.columns],
        "schema": {"openAPIV3Schema": openapi_schema(resource)},
    }
    if resource.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in resource.selectable_fields]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.crd_name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.singular,
                "shortNames": list(resource.short_names),
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def crd_filename(resource: CustomResource) -> str:
    return f"{resource.crd_name}.yaml"


def render_crd(resource: CustomResource) -> str:
    """The CRD as YAML with the generated-file header; the same models always give the same text."""
    document = yaml.safe_dump(custom_resource_definition(resource), sort_keys=True, width=_NO_WRAP)
    return GENERATED_HEADER + document


def render_crd_files(resources: Iterable[CustomResource] = RESOURCES) -> dict[str, str]:
    """File name -> content for every resource."""
    return {crd_filename(resource): render_crd(resource) for resource in resources}


def drift(expected: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """One line per file that is missing, differs from the models, or is generated by no model."""
    problems = (
        _file_drift(name, expected.get(name), actual.get(name)) for name in sorted({*expected, *actual})
    )
    return [problem for problem in problems if problem]


def _file_drift(name: str, expected: str | None, actual: str | None) -> str | None:
    if actual is None:
        return f"{name}: missing"
    if expected is None:
        return f"{name}: generated by no model; delete it"
    if actual == expected:
        return None
    added, removed = _changed_lines(actual, expected)
    return f"{name}: differs from the models (regenerating adds {added} and removes {removed} lines)"


def _changed_lines(old: str, new: str) -> tuple[int, int]:
    body = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))[2:]
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    return added, removed


def read_crd_files(directory: Path) -> dict[str, str]:
    """The files in `directory` named like generated CRDs (none if the directory does not exist)."""
    if not directory.is_dir():
        return {}
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(directory.glob(f"*.{GROUP}.yaml"))}


def write_crd_files(directory: Path, files: Mapping[str, str]) -> list[Path]:
    """Write `files` into `directory` (created if needed); returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in files]
    for path, text in zip(paths, files.values(), strict=True):
        path.write_text(text, encoding="utf-8")
    return paths
