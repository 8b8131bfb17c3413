"""What an upstream adapter is told of the one request it is sent, and what it reports back.

The adapters never see the gateway's `RequestContext`: the upstream caller
(gateway/upstream_call.py) makes an `UpstreamCall` per attempt and reads back what the
adapter found out (the replica that answered, a whole answer's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class UpstreamCall:
    request_id: str
    session_id: str | None = None  # keys the conversation's KV cache upstream
    cache_salt: str | None = None  # the engine's prefix-cache partition (gateway/kv_isolation.py)
    # the client's JSON as it came, when the request sent is the client's own, unchanged:
    # a passthrough may send these very bytes
    client_json: bytes | None = None
    priority: int | None = None  # the engine's request priority (the route's `priority:`)
    # reported back by the adapter
    endpoint: str | None = None  # the replica that answered (a fleet's base URL)
    body: bytes | None = None  # a whole answer's bytes as the upstream sent them
