"""`headstart engine --role both|prefill|decode`: what each role needs at start.

`both` (the default) is the engine as it always was. `prefill` also serves its pool's blocks
over TCP (engine/kv_handover_wire.py) and names them in its answers' `kv_transfer_params`;
`decode` also loads the blocks such an answer names (engine/serving/kv_transfer.py). Both
hand blocks over by their hashes, so both need the prefix cache. Bad combinations stop the
command before the model loads.
"""

from __future__ import annotations

import argparse
import socket
import uuid

from engine.async_engine import AsyncEngine
from engine.kv_handover import BlockLayout
from engine.kv_handover_wire import BlockServer
from engine.serving.kv_transfer import KVTransfer

EXPORT_TIMEOUT_S = 30.0  # a step running longer than this fails the transfer, not the engine


def check_role(args: argparse.Namespace) -> None:
    """ValueError naming the flag that does not fit `--role`."""
    if args.role != "both" and args.no_prefix_caching:
        raise ValueError(f"--role {args.role} hands KV blocks over by their prefix-cache "
                         "hashes: it cannot run with --no-prefix-caching")
    for flag in ("kv_transfer_port", "kv_transfer_host"):
        if getattr(args, flag) is not None and args.role != "prefill":
            raise ValueError(f"--{flag.replace('_', '-')} applies to --role prefill only")
    if args.kv_transfer_port is not None and not 0 <= args.kv_transfer_port < 65536:
        raise ValueError(f"--kv-transfer-port {args.kv_transfer_port} is not a port (0-65535)")
    if args.kv_transfer_port and args.kv_transfer_port == args.port:
        raise ValueError(f"--kv-transfer-port {args.port} is the engine's own --port")


def advertised_host(bind_host: str) -> str:
    """Where decode engines reach a block server bound to `bind_host`."""
    if bind_host in ("0.0.0.0", "::", ""):
        return socket.gethostbyname(socket.gethostname())
    return bind_host


def bind_block_server(host: str, port: int, layout: BlockLayout, export, http_port: int,
                      tries: int = 8) -> BlockServer:
    """The block server on `port`, started; port 0: any free port but `http_port`, which
    the engine binds only later and which the kernel may hand out meanwhile (it was free
    a moment ago, when whoever started the engine chose it)."""
    for _ in range(tries):
        server = BlockServer(host, port, layout, export)
        if port or server.port != http_port:
            return server.start()
        server.close()
    raise ValueError(f"no free port for the KV block server beside --port {http_port}")


def start_kv_transfer(engine: AsyncEngine, args: argparse.Namespace
                      ) -> tuple[KVTransfer, BlockServer | None]:
    """The engine's `KVTransfer` for its role, and the block server a prefill engine runs
    (started; the caller closes it)."""
    engine_id = f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
    if args.role != "prefill":
        return KVTransfer(engine, args.role, engine_id=engine_id), None
    transfer = KVTransfer(engine, "prefill", engine_id=engine_id)

    def export(hashes: list[int]) -> tuple[int, bytearray]:
        return engine.executor.submit(transfer.export, hashes).result(EXPORT_TIMEOUT_S)

    server = bind_block_server(args.host, args.kv_transfer_port or 0,
                               BlockLayout.of(engine.engine.runner.kv_cache), export, args.port)
    transfer.host = args.kv_transfer_host or advertised_host(args.host)
    transfer.port = server.port
    return transfer, server
