"""The cluster's certificates: a CA of its own (openssl), the serving and client certificates it signs,
the service-account key pair and the bearer tokens of the components."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(pki: Path) -> dict[str, str]:
    """CA, serving cert, service-account key pair and bearer tokens. Returns tokens by user."""
    pki.mkdir(parents=True, exist_ok=True)
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "365",
        "-subj",
        "/CN=gymsandbox-local-ca",
        "-keyout",
        str(pki / "ca.key"),
        "-out",
        str(pki / "ca.crt"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    serving_cert(
        pki,
        "server",
        "kube-apiserver",
        "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
    )
    # kwok's kubelet server (exec, logs), so the API server can verify whom it sends exec streams to.
    serving_cert(pki, "kwok", "kwok-kubelet", "IP:127.0.0.1")
    # The API server's identity towards kubelets (exec, logs): the real node accepts no anonymous client.
    issue_cert(pki, "kubelet-client", "/CN=kube-apiserver-kubelet-client", "clientAuth")
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    users = {
        "admin": ("admin", "system:masters"),
        "kube-controller-manager": ("system:kube-controller-manager", ""),
        "kube-scheduler": ("system:kube-scheduler", ""),
        "kwok": ("kwok", "system:masters"),
    }
    tokens = {name: secrets.token_hex(24) for name in users}
    lines = [f'{tokens[name]},{user},{user},"{groups}"' for name, (user, groups) in users.items()]
    (pki / "tokens.csv").write_text("\n".join(lines) + "\n")
    for path in pki.iterdir():
        path.chmod(0o600)
    return tokens


def serving_cert(pki: Path, name: str, common_name: str, alt_names: str) -> None:
    """NAME.crt and NAME.key: a TLS server certificate for `alt_names`, signed by the cluster CA."""
    issue_cert(pki, name, f"/CN={common_name}", "serverAuth", alt_names)


def issue_cert(pki: Path, name: str, subject: str, usage: str, alt_names: str = "") -> None:
    """NAME.crt and NAME.key in `pki`, signed by the cluster CA: `usage` is serverAuth or clientAuth."""
    ext = pki / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage={usage}\n" + (f"subjectAltName={alt_names}\n" if alt_names else "")
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        str(pki / f"{name}.key"),
        "-out",
        str(pki / f"{name}.csr"),
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(pki / f"{name}.csr"),
        "-CA",
        str(pki / "ca.crt"),
        "-CAkey",
        str(pki / "ca.key"),
        "-CAcreateserial",
        "-days",
        "365",
        "-extfile",
        str(ext),
        "-out",
        str(pki / f"{name}.crt"),
    )
    (pki / f"{name}.key").chmod(0o600)
