"""A fake Anthropic Messages endpoint for Claude Code under test: streams scripted replies
and `tool_use` blocks, answers 529/429 on demand, cuts a stream, and counts what it hears.

Each POST /v1/messages takes the next script of the queue (or the default reply once the
queue is empty). Requests that are not a conversation turn of the agent (a title or a quota
probe, say) are answered at once with a short reply and take no script.
"""

import itertools
import json
import threading
import time
from http.server import ThreadingHTTPServer

from fake_http import FakeHandler


def text(*chunks: str, every: float = 0.0, input_tokens: int = 10) -> dict:
    """A streamed text reply, one delta per chunk, that says it read `input_tokens`."""
    return {"kind": "text", "chunks": list(chunks), "every": every, "input_tokens": input_tokens}


def tool_use(name: str, arguments: dict, say: str = "") -> dict:
    """A reply asking for one tool call (after `say`, when given)."""
    return {"kind": "tool_use", "name": name, "input": arguments, "say": say}


def status(code: int, kind: str, message: str) -> dict:
    """An error answer, the shape Anthropic sends."""
    return {"kind": "status", "code": code, "type": kind, "message": message}


def overloaded() -> dict:
    return status(529, "overloaded_error", "Overloaded")


def cut(*chunks: str) -> dict:
    """Streams the chunks, then closes the connection with no end to the message."""
    return {"kind": "cut", "chunks": list(chunks)}


def overloaded_after(*chunks: str) -> dict:
    """Streams the chunks, then an `error` event (overloaded), as Anthropic does mid-stream."""
    return {"kind": "error_after", "chunks": list(chunks)}


def hang(*chunks: str) -> dict:
    """Streams the chunks, then nothing more (keep-alives only) until the client goes."""
    return {"kind": "hang", "chunks": list(chunks)}


class FakeAnthropic:
    def __init__(self):
        self.lock = threading.Lock()
        self.queue: list = []
        self.default = text("Done.")
        self.heard: list = []
        self.turns = 0
        fake = self

        class Handler(FakeHandler):
            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                self.reply_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})

            def do_POST(self):
                body = self.read_json()
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.heard.append({"path": path, "body": body, "headers": dict(self.headers)})
                if path.endswith("/count_tokens"):
                    return self.reply_json(200, {"input_tokens": 100})
                if not path.endswith("/v1/messages"):
                    return self.reply_json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
                script = fake.next_script(body)
                if body.get("stream"):
                    self.stream(script, body)
                else:
                    self.whole(script, body)

            def whole(self, script: dict, body: dict):
                if script["kind"] == "status":
                    return self.error(script)
                words = "".join(script.get("chunks") or ["Done."])
                self.reply_json(200, message(body, [{"type": "text", "text": words}], "end_turn"))

            def error(self, script: dict):
                self.reply_json(
                    script["code"],
                    {"type": "error", "error": {"type": script["type"], "message": script["message"]}},
                    {"x-should-retry": "true"} if script["code"] >= 500 else None,
                )

            def stream(self, script: dict, body: dict):
                if script["kind"] == "status":
                    return self.error(script)
                self.start_events()
                start = message(body, [], None)
                start["usage"]["input_tokens"] = script.get("input_tokens", 10)
                self.event("message_start", {"type": "message_start", "message": start})
                index = 0
                chunks = script.get("chunks") or []
                if script["kind"] == "tool_use" and script["say"]:
                    chunks = [script["say"]]
                if chunks:
                    self.event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
                    for c in chunks:
                        if script.get("every"):
                            time.sleep(script["every"])
                        self.event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": c}})
                    if script["kind"] == "cut":
                        self.close_connection = True
                        return
                    if script["kind"] == "error_after":
                        self.event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                        return self.end_events()
                if script["kind"] == "hang":
                    try:
                        while True:
                            time.sleep(0.2)
                            self.event("ping", {"type": "ping"})
                    except OSError:
                        return
                if chunks:
                    self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
                    index = 1
                stop = "end_turn"
                if script["kind"] == "tool_use":
                    stop = "tool_use"
                    block = {"type": "tool_use", "id": f"toolu_{fake.turns:04d}", "name": script["name"], "input": {}}
                    self.event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
                    self.event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": json.dumps(script["input"])}})
                    self.event("content_block_stop", {"type": "content_block_stop", "index": index})
                self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}})
                self.event("message_stop", {"type": "message_stop"})
                self.end_events()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def push(self, *scripts: dict):
        with self.lock:
            self.queue.extend(scripts)

    def next_script(self, body: dict) -> dict:
        with self.lock:
            if not is_turn(body):
                return text("Title")
            self.turns += 1
            return self.queue.pop(0) if self.queue else self.default

    def turn_requests(self) -> list:
        with self.lock:
            return [h for h in self.heard if h["path"].endswith("/v1/messages") and is_turn(h["body"])]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def is_turn(body: dict) -> bool:
    """A request of the agent's conversation (it offers tools), not a side question."""
    return bool(body.get("tools"))


IDS = itertools.count(1)


def message(body: dict, content: list, stop) -> dict:
    return {
        # Claude Code keeps one transcript entry per message id: each reply needs its own.
        "id": f"msg_fake{next(IDS):04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-fake"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
