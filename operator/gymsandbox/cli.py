"""The `gymsandbox` command: `operator`, `broker`, `policy check`, and the generators (`crds`, `chart-schema`,
`dashboard`, `docs`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gymsandbox import __version__

# What the commands but --help and --version need: the `operator` extra. They are imported by the command
# that uses them, so that the light install (the host-side SDK) still answers --help and --version.
OPERATOR_EXTRA = ("kubernetes", "yaml", "fastapi", "starlette", "uvicorn", "prometheus_client")

Address = tuple[str, int]
Files = Mapping[str, str]

# Commands that write a directory of generated files.
GENERATED_DIRECTORIES = ("crds", "docs")


def generated_directory(command: str) -> tuple[Callable[[], Files], Callable[[Path], Files]]:
    """How to render a directory command's files, and how to read what is there."""
    from gymsandbox import crdgen, docgen  # noqa: PLC0415 - the operator extra, loaded by its command

    if command == "crds":
        return crdgen.render_crd_files, crdgen.read_crd_files
    return docgen.render_docs, docgen.read_docs


def listen_address(text: str) -> Address:
    """`address:port` (an IPv6 address in brackets) for a server to bind."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be address:port, not {text!r}")
    return host.strip("[]"), int(port)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gymsandbox", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gymsandbox {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    crds = commands.add_parser("crds", help="write the CustomResourceDefinitions generated from the models")
    crds.add_argument(
        "--output-dir", type=Path, default=Path("crds"), help="directory of the YAML files (default: crds)"
    )
    crds.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files differ from the models"
    )
    schema = commands.add_parser(
        "chart-schema", help="write the chart's values.schema.json (its policy part comes from the models)"
    )
    schema.add_argument(
        "--output",
        type=Path,
        default=Path("charts/gymsandbox-operator/values.schema.json"),
        help="file to write (default: charts/gymsandbox-operator/values.schema.json)",
    )
    schema.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file differs")
    board = commands.add_parser("dashboard", help="write the Grafana dashboard of the exported metrics")
    board.add_argument(
        "--output",
        type=Path,
        default=Path("docs/dashboard.json"),
        help="file to write (default: docs/dashboard.json)",
    )
    board.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file differs")
    docs = commands.add_parser(
        "docs", help="write the API reference and the troubleshooting table generated from the code"
    )
    docs.add_argument(
        "--output-dir", type=Path, default=Path("docs"), help="directory of the pages (default: docs)"
    )
    docs.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the pages differ from the code"
    )
    policy = commands.add_parser("policy", help="check a cluster policy offline")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_commands.add_parser(
        "check",
        help="validate cluster policies as the operator does at start: policy files, or the manifests"
        " `helm template` prints (each ConfigMap with a policy.yaml); exit 1 if any is invalid",
    )
    check.add_argument("files", nargs="+", help="files to check; - reads standard input")
    operator = commands.add_parser("operator", help="run the operator (reconciles GymHost objects)")
    operator.add_argument("--policy", help="cluster policy YAML (default: $GYMSANDBOX_POLICY)")
    operator.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; default: the policy's watchNamespaces, else all)",
    )
    operator.add_argument(
        "--liveness", help="serve the liveness probe here, e.g. http://0.0.0.0:8080/healthz"
    )
    operator.add_argument(
        "--operator-namespace",
        default=os.environ.get("GYMSANDBOX_NAMESPACE", "gymsandbox-system"),
        help="where the lease signing key lives (default: $GYMSANDBOX_NAMESPACE or gymsandbox-system)",
    )
    operator.add_argument(
        "--verbose", action="store_true", help="log every handler's activity, routine successes included"
    )
    operator.add_argument(
        "--log-format",
        choices=["full", "plain", "json"],
        default="full",
        help="full (time, logger, level; the default), plain (messages only) or json (a record per line)",
    )
    operator.add_argument(
        "--metrics-listen",
        type=listen_address,
        help="serve Prometheus metrics on address:port, e.g. 0.0.0.0:9090 (default: off)",
    )
    broker = commands.add_parser("broker", help="serve the episode broker (HTTP) for Gym hosts")
    broker.add_argument("--policy", help="cluster policy YAML (default: $GYMSANDBOX_POLICY)")
    broker.add_argument(
        "--listen",
        type=listen_address,
        default="0.0.0.0:8443",
        help="address:port to serve on (default 0.0.0.0:8443)",
    )
    broker.add_argument(
        "--metrics-listen",
        type=listen_address,
        help="serve Prometheus metrics on address:port, apart from the API (default: off)",
    )
    broker.add_argument(
        "--tls-dir",
        default=os.environ.get("GYMSANDBOX_BROKER_TLS_DIR"),
        help="serve HTTPS with tls.crt and tls.key from this directory, e.g. a mounted kubernetes.io/tls"
        " Secret (default: $GYMSANDBOX_BROKER_TLS_DIR; without it, plain HTTP)",
    )
    broker.add_argument(
        "--max-calls-per-host",
        type=positive_int,
        help="commands and transfers one GymHost may have in flight at once; past it, 429 (default"
        f" {default_calls_per_host()}). Size it to the rollouts a host runs at once",
    )
    broker.add_argument(
        "--operator-namespace",
        default=os.environ.get("GYMSANDBOX_NAMESPACE", "gymsandbox-system"),
        help="where the lease signing key lives (default: $GYMSANDBOX_NAMESPACE or gymsandbox-system)",
    )
    return parser


def _check_policies(files: Sequence[str]) -> int:
    """`gymsandbox policy check`: a line per policy found, the problems under it; exit 1 if any has one, 2 if
    a file cannot be read."""
    from gymsandbox.policy.check import check_policies  # noqa: PLC0415 - the operator extra (PyYAML)

    failed = False
    for name in files:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            print(f"{name}: cannot read it ({getattr(e, 'strerror', None) or e})", file=sys.stderr)
            return 2
        for checked in check_policies(text, "standard input" if name == "-" else name):
            failed = failed or bool(checked.problems)
            print(f"{checked.source}: {'invalid' if checked.problems else 'ok'}")
            for problem in checked.problems:
                print(f"  {problem}")
    return 1 if failed else 0


def default_calls_per_host() -> str:
    try:
        from gymsandbox.broker.service import BrokerSettings  # noqa: PLC0415 - the operator extra
    except ModuleNotFoundError:  # the light install: the broker does not run here anyway
        return "the broker's"
    return str(BrokerSettings.max_calls_per_host)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] not in OPERATOR_EXTRA:
            raise
        print(
            f"gymsandbox {args.command}: {missing.name} is missing; this command needs:"
            " pip install 'gymsandbox[operator]'",
            file=sys.stderr,
        )
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "policy":
        return _check_policies(args.files)
    if args.command in (*GENERATED_DIRECTORIES, "chart-schema", "dashboard"):
        return _generate(args)
    if args.command == "broker":
        return _broker(
            args.policy,
            args.operator_namespace,
            args.listen,
            args.metrics_listen,
            args.tls_dir,
            max_calls_per_host=args.max_calls_per_host,
        )
    return _operator(
        args.policy,
        args.namespace,
        args.operator_namespace,
        liveness=args.liveness,
        verbose=args.verbose,
        log_format=args.log_format,
        metrics_listen=args.metrics_listen,
    )


def _generate(args: argparse.Namespace) -> int:
    """The generators: a directory of files (`crds`, `docs`) or one file (`chart-schema`, `dashboard`)."""
    if args.command in GENERATED_DIRECTORIES:
        render, read = generated_directory(args.command)
        return _generated_files(args.output_dir, render(), read, args.command, check=args.check)
    if args.command == "chart-schema":
        from gymsandbox import chartschema  # noqa: PLC0415 - the operator extra, loaded by its command

        return _generated(args.output, chartschema.render_values_schema(), "chart-schema", check=args.check)
    from gymsandbox import dashboard  # noqa: PLC0415 - the operator extra, loaded by its command

    return _generated(args.output, dashboard.render_dashboard(), "dashboard", check=args.check)


def _generated_files(
    output_dir: Path,
    expected: Files,
    read: Callable[[Path], Files],
    command: str,
    *,
    check: bool,
) -> int:
    """Write a directory's generated files, or with `check` only compare them (`read` finds them)."""
    from gymsandbox import crdgen  # noqa: PLC0415 - the operator extra, loaded by its command

    if not check:
        for path in crdgen.write_crd_files(output_dir, expected):
            print(f"wrote {path}")
        return 0
    problems = crdgen.drift(expected, read(output_dir))
    if not problems:
        return 0
    print(f"{output_dir} is out of date with the code:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"run `gymsandbox {command} --output-dir {output_dir}` to regenerate", file=sys.stderr)
    return 1


def _generated(output: Path, expected: str, command: str, *, check: bool) -> int:
    """Write a generated file, or with `check` only compare it."""
    if not check:
        output.write_text(expected)
        print(f"wrote {output}")
        return 0
    if output.exists() and output.read_text() == expected:
        return 0
    print(f"{output} is out of date with the code; run `gymsandbox {command}`", file=sys.stderr)
    return 1


def _operator(
    policy: str | None,
    namespaces: list[str],
    operator_namespace: str,
    *,
    liveness: str | None,
    verbose: bool,
    log_format: str,
    metrics_listen: Address | None,
) -> int:
    policy = policy or os.environ.get("GYMSANDBOX_POLICY")
    if not policy:
        print(
            "gymsandbox operator: no cluster policy: pass --policy FILE or set GYMSANDBOX_POLICY",
            file=sys.stderr,
        )
        return 2
    from gymsandbox.kube.connect import ConnectionSetupError  # noqa: PLC0415 - the operator extra
    from gymsandbox.kube.signing import SigningKeyError  # noqa: PLC0415
    from gymsandbox.metrics import MetricsListenError  # noqa: PLC0415
    from gymsandbox.policy.cluster import PolicyError  # noqa: PLC0415
    from gymsandbox.runner import run_operator  # noqa: PLC0415

    try:
        run_operator(
            Path(policy),
            namespaces,
            operator_namespace,
            liveness=liveness,
            verbose=verbose,
            log_format=log_format,
            metrics_listen=metrics_listen,
        )
    except (PolicyError, SigningKeyError, MetricsListenError, ConnectionSetupError) as e:
        print(f"gymsandbox operator: refusing to start: {e}", file=sys.stderr)
        return 2
    return 0


def _broker(
    policy: str | None,
    operator_namespace: str,
    listen: Address,
    metrics_listen: Address | None,
    tls_dir: str | None,
    *,
    max_calls_per_host: int | None,
) -> int:
    policy = policy or os.environ.get("GYMSANDBOX_POLICY")
    if not policy:
        print(
            "gymsandbox broker: no cluster policy: pass --policy FILE or set GYMSANDBOX_POLICY",
            file=sys.stderr,
        )
        return 2
    from gymsandbox.broker.server import TLSFilesError, run_broker  # noqa: PLC0415 - the operator extra
    from gymsandbox.broker.service import BrokerSettings  # noqa: PLC0415
    from gymsandbox.kube.connect import ConnectionSetupError  # noqa: PLC0415
    from gymsandbox.kube.signing import SigningKeyError  # noqa: PLC0415
    from gymsandbox.metrics import MetricsListenError  # noqa: PLC0415
    from gymsandbox.policy.cluster import PolicyError  # noqa: PLC0415

    settings = (
        BrokerSettings()
        if max_calls_per_host is None
        else BrokerSettings(max_calls_per_host=max_calls_per_host)
    )
    try:
        run_broker(
            Path(policy),
            operator_namespace,
            listen,
            metrics_listen,
            Path(tls_dir) if tls_dir else None,
            settings=settings,
        )
    except (PolicyError, SigningKeyError, MetricsListenError, TLSFilesError, ConnectionSetupError) as e:
        print(f"gymsandbox broker: refusing to start: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
