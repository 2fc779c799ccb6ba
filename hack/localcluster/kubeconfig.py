"""kubeconfig files: the admin's and the control-plane components' (a bearer token), and the real node's
components' (a client certificate)."""

from __future__ import annotations

import base64
import textwrap
from pathlib import Path

from hack.localcluster.paths import Paths


def write_token_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str) -> None:
    """A kubeconfig that authenticates with a bearer token, trusting `ca`."""
    ca_data = base64.b64encode(ca.read_bytes()).decode()
    path.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: gymsandbox-local
          cluster:
            server: {server}
            certificate-authority-data: {ca_data}
        users:
        - name: {user}
          user:
            token: {token}
        contexts:
        - name: gymsandbox-local
          context:
            cluster: gymsandbox-local
            user: {user}
        current-context: gymsandbox-local
        """)
    )
    path.chmod(0o600)


def write_certificate_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    """A kubeconfig that authenticates as pki/USER.crt (and .key), trusting pki/ca.crt."""
    path.write_text(
        textwrap.dedent(f"""\
            apiVersion: v1
            kind: Config
            clusters:
            - name: local
              cluster: {{server: "{server}", certificate-authority: "{pki / "ca.crt"}"}}
            users:
            - name: {user}
              user: {{client-certificate: "{pki / f"{user}.crt"}", client-key: "{pki / f"{user}.key"}"}}
            contexts:
            - name: local
              context: {{cluster: local, user: {user}}}
            current-context: local
            """)
    )
    path.chmod(0o600)


def admin_token(paths: Paths) -> str | None:
    """The bearer token of the admin kubeconfig `up` wrote (None when it holds none)."""
    for line in paths.kubeconfig.read_text().splitlines():
        if line.strip().startswith("token:"):
            return line.split(":", 1)[1].strip()
    return None
