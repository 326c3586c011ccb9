"""Turns on the real Claude Code (`claude-agent-acp` from end2end's lockfile, Claude Code's own
CLI inside) as a session's engine (CONTRACT §9), its model a fake Anthropic endpoint of this
suite: a reply streams, an outage fails `overloaded` and a retry completes, a permission
waits for the operator, a cancel, a killed agent and a restart of Mulligan.
"""

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from fake_anthropic import FakeAnthropic, hang, overloaded, overloaded_after, text, tool_use
from test_agents import ROOT, Server

AGENT = ROOT / "end2end" / "node_modules" / ".bin" / "claude-agent-acp"
MODEL = "claude/default"
KEY = "sk-ant-fake-0123456789"

pytestmark = pytest.mark.skipif(not AGENT.exists(), reason="claude-agent-acp is not installed (scripts/toolchain.sh installs it)")


class Claude(Server):
    """A `mulligan serve` whose catalogue hosts Claude Code against `fake`."""

    def __init__(self, tmp: Path, fake: FakeAnthropic, env=None):
        home = tmp / "home"
        home.mkdir()
        self.work = tmp / "work"
        self.work.mkdir()
        self.fake = fake
        agents = {
            "claude": {
                "kind": "acp",
                "command": str(AGENT),
                "env": {
                    "ANTHROPIC_BASE_URL": fake.url,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "CLAUDE_CODE_MAX_RETRIES": "0",
                    "DISABLE_AUTOUPDATER": "1",
                    "HOME": str(home),
                    # Claude Code refuses to run as root unless it is told it is sandboxed.
                    "IS_SANDBOX": "1",
                },
                # The key is Mulligan's to give, by name; the agent gets only this one.
                "env_from": {"ANTHROPIC_API_KEY": "TEST_ANTHROPIC_KEY"},
                "cwd": str(self.work),
            }
        }
        env = {"TEST_ANTHROPIC_KEY": KEY, "MULLIGAN_ACP_IDLE_MS": "600000", **(env or {})}
        super().__init__(tmp, env=env, agents=agents, model=MODEL)

    def agent_pids(self) -> list:
        """The agent processes Mulligan started (its direct children)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def wait_reply_has(self, sid: str, needle: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, detail = self.api("GET", f"/sessions/{sid}")
            reply = [m for m in detail["messages"] if m["role"] == "agent"]
            if reply and needle in reply[-1]["content"]:
                return
            time.sleep(0.05)
        raise AssertionError(f"no reply of session {sid} showed {needle!r}")


@pytest.fixture()
def claude():
    fake = FakeAnthropic()
    # A killed agent's CLI may still be writing its session files as the folder goes.
    with tempfile.TemporaryDirectory(prefix="mulligan-claude-", ignore_cleanup_errors=True) as tmp:
        s = Claude(Path(tmp), fake)
        yield s
        s.stop()
    fake.close()


def last_user_text(request: dict) -> str:
    """What the last user message of a model request says, its text blocks joined."""
    content = request["body"]["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def test_a_claude_code_turn_streams_and_completes(claude):
    claude.fake.push(text("Hello ", "from ", "Claude."))
    sid = claude.session()
    run, reply = claude.turn(sid, "say hello")
    assert reply == "Hello from Claude.", reply
    turns = claude.fake.turn_requests()
    assert len(turns) == 1 and "say hello" in last_user_text(turns[0]), [last_user_text(t) for t in turns]
    # The key Mulligan was given by name reached the model endpoint.
    headers = {k.lower(): v for k, v in turns[0]["headers"].items()}
    assert headers.get("x-api-key") == KEY, sorted(headers)


def test_an_outage_fails_overloaded_and_a_retry_resends_once_it_ends(claude):
    claude.fake.default = overloaded()
    sid = claude.session()
    run, _ = claude.turn(sid, "summarise the notes", statuses={"failed"})
    assert run["retry"]["retry_class"] == "overloaded" and run["retry"]["retryable"], run
    assert "529" in run["error_message"], run["error_message"]
    claude.fake.default = text("Recovered.")
    status, retried = claude.api("POST", f"/sessions/{sid}/retry")
    assert status == 200 and retried["kind"] == "resend", retried
    run, detail = claude.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and claude.reply(detail, run) == "Recovered.", run
    # The same prompt asked again, not a second copy of it in one conversation.
    last = claude.fake.turn_requests()[-1]
    assert "summarise the notes" in last_user_text(last)


def test_text_before_an_overload_makes_the_retry_a_continuation(claude):
    claude.fake.push(overloaded_after("The first half, "))
    claude.fake.default = overloaded()
    sid = claude.session()
    run, reply = claude.turn(sid, "write the essay", statuses={"failed"})
    assert run["retry"]["retry_class"] == "overloaded", run
    assert reply == "The first half, ", reply
    claude.fake.default = text("and the rest.")
    status, retried = claude.api("POST", f"/sessions/{sid}/retry")
    assert status == 200 and retried["kind"] == "continuation", retried
    run, detail = claude.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed", run
    # The continuation tells Claude Code where its reply was cut off.
    assert "cut off" in last_user_text(claude.fake.turn_requests()[-1]), last_user_text(claude.fake.turn_requests()[-1])


def test_a_tool_that_ran_makes_the_retry_a_continuation(claude):
    target = claude.work / "notes.txt"
    claude.fake.push(tool_use("Write", {"file_path": str(target), "content": "first draft\n"}))
    claude.fake.default = overloaded()
    sid = claude.session(approval="trust")
    run, _ = claude.turn(sid, "write the notes", statuses={"failed"})
    assert run["retry"]["retry_class"] == "overloaded", run
    assert target.read_text() == "first draft\n"
    assert [c[1] for c in claude.calls(sid, run)] == ["ok"], claude.calls(sid, run)
    claude.fake.default = text("Notes written.")
    status, retried = claude.api("POST", f"/sessions/{sid}/retry")
    assert status == 200 and retried["kind"] == "continuation", retried
    run, detail = claude.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and claude.reply(detail, run) == "Notes written.", run


def test_a_write_waits_for_the_operator_deny_writes_nothing_allow_writes_once(claude):
    target = claude.work / "note.txt"
    sid = claude.session()
    claude.fake.push(tool_use("Write", {"file_path": str(target), "content": "hello\n"}), text("Not written."))
    receipt = claude.send(sid, "write a note")
    call = waiting(claude, receipt["run_id"])
    assert call["tool"].startswith("Write") and call["arguments"].get("file_path") == str(target), call
    assert not target.exists()
    status, decided = claude.api("POST", f"/runs/{receipt['run_id']}/tool_calls/{call['id']}/decision",
                                 {"decision": "reject_once"})
    assert status == 200 and decided["call"]["status"] == "denied", decided
    run, detail = claude.wait_run(sid, receipt["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and claude.reply(detail, run) == "Not written.", run
    assert not target.exists()

    claude.fake.push(tool_use("Write", {"file_path": str(target), "content": "hello\n"}), text("Written."))
    receipt = claude.send(sid, "write it after all")
    call = waiting(claude, receipt["run_id"])
    status, decided = claude.api("POST", f"/runs/{receipt['run_id']}/tool_calls/{call['id']}/decision",
                                 {"decision": "allow_once"})
    assert status == 200, decided
    run, detail = claude.wait_run(sid, receipt["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and claude.reply(detail, run) == "Written.", run
    assert target.read_text() == "hello\n"
    [(tool, status, result)] = claude.calls(sid, run)
    assert tool.startswith("Write") and status == "ok" and result, (tool, status, result)


def waiting(claude: Claude, run_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, listed = claude.api("GET", "/approvals")
        found = [w["call"] for w in listed["approvals"] if w["run_id"] == run_id]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no call of run {run_id} waited for approval")


def test_cancel_mid_stream_ends_the_turn_cancelled(claude):
    claude.fake.push(hang("Thinking it over"))
    sid = claude.session()
    receipt = claude.send(sid, "take your time")
    claude.wait_reply_has(sid, "Thinking it over")
    started = time.monotonic()
    status, run = claude.api("POST", f"/sessions/{sid}/runs/{receipt['run_id']}/cancel")
    assert status == 200 and run["status"] == "cancelled", run
    assert time.monotonic() - started < 6
    claude.fake.push(text("Back."))
    _, reply = claude.turn(sid, "are you there")
    assert reply == "Back.", reply


def test_a_killed_agent_fails_agent_exited_and_a_retry_completes(claude):
    claude.fake.push(hang("Working on "))
    sid = claude.session()
    receipt = claude.send(sid, "a long job")
    claude.wait_reply_has(sid, "Working on ")
    pids = claude.agent_pids()
    assert pids, "Mulligan started no agent process"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    run, _ = claude.wait_run(sid, receipt["run_id"], {"failed", "completed", "cancelled"})
    assert run["status"] == "failed" and run["retry"]["retry_class"] == "agent_exited", run
    assert run["retry"]["retryable"], run
    claude.fake.push(text("done."))
    status, retried = claude.api("POST", f"/sessions/{sid}/retry")
    # Text came before the crash: the retry continues the turn.
    assert status == 200 and retried["kind"] == "continuation", retried
    run, detail = claude.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed", run
    assert claude.reply(detail, run).endswith("done."), claude.reply(detail, run)


def test_a_restart_reopens_the_claude_session_with_its_memory(claude):
    claude.fake.push(text("Noted: the word is heron."))
    sid = claude.session()
    claude.turn(sid, "remember the word heron")
    claude.stop()
    claude.start()
    claude.fake.push(text("It was heron."))
    _, reply = claude.turn(sid, "what was the word")
    assert reply == "It was heron.", reply
    # The new process loaded the agent session: the model sees the first exchange again.
    seen = json.dumps(claude.fake.turn_requests()[-1]["body"]["messages"])
    assert "remember the word heron" in seen and "Noted: the word is heron." in seen, seen[:2000]


def test_what_claude_code_counts_of_a_turn_counts_to_the_spend_limit():
    fake = FakeAnthropic()
    with tempfile.TemporaryDirectory(prefix="mulligan-claude-", ignore_cleanup_errors=True) as tmp:
        claude = Claude(Path(tmp), fake, env={"MULLIGAN_SPEND_LIMIT_TOKENS": "4000"})
        try:
            fake.push(text("A long read.", input_tokens=5000))
            sid = claude.session()
            _, reply = claude.turn(sid, "read everything")
            assert reply == "A long read."
            # Past the budget the next turn is refused before Claude Code is asked.
            asked = len(fake.turn_requests())
            run, _ = claude.turn(sid, "and more", statuses={"failed"})
            assert run["retry"]["retry_class"] == "spend_limit_exceeded", run
            assert len(fake.turn_requests()) == asked
        finally:
            claude.stop()
            fake.close()
