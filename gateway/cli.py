"""The `headstart` command: `serve`, `engine`, `bench`, `eval-cache`.

    headstart serve  [--config FILE] [--host H] [--port P] [--workers N]
    headstart engine [--model PATH] [--host H] [--port P] ...   (engine.serving.server)
    headstart bench  ...                                         (bench.cli)
    headstart eval-cache --pairs FILE [--config FILE] [--route NAME] [--json]

Nothing downloads at run time: offline defaults are set before heavy imports.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

USAGE = """usage: headstart {serve,engine,bench,eval-cache} ...

  serve       run the gateway (embedded defaults without --config)
  engine      run the bundled engine's own OpenAI-compatible server
  bench       load-test an OpenAI-compatible endpoint
  eval-cache  measure the semantic cache on labelled pairs
"""


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="headstart serve",
                                     description="Run the Headstart gateway.")
    parser.add_argument("--config", help="YAML config file (default: embedded defaults)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--workers", type=int, default=1,
                        help="gateway processes sharing the port (configs whose upstreams are "
                             "all remote; with caching on, give them a shared `redis:`)")
    args = parser.parse_args(argv)

    from gateway.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"headstart serve: bad config\n{e}", file=sys.stderr)
        return 2

    import uvicorn

    from gateway.http_protocol import server_options

    options = dict(host=args.host, port=args.port, log_level=args.log_level,
                   access_log=False, **server_options(config))
    if args.workers > 1:
        if config.engine_upstream() is not None:
            print("headstart serve: --workers needs remote upstreams only (each worker "
                  "would load its own copy of the in-process engine)", file=sys.stderr)
            return 2
        if not config.redis and any(r.caching_enabled() for r in config.routes):
            print("headstart serve: warning: without `redis:` each worker keeps its own cache",
                  file=sys.stderr)
        os.environ[CONFIG_ENV] = os.path.abspath(args.config) if args.config else ""
        uvicorn.run("gateway.cli:app_from_env", factory=True, workers=args.workers, **options)
        return 0

    from gateway.app import create_app

    uvicorn.run(create_app(config), **options)
    return 0


CONFIG_ENV = "HEADSTART_SERVE_CONFIG"


def app_from_env():  # noqa: ANN201 - uvicorn's factory for `--workers`, one call per worker
    """The gateway app for a worker process: the config file named by the parent."""
    from gateway.app import create_app
    from gateway.config import load_config

    return create_app(load_config(os.environ.get(CONFIG_ENV) or None))


# A checkout: gateway/ beside bench/ and tests/, as an editable install leaves it
CHECKOUT = Path(__file__).resolve().parents[1]


def bench(argv: list[str]) -> int:
    """`headstart bench`: the load generator in bench/, a development tree that does not ship
    in the package (product code never imports it). Loaded only here, from the checkout
    this gateway runs from."""
    if (CHECKOUT / "bench" / "cli.py").is_file() and str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    try:
        bench_cli = importlib.import_module("bench.cli")
    except ModuleNotFoundError as exc:
        if exc.name != "bench":
            raise
        print("headstart bench: needs a checkout of the Headstart repository (bench/ does "
              "not ship in the package): clone it and run `make install` there", file=sys.stderr)
        return 2
    return bench_cli.main(argv) or 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "serve":
        return serve(rest)
    if command == "engine":
        from engine import serve_engine

        return serve_engine(rest) or 0
    if command == "bench":
        return bench(rest)
    if command == "eval-cache":
        from gateway.eval_cache import main as eval_main

        return eval_main(rest) or 0
    print(f"headstart: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
