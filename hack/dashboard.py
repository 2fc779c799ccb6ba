"""Render docs/dashboard.json's panels with real data: a benchmark run scraped by a real Prometheus.

    .venv/bin/python -m hack.dashboard [--out docs/dashboard.png] [--rate-window 10s] -- BENCH COMMAND...
    e.g. .venv/bin/python -m hack.dashboard -- .venv/bin/python -m bench.broker --episodes 20

It builds Prometheus from the Go module proxy once (cached under ~/.cache/gymsandbox, keyed by
PROMETHEUS_VERSION in hack/versions.env), starts it on a loopback port scraping every 2 s whatever the bench's
processes announce (bench/common.py writes a file_sd target per operator and broker into
$GYMSANDBOX_METRICS_TARGETS), runs the bench, then evaluates every panel's queries over the run with
Prometheus' query_range API and draws them with matplotlib (pip install -e '.[dashboard]'), one tile per
panel in the dashboard's own layout. Grafana itself is not used (it is AGPL and not built here): the queries
are the dashboard's, evaluated by Prometheus; only the drawing differs. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hack.localcluster.paths import CACHE, ROOT
from hack.localcluster.pins import pin
from hack.localcluster.processes import free_port

try:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
except ImportError:
    raise SystemExit("hack.dashboard needs matplotlib: .venv/bin/pip install -e '.[dashboard]'") from None

SCRAPE_SECONDS = 2


def version() -> str:
    return pin("PROMETHEUS_VERSION")


def prometheus() -> Path:
    pinned = version()
    binary = CACHE / f"prometheus-{pinned}" / "bin" / "prometheus"
    if not binary.exists():
        print(f"building Prometheus {pinned} from the Go module proxy (a few minutes, once)", flush=True)
        env = {**os.environ, "GOBIN": str(binary.parent)}
        module = f"github.com/prometheus/prometheus/cmd/prometheus@{pinned}"
        subprocess.run(["go", "install", module], check=True, env=env)
    return binary


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("prometheus exited; see its log")
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit("prometheus did not become ready")


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": SCRAPE_SECONDS},
        timeout=30,
    ).json()
    if answer.get("status") != "success":
        raise SystemExit(f"Prometheus refused {expr!r}: {answer.get('error')}")
    return list(answer["data"]["result"])


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip() or "value"


def gapped(values: list[list[Any]], start: float) -> tuple[list[float], list[float]]:
    """Points as seconds into the run; a gap (no sample for over two steps) stays a gap, not a line."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in values:
        if v in ("NaN", "+Inf", "-Inf"):
            continue
        if xs and float(t) - start - xs[-1] > 2 * SCRAPE_SECONDS:
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs.append(float(t) - start)
        ys.append(float(v))
    return xs, ys


def render(board: dict[str, Any], url: str, span: tuple[float, float], out: Path, window: str) -> None:
    start, end = span
    panels = [p for p in board["panels"] if p["type"] != "row"]
    row_of = {y: i for i, y in enumerate(sorted({p["gridPos"]["y"] for p in panels}))}
    figure = pyplot.figure(figsize=(18, 3.2 * len(row_of)))
    grid = figure.add_gridspec(len(row_of), 3, hspace=0.55, wspace=0.18, top=0.96, bottom=0.03)
    for panel in panels:
        axes = figure.add_subplot(grid[row_of[panel["gridPos"]["y"]], panel["gridPos"]["x"] // 8])
        axes.set_title(panel["title"], fontsize=10, loc="left")
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", window).replace("$namespace", ".*")
            for series in query_range(url, expr, start, end):
                xs, ys = gapped(series["values"], start)
                if xs:
                    axes.plot(xs, ys, label=legend(target["legendFormat"], series["metric"]), linewidth=1.2)
        axes.set_xlim(0, end - start)
        axes.set_xlabel(f"seconds into the run ({panel['fieldConfig']['defaults']['unit']})", fontsize=7)
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=6, loc="upper left")
        else:
            axes.text(0.5, 0.5, "no data in this run", ha="center", va="center", transform=axes.transAxes)
    figure.suptitle(f"{board['title']}: docs/dashboard.json evaluated by Prometheus over a benchmark run")
    figure.savefig(out, dpi=80, bbox_inches="tight")
    print(f"wrote {out}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--rate-window", default="10s", help="what $__rate_interval stands for (10s)")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then the benchmark command")
    args = parser.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        parser.error("give the benchmark command after --")
    board = json.loads((ROOT / "docs" / "dashboard.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="gymsandbox-dashboard-"))
    targets = work / "targets"
    targets.mkdir()
    config = {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "scrape_configs": [
            {
                "job_name": "gymsandbox",
                "file_sd_configs": [{"files": [str(targets / "*.json")], "refresh_interval": "1s"}],
            }
        ],
    }
    (work / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (work / "prometheus.log").open("wb") as log:
        argv = [str(prometheus()), f"--config.file={work / 'prometheus.yml'}"]
        argv += [f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"]
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, server)
        print(f"prometheus pid {server.pid} on {url}, work directory {work}", flush=True)
        start = time.time()
        environment = {**os.environ, "GYMSANDBOX_METRICS_TARGETS": str(targets)}
        code = subprocess.run(bench, env=environment, check=False).returncode
        end = time.time()
        if code != 0:
            print(f"the benchmark exited {code}; rendering what was scraped", file=sys.stderr)
        render(board, url, (start, end), args.out, args.rate_window)
    finally:
        server.terminate()
        server.wait(timeout=30)
    shutil.rmtree(work / "data", ignore_errors=True)
    print(f"the processes' last scrapes: {' '.join(str(p) for p in sorted(work.glob('*.metrics.txt')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
