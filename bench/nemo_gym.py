#!/usr/bin/env python3
"""NeMo Gym provider benchmark, from inside a real GymHost pod under gVisor.

    python -m bench.nemo_gym [--starts 5] [--execs 50] [--keep]

Set-up: hack/sample.py deploys a release of its own (`gs-bench`: the chart's operator and broker as pods
on the real node, HTTPS broker) and the sample Gym host (examples/gym-host/, gVisor) in namespace
`bench-nemo-gym`; the measuring script runs inside that host pod (`kubectl exec -i ... python3 -`), with
nemo-gym 0.4.0 and the gymsandbox provider exactly as a Gym host has them, and episodes of the sample
episode image (also gVisor).

Measured, reported, never asserted:
- start to first exec: STARTS times, `AsyncSandbox.start()` (create, wait for Ready) then `exec("true")`
  on a fresh sandbox, timed until that exec returns; p50 and max.
- exec overhead: on one open sandbox, EXECS execs of `true` through the provider (`provider.exec`) and
  EXECS through `AsyncBrokerClient.exec` alone on the same episode, alternating; p50 and p99 of each and
  their ratio (provider / client).
The last line is the same as JSON. Needs the local cluster with its real node (`python -m hack.localcluster
up`, reused if it runs); the release and namespace are removed at the end (kept with --keep).
"""

from __future__ import annotations

import argparse
import json
import sys

from hack import sample as hack_sample
from tests.support.cluster import find_cluster

from bench import common

IN_POD = r"""
import asyncio, json, os, sys, time
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec, create_provider
from gymsandbox.client import AsyncBrokerClient

IMAGE, CONFIG = os.environ["GYM_EPISODE_IMAGE"], {"gymsandbox": {}}
STARTS, EXECS = int(sys.argv[1]), int(sys.argv[2])


async def main():
    starts = []
    for _ in range(STARTS):
        began = time.monotonic()
        async with AsyncSandbox(CONFIG, SandboxSpec(image=IMAGE, ready_timeout_s=120)) as sandbox:
            await sandbox.start()
            assert (await sandbox.exec("true")).return_code == 0
            starts.append(time.monotonic() - began)
    provider = create_provider(CONFIG)
    handle = await provider.create(SandboxSpec(image=IMAGE, ready_timeout_s=120))
    through_provider, through_client = [], []
    async with AsyncBrokerClient.from_environment() as broker:
        for _ in range(EXECS):
            began = time.monotonic()
            assert (await provider.exec(handle, "true")).return_code == 0
            through_provider.append(time.monotonic() - began)
            began = time.monotonic()
            assert (await broker.exec(handle.sandbox_id, shell="true")).exit_code == 0
            through_client.append(time.monotonic() - began)
    await provider.close(handle)
    await provider.aclose()
    print(json.dumps({"starts": starts, "provider": through_provider, "client": through_client}))


asyncio.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--execs", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the release and the namespace")
    args = parser.parse_args()
    cluster, _ = find_cluster()  # left running
    if not cluster.local:
        raise SystemExit("bench.nemo_gym deploys to the local cluster (its images load into the real node)")
    sample = hack_sample.Sample(cluster.paths, release="gs-bench", release_namespace="gymsandbox-bench",
                           namespace="bench-nemo-gym")  # fmt: skip
    try:
        pod = hack_sample.up(sample)
        common.log(
            f"measuring inside {sample.namespace}/{pod}: {args.starts} starts, {args.execs} execs each way"
        )
        answer = sample.kubectl("exec", "-i", "-n", sample.namespace, pod, "--", "python3", "-",
                                str(args.starts), str(args.execs), stdin=IN_POD)  # fmt: skip
    finally:
        if not args.keep:
            hack_sample.down(sample)
    seen = json.loads(answer.strip().splitlines()[-1])
    p = common.nearest_rank
    columns = ("provider", "client")
    common.print_ratio_table(
        columns,
        [
            ("exec p50 (s)", p(seen["provider"], 50), p(seen["client"], 50), 4),
            ("exec p99 (s)", p(seen["provider"], 99), p(seen["client"], 99), 4),
        ],
    )
    print(f"start to first exec under gVisor: p50 {common.fmt(p(seen['starts'], 50))} s, "
          f"max {common.fmt(max(seen['starts']))} s over {len(seen['starts'])}")  # fmt: skip
    summary = {
        "exec_p50_seconds": common.compared(columns, p(seen["provider"], 50), p(seen["client"], 50)),
        "exec_p99_seconds": common.compared(columns, p(seen["provider"], 99), p(seen["client"], 99)),
        "start_to_first_exec_seconds": {"p50": p(seen["starts"], 50), "max": max(seen["starts"])},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
