"""The CRD generated from the models is structural, complete, and says what the models say."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from gymsandbox.api.common import QUANTITY_PATTERN, SUB_PATH_PATTERN, Lifetime, Model, MountPath
from gymsandbox.api.episode import EpisodeEnvVar
from gymsandbox.api.gymhost import (
    EGRESS_ENTRY_PATTERN,
    IMAGE_PATTERN,
    MODEL_ENDPOINT_PATTERN,
    OPERATOR_MOUNT_PATHS,
    EnvVar,
)
from gymsandbox.api.resources import (
    AGE_COLUMN,
    EPISODE_SANDBOX,
    GYMHOST,
    READY_COLUMN,
    CustomResource,
    PrinterColumn,
)
from gymsandbox.crdgen import (
    GENERATED_HEADER,
    crd_filename,
    custom_resource_definition,
    drift,
    model_schema,
    render_crd,
    render_crd_files,
)

CRD = custom_resource_definition(GYMHOST)
VERSION = CRD["spec"]["versions"][0]
ROOT = VERSION["schema"]["openAPIV3Schema"]
SPEC = ROOT["properties"]["spec"]
STATUS = ROOT["properties"]["status"]
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path: properties as `.name`, list items as `[]`, map values as `.*`."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")


def node_at(path: str) -> dict[str, Any]:
    return dict(nodes(ROOT))[path]


def default_violations(value: Any, schema: dict[str, Any]) -> list[str]:
    """What about `value` its schema refuses (the checks the API server applies to defaults)."""
    kind = schema["type"]
    python_types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
    }
    if kind == "object":
        return [
            problem
            for name, sub in value.items()
            for problem in default_violations(sub, schema["properties"][name])
        ]
    if kind == "array":
        return [problem for item in value for problem in default_violations(item, schema["items"])]
    problems = [] if isinstance(value, python_types[kind]) else [f"{value!r} is not {kind}"]
    if "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{value!r} does not match {schema['pattern']}")
    if len(str(value)) > schema.get("maxLength", float("inf")):
        problems.append(f"{value!r} is longer than {schema['maxLength']}")
    if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        problems.append(f"{value!r} is out of bounds")
    if value not in schema.get("enum", [value]):
        problems.append(f"{value!r} is not one of {schema['enum']}")
    return problems


# --- structural ---------------------------------------------------------------------------------------


def test_every_node_has_one_structural_type() -> None:
    untyped = [path for path, node in nodes(ROOT) if node.get("type") not in TYPES]

    assert untyped == []


@pytest.mark.parametrize(
    "keyword", ["$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "nullable", "title", "uniqueItems"]
)
def test_no_node_keeps_a_keyword_structural_schemas_forbid(keyword: str) -> None:
    assert [path for path, node in nodes(ROOT) if keyword in node] == []


def test_objects_with_properties_have_no_additional_properties() -> None:
    both = [path for path, node in nodes(ROOT) if "properties" in node and "additionalProperties" in node]

    assert both == []


def test_spec_and_status_roots_do_not_preserve_unknown_fields() -> None:
    assert "x-kubernetes-preserve-unknown-fields" not in SPEC
    assert "x-kubernetes-preserve-unknown-fields" not in STATUS


def test_no_node_preserves_unknown_fields() -> None:
    assert [path for path, node in nodes(ROOT) if "x-kubernetes-preserve-unknown-fields" in node] == []


def test_spec_is_required_and_status_is_not() -> None:
    assert ROOT["required"] == ["spec"]


def test_root_declares_api_version_kind_and_metadata() -> None:
    assert {name: ROOT["properties"][name]["type"] for name in ("apiVersion", "kind", "metadata")} == {
        "apiVersion": "string",
        "kind": "string",
        "metadata": "object",
    }


def test_optional_fields_are_omitted_rather_than_required_or_null() -> None:
    assert "command" not in SPEC["required"]
    assert SPEC["properties"]["command"]["type"] == "array"
    assert "default" not in SPEC["properties"]["command"]
    assert "dataset" not in SPEC["properties"]["storage"]["required"]
    assert SPEC["properties"]["storage"]["properties"]["dataset"]["type"] == "object"


def test_status_has_no_kopf_field() -> None:
    assert "kopf" not in STATUS["properties"]


# --- names, version, columns ------------------------------------------------------------------------------


def test_names_follow_the_design() -> None:
    assert CRD["metadata"]["name"] == "gymhosts.gymsandbox.dev"
    assert CRD["spec"]["group"] == "gymsandbox.dev"
    assert CRD["spec"]["scope"] == "Namespaced"
    assert CRD["spec"]["names"] == {
        "kind": "GymHost",
        "listKind": "GymHostList",
        "plural": "gymhosts",
        "singular": "gymhost",
        "shortNames": ["gh"],
        "categories": ["gymsandbox"],
    }


def test_the_only_version_is_v1alpha1_served_and_stored_with_a_status_subresource() -> None:
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert (VERSION["served"], VERSION["storage"]) == (True, True)
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns_show_ready_reason_runtime_endpoint_and_age() -> None:
    assert VERSION["additionalPrinterColumns"] == [
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
        {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtime"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def test_another_kind_is_one_more_entry() -> None:
    class HostRef(Model):
        name: str = Field(max_length=253)

    class SandboxSpec(Model):
        host_ref: HostRef
        runtime: str = Field(max_length=63)

    class SandboxStatus(Model):
        endpoint: str | None = None

    sandbox = CustomResource(
        kind="EpisodeSandbox",
        plural="episodesandboxes",
        short_names=("esb",),
        description="One episode.",
        spec=SandboxSpec,
        status=SandboxStatus,
        columns=(READY_COLUMN, PrinterColumn("Host", ".spec.hostRef.name"), AGE_COLUMN),
    )

    crd = custom_resource_definition(sandbox)

    assert crd["metadata"]["name"] == "episodesandboxes.gymsandbox.dev"
    assert crd["spec"]["names"]["singular"] == "episodesandbox"
    assert crd["spec"]["versions"][0]["additionalPrinterColumns"][1]["jsonPath"] == ".spec.hostRef.name"
    assert crd_filename(sandbox) == "episodesandboxes.gymsandbox.dev.yaml"


# --- lists ------------------------------------------------------------------------------------------------


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = STATUS["properties"]["conditions"]

    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_env_is_a_map_keyed_by_name_so_the_api_server_refuses_duplicates() -> None:
    env = SPEC["properties"]["env"]

    assert (env["x-kubernetes-list-type"], env["x-kubernetes-list-map-keys"]) == ("map", ["name"])


def test_map_list_keys_are_required_scalar_fields_of_the_items() -> None:
    for path, node in nodes(ROOT):
        for key in node.get("x-kubernetes-list-map-keys", []):
            assert key in node["items"]["required"], path
            assert node["items"]["properties"][key]["type"] in {"string", "integer", "boolean"}, path


def test_lists_of_scalars_are_atomic() -> None:
    scalar_lists = [
        node
        for _, node in nodes(ROOT)
        if node["type"] == "array" and node["items"]["type"] in TYPES - {"object", "array"}
    ]

    assert scalar_lists
    assert {node["x-kubernetes-list-type"] for node in scalar_lists} == {"atomic"}


def test_every_list_states_its_list_type() -> None:
    assert [
        path for path, node in nodes(ROOT) if node["type"] == "array" and "x-kubernetes-list-type" not in node
    ] == []


# --- validation carried over ----------------------------------------------------------------------------


def rules(node: dict[str, Any]) -> list[str]:
    return [rule["rule"] for rule in node.get("x-kubernetes-validations", [])]


def test_storage_rule_covers_every_mount_path_and_no_spec_names_the_workspace() -> None:
    storage = SPEC["properties"]["storage"]
    (rule,) = rules(storage)

    for mount in ("environment", "workspace", "workspace.episodesMountPath", "dataset"):
        assert f"self.{mount}" in rule
    assert "subPath" not in storage["properties"]["workspace"]["properties"]


def test_env_items_refuse_credential_names_and_the_reserved_prefix() -> None:
    env_rules = rules(SPEC["properties"]["env"]["items"])

    assert any("matches(" in rule and "TOKEN" in rule for rule in env_rules)
    assert "!self.name.startsWith('GYMSANDBOX_')" in env_rules


EPISODE_SPEC = custom_resource_definition(EPISODE_SANDBOX)["spec"]["versions"][0]["schema"][
    "openAPIV3Schema"
]["properties"]["spec"]


def test_episode_env_items_refuse_credential_names_with_the_hosts_own_rule() -> None:
    (host_rule, _) = SPEC["properties"]["env"]["items"]["x-kubernetes-validations"]
    (episode_rule,) = EPISODE_SPEC["properties"]["env"]["items"]["x-kubernetes-validations"]

    assert episode_rule["rule"] == host_rule["rule"]
    assert "envFrom secret references" in host_rule["message"]
    assert "the GymHost's envFrom secret references" in episode_rule["message"]


def credential_rule_refuses(name: str) -> bool:
    """Whether the CRD's credential rule, `!self.name.matches('...')`, refuses `name` (CEL's matches
    searches, as re.search does)."""
    (rule,) = EPISODE_SPEC["properties"]["env"]["items"]["x-kubernetes-validations"]
    matched = re.fullmatch(r"!self\.name\.matches\('(.*)'\)", rule["rule"])
    assert matched is not None, rule
    return re.search(matched.group(1), name) is not None


def refuses(adapter: TypeAdapter[Any], value: object) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return True
    return False


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "openai_api_key", "DB_PASSWD", "GitHubAuth", "SEED", "TASK_ID", "PATH", "KEYBOARD"]
)
def test_the_credential_rule_and_both_env_models_agree(name: str) -> None:
    refused = credential_rule_refuses(name)

    assert refuses(TypeAdapter(EnvVar), {"name": name}) == refused
    assert refuses(TypeAdapter(EpisodeEnvVar), {"name": name}) == refused


def test_storage_rule_keeps_every_spec_mount_off_the_operators_own() -> None:
    (rule,) = rules(SPEC["properties"]["storage"])
    operators_own = ", ".join(f"'{path}'" for path in OPERATOR_MOUNT_PATHS)

    assert rule.startswith(f"([{operators_own}, self.environment.mountPath, ")


def mount_path_nodes() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{kind}{path}", node)
        for kind, spec in (("GymHost", SPEC), ("EpisodeSandbox", EPISODE_SPEC))
        for path, node in nodes(spec)
        if path.endswith(("mountPath", "MountPath"))
    ]


def test_every_mount_path_of_either_crd_is_checked_alike() -> None:
    found = mount_path_nodes()

    assert [path for path, _ in found] == [
        "GymHost.storage.environment.mountPath",
        "GymHost.storage.workspace.mountPath",
        "GymHost.storage.workspace.episodesMountPath",
        "GymHost.storage.dataset.mountPath",
        "EpisodeSandbox.workspace.mountPath",
    ]
    checks = {
        (
            node["pattern"],
            node["maxLength"],
            tuple(rules(node)),
            node["x-kubernetes-validations"][0]["message"],
        )
        for _, node in found
    }
    assert len(checks) == 1


def crd_refuses_mount_path(path: str) -> bool:
    """What the CRD says of a mount path: its pattern, then its CEL rule `self.matches(r'...')`."""
    ((_, node), *_) = mount_path_nodes()
    (rule,) = rules(node)
    matched = re.fullmatch(r"self\.matches\(r'(.*)'\)", rule)
    assert matched is not None, rule
    return not (re.search(node["pattern"], path) and re.search(matched.group(1), path))


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/workspace", False),
        ("/", False),
        ("/home/user/.cache", False),
        ("/opt/gym..v2/env", False),
        ("/x/../workspace/env", True),
        ("/workspace/./env", True),
        ("/env/..", True),
        ("/.", True),
        ("/...", True),
        ("//env", True),
        ("/srv//env", True),
        ("/env/", True),
        ("env", True),
        ("/env dir", True),
    ],
)
def test_the_crd_and_the_model_refuse_the_same_mount_paths(path: str, refused: bool) -> None:
    assert (crd_refuses_mount_path(path), refuses(TypeAdapter(MountPath), path)) == (refused, refused)


def test_episodes_rule_orders_default_and_max_ttl() -> None:
    assert rules(SPEC["properties"]["episodes"]) == ["self.defaultTTLSeconds <= self.maxTTLSeconds"]


def test_spec_rules_make_runtime_and_storage_immutable_with_a_reason() -> None:
    assert SPEC["x-kubernetes-validations"] == [
        {
            "rule": "self.runtime == oldSelf.runtime",
            "message": "runtime is immutable",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "self.storage == oldSelf.storage",
            "message": "storage is immutable",
            "reason": "FieldValueForbidden",
        },
    ]


def test_every_string_and_list_a_cel_rule_can_reach_is_bounded() -> None:
    unbounded = [
        f"{top}{path}"
        for top, ruled in nodes(ROOT)
        if "x-kubernetes-validations" in ruled
        for path, node in nodes(ruled)
        if (node["type"] == "string" and "maxLength" not in node and "enum" not in node)
        or (node["type"] == "array" and "maxItems" not in node)
    ]

    assert unbounded == []


@pytest.mark.parametrize(
    ("path", "keyword", "expected"),
    [
        (".spec.image", "pattern", IMAGE_PATTERN),
        (".spec.image", "maxLength", 512),
        (".spec.egress.allow[]", "pattern", EGRESS_ENTRY_PATTERN),
        (".spec.egress.allow", "maxItems", 64),
        (".spec.egress.modelEndpoints[]", "pattern", MODEL_ENDPOINT_PATTERN),
        (".spec.storage.environment.subPath", "pattern", SUB_PATH_PATTERN),
        (".spec.resources.memory", "pattern", QUANTITY_PATTERN),
        (".spec.port", "minimum", 1),
        (".spec.port", "maximum", 65535),
        (".spec.runtime", "maxLength", 63),
        (".spec.episodes.runtime", "minLength", 1),
        (".spec.env", "maxItems", 128),
        (".status.conditions[].type", "maxLength", 316),
    ],
)
def test_patterns_and_bounds_match_the_models(path: str, keyword: str, expected: object) -> None:
    assert node_at(path)[keyword] == expected


@pytest.mark.parametrize(
    ("path", "values"),
    [
        (".spec.lifetime.expiryPolicy", ["Delete", "Retain"]),
        (".status.conditions[].status", ["True", "False", "Unknown"]),
        (".status.failure.kind", ["Infrastructure", "Workload", "Policy"]),
    ],
)
def test_literals_and_enums_become_string_enums(path: str, values: list[str]) -> None:
    assert (node_at(path)["type"], node_at(path)["enum"]) == ("string", values)


@pytest.mark.parametrize("path", [".status.conditions[].lastTransitionTime", ".status.expiresAt"])
def test_datetimes_are_date_time_strings(path: str) -> None:
    assert (node_at(path)["type"], node_at(path)["format"]) == ("string", "date-time")


def test_descriptions_are_kept() -> None:
    assert node_at(".spec.port")["description"] == "HTTP port the host serves on."


def test_defaults_are_kept_where_the_models_have_them() -> None:
    assert node_at(".spec.port")["default"] == 8080
    assert node_at(".spec.resources.memory")["default"] == "1Gi"


def test_every_default_validates_against_its_own_schema() -> None:
    defaults = [(path, node) for path, node in nodes(ROOT) if "default" in node]

    assert defaults
    assert [(path, default_violations(node["default"], node)) for path, node in defaults] == [
        (path, []) for path, _ in defaults
    ]


# --- translation of single constructs -------------------------------------------------------------------


def test_single_value_literal_becomes_an_enum() -> None:
    class Fixed(BaseModel):
        mode: Literal["only"]

    assert model_schema(Fixed, "validation")["properties"]["mode"] == {"type": "string", "enum": ["only"]}


def test_exclusive_bounds_become_openapi_v3_boolean_flags() -> None:
    class Open(BaseModel):
        ratio: float = Field(gt=0, lt=1)

    ratio = model_schema(Open, "validation")["properties"]["ratio"]

    assert ratio == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
    }


def test_string_maps_keep_their_value_schema() -> None:
    class Labels(BaseModel):
        labels: dict[str, str] = Field(default_factory=dict)

    labels = model_schema(Labels, "validation")["properties"]["labels"]

    assert labels == {"type": "object", "additionalProperties": {"type": "string"}}


def test_datetime_fields_become_date_time_strings() -> None:
    class Stamped(BaseModel):
        at: datetime

    assert model_schema(Stamped, "serialization")["properties"]["at"] == {
        "type": "string",
        "format": "date-time",
    }


def test_nested_model_defaults_drop_null_fields() -> None:
    class WithLifetime(Model):
        lifetime: Lifetime = Field(Lifetime())

    assert model_schema(WithLifetime, "validation")["properties"]["lifetime"]["default"] == {
        "expiryPolicy": "Delete"
    }


def test_a_union_of_two_types_is_refused_with_its_path() -> None:
    class Either(BaseModel):
        value: int | str

    with pytest.raises(ValueError, match=r"^\.value: anyOf of 2 schemas"):
        model_schema(Either, "validation")


def test_a_set_is_refused_because_unique_items_is_forbidden() -> None:
    class Tags(BaseModel):
        tags: set[str]

    with pytest.raises(ValueError, match="uniqueItems"):
        model_schema(Tags, "validation")


def test_a_recursive_model_is_refused() -> None:
    class Tree(BaseModel):
        children: list[Tree] = Field(default_factory=list)

    with pytest.raises(ValueError, match="Tree contains itself"):
        model_schema(Tree, "validation")


def test_an_open_object_is_refused() -> None:
    class Anything(BaseModel):
        data: dict[str, Any]

    with pytest.raises(ValueError, match=r"^\.data: an open object"):
        model_schema(Anything, "validation")


# --- rendering ------------------------------------------------------------------------------------------


def test_rendered_file_starts_with_the_generated_header() -> None:
    assert render_crd(GYMHOST).startswith(GENERATED_HEADER)
    assert "gymsandbox crds" in GENERATED_HEADER


def test_rendering_is_deterministic() -> None:
    assert render_crd(GYMHOST) == render_crd(GYMHOST)


def test_rendered_yaml_parses_back_to_the_definition() -> None:
    assert yaml.safe_load(render_crd(GYMHOST)) == CRD


def test_rendered_yaml_uses_no_anchors_or_aliases() -> None:
    assert not re.search(r"[&*]id\d+", render_crd(GYMHOST))


def test_one_file_per_resource_named_plural_dot_group() -> None:
    assert sorted(render_crd_files()) == [
        "episodesandboxes.gymsandbox.dev.yaml",
        "gymhosts.gymsandbox.dev.yaml",
    ]


# --- drift ----------------------------------------------------------------------------------------------


def test_drift_is_empty_when_files_match() -> None:
    assert drift({"a.yaml": "x\n"}, {"a.yaml": "x\n"}) == []


def test_drift_names_a_missing_file() -> None:
    assert drift({"a.yaml": "x\n"}, {}) == ["a.yaml: missing"]


def test_drift_names_a_file_no_model_generates() -> None:
    assert drift({}, {"old.yaml": "x\n"}) == ["old.yaml: generated by no model; delete it"]


def test_drift_counts_the_lines_regenerating_would_change() -> None:
    assert drift({"a.yaml": "a\nb\nc\n"}, {"a.yaml": "a\nB\n"}) == [
        "a.yaml: differs from the models (regenerating adds 2 and removes 1 lines)"
    ]
