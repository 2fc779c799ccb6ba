"""Attacker B writes a GymHost whose spec is valid but larger than the 256 KiB the API server allows in
annotations (128 variables of 4 KiB). kopf, which ran hosts once, kept a copy of the last handled spec in an
annotation, so such an object could never be marked handled: every event handled it again, each ending in a
refused patch. The engine keeps nothing in annotations; the host is handled once like any other."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gymsandbox.api.names import GROUP, VERSION
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration


def test_a_spec_too_large_for_an_annotation_is_handled_like_any_other(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, attacker_b: client.ApiClient
) -> None:
    claim, host = sample()
    host["spec"]["env"] = [{"name": f"PADDING_{i:03d}", "value": "x" * 4096} for i in range(128)]
    offset = operator.log.stat().st_size
    apply(cluster, namespace, claim)  # kubectl apply would copy the host into an annotation of its own
    client.CustomObjectsApi(attacker_b).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "gymhosts", host
    )
    hosts.wait_reason(host["metadata"]["name"], "HostReady")
    host = hosts.get(host["metadata"]["name"]) or {}
    assert len(json.dumps(host["spec"])) > 256 * 1024
    ours = [k for k in host["metadata"].get("annotations") or {} if k.startswith(f"{GROUP}/")]
    assert ours == []  # the engine keeps nothing about an object in its annotations
    with operator.log.open("rb") as log:
        log.seek(offset)
        assert b"Too long" not in log.read()
