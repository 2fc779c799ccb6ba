"""Cluster policy: what an admin allows (images, runtime profiles, caps, egress), where broker and DNS live.

Loaded from a YAML file the Helm chart mounts. Closed by default: `ClusterPolicy()` is valid, admits nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from gymsandbox.api.common import Model
from gymsandbox.api.gymhost import IMAGE_PATTERN
from gymsandbox.policy.egress import IPNetwork, check_host_name, is_private_range, parse_address, parse_cidr
from gymsandbox.policy.quantity import parse_quantity

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class PolicyError(Exception):
    """The policy file is missing, not YAML, or invalid. The message names the file, then each problem."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"invalid cluster policy {path}:\n{lines}")
        self.path = path
        self.problems = list(problems)


def image_approved(image: str, approved: Sequence[str]) -> bool:
    """Whether an image is on the approved list: an exact entry, or under an entry that ends in "/".

    An entry without the trailing slash approves only that exact reference, so "registry/gym" approves neither
    "registry/gym/x" nor "registry/gym-evil". Anything that is not an image reference is never approved.
    """
    if not re.fullmatch(IMAGE_PATTERN, image):
        return False
    return any(image == entry or (entry.endswith("/") and image.startswith(entry)) for entry in approved)


def _approved_entry(entry: str) -> str:
    reference = entry.removesuffix("/")
    if not re.fullmatch(IMAGE_PATTERN, reference) or (entry != reference and "@" in reference):
        raise ValueError(
            f'"{entry}" is neither an image reference (repo:tag, repo@sha256:...) nor a prefix ending in "/"'
        )
    return entry


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError(f'"{value}" is not a DNS label (lower-case letters, digits and "-", at most 63)')
    return value


def _label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    valid_prefix = not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) is not None)
    if not valid_prefix or not _LABEL_NAME.fullmatch(name):
        raise ValueError(f'"{key}" is not a label key ([prefix/]name, e.g. app.kubernetes.io/name)')
    return key


def _label_value(value: str) -> str:
    if value and not _LABEL_NAME.fullmatch(value):
        raise ValueError(f'"{value}" is not a label value (at most 63 letters, digits, "-", "_" or ".")')
    return value


def _quantity(value: str) -> str:
    parse_quantity(value)
    return value


def _cidr(value: str) -> str:
    return str(parse_cidr(value))


def _address(value: str) -> str:
    return str(parse_address(value))


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f'"{value}" is not an http:// or https:// URL')
    return value


# The pattern also goes into the chart's values.schema.json, so helm refuses a bad name at install time.
DnsLabel = Annotated[
    str, AfterValidator(_dns_label), Field(json_schema_extra={"pattern": f"^{_DNS_LABEL.pattern}$"})
]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
PolicyQuantity = Annotated[str, AfterValidator(_quantity)]
HostName = Annotated[str, AfterValidator(check_host_name)]
Addresses = Annotated[list[Annotated[str, AfterValidator(_address)]], Field(min_length=1)]


class Toleration(Model):
    """A core/v1 Toleration added to pods of a runtime profile (e.g. to land on tainted Kata nodes)."""

    key: Annotated[str, AfterValidator(_label_key)] | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _as_the_api_server_checks(self) -> Toleration:
        # The same rules the API server applies, so a bad profile fails at load, not at every pod creation.
        if self.operator == "Exists" and self.value:
            raise ValueError('value must be empty when operator is "Exists"')
        if not self.key and self.operator != "Exists":
            raise ValueError('operator must be "Exists" when key is empty')
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError('tolerationSeconds is only allowed with effect "NoExecute"')
        return self


class RuntimeProfile(Model):
    """What a `spec.runtime` name means on this cluster. There is never a fallback to another profile."""

    runtime_class_name: Annotated[str, AfterValidator(_dns_label)]
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)


class Caps(Model):
    """Upper bounds on what one GymHost or episode may ask for, and floors under its resources: a pod is
    always limited (to the kubelet a limit of 0 is none)."""

    max_ttl_seconds: int = Field(86_400, ge=1, alias="maxTTLSeconds")
    max_cpu: PolicyQuantity = "8"
    max_memory: PolicyQuantity = "32Gi"
    max_ephemeral_storage: PolicyQuantity = "50Gi"
    min_cpu: PolicyQuantity = "10m"
    min_memory: PolicyQuantity = "16Mi"
    min_ephemeral_storage: PolicyQuantity = "16Mi"
    max_gpu: int = Field(0, ge=0)
    max_egress_entries: int = Field(32, ge=0)
    max_episodes_per_host: int = Field(64, ge=0)

    @model_validator(mode="after")
    def _floors_under_caps(self) -> Caps:
        for name, floor, cap in (
            ("Cpu", self.min_cpu, self.max_cpu),
            ("Memory", self.min_memory, self.max_memory),
            ("EphemeralStorage", self.min_ephemeral_storage, self.max_ephemeral_storage),
        ):
            if parse_quantity(floor) > parse_quantity(cap):
                raise ValueError(f"caps.min{name} {floor} is over caps.max{name} {cap}")
        return self


def _default_broker_selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": "gymsandbox-broker"}


def _default_dns_selector() -> dict[str, str]:
    return {"k8s-app": "kube-dns"}


class Broker(Model):
    """Where sandboxes reach the episode broker; their NetworkPolicy always allows it."""

    namespace: DnsLabel = "gymsandbox-system"
    # Never empty: an empty selector would open every pod in the namespace.
    pod_selector: dict[LabelKey, LabelValue] = Field(default_factory=_default_broker_selector, min_length=1)
    port: int = Field(8443, ge=1, le=65535)
    url: Annotated[str, AfterValidator(_http_url)] = "http://gymsandbox-broker.gymsandbox-system.svc:8443"
    # The CA that signed the broker's certificate (PEM), for an https url whose certificate no public CA
    # signed: hosts get it as GYMSANDBOX_BROKER_CA and verify the broker with it. Not a secret.
    ca_bundle: str | None = Field(
        None, alias="caBundle", pattern=r"^\s*-----BEGIN CERTIFICATE-----", max_length=65_536
    )


class Dns(Model):
    """The cluster resolver: the only DNS servers sandboxes may query (UDP and TCP 53)."""

    namespace: DnsLabel = "kube-system"
    pod_selector: dict[LabelKey, LabelValue] = Field(default_factory=_default_dns_selector, min_length=1)


def _private_cidr(value: str) -> str:
    network = parse_cidr(value)
    if not is_private_range(network):
        raise ValueError(
            f'"{value}" is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,'
            " 100.64.0.0/10, fc00::/7); public addresses need no exception"
        )
    return str(network)


class EgressPolicy(Model):
    allowed_private_cidrs: list[Annotated[str, AfterValidator(_private_cidr)]] = Field(
        default_factory=list, alias="allowedPrivateCIDRs"
    )
    # Never reachable, even where allowedPrivateCIDRs opens them: the pod, service and node networks and the
    # API server's addresses, say. Refused in entries, in resolved names and in IPv6 forms embedding them.
    denied_cidrs: list[Annotated[str, AfterValidator(_cidr)]] = Field(
        default_factory=list, alias="deniedCIDRs"
    )
    # Admin-pinned answers consulted before DNS, like hostAliases. They are written into NetworkPolicies.
    static_hosts: dict[HostName, Addresses] = Field(default_factory=dict)

    @property
    def allowed_private_networks(self) -> list[IPNetwork]:
        return [parse_cidr(cidr) for cidr in self.allowed_private_cidrs]

    @property
    def denied_networks(self) -> list[IPNetwork]:
        return [parse_cidr(cidr) for cidr in self.denied_cidrs]


USABLE_BY_LABEL = "gymsandbox.dev/usable-by"


def _usable_by_gymhosts() -> dict[str, str]:
    return {USABLE_BY_LABEL: "gymhosts"}


class References(Model):
    """Which Secrets (envFrom) and PersistentVolumeClaims (claimName, dataset.claimName) a GymHost may use:
    those carrying every label of the selector, which whoever creates the object sets (a namespace user who
    may not write Secrets cannot add it to one). The operator's own Secrets are refused whatever their
    labels. An empty selector allows every object of the namespace: other runs' included."""

    secret_selector: dict[LabelKey, LabelValue] = Field(default_factory=_usable_by_gymhosts)
    claim_selector: dict[LabelKey, LabelValue] = Field(default_factory=_usable_by_gymhosts)


class ClusterPolicy(Model):
    approved_images: list[Annotated[str, AfterValidator(_approved_entry)]] = Field(default_factory=list)
    runtime_profiles: dict[DnsLabel, RuntimeProfile] = Field(default_factory=dict)
    caps: Caps = Field(default_factory=Caps)
    broker: Broker = Field(default_factory=Broker)
    dns: Dns = Field(default_factory=Dns)
    egress: EgressPolicy = Field(default_factory=EgressPolicy)
    references: References = Field(default_factory=References)
    # Empty: every namespace.
    watch_namespaces: list[DnsLabel] = Field(default_factory=list)


class _UniqueKeyLoader(yaml.SafeLoader):
    """Refuses a key given twice in one mapping, which plain YAML loading silently resolves to the last."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            problem = f"found duplicate key {key!r}"
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (key)"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out or "(top level)"


def _problem(error: ErrorDetails) -> str:
    where = _location(error["loc"])
    kind, message, given = error["type"], error["msg"], error["input"]
    if kind == "value_error":
        return f"{where}: {message.removeprefix('Value error, ')}"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    if kind == "missing":
        return f"{where}: required"
    if kind == "too_short":
        return f"{where}: must not be empty"
    if isinstance(given, str | int | float | bool):
        return f"{where}: {message} (got {given!r})"
    return f"{where}: {message}"


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"not valid YAML: {error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return f"not valid YAML: {error}"


def load_policy(path: str | os.PathLike[str]) -> ClusterPolicy:
    """Read and validate the cluster policy. An empty file is the default policy, which admits nothing."""
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(name, [f"cannot read the file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise PolicyError(name, ["not UTF-8 text"]) from None
    return parse_policy(text, name)


def parse_policy(text: str, name: str) -> ClusterPolicy:
    """Validate the cluster policy in `text` (from `name`, which errors name). Empty: the default policy."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise PolicyError(name, [_yaml_problem(exc)]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(name, [f"expected a mapping of policy fields, got a {type(data).__name__}"])
    try:
        return ClusterPolicy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(name, [_problem(error) for error in exc.errors(include_url=False)]) from None
