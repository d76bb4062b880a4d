"""Recorded real Claude API traffic, read for calibrating the token count (never edited).

Two sources under `claude-api-real/` in the shared corpus:

- pydantic-ai's HTTP cassettes: every request body exactly as sent to the Messages API (or its
  count_tokens endpoint), the status it got, and the usage the API reported. The real input of
  a request is input + cache creation + cache read tokens.
- Claude Code session logs (spotter, claude-code-viewer, sniffly): API responses with their
  usage, but no system prompt or tools; what they measure is the change in the prompt from one
  response to the next.

The split into a fitting half and a held-out half is by file (a digest of its path), so no
parameter sees the file it is checked on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.corpus_location import readable

REAL_DIR = "claude-api-real"
CASSETTES = "pydantic-ai"
CLAUDE_CODE = ("spotter", "claude-code-viewer", "sniffly")
MESSAGES_PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"


def held_out(relative_path: str) -> bool:
    """The file's half: a digest of its path, so the split is fixed and blind to its content."""
    return hashlib.sha256(relative_path.encode()).digest()[0] % 2 == 1


@dataclass(frozen=True)
class Exchange:
    """One recorded call to the Messages API (or count_tokens) and what the API said."""

    file: str  # relative to the cassettes folder
    index: int  # the interaction's place in its cassette
    endpoint: str  # "messages" or "count_tokens"
    status: int
    request: Mapping[str, Any]
    usage: Mapping[str, Any] = field(default_factory=dict)

    @property
    def real_tokens(self) -> int:
        """The request's size as the API measured it: input + cache creation + cache read."""
        u = self.usage
        return int(u.get("input_tokens") or 0) + int(u.get("cache_creation_input_tokens") or 0) + int(
            u.get("cache_read_input_tokens") or 0)

    @property
    def held_out(self) -> bool:
        return held_out(self.file)


def _body(part: Mapping[str, Any]) -> Any:
    if part.get("parsed_body") is not None:
        return part["parsed_body"]
    body = part.get("body")
    if isinstance(body, Mapping):
        body = body.get("string")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return body
    try:
        return json.loads(body)
    except ValueError:
        return body


def stream_usage(text: str) -> dict[str, Any]:
    """The usage of a streamed reply: message_start's, updated by message_delta's."""
    usage: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        if event.get("type") == "message_start":
            usage.update(event.get("message", {}).get("usage") or {})
        elif event.get("type") == "message_delta":
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
    return usage


def _usage(endpoint: str, reply: Any) -> dict[str, Any]:
    if isinstance(reply, Mapping):
        if endpoint == "count_tokens":
            return {"input_tokens": reply.get("input_tokens", 0)}
        return dict(reply.get("usage") or {})
    if isinstance(reply, str):
        return stream_usage(reply)
    return {}


def cassette_paths(corpus: Path) -> list[Path]:
    return sorted((corpus / REAL_DIR / CASSETTES).rglob("*.yaml"))


def load_exchanges(corpus: Path) -> list[Exchange]:
    """Every recorded call to api.anthropic.com's Messages API or count_tokens, in file order."""
    exchanges: list[Exchange] = []
    for path in cassette_paths(corpus):
        exchanges += readable(lambda p: _cassette(p, corpus / REAL_DIR / CASSETTES), path) or []
    return exchanges


def _cassette(path: Path, root: Path) -> list[Exchange]:
    """The calls to the Messages API or count_tokens one cassette recorded."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {error}") from error
    exchanges: list[Exchange] = []
    for index, interaction in enumerate(data.get("interactions") or []):
        request, response = interaction["request"], interaction["response"]
        uri = str(request.get("uri", ""))
        if "api.anthropic.com" not in uri:
            continue
        path_part = uri.split("api.anthropic.com", 1)[1].split("?", 1)[0]
        endpoint = {MESSAGES_PATH: "messages", COUNT_PATH: "count_tokens"}.get(path_part)
        body = _body(request)
        if endpoint is None or not isinstance(body, Mapping):
            continue
        status = int(response["status"]["code"])
        usage = _usage(endpoint, _body(response)) if status == 200 else {}
        exchanges.append(Exchange(str(path.relative_to(root)), index, endpoint, status, body, usage))
    return exchanges


# -- Claude Code logs --------------------------------------------------------------------------

@dataclass(frozen=True)
class Response:
    """One API response of a Claude Code session: its usage and the messages sent before it."""

    id: str
    model: str
    usage: Mapping[str, Any]
    start: int  # index in the session's message list of the response's first message

    @property
    def prompt_tokens(self) -> int:
        u = self.usage
        return int(u.get("input_tokens") or 0) + int(u.get("cache_creation_input_tokens") or 0) + int(
            u.get("cache_read_input_tokens") or 0)


@dataclass(frozen=True)
class Session:
    """A Claude Code log as the request thread: API messages in order and the responses in it."""

    file: str  # relative to claude-api-real/
    messages: list[dict[str, Any]]  # {"role", "content": [blocks]} (one record each)
    responses: list[Response]

    @property
    def held_out(self) -> bool:
        return held_out(self.file)


def session_paths(corpus: Path) -> list[Path]:
    root = corpus / REAL_DIR
    return sorted(p for name in CLAUDE_CODE for p in (root / name).rglob("*.jsonl"))


def _records(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.open(encoding="utf-8"):
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError:
                continue


def load_session(path: Path, corpus: Path) -> Session:
    """The request thread of a log: the ancestors of its last assistant record, and the tool
    results hanging off tool calls on that thread (parallel results are siblings, not a chain).
    A response is written as several records sharing its message id: one Response, at its first."""
    every = list(_records(path))
    # Every record takes part in the chain (a hook's or a progress record can sit between two
    # messages); a compaction boundary continues its logical parent's thread.
    parents = {r.get("uuid"): r.get("parentUuid") or r.get("logicalParentUuid") for r in every}
    records = [r for r in every if r.get("type") in ("user", "assistant") and isinstance(r.get("message"), dict)]
    last = next((r for r in reversed(records) if r["type"] == "assistant"), None)
    thread: set[str] = set()
    cursor = last.get("uuid") if last else None
    while cursor and cursor not in thread:
        thread.add(cursor)
        cursor = parents.get(cursor)
    messages: list[dict[str, Any]] = []
    responses: list[Response] = []
    seen: set[str] = set()
    for r in records:
        if r.get("uuid") not in thread and r.get("sourceToolAssistantUUID") not in thread:
            continue
        body = r["message"]
        content = body.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if r["type"] == "assistant":
            response_id = str(body.get("id") or r.get("requestId") or "")
            if response_id and response_id not in seen and body.get("usage"):
                seen.add(response_id)
                responses.append(Response(response_id, str(body.get("model", "")), body["usage"], len(messages)))
            messages.append({"role": "assistant", "content": blocks, "id": response_id})
        else:
            messages.append({"role": "user", "content": blocks})
    return Session(str(path.relative_to(corpus / REAL_DIR)), messages, responses)


def load_sessions(corpus: Path) -> list[Session]:
    return [s for p in session_paths(corpus) if (s := readable(lambda q: load_session(q, corpus), p)) is not None]
