"""The KV handover over TCP: a prefill engine serves its pool's blocks by hash, a decode
engine fetches the ones it lacks (engine/kv_handover.py does the copies).

One request per connection, so a broken transfer never leaves a stream half-read:

    decode  -> prefill   {"hashes": ["<32 hex digits>", ...]}\\n
    prefill -> decode    {"blocks": n, "shape": [layers, 2, block_size, kv_heads, head_dim],
                          "dtype": "bfloat16"}\\n   then n blocks' bytes, in the order asked
                         (or {"error": "..."}\\n)

The prefill engine answers with the leading run of the hashes its pool still holds (`n`
may be fewer than asked: evicted since, or never computed there); the decode engine
computes the rest. Blocks go as the pool holds them (SmolLM2-135M: 368,640 bytes a block of
16 tokens in bfloat16), with no framing per block. The server listens where the engine's
HTTP server does and hands anyone who connects the blocks they name: keep it on a private
network, as the engines are.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from collections.abc import Callable

from engine.kv_handover import BlockLayout, HandoverError

log = logging.getLogger("headstart.engine")

MAX_REQUEST_BYTES = 1 << 20  # ~29,000 hashes: prompts of 460,000 tokens
DTYPES = ("bfloat16", "float16", "float32")
Export = Callable[[list[int]], tuple[int, bytearray]]  # hashes -> (count, buffer)


def encode_hash(block_hash: int) -> str:
    """A 128-bit block hash as JSON carries it (its numbers stop at 53 bits)."""
    return f"{block_hash:032x}"


def decode_hash(text: str) -> int:
    if not isinstance(text, str) or len(text) != 32:
        raise ValueError(f"a block hash is 32 hex digits, not {text!r}")
    return int(text, 16)


class BlockServer:
    """Serves `export(hashes)` on `host:port` (port 0: any free one), a thread a connection."""

    def __init__(self, host: str, port: int, layout: BlockLayout, export: Export) -> None:
        self.layout = layout
        self.export = export
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                server._serve(self.rfile, self.connection)

        self._server = socketserver.ThreadingTCPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="kv-handover", daemon=True)

    def start(self) -> BlockServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def _serve(self, rfile, connection: socket.socket) -> None:
        try:
            line = rfile.readline(MAX_REQUEST_BYTES)
            hashes = [decode_hash(h) for h in json.loads(line)["hashes"]]
            count, buffer = self.export(hashes)
        except Exception as exc:  # noqa: BLE001 - the peer is told, the engine keeps serving
            log.warning("kv handover: refused a request: %s", exc)
            connection.sendall(json.dumps({"error": str(exc)}).encode() + b"\n")
            return
        header = {"blocks": count, "shape": list(self.layout.shape), "dtype": self.layout.dtype}
        connection.sendall(json.dumps(header).encode() + b"\n")
        connection.sendall(memoryview(buffer))


def fetch_blocks(host: str, port: int, hashes: list[int],
                 timeout_s: float = 10.0) -> tuple[BlockLayout, int, bytearray]:
    """(layout, count, buffer) of the leading run of `hashes` the engine at `host:port`
    holds. OSError when it cannot be reached or breaks off, HandoverError when it refuses."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        request = json.dumps({"hashes": [encode_hash(h) for h in hashes]}).encode() + b"\n"
        sock.sendall(request)
        reader = sock.makefile("rb")
        header = json.loads(reader.readline(MAX_REQUEST_BYTES) or b"null")
        if not isinstance(header, dict):
            raise HandoverError("the prefill engine closed the connection without an answer")
        if "error" in header:
            raise HandoverError(f"the prefill engine refused: {header['error']}")
        layout = read_layout(header)
        count = int(header["blocks"])
        if not 0 <= count <= len(hashes):
            raise HandoverError(f"{count} blocks sent for {len(hashes)} asked")
        buffer = bytearray(count * layout.bytes_per_block)
        view, got = memoryview(buffer), 0
        while got < len(buffer):
            n = reader.readinto(view[got:])
            if not n:
                raise ConnectionError(f"the prefill engine stopped after {got} of "
                                      f"{len(buffer)} bytes")
            got += n
        return layout, count, buffer


def read_layout(header: dict) -> BlockLayout:
    shape, dtype = header.get("shape"), header.get("dtype")
    if dtype not in DTYPES or not isinstance(shape, list) or len(shape) != 5 \
            or not all(isinstance(n, int) and n > 0 for n in shape):
        raise HandoverError(f"blocks of shape {shape} and dtype {dtype} cannot be read")
    return BlockLayout(tuple(shape), dtype)
