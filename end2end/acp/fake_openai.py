"""A fake OpenAI Responses endpoint for Codex under test (`codex-acp`): streams a scripted text
reply, answers 503 on demand, and keeps what it heard. Each POST /v1/responses takes the next
script of the queue, or the default once it is empty.
"""

import itertools
import json
import threading
from http.server import ThreadingHTTPServer

from fake_http import FakeHandler

IDS = itertools.count(1)


def text(*chunks: str) -> dict:
    return {"kind": "text", "chunks": list(chunks)}


def unavailable() -> dict:
    """503 with OpenAI's error shape."""
    return {"kind": "status", "code": 503, "message": "Service overloaded"}


class FakeOpenAI:
    def __init__(self):
        self.lock = threading.Lock()
        self.queue: list = []
        self.default = text("Done.")
        self.heard: list = []
        fake = self

        class Handler(FakeHandler):
            def do_GET(self):
                self.reply_json(200, {"object": "list", "data": [], "models": []})

            def do_POST(self):
                body = self.read_json()
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.heard.append({"path": path, "body": body, "headers": dict(self.headers)})
                    script = fake.queue.pop(0) if fake.queue else fake.default
                if not path.endswith("/responses"):
                    return self.reply_json(404, {"error": {"message": path, "type": "invalid_request_error"}})
                if script["kind"] == "status":
                    return self.reply_json(script["code"], {"error": {"message": script["message"], "type": "server_error"}})
                self.start_events()
                n = next(IDS)
                rid, mid = f"resp_{n}", f"msg_{n}"
                self.typed("response.created", {"response": {"id": rid}})
                self.typed("response.output_item.added", {"output_index": 0, "item": {"type": "message", "id": mid, "role": "assistant", "content": []}})
                for c in script["chunks"]:
                    self.typed("response.output_text.delta", {"delta": c, "item_id": mid, "output_index": 0, "content_index": 0})
                whole = "".join(script["chunks"])
                self.typed("response.output_item.done", {"output_index": 0, "item": {"type": "message", "id": mid, "role": "assistant", "content": [{"type": "output_text", "text": whole}]}})
                self.typed("response.completed", {"response": {"id": rid, "usage": {
                    "input_tokens": 10, "input_tokens_details": None, "output_tokens": 5,
                    "output_tokens_details": None, "total_tokens": 15}}})
                self.end_events()

            def typed(self, kind: str, data: dict):
                self.event(kind, {"type": kind, **data})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def push(self, *scripts: dict):
        with self.lock:
            self.queue.extend(scripts)

    def turns(self) -> list:
        with self.lock:
            return [h for h in self.heard if h["path"].endswith("/responses")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
