"""Turns on the real Codex (`codex-acp` from end2end's lockfile) as a session's engine
(CONTRACT §9), its model a fake OpenAI Responses endpoint of this suite: the same recovery as
Claude Code's, so nothing in it is specific to one agent.
"""

import tempfile
from pathlib import Path

import pytest

from fake_openai import FakeOpenAI, text, unavailable
from test_agents import ROOT, Server

AGENT = ROOT / "end2end" / "node_modules" / ".bin" / "codex-acp"
MODEL = "codex/default"
KEY = "sk-fake-codex-0123456789"

pytestmark = pytest.mark.skipif(not AGENT.exists(), reason="codex-acp is not installed (scripts/toolchain.sh installs it)")


class Codex(Server):
    """A `mulligan serve` whose catalogue hosts Codex against `fake`, its provider set in its
    own CODEX_HOME (with no retries of its own, so an outage reaches Mulligan at once)."""

    def __init__(self, tmp: Path, fake: FakeOpenAI):
        home = tmp / "codex"
        home.mkdir()
        (home / "config.toml").write_text(
            'model_provider = "fake"\n'
            'model = "gpt-5"\n'
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{fake.url}/v1"\n'
            'env_key = "OPENAI_API_KEY"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )
        self.fake = fake
        agents = {
            "codex": {
                "kind": "acp",
                "command": str(AGENT),
                "env": {"CODEX_HOME": str(home), "HOME": str(home)},
                "env_from": {"OPENAI_API_KEY": "TEST_OPENAI_KEY"},
                # As the README says for a real key: Codex offers this method in initialize.
                "authenticate": "openai-api-key",
                "cwd": str(tmp),
            }
        }
        super().__init__(tmp, env={"TEST_OPENAI_KEY": KEY}, agents=agents, model=MODEL)


@pytest.fixture()
def codex():
    fake = FakeOpenAI()
    with tempfile.TemporaryDirectory(prefix="mulligan-codex-", ignore_cleanup_errors=True) as tmp:
        s = Codex(Path(tmp), fake)
        yield s
        s.stop()
    fake.close()


def test_a_codex_turn_streams_and_completes(codex):
    codex.fake.push(text("Hello ", "from ", "Codex."))
    sid = codex.session()
    run, reply = codex.turn(sid, "say hello")
    assert reply.endswith("Hello from Codex."), reply
    [turn] = codex.fake.turns()
    headers = {k.lower(): v for k, v in turn["headers"].items()}
    assert headers.get("authorization") == f"Bearer {KEY}", sorted(headers)


def test_a_codex_outage_fails_retryable_and_a_retry_completes(codex):
    codex.fake.default = unavailable()
    sid = codex.session()
    run, reply = codex.turn(sid, "summarise the notes", statuses={"failed"})
    assert run["retry"]["retryable"] and run["retry"]["retry_class"] == "overloaded", run
    assert "503" in run["error_message"], run["error_message"]
    codex.fake.default = text("Recovered.")
    status, retried = codex.api("POST", f"/sessions/{sid}/retry")
    # Codex says a word before its first request (a note that the fake serves no model
    # metadata): the agent had spoken, so by the acpmux rule the retry continues.
    kind = "continuation" if reply else "resend"
    assert status == 200 and retried["kind"] == kind, (retried, reply)
    run, detail = codex.wait_run(sid, retried["run_id"], {"completed", "failed"})
    assert run["status"] == "completed" and codex.reply(detail, run).endswith("Recovered."), run
