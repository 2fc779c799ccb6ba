"""The GymHost spec model refuses bad input with a message naming the field, and accepts good input."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from gymsandbox.api.gymhost import GymHostSpec
from tests.unit.conftest import PLAIN_HOST, changed

DIGEST = "sha256:" + "a" * 64


def valid_spec() -> dict[str, Any]:
    return copy.deepcopy(PLAIN_HOST)


def spec_with(path: str, value: Any) -> dict[str, Any]:
    """valid_spec() with the value at a dotted path replaced (missing objects on the way are created)."""
    return changed(PLAIN_HOST, **{path: value})


def refusal(spec: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as refused:
        GymHostSpec.model_validate(spec)
    return [(error["loc"], error["msg"]) for error in refused.value.errors()]


PATTERN = "String should match pattern"
NORMAL_FORM = "must be a path in normal form"
DATASET = {"claimName": "datasets", "subPath": "swe-bench/verified"}

BAD_INPUTS = [
    # storage
    ("storage.environment.subPath", "../escape", ("storage", "environment", "subPath"), PATTERN),
    ("storage.environment.subPath", "envs/../../etc", ("storage", "environment", "subPath"), PATTERN),
    ("storage.environment.subPath", "./envs", ("storage", "environment", "subPath"), PATTERN),
    ("storage.environment.subPath", "/etc/passwd", ("storage", "environment", "subPath"), PATTERN),
    ("storage.environment.subPath", "envs//chess", ("storage", "environment", "subPath"), PATTERN),
    ("storage.environment.subPath", "", ("storage", "environment", "subPath"), PATTERN),
    # the operator's workspaces tree starts with a dot: no spec can name it
    ("storage.environment.subPath", ".gymsandbox/hosts", ("storage", "environment", "subPath"), PATTERN),
    ("storage.workspace.subPath", "runs/42", ("storage", "workspace", "subPath"), "Extra inputs"),
    ("storage.workspace.mountPath", "workspace", ("storage", "workspace", "mountPath"), PATTERN),
    ("storage.workspace.mountPath", "/env", ("storage",), "mountPaths must be distinct"),
    ("storage.workspace.mountPath", "/env/work", ("storage",), "none may contain another"),
    ("storage.workspace.mountPath", "/", ("storage",), "none may contain another"),
    ("storage.workspace.episodesMountPath", "/workspace/episodes", ("storage",), "none may contain another"),
    # mount paths in normal form only: they are compared as strings, and "/x/../workspace/env" lies inside
    # the workspace while it does not start with "/workspace/"
    (
        "storage.environment.mountPath",
        "/x/../workspace/env",
        ("storage", "environment", "mountPath"),
        NORMAL_FORM,
    ),
    (
        "storage.environment.mountPath",
        "/workspace/./env",
        ("storage", "environment", "mountPath"),
        NORMAL_FORM,
    ),
    ("storage.environment.mountPath", "/./env", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "/env/..", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "/env/.", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "/...", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "//env", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "/srv//env", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.environment.mountPath", "/env/", ("storage", "environment", "mountPath"), NORMAL_FORM),
    ("storage.workspace.mountPath", "/workspace/", ("storage", "workspace", "mountPath"), NORMAL_FORM),
    ("storage.workspace.mountPath", "/env/../work", ("storage", "workspace", "mountPath"), NORMAL_FORM),
    (
        "storage.workspace.episodesMountPath",
        "/workspace/",
        ("storage", "workspace", "episodesMountPath"),
        NORMAL_FORM,
    ),
    (
        "storage.dataset",
        {**DATASET, "mountPath": "/data/../workspace/data"},
        ("storage", "dataset", "mountPath"),
        NORMAL_FORM,
    ),
    # the operator's own mounts of the host pod: its writable /tmp and the lease token
    ("storage.workspace.mountPath", "/tmp", ("storage",), "the operator's own"),
    ("storage.environment.mountPath", "/tmp/env", ("storage",), "none may contain another"),
    ("storage.workspace.episodesMountPath", "/tmp/episodes", ("storage",), "/tmp included"),
    ("storage.dataset", {**DATASET, "mountPath": "/tmp/data"}, ("storage",), "/tmp included"),
    ("storage.environment.mountPath", "/var/run/secrets", ("storage",), "none may contain another"),
    ("storage.dataset", {**DATASET, "mountPath": "/var/run/secrets/gymsandbox"}, ("storage",), "distinct"),
    ("storage.claimName", "Gym_Data", ("storage", "claimName"), PATTERN),
    # egress allowlist
    ("egress.allow", ["example.com"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:https"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:443/v1"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["https://example.com:443"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:0"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:70000"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["example.com:08080"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["*.example.com:443"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["2001:db8::1:443"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["[2001:db8::1]"], ("egress", "allow", 0), PATTERN),
    ("egress.allow", ["ok.example.com:443", "bad host:80"], ("egress", "allow", 1), PATTERN),
    ("egress.allow", [f"h{i}.example.com:443" for i in range(65)], ("egress", "allow"), "at most 64"),
    ("egress.modelEndpoints", ["models.example.com:8000"], ("egress", "modelEndpoints", 0), PATTERN),
    ("egress.modelEndpoints", ["ftp://models.example.com"], ("egress", "modelEndpoints", 0), PATTERN),
    ("egress.modelEndpoints", ["https://"], ("egress", "modelEndpoints", 0), PATTERN),
    ("egress.modelEndpoints", ["https://models.example.com:0/v1"], ("egress", "modelEndpoints", 0), PATTERN),
    ("egress.modelEndpoints", ["https://*.example.com"], ("egress", "modelEndpoints", 0), PATTERN),
    # env
    ("env", [{"name": "API_KEY", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "GITHUB_TOKEN", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "DB_PASSWORD", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "openai_api_key", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "GIT_AUTH_HEADER", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "SSH_PRIVATE_KEY", "value": "x"}], ("env", 0), "looks like a credential"),
    ("env", [{"name": "GYMSANDBOX_BROKER_URL", "value": "x"}], ("env", 0), "reserved"),
    ("env", [{"name": "1ST", "value": "x"}], ("env", 0, "name"), PATTERN),
    ("env", [{"name": "A=B", "value": "x"}], ("env", 0, "name"), PATTERN),
    (
        "env",
        [{"name": "SEED", "value": "1"}, {"name": "SEED", "value": "2"}],
        (),
        "env names must be unique: SEED",
    ),
    ("envFrom", [{"secretRef": {"name": "Not_A_Name"}}], ("envFrom", 0, "secretRef", "name"), PATTERN),
    # resources and limits
    ("resources.memory", "1Gii", ("resources", "memory"), PATTERN),
    ("resources.cpu", "-1", ("resources", "cpu"), PATTERN),
    ("resources.cpu", "two", ("resources", "cpu"), PATTERN),
    ("resources.gpu", 17, ("resources", "gpu"), "less than or equal to 16"),
    ("episodes.defaultTTLSeconds", 7200, ("episodes",), "defaultTTLSeconds must not exceed maxTTLSeconds"),
    ("episodes.maxConcurrent", 0, ("episodes", "maxConcurrent"), "greater than or equal to 1"),
    ("episodes.images", ["Upper/Case:1"], ("episodes", "images", 0), PATTERN),
    ("lifetime.ttlSeconds", 0, ("lifetime", "ttlSeconds"), "greater than or equal to 1"),
    ("lifetime.expiryPolicy", "Keep", ("lifetime", "expiryPolicy"), "'Delete' or 'Retain'"),
    # the host itself
    ("port", 0, ("port",), "greater than or equal to 1"),
    ("port", 70000, ("port",), "less than or equal to 65535"),
    ("readinessPath", "health", ("readinessPath",), PATTERN),
    ("runtime", "Kata", ("runtime",), PATTERN),
    ("image", "", ("image",), "at least 1 character"),
    ("image", "Registry.Example.com/Gym:1", ("image",), PATTERN),
    ("image", "nginx:", ("image",), PATTERN),
    ("image", "nginx latest", ("image",), PATTERN),
    ("image", "nginx@sha256:abc", ("image",), PATTERN),
    ("image", "-nginx", ("image",), PATTERN),
    # unknown fields
    ("replicas", 2, ("replicas",), "Extra inputs are not permitted"),
    (
        "storage.environment.readOnly",
        False,
        ("storage", "environment", "readOnly"),
        "Extra inputs are not permitted",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "loc", "message"),
    BAD_INPUTS,
    ids=[f"{path}={value!r}"[:80] for path, value, _, _ in BAD_INPUTS],
)
def test_bad_input_is_refused_with_a_message_at_its_field(
    path: str, value: Any, loc: tuple[str | int, ...], message: str
) -> None:
    errors = refusal(spec_with(path, value))

    assert len(errors) == 1, errors
    assert errors[0][0] == loc
    assert message in errors[0][1]


def test_a_spec_without_storage_is_refused() -> None:
    spec = valid_spec()
    del spec["storage"]

    assert refusal(spec) == [(("storage",), "Field required")]


@pytest.mark.parametrize(
    "entry",
    [
        "10.0.0.1:443",
        "10.0.0.0/8:5432",
        "[2001:db8::1]:443",
        "[2001:db8::/32]:443",
        "api.example.com:443",
        "localhost:1",
        "a-b.example:65535",
    ],
)
def test_egress_allow_accepts_ip_cidr_ipv6_and_dns_entries(entry: str) -> None:
    spec = GymHostSpec.model_validate(spec_with("egress.allow", [entry]))

    assert spec.egress.allow == [entry]


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com",
        "https://api.example.com/v1",
        "http://vllm.models.svc.cluster.local:8000/v1",
        "https://10.0.0.5:8443",
        "http://[2001:db8::5]:8000/v1",
    ],
)
def test_model_endpoints_accept_urls_with_and_without_port(url: str) -> None:
    spec = GymHostSpec.model_validate(spec_with("egress.modelEndpoints", [url]))

    assert spec.egress.model_endpoints == [url]


@pytest.mark.parametrize(
    "image",
    [
        "nginx",
        "nginx:1.25",
        "ghcr.io/org/gym-env:v1.2.3",
        "localhost:5000/gym:dev",
        f"registry.example.com/gym@{DIGEST}",
    ],
)
def test_image_references_with_registry_tag_or_digest_are_accepted(image: str) -> None:
    assert GymHostSpec.model_validate(spec_with("image", image)).image == image


@pytest.mark.parametrize("quantity", ["500m", "2", "1.5Gi", "4G", "512Mi"])
def test_kubernetes_quantities_are_accepted(quantity: str) -> None:
    assert GymHostSpec.model_validate(spec_with("resources.memory", quantity)).resources.memory == quantity


def test_sibling_mount_paths_sharing_a_prefix_are_accepted() -> None:
    spec = spec_with("storage.workspace.episodesMountPath", "/workspace-episodes")

    assert GymHostSpec.model_validate(spec).storage.workspace.episodes_mount_path == "/workspace-episodes"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("storage.environment.mountPath", "/tmp-env"),
        ("storage.environment.mountPath", "/var/run/gym"),
        ("storage.environment.mountPath", "/home/gym/.config"),
        ("storage.environment.mountPath", "/opt/gym..v2/env"),
        ("storage.workspace.mountPath", "/srv/work_space-1"),
        ("storage.workspace.episodesMountPath", "/..episodes"),
    ],
)
def test_mount_paths_in_normal_form_are_accepted(path: str, value: str) -> None:
    """Dots inside a segment are fine; only segments of dots alone, empty ones and a trailing '/' are not."""
    spec = GymHostSpec.model_validate(spec_with(path, value))

    assert value in (
        spec.storage.environment.mount_path,
        spec.storage.workspace.mount_path,
        spec.storage.workspace.episodes_mount_path,
    )


def test_a_credential_looking_name_is_refused_by_name_pointing_at_env_from() -> None:
    (problem,) = refusal(
        spec_with("env", [{"name": "SEED", "value": "1"}, {"name": "HF_TOKEN", "value": "x"}])
    )

    assert problem == (
        ("env", 1),
        "Value error, env HF_TOKEN: looks like a credential; use envFrom secret references",
    )


def test_plain_env_names_are_accepted() -> None:
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "GYM_SEED", "value": "7"}]

    assert [e.name for e in GymHostSpec.model_validate(spec_with("env", env)).env] == [
        "PYTHONUNBUFFERED",
        "GYM_SEED",
    ]


def test_a_minimal_spec_gets_the_documented_defaults() -> None:
    spec = GymHostSpec.model_validate(valid_spec())

    assert (spec.port, spec.readiness_path, spec.lifetime.expiry_policy) == (8080, "/health", "Delete")
    assert (spec.episodes.default_ttl_seconds, spec.episodes.max_ttl_seconds) == (600, 3600)
    assert spec.egress.allow == []


def test_the_wire_form_round_trips() -> None:
    spec = GymHostSpec.model_validate(spec_with("env", [{"name": "SEED", "value": "1"}]))

    assert GymHostSpec.model_validate(spec.wire()) == spec
