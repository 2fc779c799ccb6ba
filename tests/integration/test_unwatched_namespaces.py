"""A GymHost or EpisodeSandbox created in a namespace the release does not watch used to look healthy: no
status, no event, and kstatus (Flux) reads an object without conditions as Current. With
policy.watchNamespaces set, the chart's ValidatingAdmissionPolicy refuses the create, naming what is served.

The policy is the chart's as `helm template` renders it; only its binding is narrowed to this test's two
namespaces (by a label), so that it refuses nothing of the tests running beside it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import GROUP, VERSION
from tests.support.chart import CHART
from tests.support.cluster import Cluster
from tests.support.episodes import episode
from tests.support.gymhosts import eventually, sample

pytestmark = pytest.mark.integration

RELEASE = "vap-test"
LABEL = "gymsandbox.dev/test-watched-namespaces"


def rendered_policy(cluster: Cluster, watched: list[str]) -> list[dict[str, Any]]:
    result = cluster.helm(
        "template", RELEASE, str(CHART), "--kube-version", "1.36.0",
        "--show-only", "templates/unwatched-namespaces-policy.yaml",
        "--set-json", f"policy.watchNamespaces={json.dumps(watched)}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def create(api: client.CustomObjectsApi, namespace: str, plural: str, body: dict[str, Any]) -> None:
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body, dry_run="All")


def test_creates_outside_the_watched_namespaces_are_refused_naming_them(
    cluster: Cluster, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, own_namespace: str
) -> None:
    watched, unwatched = namespace, own_namespace
    policy, binding = rendered_policy(cluster, [watched])
    mark = uuid.uuid4().hex[:12]
    for name in (watched, unwatched):
        core.patch_namespace(name, {"metadata": {"labels": {LABEL: mark}}})
    name = f"{policy['metadata']['name']}-{mark}"
    policy["metadata"]["name"] = name
    binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {LABEL: mark}}}
    admission = client.AdmissionregistrationV1Api(api_client)
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    custom = client.CustomObjectsApi(api_client)
    _, host = sample()
    try:

        def refused() -> str | None:
            try:
                create(custom, unwatched, "gymhosts", host)
            except ApiException as e:
                return str(e.body) if e.status in (400, 403, 422) else None
            return None

        # The API server compiles a new policy within a second or so.
        message = eventually(refused, timeout=20, what="the policy to refuse a GymHost outside watched")
        assert f"no gymsandbox operator serves namespace {unwatched}" in message, message
        assert f"release {RELEASE} watches only {watched} (policy.watchNamespaces)" in message, message
        with pytest.raises(ApiException) as episode_refused:
            create(custom, unwatched, "episodesandboxes", episode("e-1"))
        assert f"serves namespace {unwatched}" in str(episode_refused.value.body)
        create(custom, watched, "gymhosts", host)  # the watched namespace: admitted (a dry run)
        create(custom, watched, "episodesandboxes", episode("e-1"))
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
