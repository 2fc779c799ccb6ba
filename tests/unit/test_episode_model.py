"""The EpisodeSandbox spec model refuses bad input naming the field, accepts good input, fills defaults."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gymsandbox.api.episode import EpisodeSandboxSpec

EXAMPLE_EPISODE = Path(__file__).resolve().parents[2] / "examples" / "episode.yaml"
MINIMAL: dict[str, Any] = {
    "hostRef": {"name": "swe-gym-run-1"},
    "rolloutId": "rollout-0001",
    "image": "registry.example.com/episodes/python-sandbox:3.12",
}
PATTERN = "String should match pattern"
CREDENTIAL = "looks like a credential"
NORMAL_FORM = "must be a path in normal form"


def spec_with(path: str, value: Any) -> dict[str, Any]:
    """MINIMAL with the value at a dotted path replaced (missing objects on the way are created)."""
    spec = copy.deepcopy(MINIMAL)
    *parents, leaf = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return spec


def refusal(spec: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as refused:
        EpisodeSandboxSpec.model_validate(spec)
    return [(error["loc"], error["msg"]) for error in refused.value.errors()]


def example_spec() -> dict[str, Any]:
    spec = yaml.safe_load(EXAMPLE_EPISODE.read_text(encoding="utf-8"))["spec"]
    assert isinstance(spec, dict)
    return spec


BAD_INPUTS = [
    # user: a numeric uid, never root
    ("user", "root", ("user",), "valid integer"),
    ("user", "nobody", ("user",), "valid integer"),
    ("user", 0, ("user",), "greater than or equal to 1"),
    ("user", -1, ("user",), "greater than or equal to 1"),
    ("user", 2_147_483_648, ("user",), "less than or equal to 2147483647"),
    # env names execve can take as written
    ("env", [{"name": "A=B", "value": "x"}], ("env", 0, "name"), PATTERN),
    ("env", [{"name": "A\x00B", "value": "x"}], ("env", 0, "name"), PATTERN),
    ("env", [{"name": "=", "value": "x"}], ("env", 0, "name"), PATTERN),
    ("env", [{"name": "", "value": "x"}], ("env", 0, "name"), "at least 1 character"),
    # names that look like credentials, refused as in a GymHost's env
    ("env", [{"name": "HF_TOKEN", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "OPENAI_API_KEY", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "db_password", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "ssh_private_key", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "GIT_AUTH", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "API-KEY", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "openai.api.key", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "ACCESS-KEY", "value": "x"}], ("env", 0), CREDENTIAL),
    ("env", [{"name": "private.key", "value": "x"}], ("env", 0), CREDENTIAL),
    (
        "env",
        [{"name": "TASK", "value": "t"}, {"name": "Credentials.json", "value": "x"}],
        ("env", 1),
        CREDENTIAL,
    ),
    # labels
    ("labels", {"gymsandbox.dev/episode": "other"}, (), "plain names without a prefix"),
    ("labels", {"app.kubernetes.io/name": "gymsandbox-broker"}, (), "plain names without a prefix"),
    ("labels", {"example.com/tier": "gold"}, (), "plain names without a prefix"),
    ("labels", {"-bad": "x"}, (), "plain names without a prefix"),
    ("labels", {"a/b/c": "x"}, (), "plain names without a prefix"),
    ("labels", {"x" * 64: "x"}, (), "plain names without a prefix"),
    ("labels", {"": "x"}, (), "plain names without a prefix"),
    ("labels", {"team": "has space"}, ("labels", "team"), PATTERN),
    ("labels", {"team": "-leading"}, ("labels", "team"), PATTERN),
    ("labels", {"team": "trailing-"}, ("labels", "team"), PATTERN),
    ("labels", {"team": "v" * 64}, ("labels", "team"), "at most 63 characters"),
    # rolloutId
    ("rolloutId", "has space", ("rolloutId",), PATTERN),
    ("rolloutId", " leading", ("rolloutId",), PATTERN),
    ("rolloutId", "trailing ", ("rolloutId",), PATTERN),
    ("rolloutId", "", ("rolloutId",), "at least 1 character"),
    ("rolloutId", "a/b", ("rolloutId",), PATTERN),
    # paths
    ("workdir", "workspace", ("workdir",), PATTERN),
    ("workdir", "./workspace", ("workdir",), PATTERN),
    # where the workspace lies on the claim is the operator's choice, never the spec's
    ("workspace.subPath", "workspaces/run-1", ("workspace", "subPath"), "Extra inputs"),
    ("workspace.mountPath", "work", ("workspace", "mountPath"), PATTERN),
    ("workspace.mountPath", "/x/../workspace", ("workspace", "mountPath"), NORMAL_FORM),
    ("workspace.mountPath", "/workspace/.", ("workspace", "mountPath"), NORMAL_FORM),
    ("workspace.mountPath", "//workspace", ("workspace", "mountPath"), NORMAL_FORM),
    ("workspace.mountPath", "/workspace/", ("workspace", "mountPath"), NORMAL_FORM),
    # everything else
    ("image", "Registry/Upper:1", ("image",), PATTERN),
    ("runtime", "Kata", ("runtime",), PATTERN),
    ("hostRef.name", "Host_1", ("hostRef", "name"), PATTERN),
    ("resources.cpu", "1 core", ("resources", "cpu"), PATTERN),
    ("lifetime.ttlSeconds", 0, ("lifetime", "ttlSeconds"), "greater than or equal to 1"),
    ("egress.allow", ["example.com"], ("egress", "allow", 0), PATTERN),
    ("admissionTimeoutSeconds", 0, ("admissionTimeoutSeconds",), "greater than or equal to 1"),
]


@pytest.mark.parametrize(
    ("path", "value", "loc", "message"), BAD_INPUTS, ids=[f"{p}={v!r}"[:60] for p, v, *_ in BAD_INPUTS]
)
def test_bad_input_is_refused_naming_the_field(
    path: str, value: Any, loc: tuple[str | int, ...], message: str
) -> None:
    errors = refusal(spec_with(path, value))
    assert any(error_loc == loc and message in text for error_loc, text in errors), errors


@pytest.mark.parametrize("field", ["hostRef", "rolloutId", "image"])
def test_required_field_missing_is_refused(field: str) -> None:
    spec = copy.deepcopy(MINIMAL)
    del spec[field]
    assert ((field,), "Field required") in refusal(spec)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("unknownField", 1),
        ("resources.gpus", 1),
        ("workspace.readOnly", True),
        ("env", [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
    ],
)
def test_unknown_field_is_refused(path: str, value: Any) -> None:
    errors = refusal(spec_with(path, value))
    assert any(text == "Extra inputs are not permitted" for _, text in errors), errors


def test_a_credential_looking_name_is_refused_by_name_pointing_at_the_hosts_env_from() -> None:
    (problem,) = refusal(
        spec_with("env", [{"name": "TASK", "value": "t"}, {"name": "HF_TOKEN", "value": "x"}])
    )

    assert problem == (
        ("env", 1),
        "Value error, env HF_TOKEN: looks like a credential; use the GymHost's envFrom secret references",
    )


def test_prefixed_label_message_names_the_key() -> None:
    errors = refusal(spec_with("labels", {"gymsandbox.dev/episode": "x", "team": "rl"}))
    assert any("gymsandbox.dev/episode" in text for _, text in errors)


def test_minimal_spec_is_accepted() -> None:
    EpisodeSandboxSpec.model_validate(MINIMAL)


def test_example_episode_is_accepted() -> None:
    spec = EpisodeSandboxSpec.model_validate(example_spec())
    assert spec.user == 1000
    assert spec.workspace is not None
    assert spec.workspace.mount_path == "/workspace"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("user", 1),
        ("user", 2_147_483_647),
        ("env", [{"name": "lower-case.dots and spaces", "value": "x"}]),
        ("env", [{"name": "TASK_ID", "value": "x" * 32768}]),
        ("labels", {"team": "rl", "tier": "gold", "name": ""}),
        ("labels", {"x": "A_b.c-9", "Upper_Case.dots-9": "y"}),
        ("rolloutId", "run-7:step.12_a"),
        ("rolloutId", "x"),
        ("workdir", "/"),
        ("workdir", "/home/user/"),
        ("workspace.mountPath", "/home/user/work"),
        ("workspace.mountPath", "/home/user/.cache"),
        ("env", [{"name": "TASK_ID", "value": "x"}, {"name": "SEED", "value": "7"}]),
        ("egress.allow", ["models.example.com:443", "203.0.113.0/24:443", "[2001:db8::1]:443"]),
        ("runtime", "crun"),
        ("command", ["python", "-c", "print(1)"]),
        ("admissionTimeoutSeconds", 300),
    ],
)
def test_good_input_is_accepted(path: str, value: Any) -> None:
    EpisodeSandboxSpec.model_validate(spec_with(path, value))


def test_user_defaults_to_65532() -> None:
    assert EpisodeSandboxSpec.model_validate(MINIMAL).user == 65532


def test_resources_default_to_half_a_cpu_512mi_memory_and_1gi_scratch() -> None:
    resources = EpisodeSandboxSpec.model_validate(MINIMAL).resources
    assert (resources.cpu, resources.memory, resources.ephemeral_storage, resources.gpu) == (
        "500m",
        "512Mi",
        "1Gi",
        0,
    )


def test_optional_fields_default_to_nothing() -> None:
    spec = EpisodeSandboxSpec.model_validate(MINIMAL)
    assert (spec.runtime, spec.command, spec.args, spec.workdir, spec.workspace) == (None,) * 5
    assert (spec.env, spec.labels, spec.egress.allow) == ([], {}, [])
    assert spec.lifetime.ttl_seconds is None
    assert spec.admission_timeout_seconds is None


def test_workspace_mounts_at_workspace_by_default() -> None:
    spec = EpisodeSandboxSpec.model_validate(spec_with("workspace", {}))
    assert spec.workspace is not None
    assert spec.workspace.mount_path == "/workspace"
