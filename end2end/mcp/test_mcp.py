"""MCP (CONTRACT §5) through the official Python `mcp` client: `/mcp` over streamable HTTP
and `mulligan mcp` over stdio, against the built binary serving the demo provider.

The binary is $MULLIGAN_BIN, else target/release/mulligan, else target/debug/mulligan.
Sessions are made with the HTTP API (urllib); everything else goes through MCP.
"""

import asyncio
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "list_sessions", "send_message", "retry_session", "stop_session", "list_models",
    "rename_session", "list_approvals", "decide_tool_call",
}


def binary() -> str:
    if os.environ.get("MULLIGAN_BIN"):
        return os.environ["MULLIGAN_BIN"]
    release = ROOT / "target" / "release" / "mulligan"
    return str(release if release.exists() else ROOT / "target" / "debug" / "mulligan")


class Server:
    def __init__(self, base: str, token: str):
        self.base, self.token = base, token

    def api(self, method: str, path: str, body=None, token=None):
        req = urllib.request.Request(
            f"{self.base}/api/v1{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def session(self, title: str, model: str = "demo", parent: str | None = None, auto_retry: str | None = None) -> dict:
        body = {"title": title, "model": model}
        if parent:
            body["parent_id"] = parent
        if auto_retry:
            body["auto_retry"] = auto_retry
        status, created = self.api("POST", "/sessions", body)
        assert status == 201, created
        return created

    def wait_last_run(self, sid: str, statuses: set[str], timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, detail = self.api("GET", f"/sessions/{sid}")
            runs = detail["runs"]
            if runs and runs[-1]["status"] in statuses:
                return detail
            time.sleep(0.1)
        raise AssertionError(f"session {sid} never reached {statuses}: {detail['runs']}")


@pytest.fixture(scope="module")
def server():
    data_dir = tempfile.mkdtemp(prefix="mulligan-mcp-")
    env = {
        **os.environ,
        "MULLIGAN_BIND": "127.0.0.1:0",
        "MULLIGAN_DATA_DIR": data_dir,
        "MULLIGAN_PROVIDER": "demo",
        "MULLIGAN_DEMO_DELTA_MS": "30",
        "MULLIGAN_TIER1_BASE_MS": "20",
        # Background retries wait ten minutes here: long enough to see and stop them.
        "MULLIGAN_TIER2_BASE_MS": "600000",
        "RUST_LOG": "warn",
        # MCP needs no page: a debug binary without a built site serves these tests too.
        "MULLIGAN_SITE_OPTIONAL": "true",
    }
    env.pop("MULLIGAN_TOKEN", None)
    env.pop("MULLIGAN_DATABASE_URL", None)
    proc = subprocess.Popen([binary(), "serve"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    found: dict = {}

    def read():
        for line in proc.stdout:
            m = re.search(r"open (http://\S+)/\?token=(\S+)", line)
            if m and not found:
                found["base"], found["token"] = m.group(1), m.group(2)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 30
    while not found and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not found:
        proc.kill()
        pytest.fail(f"{binary()} serve printed no URL (exit {proc.poll()})")
    yield Server(found["base"], found["token"])
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


async def _http(server: Server, token: str, fn):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
        async with streamable_http_client(f"{server.base}/mcp", http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await fn(session)


def over_http(server: Server, token: str, fn):
    return asyncio.run(_http(server, token, fn))


def call(server: Server, token: str, tool: str, args: dict | None = None):
    return over_http(server, token, lambda s: s.call_tool(tool, args or {}))


def refusal(result) -> str:
    """The refusal's code, after checking its shape (CONTRACT §5): isError, the API's error
    JSON as its one text block, and no structured content (clients validate that against the
    tool's outputSchema, which an error body does not match)."""
    assert result.is_error, result
    assert result.structured_content is None, result
    assert len(result.content) == 1 and result.content[0].type == "text", result
    body = json.loads(result.content[0].text)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"]


def test_lists_the_tools_with_schemas(server):
    tools = over_http(server, server.token, lambda s: s.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    by_name = {t.name: t for t in tools}
    assert by_name["send_message"].input_schema["required"] == ["session", "content"]
    for name in ("retry_session", "stop_session"):
        assert by_name[name].input_schema["required"] == ["session"]
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in tools)
    assert by_name["list_models"].annotations.read_only_hint is True


def test_list_models_answers_the_apis_model_list(server):
    _, api = server.api("GET", "/models")
    for token in (server.token, server.session("mcp models")["agent_token"]):
        listed = call(server, token, "list_models")
        assert not listed.is_error
        assert listed.structured_content["default_model"] == api["default_model"]
        assert [m["id"] for m in listed.structured_content["models"]] == [m["id"] for m in api["models"]]


def test_no_or_unknown_token_is_401_in_the_contract_shape(server):
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        req = urllib.request.Request(
            f"{server.base}/mcp",
            method="POST",
            data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401
        assert json.loads(e.value.read())["error"]["code"] == "unauthorized"


def test_list_and_send_answer_the_api_json(server):
    s = server.session("mcp list and send")
    listed = call(server, server.token, "list_sessions")
    assert not listed.is_error
    assert s["id"] in [x["id"] for x in listed.structured_content["sessions"]]
    _, api_list = server.api("GET", "/sessions")
    assert listed.structured_content["sessions"][0].keys() == api_list["sessions"][0].keys()

    sent = call(server, server.token, "send_message", {"session": s["id"], "content": "hello from MCP"})
    assert not sent.is_error, sent
    receipt = sent.structured_content
    assert set(receipt) == {"message_id", "run_id", "queued", "superseded"}
    assert json.loads(sent.content[0].text) == receipt
    _, detail = server.api("GET", f"/sessions/{s['id']}")
    assert receipt["run_id"] in [r["id"] for r in detail["runs"]]


def test_refusals_are_tool_errors_with_the_api_codes(server):
    s = server.session("mcp nothing failed")
    assert refusal(call(server, server.token, "retry_session", {"session": s["id"]})) == "retry.nothing_failed"
    assert refusal(call(server, server.token, "retry_session", {"session": "s_missing"})) == "not_found"
    assert refusal(call(server, server.token, "send_message", {"session": s["id"], "content": "  "})) == "invalid_request"
    assert refusal(call(server, server.token, "send_message", {"session": s["id"]})) == "invalid_request"


def test_agent_tokens_act_only_on_descendants(server):
    parent = server.session("mcp parent")
    child = server.session("mcp child", model="demo-auth", parent=parent["id"])
    sibling = server.session("mcp sibling", parent=parent["id"])
    grandchild = server.session("mcp grandchild", parent=child["id"])

    # The parent sees its descendants, not itself nor anything else.
    listed = call(server, parent["agent_token"], "list_sessions").structured_content["sessions"]
    assert {x["id"] for x in listed} == {child["id"], sibling["id"], grandchild["id"]}
    assert call(server, sibling["agent_token"], "list_sessions").structured_content == {"sessions": []}

    # A sibling's token on a non-descendant, and any agent token on its own session: refused.
    for token, target in [
        (sibling["agent_token"], child["id"]),
        (sibling["agent_token"], sibling["id"]),
        (child["agent_token"], parent["id"]),
    ]:
        for tool, args in [
            ("retry_session", {}),
            ("stop_session", {}),
            ("send_message", {"content": "not yours"}),
        ]:
            assert refusal(call(server, token, tool, {"session": target, **args})) == "subsessions.not_family"
    _, detail = server.api("GET", f"/sessions/{child['id']}")
    assert detail["messages"] == []

    # The parent's token on its child works: the child's turn fails (401 from the demo
    # provider), the parent retries it, and the retry records where it came from.
    sent = call(server, parent["agent_token"], "send_message", {"session": child["id"], "content": "do the thing"})
    assert not sent.is_error, sent
    server.wait_last_run(child["id"], {"failed"})
    retried = call(server, parent["agent_token"], "retry_session", {"session": child["id"]})
    assert not retried.is_error, retried
    assert set(retried.structured_content) == {"prompt_id", "run_id", "kind"}
    assert retried.structured_content["kind"] == "resend"
    _, detail = server.api("GET", f"/sessions/{child['id']}")
    run = next(r for r in detail["runs"] if r["id"] == retried.structured_content["run_id"])
    assert run["provenance"]["from"] == parent["id"]
    assert run["provenance"]["manual"] is True

    # The grandparent's reach goes down more than one level.
    assert not call(server, parent["agent_token"], "send_message", {"session": grandchild["id"], "content": "hi"}).is_error


def test_stop_session_cancels_the_running_run(server):
    s = server.session("mcp stop", model="demo-long")
    sent = call(server, server.token, "send_message", {"session": s["id"], "content": "write a lot"})
    server.wait_last_run(s["id"], {"running"})
    stopped = call(server, server.token, "stop_session", {"session": s["id"]})
    assert not stopped.is_error, stopped
    assert stopped.structured_content["id"] == sent.structured_content["run_id"]
    assert stopped.structured_content["status"] == "cancelled"
    assert refusal(call(server, server.token, "stop_session", {"session": s["id"]})) == "conflict"


def test_stop_session_cancels_a_waiting_background_retry(server):
    s = server.session("mcp stop waiting", model="demo-down", auto_retry="background")
    sent = call(server, server.token, "send_message", {"session": s["id"], "content": "try later"})
    detail = server.wait_last_run(s["id"], {"failed"})
    deadline = time.monotonic() + 10
    while detail["session"].get("waiting_retry") is None and time.monotonic() < deadline:
        time.sleep(0.05)
        _, detail = server.api("GET", f"/sessions/{s['id']}")
    assert detail["session"]["waiting_retry"]["attempt"] == 1, detail["session"]
    stopped = call(server, server.token, "stop_session", {"session": s["id"]})
    assert not stopped.is_error, stopped
    assert stopped.structured_content["id"] == sent.structured_content["run_id"]
    assert stopped.structured_content["status"] == "failed"
    _, detail = server.api("GET", f"/sessions/{s['id']}")
    assert "waiting_retry" not in detail["session"] or detail["session"]["waiting_retry"] is None
    assert refusal(call(server, server.token, "stop_session", {"session": s["id"]})) == "conflict"


def test_only_the_operator_lists_and_decides_approvals(server):
    """CONTRACT §8: the demo agent's rename waits; its own agent token may neither see nor
    decide it (forbidden), the operator's token lists it and allows it, and the turn goes on."""
    s = server.session("mcp approvals", model="demo-agent-writes")
    server.api("POST", f"/sessions/{s['id']}/messages", {"content": "tidy up"})
    detail = server.wait_last_run(s["id"], {"awaiting_approval"})
    run_id = detail["runs"][-1]["id"]
    agent = s["agent_token"]
    assert refusal(call(server, agent, "list_approvals")) == "forbidden"
    listed = call(server, server.token, "list_approvals")
    assert not listed.is_error, listed
    mine = [w for w in listed.structured_content["approvals"] if w["run_id"] == run_id]
    assert len(mine) == 1, listed.structured_content
    args = {"run": run_id, "call": mine[0]["call"]["id"], "decision": "allow_once"}
    assert refusal(call(server, agent, "decide_tool_call", args)) == "forbidden"
    decided = call(server, server.token, "decide_tool_call", args)
    assert not decided.is_error, decided
    assert decided.structured_content["call"]["approval"]["by"] == "mcp"
    detail = server.wait_last_run(s["id"], {"completed"})
    assert detail["session"]["title"].startswith("About:"), detail["session"]
    assert refusal(call(server, server.token, "decide_tool_call", args)) == "approval.decided"


def test_mulligan_mcp_over_stdio(server):
    parent = server.session("mcp stdio parent")
    child = server.session("mcp stdio child", parent=parent["id"])

    async def run(token: str):
        params = StdioServerParameters(
            command=binary(), args=["mcp"], env={"MULLIGAN_URL": server.base, "MULLIGAN_TOKEN": token}
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                listed = await session.call_tool("list_sessions", {})
                retry = await session.call_tool("retry_session", {"session": child["id"]})
                sent = await session.call_tool("send_message", {"session": parent["id"], "content": "hi"})
                return tools, listed, retry, sent

    tools, listed, retry, sent = asyncio.run(run(server.token))
    assert {t.name for t in tools.tools} == TOOLS
    assert {parent["id"], child["id"]} <= {x["id"] for x in listed.structured_content["sessions"]}
    assert refusal(retry) == "retry.nothing_failed"
    assert not sent.is_error and set(sent.structured_content) == {"message_id", "run_id", "queued", "superseded"}

    # With the parent's agent token, the same bridge carries the same authority.
    tools, listed, retry, sent = asyncio.run(run(parent["agent_token"]))
    assert [x["id"] for x in listed.structured_content["sessions"]] == [child["id"]]
    assert refusal(retry) == "retry.nothing_failed"
    assert refusal(sent) == "subsessions.not_family"


def test_mulligan_mcp_with_a_wrong_token_says_so(server):
    req = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
    env = {**os.environ, "MULLIGAN_URL": server.base, "MULLIGAN_TOKEN": "wrong"}
    out = subprocess.run([binary(), "mcp"], input=req, env=env, capture_output=True, timeout=30)
    assert out.returncode == 0
    answer = json.loads(out.stdout)
    assert answer["id"] == 1 and "401" in answer["error"]["message"]
    assert b"token was rejected" in out.stderr
