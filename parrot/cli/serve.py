"""parrot-serve: run the Parrot manager and its engines from a YAML policy file.

    parrot-serve --config policies.yaml [--host 127.0.0.1] [--port 9000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from parrot.core.config import ServeConfig
from parrot.core.server import ParrotServer
from parrot.errors import ParrotError
from parrot.policies.registry import default_registry


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parrot-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="YAML file (see policies.yaml)")
    parser.add_argument("--host", default=None, help="overrides manager.host")
    parser.add_argument("--port", type=int, default=None, help="overrides manager.port (0: any)")
    parser.add_argument("--log-level", default="INFO")
    return parser


async def serve(config: ServeConfig, host: str | None, port: int | None) -> None:
    server = ParrotServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    url = await server.start(host, port)
    print(f"parrot-serve ready at {url} with policy {config.policy.name!r} and "
          f"{len(config.engines)} engine(s)", flush=True)
    if server.admin_token_generated:
        # Engine registration and service-wide stats need it; set manager.admin_token to fix it.
        print(f"parrot-serve admin token (generated): {server.admin_token}", flush=True)
    try:
        await stop.wait()
        print("parrot-serve stopping: admitting nothing new, waiting up to "
              f"{config.manager.shutdown_grace_s:g} s for running calls", flush=True)
        await server.shutdown()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServeConfig.load(args.config)
        # Validate the policy and its parameters now: a typo stops us before engines start.
        default_registry().create(config.policy.name, config.policy.params)
    except ParrotError as exc:
        print(f"parrot-serve: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:  # uvloop is optional (e.g. on Windows)
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config, args.host, args.port))
    except ParrotError as exc:
        print(f"parrot-serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
