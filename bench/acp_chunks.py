"""Bench for issue 55: what hosting an ACP agent costs per streamed chunk.

The suite's scripted agent (end2end/acp/scripted_agent.py) streams N chunks of one turn
(`chunks N`), driven two ways on one machine: directly by the official Python ACP client, and
through `mulligan serve` (its HTTP API, the run followed to its end). Prints the wall time of
each, their ratio, Mulligan's CPU per chunk (its /proc utime + stime over the turn, divided by
N) and its resident memory before and after the session's agent started.

    target/acp-venv/bin/python bench/acp_chunks.py [--chunks 20000] [--runs 3]

The binary is $MULLIGAN_BIN, else target/release/mulligan.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "end2end" / "acp"))
AGENT = ROOT / "end2end" / "acp" / "scripted_agent.py"

import acp  # noqa: E402
from acp import PROTOCOL_VERSION, Client  # noqa: E402


class Counter(Client):
    def __init__(self):
        self.chunks = 0

    async def session_update(self, session_id, update, **kw):
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks += 1

    async def request_permission(self, *a, **kw):
        raise RuntimeError("no permission is asked in this bench")


async def direct(n: int, state: Path) -> float:
    counter = Counter()
    env = {"PATH": os.environ["PATH"], "AGENT_STATE": str(state)}
    async with acp.spawn_agent_process(counter, sys.executable, str(AGENT), env=env) as (conn, _proc):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(state.parent), mcp_servers=[])
        started = time.perf_counter()
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(f"chunks {n}")])
        wall = time.perf_counter() - started
    assert counter.chunks == n, counter.chunks
    return wall


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def hosted(n: int, runs: int, tmp: Path):
    from test_agents import Server  # the ACP suite's harness: one `mulligan serve`

    os.environ.setdefault("MULLIGAN_BIN", str(ROOT / "target" / "release" / "mulligan"))
    server = Server(tmp, env={"MULLIGAN_DELTA_WINDOW_MS": "33"})
    try:
        sid = server.session()
        before = rss_kib(server.proc.pid)
        server.turn(sid, "warm up")
        after = rss_kib(server.proc.pid)
        walls, cpus = [], []
        for _ in range(runs):
            cpu0 = cpu_s(server.proc.pid)
            started = time.perf_counter()
            receipt = server.send(sid, f"chunks {n}")
            run, detail = server.wait_run(sid, receipt["run_id"], {"completed", "failed"}, timeout=600)
            walls.append(time.perf_counter() - started)
            cpus.append(cpu_s(server.proc.pid) - cpu0)
            assert run["status"] == "completed", run
            assert len(server.reply(detail, run)) == 8 * n
        return walls, cpus, before, after
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mulligan-bench-acp-") as tmp:
        tmp = Path(tmp)
        (tmp / "direct").mkdir()
        directs = [asyncio.run(direct(a.chunks, tmp / "direct" / "state")) for _ in range(a.runs)]
        (tmp / "hosted").mkdir()
        walls, cpus, before, after = hosted(a.chunks, a.runs, tmp / "hosted")
    d, h = statistics.median(directs), statistics.median(walls)
    print(json.dumps({
        "chunks": a.chunks,
        "runs": a.runs,
        "direct_wall_s": [round(x, 3) for x in directs],
        "hosted_wall_s": [round(x, 3) for x in walls],
        "wall_ratio_median": round(h / d, 3),
        "server_cpu_us_per_chunk": [round(c / a.chunks * 1e6, 1) for c in cpus],
        "server_rss_kib_before_agent": before,
        "server_rss_kib_after_agent": after,
    }, indent=1))


if __name__ == "__main__":
    main()
