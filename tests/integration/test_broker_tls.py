"""The broker over HTTPS with the certificate the chart makes (broker.tls.enabled): a host that trusts the CA
the policy hands it (GYMSANDBOX_BROKER_CA) reaches the broker under its Service name; without that CA, under
another name, or in plain HTTP, nothing is served, so a lease token never crosses the network in the clear."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gymsandbox.client.broker import broker_ssl_context
from tests.support.chart import CHART, OPERATOR_NAMESPACE, Identities
from tests.support.cluster import Cluster
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.integration

RELEASE = "gymsandbox"
SERVICE_NAME = f"{RELEASE}-broker.{OPERATOR_NAMESPACE}.svc"


@pytest.fixture(scope="module")
def tls_broker(
    cluster: Cluster,
    identities: Identities,
    policy_file: Path,
    broker: BrokerProcess,  # the session's: the signing key exists
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[BrokerProcess]:
    """A broker serving the chart's generated certificate, mounted as the chart mounts its Secret."""
    rendered = cluster.helm(
        "template", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
        "--kube-version", "1.36.3", "--set", "broker.tls.enabled=true",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    docs: dict[tuple[str, str], Any] = {
        (d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered.stdout) if d
    }
    secret = docs["Secret", f"{RELEASE}-broker-tls"]["data"]
    policy = yaml.safe_load(docs["ConfigMap", f"{RELEASE}-policy"]["data"]["policy.yaml"])
    tls_dir = tmp_path_factory.mktemp("broker-tls")
    for key in ("tls.crt", "tls.key"):
        (tls_dir / key).write_bytes(base64.b64decode(secret[key]))
    ca = policy["broker"]["caBundle"]
    assert ca == base64.b64decode(secret["ca.crt"]).decode()
    log = tmp_path_factory.mktemp("tls-broker") / "broker.log"
    handle = BrokerProcess.launch(identities.broker, policy_file, log, tls_dir=tls_dir, ca_bundle=ca)
    yield handle
    handle.stop()


def get(broker: BrokerProcess, path: str, verify: Any, name: str = SERVICE_NAME, **headers: str) -> int:
    """GET `path` from the broker at 127.0.0.1, presenting `name` as the server name to verify."""
    with httpx.Client(base_url=broker.url, verify=verify, timeout=10) as http:
        return http.get(path, headers=headers, extensions={"sni_hostname": name}).status_code


def test_a_host_trusting_the_policys_ca_reaches_the_broker_by_its_service_name(
    tls_broker: BrokerProcess, host_token: str
) -> None:
    trusted = broker_ssl_context(tls_broker.ca_bundle or "")
    assert get(tls_broker, "/healthz", trusted) == 200
    assert get(tls_broker, "/v1/episodes", trusted, Authorization=f"Bearer {host_token}") == 200


def test_without_the_ca_or_under_another_name_the_certificate_is_refused(tls_broker: BrokerProcess) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        get(tls_broker, "/healthz", True)  # the system's CAs never signed it
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        get(tls_broker, "/healthz", broker_ssl_context(tls_broker.ca_bundle or ""), name="broker.example.com")


def test_plain_http_is_not_served(tls_broker: BrokerProcess, host_token: str) -> None:
    plain = tls_broker.url.replace("https://", "http://")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{plain}/v1/episodes", headers={"Authorization": f"Bearer {host_token}"}, timeout=10)
