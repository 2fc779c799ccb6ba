"""The Helm chart's values.schema.json: the chart's own knobs, and `policy` generated from ClusterPolicy.

Helm checks values against this schema on install, upgrade, lint and template, so a bad type or an unknown
key (a misspelt policy field included) is refused before anything reaches the cluster. `policy.broker` is
not accepted: the chart fills it in from the release. tests/unit/test_chart.py fails when the file drifts.
"""

from __future__ import annotations

import json
from typing import Any

from gymsandbox.policy.cluster import ClusterPolicy

Schema = dict[str, Any]

_NAME = {"type": "string", "minLength": 1}
_ID = {"type": "integer", "minimum": 1}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_RESOURCES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "requests": {"type": "object", "additionalProperties": {"type": ["string", "integer"]}},
        "limits": {"type": "object", "additionalProperties": {"type": ["string", "integer"]}},
    },
}


def _closed(properties: Schema, required: list[str] | None = None) -> Schema:
    schema: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _pod_placement() -> Schema:
    return {
        "resources": _RESOURCES,
        "podAnnotations": _STRING_MAP,
        # The chart's own labels select its pods: a value under app.kubernetes.io/ would clash with them.
        "podLabels": {**_STRING_MAP, "propertyNames": {"not": {"pattern": "^app\\.kubernetes\\.io/"}}},
        "extraArgs": {"type": "array", "items": {"type": "string", "pattern": "^--"}},
        "priorityClassName": {"type": "string", "maxLength": 253},
        "nodeSelector": _STRING_MAP,
        "tolerations": {"type": "array", "items": {"type": "object"}},
        "affinity": {"type": "object"},
        "topologySpreadConstraints": {"type": "array", "items": {"type": "object"}},
    }


def _close_pattern_keys(schema: Any) -> None:
    """A map whose keys must match a pattern (e.g. DNS-label profile names) admits no other key: pydantic
    leaves `additionalProperties` out beside `patternProperties`, which would let any other key through."""
    if isinstance(schema, dict):
        if "patternProperties" in schema:
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _close_pattern_keys(value)
    elif isinstance(schema, list):
        for value in schema:
            _close_pattern_keys(value)


def policy_schema() -> tuple[Schema, Schema]:
    """ClusterPolicy's JSON Schema without `broker` (the chart's to set): (schema, its $defs)."""
    schema = ClusterPolicy.model_json_schema(by_alias=True)
    _close_pattern_keys(schema)
    definitions: Schema = schema.pop("$defs")
    definitions.pop("Broker")
    schema["properties"].pop("broker")
    schema["description"] = (
        "The cluster policy (examples/policy.yaml explains every field). `broker` is set by the chart."
    )
    return schema, definitions


def values_schema() -> Schema:
    policy, definitions = policy_schema()
    image = _closed(
        {
            "repository": _NAME,
            "tag": {"type": "string"},
            "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
            "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        },
        ["repository"],
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gymsandbox-operator chart values",
        **_closed(
            {
                "global": {"type": "object"},
                "image": image,
                "imagePullSecrets": {"type": "array", "items": _closed({"name": _NAME}, ["name"])},
                "securityContext": _closed({"runAsUser": _ID, "runAsGroup": _ID}),
                "operator": _closed(
                    {
                        "replicas": {"type": "integer", "minimum": 1},
                        "verbose": {"type": "boolean"},
                        "logFormat": {"enum": ["full", "plain", "json"]},
                        "healthPort": _PORT,
                        "unwatchedNamespacePolicy": _closed({"enabled": {"type": "boolean"}}),
                        **_pod_placement(),
                    }
                ),
                "broker": _closed(
                    {
                        "replicas": {"type": "integer", "minimum": 1},
                        "port": _PORT,
                        "maxCallsPerHost": {"type": "integer", "minimum": 1},
                        "execPolicy": _closed({"enabled": {"type": "boolean"}}),
                        "tls": _closed(
                            {
                                "enabled": {"type": "boolean"},
                                "secretName": {"type": "string", "maxLength": 253},
                                "caBundle": {"type": "string"},
                            }
                        ),
                        **_pod_placement(),
                    }
                ),
                "metrics": _closed(
                    {
                        "enabled": {"type": "boolean"},
                        "port": _PORT,
                        "scrapers": {"type": "array", "items": {"type": "object"}, "minItems": 1},
                        "serviceMonitor": _closed(
                            {
                                "enabled": {"type": "boolean"},
                                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "labels": _STRING_MAP,
                            }
                        ),
                    }
                ),
                "networkPolicy": _closed(
                    {
                        "enabled": {"type": "boolean"},
                        "apiServer": _closed(
                            {
                                "cidrs": {"type": "array", "items": _NAME},
                                "ports": {"type": "array", "items": _PORT, "minItems": 1},
                            }
                        ),
                        "extraBrokerIngress": {"type": "array", "items": {"type": "object"}},
                    }
                ),
                "policy": policy,
            }
        ),
        "$defs": definitions,
    }


def render_values_schema() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=False) + "\n"
