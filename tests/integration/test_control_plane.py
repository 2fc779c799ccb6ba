"""The local control plane is a real one: scheduling by RuntimeClass, Pod Security, GC, authn and authz."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.gymhosts import eventually

pytestmark = pytest.mark.integration

# RuntimeClass -> the value of gymsandbox.dev/runtime its scheduling selects. `crun` lands on kwok-crun-0, or
# on the real node where hack/localcluster/node.py runs one (then kwok-crun-0 does not exist).
RUNTIME_CLASSES = {"kata-qemu": "kata", "crun": "crun"}


def restricted_pod(name: str, **spec: object) -> client.V1Pod:
    container = client.V1Container(
        name="main",
        image="registry.example.com/gym/echo:1",
        security_context=client.V1SecurityContext(
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
            run_as_non_root=True,
            run_as_user=1000,
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[container], automount_service_account_token=False, **spec),
    )


def nodes_of(core: client.CoreV1Api, runtime: str) -> set[str]:
    return {n.metadata.name for n in core.list_node(label_selector=f"gymsandbox.dev/runtime={runtime}").items}


def is_kwok(core: client.CoreV1Api, node: str) -> bool:
    return bool(core.read_node(node).metadata.labels.get("type") == "kwok")


def test_all_nodes_are_ready(core: client.CoreV1Api) -> None:
    nodes = core.list_node().items
    for runtime in RUNTIME_CLASSES.values():
        assert len(nodes_of(core, runtime)) == 1, f"one node for runtime {runtime}"
    for node in nodes:
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True", f"node {node.metadata.name} is not Ready: {ready.reason}"


@pytest.mark.parametrize(("runtime_class", "runtime"), sorted(RUNTIME_CLASSES.items()))
def test_pod_lands_only_on_the_node_of_its_runtime_class(
    core: client.CoreV1Api, namespace: str, runtime_class: str, runtime: str
) -> None:
    names = [f"pod-{i}" for i in range(4)]
    for name in names:
        core.create_namespaced_pod(namespace, restricted_pod(name, runtime_class_name=runtime_class))
    (node,) = nodes_of(core, runtime)
    if not is_kwok(core, node):  # a real node cannot pull this image: placement is what is checked here
        placed = lambda: all(core.read_namespaced_pod(n, namespace).spec.node_name for n in names)  # noqa: E731
        assert eventually(placed, timeout=60, what=f"{runtime_class} pods scheduled")
        assert {core.read_namespaced_pod(n, namespace).spec.node_name for n in names} == {node}
        return

    def all_running_and_ready() -> list[client.V1Pod] | None:
        pods = [core.read_namespaced_pod(name, namespace) for name in names]
        ok = all(
            p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods
        )
        return pods if ok else None

    pods = eventually(all_running_and_ready, timeout=60, what=f"{runtime_class} pods Running and Ready")
    assert {p.spec.node_name for p in pods} == {node}


def test_privileged_pod_is_rejected_in_a_restricted_namespace(core: client.CoreV1Api, namespace: str) -> None:
    pod = restricted_pod("privileged")
    pod.spec.containers[0].security_context = client.V1SecurityContext(privileged=True)
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod)
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body
    assert "privileged" in refused.value.body


def test_deleting_an_owner_deletes_its_dependents(core: client.CoreV1Api, namespace: str) -> None:
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    reference = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, block_owner_deletion=True
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[reference])),
    )
    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except ApiException as e:
            return e.status == 404
        return False

    eventually(dependent_gone, timeout=60, what="the garbage collector to delete the dependent")


def _client_with_token(api_client: client.ApiClient, token: str) -> client.CoreV1Api:
    configuration = client.Configuration()
    configuration.host = api_client.configuration.host
    configuration.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.CoreV1Api(client.ApiClient(configuration))


def test_wrong_bearer_token_is_unauthorized(api_client: client.ApiClient, namespace: str) -> None:
    stranger = _client_with_token(api_client, "not-a-valid-token")
    with pytest.raises(ApiException) as refused:
        stranger.list_namespaced_pod(namespace)
    assert refused.value.status == 401


def test_service_account_without_binding_is_forbidden(
    core: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody"))
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = core.create_namespaced_service_account_token("nobody", namespace, request).status.token
    nobody = _client_with_token(api_client, token)
    with pytest.raises(ApiException) as refused:
        nobody.list_namespaced_pod(namespace)
    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body
