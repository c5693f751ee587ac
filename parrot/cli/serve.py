"""parrot-serve: run the Parrot manager and its engines from a YAML policy file.

    parrot-serve --config policies.yaml [--host 127.0.0.1] [--port 9000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import parrot
from parrot.cli.limits import raise_file_limit
from parrot.cli.logs import configure_logging
from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer
from parrot.errors import ParrotError
from parrot.policies.registry import default_registry


PACKAGED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # installed package data
SOURCE_CONFIGS = Path(__file__).resolve().parents[2] / "configs"     # a source checkout


def packaged_configs() -> list[str]:
    folder = PACKAGED_CONFIGS if PACKAGED_CONFIGS.is_dir() else SOURCE_CONFIGS
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve_config(value: str) -> Path:
    """A path as given, or the name of a shipped config (`--config sim`)."""
    path = Path(value)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    for folder in (PACKAGED_CONFIGS, SOURCE_CONFIGS):
        if (folder / f"{value}.yaml").is_file():
            return folder / f"{value}.yaml"
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parrot-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {parrot.__version__}")
    parser.add_argument("--config", required=True,
                        help="YAML file (see policies.yaml), or the name of a config shipped "
                             f"with the package: {', '.join(packaged_configs())}")
    parser.add_argument("--host", default=None, help="overrides manager.host")
    parser.add_argument("--port", type=int, default=None, help="overrides manager.port (0: any)")
    parser.add_argument("--log-level", default="INFO",
                        help="DEBUG | INFO (default: one access-log line per request) | "
                             "WARNING | ERROR | CRITICAL")
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
    if not configure_logging("parrot-serve", args.log_level):
        return 2
    raise_file_limit(logging.getLogger("parrot.serve"))  # every client is a file descriptor
    try:
        config = ServeConfig.load(resolve_config(args.config))
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
