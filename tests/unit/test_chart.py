"""The Helm chart, rendered by the pinned helm: lint, golden output, schema refusals, and what it promises."""

from __future__ import annotations

import base64
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymsandbox import __version__
from gymsandbox.broker.server import SIGNING_KEY_WAIT_SECONDS
from gymsandbox.chartschema import render_values_schema
from gymsandbox.desired.pod import EPISODE_CONTAINER_NAME, EPISODE_POD_SUFFIX
from gymsandbox.leases import SIGNING_KEY_SECRET
from gymsandbox.policy.cluster import ClusterPolicy, load_policy

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gymsandbox-operator"
GOLDEN = Path(__file__).parent / "golden"
KUBE_VERSION = "1.36.3"
RELEASE, NAMESPACE = "gymsandbox", "gymsandbox-system"
UPDATE = os.environ.get("GYMSANDBOX_UPDATE_GOLDEN") == "1"

# Values that exercise every optional branch of the templates.
CUSTOM_VALUES: dict[str, Any] = {
    "image": {"digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry-creds"}],
    "operator": {
        "verbose": True,
        "nodeSelector": {"pool": "system"},
        "podAnnotations": {"team": "rl"},
        "podLabels": {"team": "rl"},
        "extraArgs": ["--log-format=json"],
        "priorityClassName": "system-cluster-critical",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
    "broker": {
        "replicas": 3,
        "port": 9443,
        "tolerations": [{"key": "system", "operator": "Exists"}],
        "affinity": {"podAntiAffinity": {}},
        "extraArgs": ["--max-calls-per-host=8"],
    },
    "networkPolicy": {
        "apiServer": {"cidrs": ["192.0.2.10/32"], "ports": [6443]},
        "extraBrokerIngress": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "trainers"}}}
        ],
    },
    "metrics": {
        "port": 9100,
        "scrapers": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "serviceMonitor": {
            "enabled": True,
            "interval": "15s",
            "labels": {"release": "kube-prometheus-stack"},
        },
    },
    "policy": {"approvedImages": ["registry.example.com/gym/"], "watchNamespaces": ["evals"]},
}


def helm() -> Path:
    out = subprocess.run(
        [str(ROOT / "hack" / "build-binaries.sh")], check=True, capture_output=True, text=True
    ).stdout
    directories = dict(line.split("=", 1) for line in out.split())
    return Path(directories["helm"]) / "helm"


HELM = helm()


def run_helm(
    *args: str, values: dict[str, Any] | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [str(HELM), *args]
    if values is not None:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def template(values: dict[str, Any] | None = None, tmp: Path | None = None) -> str:
    result = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
        values=values, tmp=tmp,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def objects(rendered: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered) if o}


def test_helm_lint_is_clean() -> None:
    result = run_helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


GENERATED = (  # what differs between renders: the broker certificate the chart makes, and what hashes it
    (re.compile(r"^(\s+(?:tls\.crt|tls\.key|ca\.crt): ).+$", re.MULTILINE), r"\1<generated>"),
    (
        re.compile(r"(-----BEGIN CERTIFICATE-----\n).*?(\s*-----END CERTIFICATE-----)", re.DOTALL),
        r"\1<generated>\2",
    ),
    (re.compile(r"^(\s+checksum/policy: )[0-9a-f]{64}$", re.MULTILINE), r"\1<generated>"),
)


def without_generated(rendered: str) -> str:
    for pattern, replacement in GENERATED:
        rendered = pattern.sub(replacement, rendered)
    return rendered


@pytest.mark.parametrize("case", ["default", "custom"])
def test_rendering_matches_the_golden_file(case: str, tmp_path: Path) -> None:
    rendered = without_generated(template(CUSTOM_VALUES if case == "custom" else None, tmp_path))
    golden = GOLDEN / f"chart-{case}.yaml"
    if UPDATE:
        golden.write_text(rendered)
    assert rendered == golden.read_text(), (
        f"chart output changed; if intended: GYMSANDBOX_UPDATE_GOLDEN=1 pytest {__file__}"
    )


BAD_VALUES = {
    "wrong-type": ({"broker": {"replicas": "two"}}, "at '/broker/replicas': got string, want integer"),
    "unknown-key": ({"operatr": {}}, "additional properties 'operatr' not allowed"),
    "policy-broker-is-the-charts": ({"policy": {"broker": {"port": 1}}}, "additional properties 'broker'"),
    "misspelt-policy-field": ({"policy": {"aprovedImages": []}}, "additional properties 'aprovedImages'"),
    "policy-quantity-as-number": ({"policy": {"caps": {"maxCpu": 8}}}, "at '/policy/caps/maxCpu'"),
    "profile-without-runtime-class": (
        {"policy": {"runtimeProfiles": {"youki": {"nodeSelector": {}}}}},
        "missing property 'runtimeClassName'",
    ),
    "digest-not-a-digest": ({"image": {"digest": "latest"}}, "at '/image/digest'"),
    "port-out-of-range": ({"broker": {"port": 70000}}, "at '/broker/port'"),
    "zero-replicas": ({"broker": {"replicas": 0}}, "at '/broker/replicas'"),
    # A glob is not a namespace name (the operator's --namespace takes patterns; the policy does not).
    "profile-name-not-a-dns-label": (
        {"policy": {"runtimeProfiles": {"Kata_QEMU": {"runtimeClassName": "kata"}}}},
        "additional properties 'Kata_QEMU' not allowed",
    ),
    "log-format-unknown": ({"operator": {"logFormat": "xml"}}, "at '/operator/logFormat'"),
    "pod-label-of-the-charts-own": (
        {"operator": {"podLabels": {"app.kubernetes.io/name": "x"}}},
        "invalid propertyName 'app.kubernetes.io/name'",
    ),
    "extra-arg-not-a-flag": ({"broker": {"extraArgs": ["rm -rf /"]}}, "at '/broker/extraArgs/0'"),
    "scrape-interval-not-a-duration": (
        {"metrics": {"serviceMonitor": {"interval": "often"}}},
        "at '/metrics/serviceMonitor/interval'",
    ),
    "no-scrapers": ({"metrics": {"scrapers": []}}, "at '/metrics/scrapers'"),
    "watch-namespace-glob": ({"policy": {"watchNamespaces": ["evals-*"]}}, "at '/policy/watchNamespaces/0'"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_are_refused_with_the_path_named(case: str, tmp_path: Path) -> None:
    values, message = BAD_VALUES[case]
    result = run_helm(
        "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, values=values, tmp=tmp_path
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def test_values_schema_is_generated_from_the_models() -> None:
    on_disk = (CHART / "values.schema.json").read_text()
    assert on_disk == render_values_schema(), "values.schema.json drifted from the models; run `make crds`"


def test_chart_crds_are_the_generated_crds() -> None:
    ours = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == ours
    for name in ours:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), name


@pytest.mark.parametrize("values", [None, CUSTOM_VALUES], ids=["default", "custom"])
def test_the_rendered_policy_loads_and_points_at_this_releases_broker(
    values: dict[str, Any] | None, tmp_path: Path
) -> None:
    rendered = objects(template(values, tmp_path))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(rendered["ConfigMap", f"{RELEASE}-policy"]["data"]["policy.yaml"])
    policy = load_policy(policy_file)
    service = rendered["Service", f"{RELEASE}-broker"]
    broker_pods = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]["metadata"]["labels"]
    port = service["spec"]["ports"][0]["port"]
    assert policy.broker.url == f"https://{RELEASE}-broker.{NAMESPACE}.svc:{port}"
    assert policy.broker.port == port
    assert policy.broker.namespace == NAMESPACE
    assert dict(policy.broker.pod_selector).items() <= broker_pods.items()
    assert service["spec"]["selector"] == dict(policy.broker.pod_selector)


def test_default_policy_is_closed_and_names_the_usual_runtimes(tmp_path: Path) -> None:
    rendered = objects(template())
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(rendered["ConfigMap", f"{RELEASE}-policy"]["data"]["policy.yaml"])
    policy = load_policy(policy_file)
    assert policy.approved_images == []
    assert {name: p.runtime_class_name for name, p in policy.runtime_profiles.items()} == {
        "kata": "kata-qemu",
        "crun": "crun",
        "gvisor": "gvisor",
    }


def test_the_operator_runs_active_and_standby_and_drains_keep_one_of_each(tmp_path: Path) -> None:
    """Two replicas contend for a Lease (only its holder acts); a rollout replaces one at a time, and a
    PodDisruptionBudget keeps one operator and one broker through a drain."""
    rendered = objects(template())
    operator = rendered["Deployment", f"{RELEASE}-operator"]["spec"]
    assert operator["replicas"] == 2
    assert operator["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    for name in ("operator", "broker"):
        budget = rendered["PodDisruptionBudget", f"{RELEASE}-{name}"]["spec"]
        selector = rendered["Deployment", f"{RELEASE}-{name}"]["spec"]["selector"]
        assert budget == {"maxUnavailable": 1, "selector": selector}
    single = objects(template({"operator": {"replicas": 1}, "broker": {"replicas": 1}}, tmp_path))
    assert not [key for key in single if key[0] == "PodDisruptionBudget"]  # it would block every drain


def test_pods_are_restricted() -> None:
    rendered = objects(template())
    for name in ("operator", "broker"):
        pod = rendered["Deployment", f"{RELEASE}-{name}"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"{RELEASE}-{name}"
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["image"] == f"registry.example.com/gymsandbox/gymsandbox:{__version__}"
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert container["livenessProbe"]
        assert container["readinessProbe"]
        assert container["resources"]["limits"]["memory"]
    (broker,) = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]["spec"]["containers"]
    startup = broker["startupProbe"]  # it listens only once it has the key it may wait for
    assert startup["periodSeconds"] * startup["failureThreshold"] > SIGNING_KEY_WAIT_SECONDS


def test_a_digest_wins_over_the_tag(tmp_path: Path) -> None:
    rendered = objects(template(CUSTOM_VALUES, tmp_path))
    (container,) = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/gymsandbox/gymsandbox@sha256:" + "ab" * 32


def test_the_broker_may_read_only_the_signing_key_in_its_namespace() -> None:
    role = objects(template())["Role", f"{RELEASE}-broker"]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SIGNING_KEY_SECRET], "verbs": ["get"]}
    ]


def test_the_broker_exec_policy_names_the_operators_sandbox_pods_and_binds_as_deny() -> None:
    rendered = objects(template())
    policy = rendered["ValidatingAdmissionPolicy", f"{RELEASE}-broker-exec"]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{RELEASE}-broker"'
    )
    (validation,) = policy["spec"]["validations"]
    assert f"request.name.endsWith('-{EPISODE_POD_SUFFIX}')" in validation["expression"]
    assert f"object.container == '{EPISODE_CONTAINER_NAME}'" in validation["expression"]
    assert f"request.namespace != '{NAMESPACE}'" in validation["expression"]
    binding = rendered["ValidatingAdmissionPolicyBinding", f"{RELEASE}-broker-exec"]
    assert binding["spec"] == {"policyName": f"{RELEASE}-broker-exec", "validationActions": ["Deny"]}


def test_the_broker_exec_policy_can_be_turned_off(tmp_path: Path) -> None:
    rendered = objects(template({"broker": {"execPolicy": {"enabled": False}}}, tmp_path))
    assert not [key for key in rendered if key[0].startswith("ValidatingAdmissionPolicy")]


@pytest.mark.parametrize(
    ("values", "refuses"),
    [
        ({}, None),
        ({"policy": {"watchNamespaces": ["evals", "team-b"]}}, '["evals","team-b"]'),
        (
            {
                "policy": {"watchNamespaces": ["evals"]},
                "operator": {"unwatchedNamespacePolicy": {"enabled": False}},
            },
            None,
        ),
    ],
    ids=["every-namespace-served", "watched-namespaces", "turned-off"],
)
def test_creates_in_unwatched_namespaces_are_refused_only_when_some_are_unwatched(
    tmp_path: Path, values: dict[str, Any], refuses: str | None
) -> None:
    rendered = objects(template(values, tmp_path))
    name = f"{RELEASE}-operator-watched-namespaces"
    if refuses is None:
        assert ("ValidatingAdmissionPolicy", name) not in rendered
        return
    policy = rendered["ValidatingAdmissionPolicy", name]
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["gymsandbox.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": ["gymhosts", "episodesandboxes"],
        }
    ]
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == f"request.namespace in {refuses}"
    binding = rendered["ValidatingAdmissionPolicyBinding", name]
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_pod_labels_extra_args_and_placement_reach_both_deployments(tmp_path: Path) -> None:
    rendered = objects(template(CUSTOM_VALUES, tmp_path))
    operator = rendered["Deployment", f"{RELEASE}-operator"]["spec"]["template"]
    broker = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]
    assert operator["metadata"]["labels"]["team"] == "rl"
    assert operator["metadata"]["labels"]["app.kubernetes.io/name"] == "gymsandbox-operator"  # still selected
    assert operator["spec"]["containers"][0]["args"][-1] == "--log-format=json"
    assert broker["spec"]["containers"][0]["args"][-1] == "--max-calls-per-host=8"
    assert operator["spec"]["priorityClassName"] == "system-cluster-critical"
    assert operator["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert (operator["spec"]["nodeSelector"], broker["spec"]["affinity"]) == (
        {"pool": "system"},
        {"podAntiAffinity": {}},
    )
    plain = objects(template(None, tmp_path))["Deployment", f"{RELEASE}-operator"]["spec"]["template"]["spec"]
    assert not {"priorityClassName", "nodeSelector", "topologySpreadConstraints"} & set(plain)


def broker_args_and_volumes(rendered: dict[tuple[str, str], dict[str, Any]]) -> tuple[list[str], list[Any]]:
    pod = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]["spec"]
    return pod["containers"][0]["args"], pod["volumes"]


def test_the_broker_serves_plain_http_only_when_tls_is_turned_off(tmp_path: Path) -> None:
    rendered = objects(template({"broker": {"tls": {"enabled": False}}}, tmp_path))
    assert not [key for key in rendered if key[0] == "Secret"]
    args, volumes = broker_args_and_volumes(rendered)
    assert not [a for a in args if a.startswith("--tls-dir")]
    assert "tls" not in {v["name"] for v in volumes}
    policy = load_policy_from(rendered)
    assert (policy.broker.url.startswith("http://"), policy.broker.ca_bundle) == (True, None)


def load_policy_from(rendered: dict[tuple[str, str], dict[str, Any]]) -> Any:
    text = rendered["ConfigMap", f"{RELEASE}-policy"]["data"]["policy.yaml"]
    return ClusterPolicy.model_validate(yaml.safe_load(text))


def test_by_default_the_chart_makes_a_certificate_and_hands_its_ca_to_hosts() -> None:
    rendered = objects(template())
    secret = rendered["Secret", f"{RELEASE}-broker-tls"]
    assert (secret["type"], sorted(secret["data"])) == ("kubernetes.io/tls", ["ca.crt", "tls.crt", "tls.key"])
    policy = load_policy_from(rendered)
    assert policy.broker.url == f"https://{RELEASE}-broker.{NAMESPACE}.svc:8443"
    # One CA per render: the one in the Secret is the one hosts are told to trust.
    assert policy.broker.ca_bundle == base64.b64decode(secret["data"]["ca.crt"]).decode()
    args, volumes = broker_args_and_volumes(rendered)
    assert "--tls-dir=/etc/gymsandbox-tls" in args
    assert {"name": "tls", "secret": {"secretName": f"{RELEASE}-broker-tls", "items": TLS_ITEMS}} in volumes
    pod = rendered["Deployment", f"{RELEASE}-broker"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


TLS_ITEMS = [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]


def test_with_tls_from_a_secret_of_the_admins_the_chart_makes_none(tmp_path: Path) -> None:
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    values = {"broker": {"tls": {"enabled": True, "secretName": "corp-broker-cert", "caBundle": ca}}}
    rendered = objects(template(values, tmp_path))
    assert not [key for key in rendered if key[0] == "Secret"]
    assert load_policy_from(rendered).broker.ca_bundle == ca
    _, volumes = broker_args_and_volumes(rendered)
    assert {"name": "tls", "secret": {"secretName": "corp-broker-cert", "items": TLS_ITEMS}} in volumes


def test_no_role_grants_wildcards_or_escalation() -> None:
    for (kind, name), obj in objects(template()).items():
        if kind not in ("ClusterRole", "Role"):
            continue
        for rule in obj["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], (name, rule)
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), (name, rule)
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], (name, rule)


def test_network_policies_admit_only_managed_pods_to_the_broker_and_only_scrapers_to_metrics(
    tmp_path: Path,
) -> None:
    rendered = objects(template(CUSTOM_VALUES, tmp_path))
    scrapers = {
        "from": CUSTOM_VALUES["metrics"]["scrapers"],
        "ports": [{"protocol": "TCP", "port": 9100}],
    }
    operator = rendered["NetworkPolicy", f"{RELEASE}-operator"]["spec"]
    assert operator["ingress"] == [scrapers]
    assert operator["policyTypes"] == ["Ingress", "Egress"]
    broker = rendered["NetworkPolicy", f"{RELEASE}-broker"]["spec"]
    ingress, metrics = broker["ingress"]
    assert metrics == scrapers
    assert ingress["ports"] == [{"protocol": "TCP", "port": 9443}]
    assert ingress["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "gymsandbox"}},
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "trainers"}}},
    ]
    api_server = broker["egress"][1]
    assert api_server == {
        "ports": [{"protocol": "TCP", "port": 6443}],
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
    }


def test_network_policies_can_be_turned_off(tmp_path: Path) -> None:
    rendered = objects(template({"networkPolicy": {"enabled": False}}, tmp_path))
    assert not [key for key in rendered if key[0] == "NetworkPolicy"]


def test_metrics_by_default_exclude_the_pods_gymsandbox_runs_and_may_be_turned_off(tmp_path: Path) -> None:
    rendered = objects(template(None, tmp_path))
    (scrapers,) = rendered["NetworkPolicy", f"{RELEASE}-operator"]["spec"]["ingress"]
    assert scrapers["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {
                "matchExpressions": [
                    {"key": "app.kubernetes.io/managed-by", "operator": "NotIn", "values": ["gymsandbox"]}
                ]
            },
        }
    ]
    assert ("ServiceMonitor", f"{RELEASE}-metrics") not in rendered  # off unless asked
    service = rendered["Service", f"{RELEASE}-metrics"]["spec"]
    assert (service["clusterIP"], service["ports"][0]["targetPort"]) == ("None", "metrics")
    for name in ("operator", "broker"):
        (container,) = rendered["Deployment", f"{RELEASE}-{name}"]["spec"]["template"]["spec"]["containers"]
        assert "--metrics-listen=0.0.0.0:9090" in container["args"]
    off = objects(template({"metrics": {"enabled": False}}, tmp_path))
    assert ("Service", f"{RELEASE}-metrics") not in off
    assert off["NetworkPolicy", f"{RELEASE}-operator"]["spec"]["ingress"] == []
    for name in ("operator", "broker"):
        (container,) = off["Deployment", f"{RELEASE}-{name}"]["spec"]["template"]["spec"]["containers"]
        assert not any(a.startswith("--metrics-listen") for a in container["args"])


def test_a_metrics_port_already_taken_is_refused_by_name(tmp_path: Path) -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION,
        values={"metrics": {"port": 8443}}, tmp=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert "metrics.port 8443 is already taken by broker.port or operator.healthPort" in result.stderr
