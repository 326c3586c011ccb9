"""A scriptable ACP agent on the official Python SDK (`agent-client-protocol`), the outside
world for Mulligan's agent-turn tests: what it does follows the prompt's words.

- anything else: streams "echo: <prompt> (turn N)" in chunks; N counts this session's prompts,
  kept in $AGENT_STATE, so a session loaded in a new process goes on counting
- `slow N`: N chunks 100 ms apart, ended early by `session/cancel` (stopReason `cancelled`)
- `overloaded K` / `partial K`: the first K prompts of the session with these words fail as
  Claude Code does after its own retries (-32603, "API Error: 529 ..."); `partial` streams
  text first
- `exit`: streams a word, then the process exits with status 3
- `write PATH`: asks permission for an edit, writes PATH only if allowed
- `env`: answers the names of its environment's variables
- `usage N`: reports its context at N/2, N, then N/4 tokens (`usage_update`)
- `stop REASON`: streams "stopping", then ends the turn with stopReason REASON
- `chunks N`: streams N chunks of 8 characters as fast as it can (bench/acp_chunks.py)

With $AGENT_AUTH set it offers that auth method and opens no session until it is picked
(`authenticate`), as Codex does with an API key.

Every method it is sent is logged to $AGENT_STATE/log.jsonl with its pid.
"""

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import AgentCapabilities, AuthenticateResponse, AuthMethodAgent, PermissionOption, UsageUpdate

STATE = Path(os.environ.get("AGENT_STATE", "/tmp/scripted-agent"))
OVERLOADED = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'


def log(**entry) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "log.jsonl", "a") as f:
        f.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def history_file(session_id: str) -> Path:
    return STATE / f"session-{session_id}.json"


def history(session_id: str) -> list:
    try:
        return json.loads(history_file(session_id).read_text())
    except FileNotFoundError:
        return []


def save(session_id: str, turns: list) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    history_file(session_id).write_text(json.dumps(turns))


def count(name: str) -> int:
    """How many times `name` was counted before (and counts this one)."""
    path = STATE / f"count-{name}"
    n = int(path.read_text()) if path.exists() else 0
    path.write_text(str(n + 1))
    return n


class Scripted(Agent):
    def __init__(self) -> None:
        self.conn = None
        self.cancelled: set[str] = set()
        self.authenticated = not os.environ.get("AGENT_AUTH")

    def on_connect(self, conn) -> None:
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        log(method="initialize")
        auth = os.environ.get("AGENT_AUTH")
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True),
            auth_methods=[AuthMethodAgent(id=auth, name="API key")] if auth else [],
        )

    async def authenticate(self, method_id, **kw):
        log(method="authenticate", method_id=method_id)
        if method_id != os.environ.get("AGENT_AUTH"):
            raise RequestError(-32602, f"no auth method {method_id}")
        self.authenticated = True
        return AuthenticateResponse()

    def check_auth(self):
        if not self.authenticated:
            raise RequestError.auth_required()

    async def new_session(self, cwd, additional_directories=None, mcp_servers=None, **kw):
        self.check_auth()
        sid = uuid.uuid4().hex
        save(sid, [])
        log(method="session/new", session=sid, cwd=cwd)
        return NewSessionResponse(session_id=sid)

    async def load_session(self, cwd, session_id, mcp_servers=None, additional_directories=None, **kw):
        log(method="session/load", session=session_id)
        self.check_auth()
        if not history_file(session_id).exists():
            raise RequestError(-32002, f"Resource not found: session {session_id}")
        for turn in history(session_id):
            await self.conn.session_update(session_id, update_user_message_text(turn["prompt"]))
            await self.conn.session_update(session_id, update_agent_message_text(turn["reply"]))
        return LoadSessionResponse()

    async def cancel(self, session_id, **kw):
        log(method="session/cancel", session=session_id)
        self.cancelled.add(session_id)

    async def say(self, sid: str, text: str) -> None:
        await self.conn.session_update(sid, update_agent_message_text(text))

    async def prompt(self, session_id, prompt, **kw):
        text = " ".join(getattr(block, "text", "") for block in prompt)
        log(method="session/prompt", session=session_id, prompt=text)
        self.cancelled.discard(session_id)
        turns = history(session_id)
        words = text.split()
        reply = ""
        if words[:1] == ["slow"] and len(words) > 1:
            for i in range(int(words[1])):
                if session_id in self.cancelled:
                    log(method="ended", session=session_id, stop="cancelled")
                    return PromptResponse(stop_reason="cancelled")
                await self.say(session_id, f"w{i} ")
                await asyncio.sleep(0.1)
            reply = "slow done"
        elif words[:1] in (["overloaded"], ["partial"]) and len(words) > 1:
            if count(f"{session_id}-{words[0]}") < int(words[1]):
                if words[0] == "partial":
                    await self.say(session_id, "half of it ")
                await self.conn.session_update(session_id, update_agent_thought_text("retrying inside"))
                raise RequestError(-32603, OVERLOADED)
            reply = f"recovered after {words[1]}"
        elif "cut off by" in text and "Check what already finished" in text:
            reply = "continued"
        elif words[:1] == ["exit"]:
            await self.say(session_id, "bye ")
            sys.stdout.flush()
            os._exit(3)
        elif words[:1] == ["write"] and len(words) > 1:
            path = words[1]
            call = start_tool_call("call-1", f"Write {path}", kind="edit", status="pending",
                                   raw_input={"file_path": path, "content": "hello"})
            await self.conn.session_update(session_id, call)
            answer = await self.conn.request_permission(
                session_id=session_id,
                tool_call=update_tool_call("call-1", title=f"Write {path}", kind="edit", status="pending",
                                           raw_input={"file_path": path, "content": "hello"}),
                options=[
                    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
                    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                ],
            )
            chosen = getattr(answer.outcome, "option_id", None)
            log(method="permission", session=session_id, chosen=chosen)
            if chosen in ("allow", "always"):
                Path(path).write_text("hello")
                await self.conn.session_update(session_id, update_tool_call("call-1", status="completed",
                                                                                     raw_output="wrote 5 bytes"))
                reply = "wrote it"
            else:
                await self.conn.session_update(session_id, update_tool_call("call-1", status="failed"))
                reply = "not allowed"
        elif words[:1] == ["usage"] and len(words) > 1:
            # The context as it grows, then as compacted: the turn counts its most.
            for used in (int(words[1]) // 2, int(words[1]), int(words[1]) // 4):
                await self.conn.session_update(session_id, UsageUpdate(session_update="usage_update", used=used, size=200000))
            reply = f"counted {words[1]}"
        elif words[:1] == ["chunks"] and len(words) > 1:
            for _ in range(int(words[1])):
                await self.say(session_id, "chunk.. ")
            log(method="ended", session=session_id, stop="end_turn")
            return PromptResponse(stop_reason="end_turn")
        elif words[:1] == ["stop"] and len(words) > 1:
            await self.say(session_id, "stopping")
            log(method="ended", session=session_id, stop=words[1])
            return PromptResponse(stop_reason=words[1])
        elif words[:1] == ["env"]:
            reply = "env: " + " ".join(sorted(os.environ))
        else:
            reply = f"echo: {text} (turn {len(turns) + 1})"
        if not reply.startswith("slow"):
            for i in range(0, len(reply), 8):
                await self.say(session_id, reply[i:i + 8])
        turns.append({"prompt": text, "reply": reply})
        save(session_id, turns)
        log(method="ended", session=session_id, stop="end_turn")
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(Scripted()))
