"""Turns on ACP agents (CONTRACT §9) through the built binary and the HTTP API: a scriptable
agent on the official Python SDK (`scripted_agent.py`) as the session's engine, with every
recovery Mulligan has (retry now, resend or continuation, a fresh process, a restart).

The binary is $MULLIGAN_BIN, else target/release/mulligan, else target/debug/mulligan.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).resolve().parent / "scripted_agent.py"
MODEL = "scripted/default"


def binary() -> str:
    if os.environ.get("MULLIGAN_BIN"):
        return os.environ["MULLIGAN_BIN"]
    release = ROOT / "target" / "release" / "mulligan"
    return str(release if release.exists() else ROOT / "target" / "debug" / "mulligan")


class Server:
    """One `mulligan serve` with the scripted agent in its catalogue; restartable on its data."""

    def __init__(self, tmp: Path, env=None, agents=None, model=MODEL):
        self.tmp = tmp
        self.env = env or {}
        self.model = model
        self.state = tmp / "agent"
        self.data = tmp / "data"
        self.data.mkdir()
        providers = {
            "providers": {
                **(agents or {
                    "scripted": {
                        "kind": "acp",
                        "command": sys.executable,
                        "args": [str(AGENT)],
                        "env": {"AGENT_STATE": str(self.state)},
                        "cwd": str(tmp),
                    },
                }),
                "demo": {},
            },
            "default_model": model,
        }
        (tmp / "providers.json").write_text(json.dumps(providers))
        self.proc = None
        self.start()

    def start(self):
        env = {
            **os.environ,
            "MULLIGAN_BIND": "127.0.0.1:0",
            "MULLIGAN_DATA_DIR": str(self.data),
            "MULLIGAN_PROVIDERS": str(self.tmp / "providers.json"),
            "MULLIGAN_TOKEN": "tok-acp-tests-0123456789abcdefghijklmnopqrstu",
            "MULLIGAN_DELTA_WINDOW_MS": "0",
            "MULLIGAN_TIER2_BASE_MS": "600000",
            "RUST_LOG": "warn",
            "MULLIGAN_SITE_OPTIONAL": "true",
            **self.env,
        }
        env.pop("MULLIGAN_DATABASE_URL", None)
        self.proc = subprocess.Popen([binary(), "serve"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        found: dict = {}

        def read():
            for line in self.proc.stdout:
                m = re.search(r"open (http://\S+)/\?token=(\S+)", line)
                if m and not found:
                    found["base"] = m.group(1)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 30
        while not found and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not found:
            self.proc.kill()
            pytest.fail(f"{binary()} serve printed no URL (exit {self.proc.poll()})")
        self.base = found["base"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def api(self, method: str, path: str, body=None):
        req = urllib.request.Request(
            f"{self.base}/api/v1{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer tok-acp-tests-0123456789abcdefghijklmnopqrstu", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def session(self, **settings) -> str:
        status, created = self.api("POST", "/sessions", {"title": "agent", "model": self.model, **settings})
        assert status == 201, created
        return created["id"]

    def send(self, sid: str, content: str) -> dict:
        status, receipt = self.api("POST", f"/sessions/{sid}/messages", {"content": content})
        assert status == 202, receipt
        return receipt

    def wait_run(self, sid: str, run_id: str, statuses: set, timeout: float = 30) -> tuple:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, detail = self.api("GET", f"/sessions/{sid}")
            run = next((r for r in detail["runs"] if r["id"] == run_id), None)
            if run and run["status"] in statuses:
                return run, detail
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} never reached {statuses}: {run}")

    def reply(self, detail: dict, run: dict) -> str:
        return next(m["content"] for m in detail["messages"] if m["id"] == run["reply_message_id"])

    def turn(self, sid: str, content: str, statuses=frozenset({"completed"})) -> tuple:
        receipt = self.send(sid, content)
        run, detail = self.wait_run(sid, receipt["run_id"], set(statuses) | {"completed", "failed", "cancelled"})
        assert run["status"] in statuses, json.dumps(run)
        return run, self.reply(detail, run)

    def calls(self, sid: str, run: dict) -> list:
        """The reply's tool calls as (tool, status, result)."""
        _, detail = self.api("GET", f"/sessions/{sid}")
        msg = next(m for m in detail["messages"] if m["id"] == run["reply_message_id"])
        return [(p["call"]["tool"], p["call"]["status"], p["call"].get("result"))
                for p in msg.get("parts") or [] if p["type"] == "tool_call"]

    def log(self) -> list:
        path = self.state / "log.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture()
def server():
    with tempfile.TemporaryDirectory(prefix="mulligan-acp-") as tmp:
        s = Server(Path(tmp))
        yield s
        s.stop()


def test_a_turn_streams_and_the_session_remembers(server):
    sid = server.session()
    _, reply = server.turn(sid, "hello there")
    assert reply == "echo: hello there (turn 1)"
    _, reply = server.turn(sid, "and again")
    # The same agent session, in the same process: it counts on.
    assert reply == "echo: and again (turn 2)"
    news = [e for e in server.log() if e["method"] == "session/new"]
    assert len(news) == 1, news
    assert len({e["pid"] for e in server.log()}) == 1


def test_the_agent_gets_no_secret_of_mulligans(server):
    sid = server.session()
    _, reply = server.turn(sid, "env")
    names = reply.removeprefix("env: ").split()
    assert "AGENT_STATE" in names and "PATH" in names
    leaked = [n for n in names if n.startswith("MULLIGAN_")]
    assert not leaked, leaked


def test_a_turn_the_agent_ends_short_completes_and_says_why(server):
    sid = server.session()
    run, reply = server.turn(sid, "stop max_tokens")
    assert reply == "stopping" and run["stop_reason"] == "max_tokens", run
    run, _ = server.turn(sid, "stop refusal")
    assert run["stop_reason"] == "refusal", run
    # A turn that is simply done says nothing of it.
    run, _ = server.turn(sid, "hello")
    assert "stop_reason" not in run, run


def test_an_overloaded_agent_fails_retryable_and_a_retry_resends_in_a_fresh_process(server):
    sid = server.session()
    run, _ = server.turn(sid, "overloaded 1", statuses={"failed"})
    assert run["retry"]["retry_class"] == "overloaded" and run["retry"]["retryable"], run
    assert "API Error: 529" in run["error_message"], run
    status, retried = server.api("POST", f"/sessions/{sid}/retry")
    assert status == 200 and retried["kind"] == "resend", retried
    run, detail = server.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed", run
    assert server.reply(detail, run) == "recovered after 1"
    # The retry ran in a new process that loaded the agent session, not in the failed one.
    log = server.log()
    prompts = [e for e in log if e["method"] == "session/prompt"]
    assert [p["prompt"] for p in prompts] == ["overloaded 1", "overloaded 1"], prompts
    assert prompts[0]["pid"] != prompts[1]["pid"]
    loads = [e for e in log if e["method"] == "session/load"]
    assert loads and loads[-1]["session"] == prompts[0]["session"] and loads[-1]["pid"] == prompts[1]["pid"]


def test_text_before_the_failure_makes_the_retry_a_continuation(server):
    sid = server.session()
    run, reply = server.turn(sid, "partial 1", statuses={"failed"})
    assert reply == "half of it ", reply
    status, retried = server.api("POST", f"/sessions/{sid}/retry")
    assert status == 200 and retried["kind"] == "continuation", retried
    run, detail = server.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and server.reply(detail, run) == "continued", run
    prompts = [e["prompt"] for e in server.log() if e["method"] == "session/prompt"]
    assert prompts[0] == "partial 1" and "cut off by overloaded" in prompts[1], prompts


def test_an_agent_that_exits_mid_turn_fails_agent_exited_and_comes_back(server):
    sid = server.session()
    run, reply = server.turn(sid, "exit", statuses={"failed"})
    assert run["retry"]["retry_class"] == "agent_exited" and run["retry"]["retryable"], run["error_message"]
    assert "status 3" in run["error_message"], run
    assert reply == "bye ", reply
    _, reply = server.turn(sid, "hello")
    assert reply.startswith("echo: hello"), json.dumps([reply, server.log()])


def test_cancel_stops_the_agents_turn(server):
    sid = server.session()
    receipt = server.send(sid, "slow 100")
    run_id = receipt["run_id"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, detail = server.api("GET", f"/sessions/{sid}")
        reply = next((m for m in detail["messages"] if m["role"] == "agent"), None)
        if reply and "w2" in reply["content"]:
            break
        time.sleep(0.05)
    status, run = server.api("POST", f"/sessions/{sid}/runs/{run_id}/cancel")
    assert status == 200 and run["status"] == "cancelled", run
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any(e["method"] == "ended" and e["stop"] == "cancelled" for e in server.log()):
            break
        time.sleep(0.05)
    log = server.log()
    assert any(e["method"] == "session/cancel" for e in log), log
    assert any(e["method"] == "ended" and e["stop"] == "cancelled" for e in log), log
    # The session goes on with the next prompt.
    _, reply = server.turn(sid, "next")
    assert reply.startswith("echo: next"), reply


def test_a_restart_reopens_the_agent_session(server):
    sid = server.session()
    server.turn(sid, "before")
    server.stop()
    server.start()
    _, reply = server.turn(sid, "after")
    assert reply == "echo: after (turn 2)", reply
    loads = [e for e in server.log() if e["method"] == "session/load"]
    assert len(loads) == 1, loads


def waiting_call(server, run_id: str, timeout: float = 20) -> dict:
    """The run's call listed by `GET /approvals`, once it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, listed = server.api("GET", "/approvals")
        assert status == 200, listed
        waiting = [w for w in listed["approvals"] if w["run_id"] == run_id]
        if waiting:
            return waiting[0]
        time.sleep(0.05)
    raise AssertionError(f"no call of run {run_id} waited for approval")


def chosen(server) -> list:
    return [e["chosen"] for e in server.log() if e["method"] == "permission"]


def test_an_agents_permission_request_waits_for_the_operators_decision(server):
    target = server.tmp / "written.txt"
    sid = server.session()
    # Under the default policy the agent's request asks the operator, and nothing is written
    # while it waits; the run and the session say so.
    receipt = server.send(sid, f"write {target}")
    run_id = receipt["run_id"]
    waiting = waiting_call(server, run_id)
    call = waiting["call"]
    assert (call["server"], call["tool"], call["status"]) == ("scripted", f"Write {target}", "awaiting_approval"), call
    assert call["arguments"] == {"file_path": str(target), "content": "hello"}, call
    run, detail = server.wait_run(sid, run_id, {"awaiting_approval"})
    assert detail["session"]["status"] == "awaiting_approval", detail["session"]
    _, shown = server.api("GET", f"/runs/{run_id}")
    assert shown["run"]["status"] == "awaiting_approval", shown["run"]
    assert not target.exists() and chosen(server) == []
    # Rejected: the agent is answered with its reject option and the call is denied.
    status, decided = server.api("POST", f"/runs/{run_id}/tool_calls/{call['id']}/decision",
                                 {"decision": "reject_once", "reason": "not that file"})
    assert status == 200 and decided["call"]["status"] == "denied", decided
    run, detail = server.wait_run(sid, run_id, {"completed", "failed"})
    assert run["status"] == "completed" and server.reply(detail, run) == "not allowed", run
    assert not target.exists()
    assert [c[:2] for c in server.calls(sid, run)] == [(f"Write {target}", "denied")]
    # A second decision on it is refused with the first.
    status, refused = server.api("POST", f"/runs/{run_id}/tool_calls/{call['id']}/decision",
                                 {"decision": "allow_once"})
    assert status == 409 and refused["error"]["code"] == "approval.decided", refused

    # Allowed always: the agent gets its "always" option, the call runs, and the session
    # remembers the grant, so the same call next turn runs without asking.
    receipt = server.send(sid, f"write {target}")
    call = waiting_call(server, receipt["run_id"])["call"]
    status, decided = server.api("POST", f"/runs/{receipt['run_id']}/tool_calls/{call['id']}/decision",
                                 {"decision": "allow_always"})
    assert status == 200, decided
    run, detail = server.wait_run(sid, receipt["run_id"], {"completed", "failed"})
    assert server.reply(detail, run) == "wrote it" and target.read_text() == "hello", run
    assert server.calls(sid, run) == [(f"Write {target}", "ok", "wrote 5 bytes")]
    grants = detail["session"]["tool_grants"]
    assert grants == [{"server": "scripted", "tool": f"Write {target}", "decision": "allow"}], grants
    target.unlink()
    run, reply = server.turn(sid, f"write {target}")
    assert reply == "wrote it" and target.exists()
    assert chosen(server) == ["reject", "always", "allow"], chosen(server)


def test_trust_answers_an_agents_request_at_once(server):
    target = server.tmp / "trusted.txt"
    sid = server.session(approval="trust")
    run, reply = server.turn(sid, f"write {target}")
    assert reply == "wrote it" and target.read_text() == "hello"
    # The agent's call is the run's: shown with its input and output, counted by the run.
    _, detail = server.api("GET", f"/sessions/{sid}")
    msg = next(m for m in detail["messages"] if m["id"] == run["reply_message_id"])
    call = next(p["call"] for p in msg["parts"] if p["type"] == "tool_call")
    assert call["arguments"] == {"file_path": str(target), "content": "hello"}, call
    assert server.calls(sid, run) == [(f"Write {target}", "ok", "wrote 5 bytes")]
    assert chosen(server) == ["allow"], chosen(server)


def test_a_cancel_ends_a_run_whose_agent_waits_for_a_decision(server):
    target = server.tmp / "never.txt"
    sid = server.session()
    receipt = server.send(sid, f"write {target}")
    call = waiting_call(server, receipt["run_id"])["call"]
    status, run = server.api("POST", f"/sessions/{sid}/runs/{receipt['run_id']}/cancel")
    assert status == 200 and run["status"] == "cancelled", run
    assert [c[:2] for c in server.calls(sid, run)] == [(f"Write {target}", "cancelled")]
    status, refused = server.api("POST", f"/runs/{receipt['run_id']}/tool_calls/{call['id']}/decision",
                                 {"decision": "allow_once"})
    assert status == 409, refused
    _, listed = server.api("GET", "/approvals")
    assert listed["approvals"] == [], listed
    # The agent's question was withdrawn (answered cancelled), and nothing was written.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and chosen(server) != [None]:
        time.sleep(0.05)
    assert chosen(server) == [None] and not target.exists()
    _, reply = server.turn(sid, "next")
    assert reply.startswith("echo: next"), reply


def test_a_restart_while_an_agent_waits_interrupts_its_run(server):
    target = server.tmp / "later.txt"
    sid = server.session()
    receipt = server.send(sid, f"write {target}")
    waiting_call(server, receipt["run_id"])
    server.stop()
    server.start()
    run, _ = server.wait_run(sid, receipt["run_id"], {"failed", "completed", "cancelled"})
    assert run["status"] == "failed" and run["retry"]["retry_class"] == "interrupted", run
    assert server.calls(sid, run)[0][1] != "awaiting_approval"
    _, listed = server.api("GET", "/approvals")
    assert listed["approvals"] == [], listed
    assert not target.exists()


def test_an_agents_usage_counts_to_the_spend_limit():
    with tempfile.TemporaryDirectory(prefix="mulligan-acp-") as tmp:
        server = Server(Path(tmp), env={"MULLIGAN_SPEND_LIMIT_TOKENS": "4000"})
        try:
            sid = server.session()
            run, reply = server.turn(sid, "usage 5000")
            assert reply == "counted 5000"
            # Past the budget the next turn is refused before the agent is asked.
            run, _ = server.turn(sid, "hello", statuses={"failed"})
            assert run["retry"]["retry_class"] == "spend_limit_exceeded", run
            assert not any(e.get("prompt") == "hello" for e in server.log() if e["method"] == "session/prompt")
        finally:
            server.stop()


def test_regenerate_from_an_earlier_message_starts_a_new_agent_session(server):
    sid = server.session()
    server.turn(sid, "first")
    server.turn(sid, "second")
    _, detail = server.api("GET", f"/sessions/{sid}")
    first = next(m for m in detail["messages"] if m["role"] == "operator")
    status, receipt = server.api("POST", f"/sessions/{sid}/messages/{first['id']}/regenerate", {"manual": True})
    assert status == 202, receipt
    run, detail = server.wait_run(sid, receipt["run_id"], {"completed", "failed"})
    # A new agent session, which has not seen the superseded turns.
    assert server.reply(detail, run) == "echo: first (turn 1)", run
    news = [e for e in server.log() if e["method"] == "session/new"]
    assert len(news) == 2, news


def scripted_with_auth(tmp: Path, authenticate=None) -> dict:
    entry = {"kind": "acp", "command": sys.executable, "args": [str(AGENT)],
             "env": {"AGENT_STATE": str(tmp / "agent"), "AGENT_AUTH": "api-key"}, "cwd": str(tmp)}
    if authenticate:
        entry["authenticate"] = authenticate
    return {"scripted": entry}


@pytest.mark.parametrize("authenticate,ends", [
    ("api-key", "completed"),
    (None, "auth_failed"),
    ("oauth", "no auth method"),
])
def test_an_agent_that_wants_authenticate_gets_the_method_the_catalogue_names(authenticate, ends):
    with tempfile.TemporaryDirectory(prefix="mulligan-acp-") as tmp:
        server = Server(Path(tmp), agents=scripted_with_auth(Path(tmp), authenticate))
        try:
            sid = server.session()
            run, reply = server.turn(sid, "hello", statuses={"completed", "failed"})
            if ends == "completed":
                assert run["status"] == "completed" and reply.startswith("echo: hello"), run
                assert [e["method_id"] for e in server.log() if e["method"] == "authenticate"] == ["api-key"]
            elif ends == "auth_failed":
                # The agent's own refusal, not retryable: the operator must configure it.
                assert run["retry"]["retry_class"] == "auth_failed" and not run["retry"]["retryable"], run
            else:
                assert run["retry"]["retry_class"] == "auth_failed", run
                assert "offers no auth method \"oauth\" (it offers: api-key)" in run["error_message"], run
                assert not any(e["method"] == "authenticate" for e in server.log())
        finally:
            server.stop()
