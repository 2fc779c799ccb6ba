"""The chart's RBAC is enough, and every rule in it is needed.

The whole integration suite runs the operator and broker as the chart's ServiceAccounts
(tests/support/fixtures.py:
`identities`), so the chart's rules are enough. Here: calls outside them are denied, and each rule is needed:
for every rule in templates/rbac.yaml, a second release (`rbac-audit`) loses that one rule and the test its
`# needed by` comment names is run against it in a child pytest, which must fail; with all rules it passes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hack.localcluster.paths import ROOT
from kubernetes import client, config

from gymsandbox.leases import SIGNING_KEY_SECRET
from tests.support.chart import CHART, OPERATOR_NAMESPACE, Identities, chart_values, release_finalizers
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

AUDIT_RELEASE = "rbac-audit"
AUDIT_NAMESPACE = "gymsandbox-rbac-audit"
AUDIT_PREFIXES = ("ra", "rb")  # namespaces of the child runs; no other operator watches them
RBAC_TEMPLATE = CHART / "templates" / "rbac.yaml"
CHILD_TIMEOUT = 600
CHILD_HOST_WAIT_SECONDS = 10  # hosts reach their reason in one to three seconds; without a rule, never


@dataclass(frozen=True)
class Rule:
    """One rule of one role in templates/rbac.yaml, and the test that needs it."""

    role_kind: str  # ClusterRole or Role
    role_suffix: str  # operator or broker: the role is named <release>-<suffix>
    index: int
    grants: str  # resources:verbs
    needed_by: str

    @property
    def id(self) -> str:
        return f"{self.role_suffix}-{self.role_kind}-{self.grants}"


_RULE = re.compile(
    r"^\s*# needed by (\S+)\n\s*- apiGroups: \[.*\]\n\s*resources: \[(.*)\]\n(?:\s*resourceNames: .*\n)?"
    r"\s*verbs: \[(.*)\]$",
    re.MULTILINE,
)


def declared_rules() -> list[Rule]:
    """Rules in template order, each with the test named by the `# needed by <nodeid>` line right above it."""
    rules: list[Rule] = []
    for document in RBAC_TEMPLATE.read_text().split("\n---\n"):
        kind = re.search(r"^kind: (ClusterRole|Role)$", document, re.MULTILINE)
        if kind is None:
            continue
        suffix = re.search(r'name: \{\{ include "gymsandbox\.(operator|broker)Name"', document)
        assert suffix is not None, document
        found = _RULE.findall(document)
        assert len(found) == document.count("- apiGroups:"), (
            f"a rule of {kind.group(1)} {suffix.group(1)} names no test"
        )
        for index, (needed_by, resources, verbs) in enumerate(found):
            what = f"{resources}:{verbs}".replace(", ", "+")
            rules.append(Rule(kind.group(1), suffix.group(1), index, what, needed_by))
    return rules


RULES = declared_rules()


def test_every_rule_names_a_test_that_exists() -> None:
    assert len(RULES) >= 10
    for rule in RULES:
        path, _, name = rule.needed_by.partition("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.MULTILINE), rule


# --- denied: what the chart does not grant -------------------------------------------------------------


def _api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def _forbidden(call: object, *args: object, **kwargs: object) -> None:
    with pytest.raises(client.exceptions.ApiException) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    assert caught.value.status == 403, caught.value


@pytest.fixture
def ready_host(cluster: Cluster, operator: object, namespace: str, hosts: Hosts) -> str:
    apply(cluster, namespace, *sample())
    hosts.wait_reason("swe-gym-run-1", "HostReady")
    return "swe-gym-run-1"


def test_the_broker_cannot_read_lease_secrets_or_touch_pods(
    identities: Identities, namespace: str, ready_host: str
) -> None:
    core = client.CoreV1Api(_api(identities.broker))
    core.read_namespaced_secret(SIGNING_KEY_SECRET, OPERATOR_NAMESPACE)  # the one Secret it may read
    _forbidden(core.read_namespaced_secret, f"{ready_host}-lease", namespace)
    _forbidden(core.list_namespaced_secret, OPERATOR_NAMESPACE)
    _forbidden(core.list_namespaced_pod, namespace)
    _forbidden(core.delete_namespaced_pod, f"{ready_host}-host", namespace)
    custom = client.CustomObjectsApi(_api(identities.broker))
    _forbidden(
        custom.delete_namespaced_custom_object,
        "gymsandbox.dev",
        "v1alpha1",
        namespace,
        "gymhosts",
        ready_host,
    )


def _exec_refusal(core: client.CoreV1Api, namespace: str, pod: str, container: str) -> tuple[int, str]:
    """What the API server answers the broker's exec, before any kubelet is asked (admission comes first)."""
    with pytest.raises(client.exceptions.ApiException) as caught:
        core.connect_post_namespaced_pod_exec(pod, namespace, command=["true"], container=container)
    return caught.value.status, str(caught.value.body)


def test_the_broker_cannot_exec_into_anything_but_a_sandbox_container(
    identities: Identities, namespace: str, ready_host: str
) -> None:
    """RBAC grants the broker pods/exec everywhere; the chart's ValidatingAdmissionPolicy confines it to the
    sandbox container of pods named as episode pods, outside the release and kube-* namespaces."""
    core = client.CoreV1Api(_api(identities.broker))
    denied = "the gymsandbox broker may exec only into the sandbox container of an episode pod"
    for target_namespace, pod, container in [
        (namespace, f"{ready_host}-host", "gym"),  # a host pod
        (namespace, "lookalike-sandbox", "gym"),  # the name of a sandbox pod, another container
        (OPERATOR_NAMESPACE, "lookalike-sandbox", "sandbox"),  # the release's own namespace
        ("kube-system", "lookalike-sandbox", "sandbox"),
    ]:
        status, body = _exec_refusal(core, target_namespace, pod, container)
        assert (status, denied in body) == (403, True), (target_namespace, pod, container, body)
    # A sandbox container passes admission: what stops it here is only that no such pod exists.
    status, body = _exec_refusal(core, namespace, "lookalike-sandbox", "sandbox")
    assert (status, denied in body) == (404, False), body


def test_the_operator_cannot_exec_or_grant_itself_more(
    identities: Identities, namespace: str, ready_host: str
) -> None:
    api = _api(identities.operator)
    rbac = client.RbacAuthorizationV1Api(api)
    binding = client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="gymsandbox-escalate"),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
        ),
        subjects=[client.RbacV1Subject(kind="User", name="nobody", api_group="rbac.authorization.k8s.io")],
    )
    _forbidden(rbac.create_cluster_role_binding, binding)
    _forbidden(client.AppsV1Api(api).list_namespaced_deployment, OPERATOR_NAMESPACE)
    _forbidden(client.CoreV1Api(api).delete_namespace, namespace)
    _forbidden(
        client.CoreV1Api(api).connect_post_namespaced_pod_exec,
        f"{ready_host}-host",
        namespace,
        command=["true"],
    )


def test_the_operator_logs_no_permission_errors(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    """RBAC denies the operator nothing, not even what it would retry and survive. (A 403 for creating in a
    terminating namespace is admission, not RBAC, and expected.)"""
    apply(cluster, namespace, *sample())
    hosts.wait_reason("swe-gym-run-1", "HostReady")
    denied = [
        line for line in operator.output().splitlines() if re.search(r"is forbidden: User .* cannot ", line)
    ]
    assert denied == []


# --- needed: each rule, removed, fails the test it names -----------------------------------------------


@pytest.fixture(scope="module")
def audit_release(cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    values = tmp_path_factory.mktemp("audit") / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values()))
    result = cluster.helm(
        "upgrade", "--install", AUDIT_RELEASE, str(CHART), "--skip-crds",
        "--namespace", AUDIT_NAMESPACE, "--create-namespace",
        "--values", str(values), "--wait", "--timeout", "180s",
    )  # fmt: skip
    assert result.returncode == 0, f"helm install failed:\n{result.stdout}\n{result.stderr}"
    # It stays installed for the next run (the cluster may be reused); each test leaves its roles whole.
    return AUDIT_RELEASE


def child_pytest(nodeids: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    """Run tests in a fresh pytest against the audit release's identities and namespaces."""
    env = {
        **os.environ,
        "GYMSANDBOX_TEST_RELEASE": AUDIT_RELEASE,
        "GYMSANDBOX_TEST_RELEASE_NAMESPACE": AUDIT_NAMESPACE,
        "GYMSANDBOX_TEST_RELEASE_READY": "1",
        "GYMSANDBOX_TEST_SHARED_PREFIX": AUDIT_PREFIXES[0],
        "GYMSANDBOX_TEST_OWN_PREFIX": AUDIT_PREFIXES[1],
        "GYMSANDBOX_TEST_HOST_WAIT_SECONDS": str(CHILD_HOST_WAIT_SECONDS),
    }
    argv = [
        sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
        "--timeout=240", "--durations=5", *nodeids,
    ]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False
    )
    log.write_text(result.stdout + result.stderr)
    return result


def _roles(api: client.ApiClient, rule: Rule) -> tuple[object, object]:
    rbac = client.RbacAuthorizationV1Api(api)
    name = f"{AUDIT_RELEASE}-{rule.role_suffix}"
    if rule.role_kind == "ClusterRole":
        return rbac.read_cluster_role(name), lambda body: rbac.replace_cluster_role(name, body)
    return rbac.read_namespaced_role(name, AUDIT_NAMESPACE), lambda body: rbac.replace_namespaced_role(
        name, AUDIT_NAMESPACE, body
    )


def test_with_every_rule_the_named_tests_pass(audit_release: str, tmp_path: Path) -> None:
    """The control: the failures below come from the removed rule, not from the audit set-up."""
    nodeids = sorted({rule.needed_by for rule in RULES})
    result = child_pytest(nodeids, tmp_path / "child.log")
    assert result.returncode == 0, result.stdout[-4000:]


@pytest.mark.parametrize("rule", RULES, ids=[rule.id for rule in RULES])
def test_without_this_rule_the_named_test_fails(
    rule: Rule, audit_release: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    role, replace = _roles(api_client, rule)
    rules = list(role.rules or [])  # type: ignore[attr-defined]
    removed = rules.pop(rule.index)
    role.rules = rules  # type: ignore[attr-defined]
    replace(role)  # type: ignore[operator]
    try:
        result = child_pytest([rule.needed_by], tmp_path / "child.log")
    finally:
        role, replace = _roles(api_client, rule)
        role.rules = [*(role.rules or [])[: rule.index], removed, *(role.rules or [])[rule.index :]]  # type: ignore[attr-defined]
        replace(role)  # type: ignore[operator]
        # An operator that lost a rule may leave finalizers behind in the child's namespaces.
        release_finalizers(api_client, tuple(f"{prefix}-" for prefix in AUDIT_PREFIXES))
    assert result.returncode == 1, (
        f"{rule.needed_by} did not fail without {removed}:\n{result.stdout[-3000:]}"
    )
