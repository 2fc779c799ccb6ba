"""Cluster policy: loading the YAML file, readable errors, defaults, and the approved-image rule."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gymsandbox.policy.cluster import ClusterPolicy, PolicyError, RuntimeProfile, image_approved, load_policy

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
DIGEST = "sha256:" + "b" * 64


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    return caught.value.problems


# --- defaults ------------------------------------------------------------------------------------------


def test_default_policy_is_valid_and_approves_nothing() -> None:
    policy = ClusterPolicy()
    assert policy.approved_images == []
    assert policy.runtime_profiles == {}
    assert not image_approved("registry.example.com/gym/env:1", policy.approved_images)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_ttl_seconds", 86_400),
        ("max_cpu", "8"),
        ("max_memory", "32Gi"),
        ("max_ephemeral_storage", "50Gi"),
        ("max_gpu", 0),
        ("max_egress_entries", 32),
        ("max_episodes_per_host", 64),
    ],
)
def test_default_caps(field: str, value: object) -> None:
    assert getattr(ClusterPolicy().caps, field) == value


def test_default_broker_dns_egress_and_namespaces() -> None:
    policy = ClusterPolicy()
    assert policy.broker.namespace == "gymsandbox-system"
    assert policy.broker.pod_selector == {"app.kubernetes.io/name": "gymsandbox-broker"}
    assert policy.broker.port == 8443
    assert policy.broker.url == "http://gymsandbox-broker.gymsandbox-system.svc:8443"
    assert policy.dns.namespace == "kube-system"
    assert policy.dns.pod_selector == {"k8s-app": "kube-dns"}
    assert policy.egress.allowed_private_cidrs == []
    assert policy.egress.static_hosts == {}
    assert policy.watch_namespaces == []


def test_empty_file_is_the_default_policy(tmp_path: Path) -> None:
    assert load_policy(write(tmp_path, "# nothing yet\n")) == ClusterPolicy()


def test_policy_is_frozen() -> None:
    with pytest.raises(ValidationError):
        ClusterPolicy().approved_images = ["x"]  # type: ignore[misc]


# --- the example file ----------------------------------------------------------------------------------


def test_example_policy_loads() -> None:
    policy = load_policy(EXAMPLE_POLICY)
    assert policy.approved_images == ["registry.example.com/gym/", "registry.example.com/episodes/"]
    assert policy.runtime_profiles == {
        "kata": RuntimeProfile(
            runtime_class_name="kata-qemu", node_selector={"gymsandbox.dev/runtime": "kata"}
        ),
        "crun": RuntimeProfile(runtime_class_name="crun", node_selector={"gymsandbox.dev/runtime": "crun"}),
        "gvisor": RuntimeProfile(
            runtime_class_name="gvisor", node_selector={"gymsandbox.dev/gvisor": "true"}
        ),
    }
    assert policy.caps == ClusterPolicy().caps
    assert policy.broker == ClusterPolicy().broker
    assert policy.egress.static_hosts == {
        "api.openai.example": ["203.0.113.10"],
        "models.example.com": ["198.51.100.7", "198.51.100.8"],
    }
    assert policy.watch_namespaces == []


def test_policy_accepts_path_strings() -> None:
    assert load_policy(str(EXAMPLE_POLICY)) == load_policy(EXAMPLE_POLICY)


# --- image_approved ------------------------------------------------------------------------------------

APPROVED = [
    "registry.example.com/gym/",
    "registry.example.com:5000/team/",
    "docker.io/library/python:3.12",
    f"ghcr.io/org/env@{DIGEST}",
    "registry.example.com/exact",
]


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/gym/env:1",
        "registry.example.com/gym/env",
        "registry.example.com/gym/team/deep/env:v2",
        f"registry.example.com/gym/env@{DIGEST}",
        "registry.example.com:5000/team/env:1",
        "docker.io/library/python:3.12",
        f"ghcr.io/org/env@{DIGEST}",
        "registry.example.com/exact",
    ],
)
def test_approves_exact_references_and_paths_under_a_prefix(image: str) -> None:
    assert image_approved(image, APPROVED)


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/gym-evil/x:1",  # shares the prefix text but not the path
        "registry.example.com/gymnasium:1",
        "registry.example.com/gym",  # the prefix's own path is not under it
        "registry.example.com.evil.io/gym/x:1",
        "evil.io/registry.example.com/gym/x:1",
        "REGISTRY.EXAMPLE.COM/gym/x:1",
        "registry.example.com:50001/team/x:1",
        "registry.example.com/team/x:1",  # same path, other port
        "docker.io/library/python:3.13",
        "docker.io/library/python",
        "python:3.12",  # the same image to Docker, but not the approved text
        "docker.io/library/python:3.12-slim",
        f"docker.io/library/python:3.12@{DIGEST}",
        "ghcr.io/org/env:latest",
        f"ghcr.io/org/env@sha256:{'c' * 64}",
        "registry.example.com/exact/x:1",  # an entry without "/" approves only itself
        "registry.example.com/exact:1",
        "registry.example.com/gym/../x",  # not an image reference at all
        "registry.example.com/gym/ x",
        "",
    ],
)
def test_refuses_near_misses(image: str) -> None:
    assert not image_approved(image, APPROVED)


def test_empty_list_approves_nothing() -> None:
    assert not image_approved("registry.example.com/gym/env:1", [])


# --- readable errors -----------------------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert (
        str(caught.value)
        == f"invalid cluster policy {path}:\n  cannot read the file: No such file or directory"
    )


def test_directory_is_not_a_policy_file(tmp_path: Path) -> None:
    assert problems_of(tmp_path) == ["cannot read the file: Is a directory"]


def test_non_utf8_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"approvedImages: [\xff]\n")
    assert problems_of(path) == ["not UTF-8 text"]


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    [problem] = problems_of(write(tmp_path, "approvedImages:\n  - a\n caps: {\n"))
    assert problem.startswith("not valid YAML: ")
    assert re.search(r"\(line 3, column \d+\)$", problem)


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    text = "runtimeProfiles:\n  kata: {runtimeClassName: kata-qemu}\n  kata: {runtimeClassName: runc}\n"
    assert problems_of(write(tmp_path, text)) == [
        "not valid YAML: found duplicate key 'kata' (line 3, column 3)"
    ]


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    text = (
        "runtimeProfiles:\n"
        "  kata: &base {runtimeClassName: kata-qemu, nodeSelector: {pool: sandbox}}\n"
        "  kata-fc:\n    <<: *base\n    runtimeClassName: kata-fc\n"
    )
    profiles = load_policy(write(tmp_path, text)).runtime_profiles
    assert profiles["kata-fc"] == RuntimeProfile(
        runtime_class_name="kata-fc", node_selector={"pool": "sandbox"}
    )


@pytest.mark.parametrize(("text", "kind"), [("- a\n", "list"), ("just text\n", "str"), ("3\n", "int")])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    assert problems_of(write(tmp_path, text)) == [f"expected a mapping of policy fields, got a {kind}"]


INVALID_POLICY = """\
approvedImages: ["registry.example.com/gym/", "Not An Image", "registry.example.com/x@sha256:abc/"]
runtimeProfiles:
  Kata: {runtimeClassName: kata-qemu}
  crun: {nodeSelector: {"bad key!": x}}
  gvisor: {runtimeClassName: runsc, tolerations: [{value: x}]}
caps: {maxCpu: lots, maxGpu: -1, maxTtlSeconds: 5}
broker: {podSelector: {}, url: "ftp://broker"}
egress:
  allowedPrivateCIDRs: [8.8.8.0/24, 10.0.0.1/8]
  staticHosts: {localhost: [127.0.0.1], api.example.com: [], b.example.com: [nope]}
watchNamespaces: [Default]
approvedImage: []
"""


def test_every_invalid_field_is_named_on_its_own_line(tmp_path: Path) -> None:
    path = write(tmp_path, INVALID_POLICY)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"invalid cluster policy {path}:"
    assert lines[1:] == [
        '  approvedImages[1]: "Not An Image" is neither an image reference (repo:tag, repo@sha256:...)'
        ' nor a prefix ending in "/"',
        '  approvedImages[2]: "registry.example.com/x@sha256:abc/" is neither an image reference'
        ' (repo:tag, repo@sha256:...) nor a prefix ending in "/"',
        '  runtimeProfiles.Kata (key): "Kata" is not a DNS label'
        ' (lower-case letters, digits and "-", at most 63)',
        "  runtimeProfiles.crun.runtimeClassName: required",
        '  runtimeProfiles.crun.nodeSelector["bad key!"] (key): "bad key!" is not a label key'
        " ([prefix/]name, e.g. app.kubernetes.io/name)",
        '  runtimeProfiles.gvisor.tolerations[0]: operator must be "Exists" when key is empty',
        '  caps.maxCpu: "lots" is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 4G)',
        "  caps.maxGpu: Input should be greater than or equal to 0 (got -1)",
        "  caps.maxTtlSeconds: unknown field",
        "  broker.podSelector: must not be empty",
        '  broker.url: "ftp://broker" is not an http:// or https:// URL',
        '  egress.allowedPrivateCIDRs[0]: "8.8.8.0/24" is not inside a private range (10.0.0.0/8,'
        " 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7); public addresses need no exception",
        '  egress.allowedPrivateCIDRs[1]: "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?',
        '  egress.staticHosts.localhost (key): "localhost" is not a fully qualified DNS name (it has no dot)',
        '  egress.staticHosts["api.example.com"]: must not be empty',
        '  egress.staticHosts["b.example.com"][0]: "nope" is not a valid IP address',
        '  watchNamespaces[0]: "Default" is not a DNS label (lower-case letters, digits and "-", at most 63)',
        "  approvedImage: unknown field",
    ]


def policy_problems(tmp_path: Path, data: str) -> list[str]:
    return problems_of(write(tmp_path, data))


@pytest.mark.parametrize(
    ("toleration", "problem"),
    [
        ("{key: a, operator: Exists, value: b}", 'value must be empty when operator is "Exists"'),
        ("{value: b}", 'operator must be "Exists" when key is empty'),
        (
            "{key: a, effect: NoSchedule, tolerationSeconds: 5}",
            'tolerationSeconds is only allowed with effect "NoExecute"',
        ),
        ("{key: a, operator: Maybe}", "Input should be 'Equal' or 'Exists' (got 'Maybe')"),
        ("{key: a, effect: Sometimes}", "Input should be 'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"),
    ],
)
def test_tolerations_follow_the_api_server_rules(tmp_path: Path, toleration: str, problem: str) -> None:
    text = f"runtimeProfiles: {{kata: {{runtimeClassName: kata-qemu, tolerations: [{toleration}]}}}}\n"
    [line] = policy_problems(tmp_path, text)
    assert problem in line


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gymsandbox.dev/runtime", "operator": "Equal", "value": "kata", "effect": "NoSchedule"},
        {"operator": "Exists"},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 30,
        },
    ],
)
def test_valid_tolerations_load_and_keep_their_wire_names(toleration: dict[str, Any]) -> None:
    profile = RuntimeProfile.model_validate({"runtimeClassName": "kata-qemu", "tolerations": [toleration]})
    assert profile.tolerations[0].wire() == toleration


def test_allowed_private_cidrs_are_normalized() -> None:
    policy = ClusterPolicy.model_validate({"egress": {"allowedPrivateCIDRs": ["10.20.30.0/24", "FD12::/16"]}})
    assert policy.egress.allowed_private_cidrs == ["10.20.30.0/24", "fd12::/16"]
    assert [str(n) for n in policy.egress.allowed_private_networks] == ["10.20.30.0/24", "fd12::/16"]


def test_denied_cidrs_are_normalized_and_must_be_cidrs(tmp_path: Path) -> None:
    policy = ClusterPolicy.model_validate({"egress": {"deniedCIDRs": ["10.96.0.0/12", "FD00:10::/64"]}})
    assert [str(n) for n in policy.egress.denied_networks] == ["10.96.0.0/12", "fd00:10::/64"]
    [line] = policy_problems(tmp_path, "egress: {deniedCIDRs: ['10.96.0.1/12']}\n")
    assert "has host bits set" in line


@pytest.mark.parametrize(
    "cidr", ["0.0.0.0/0", "127.0.0.0/8", "169.254.0.0/16", "10.0.0.0/7", "203.0.113.0/24"]
)
def test_allowed_private_cidrs_must_lie_in_private_space(tmp_path: Path, cidr: str) -> None:
    [line] = policy_problems(tmp_path, f"egress: {{allowedPrivateCIDRs: ['{cidr}']}}\n")
    assert "is not inside a private range" in line


def test_static_hosts_are_normalized() -> None:
    policy = ClusterPolicy.model_validate(
        {"egress": {"staticHosts": {"Models.Example.com": ["2001:DB8::7"]}}}
    )
    assert policy.egress.static_hosts == {"models.example.com": ["2001:db8::7"]}


def test_dns_pod_selector_must_not_be_empty(tmp_path: Path) -> None:
    assert policy_problems(tmp_path, "dns: {podSelector: {}}\n") == ["dns.podSelector: must not be empty"]


@pytest.mark.parametrize(
    ("caps", "problem"),
    [
        ("{maxMemory: 1Gii}", 'caps.maxMemory: "1Gii" is not a Kubernetes quantity'),
        ("{maxEphemeralStorage: -1Gi}", 'caps.maxEphemeralStorage: "-1Gi" is not a Kubernetes quantity'),
        ("{maxTTLSeconds: 0}", "caps.maxTTLSeconds: Input should be greater than or equal to 1 (got 0)"),
        ("{maxEgressEntries: many}", "caps.maxEgressEntries: Input should be a valid integer"),
    ],
)
def test_caps_are_validated(tmp_path: Path, caps: str, problem: str) -> None:
    [line] = policy_problems(tmp_path, f"caps: {caps}\n")
    assert line.startswith(problem)


def test_caps_accept_any_kubernetes_quantity() -> None:
    caps = ClusterPolicy.model_validate({"caps": {"maxCpu": "16000m", "maxMemory": "64e9"}}).caps
    assert (caps.max_cpu, caps.max_memory) == ("16000m", "64e9")


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ('{"app.kubernetes.io/name": "has space"}', "is not a label value"),
        ('{"-bad": x}', "is not a label key"),
        ('{"UPPER.example.com/name": x}', "is not a label key"),
        (f'{{"k": "{"v" * 64}"}}', "is not a label value"),
    ],
)
def test_selectors_use_label_syntax(tmp_path: Path, selector: str, problem: str) -> None:
    [line] = policy_problems(tmp_path, f"broker: {{podSelector: {selector}}}\n")
    assert problem in line
