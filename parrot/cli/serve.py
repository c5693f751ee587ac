"""parrot-serve: run the Parrot manager and its engines from a YAML policy file.

    parrot-serve --config policies.yaml [--host 127.0.0.1] [--port 9000]
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import parrot
from parrot.cli.limits import raise_file_limit, settle_heap
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


def resolve_config(value: str | None) -> Path:
    """A path as given, or the name of a shipped config (`--config sim`); without one,
    ./policies.yaml, else the policies.yaml shipped in the package (configs/policies.yaml,
    a link to the checkout's top-level file, which the wheel carries as a copy)."""
    if value is None:
        return Path("policies.yaml") if Path("policies.yaml").is_file() \
            else resolve_config("policies")
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
    parser.add_argument("--config", default=None,
                        help="YAML file (see policies.yaml), or the name of a config shipped "
                             f"with the package: {', '.join(packaged_configs())} (default: "
                             "./policies.yaml if there is one, else the shipped policies)")
    parser.add_argument("--host", default=None, help="overrides manager.host")
    parser.add_argument("--port", type=int, default=None, help="overrides manager.port (0: any)")
    parser.add_argument("--log-level", default="INFO",
                        help="DEBUG | INFO (default: one access-log line per request) | "
                             "WARNING | ERROR | CRITICAL")
    return parser


COUNTDOWN_EVERY_S = 5.0   # a draining line this often while calls run


class PortInUseError(ParrotError):
    """The manager's port is taken: one line, before any engine starts."""


def check_port_free(host: str, port: int) -> None:
    """Bind the port once before engines start (a builtin engine takes minutes to load): a
    taken port is one line now, not a traceback after the engines are up."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the real bind reports it
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise PortInUseError(_bind_problem(host, port, exc)) from None


def _bind_problem(host: str, port: int, exc: OSError) -> str:
    why = "the address is already in use (another parrot-serve?)" \
        if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return f"cannot listen on {host}:{port}: {why}; pick another with --port"


async def serve(config: ServeConfig, host: str | None, port: int | None) -> None:
    """Run until SIGINT/SIGTERM. The first drains: nothing new is admitted, running calls get
    `shutdown_grace_s` (a line every few seconds counts them down); a second stops at once."""
    bind_host = host or config.manager.host
    bind_port = config.manager.port if port is None else port
    check_port_free(bind_host, bind_port)
    if not config.engines:
        print("parrot-serve: warning: the config names no engines; calls wait until one "
              "registers (POST /v1/engines, or parrot-engine --register-url)",
              file=sys.stderr, flush=True)
    server = ParrotServer(config)
    signals: list[asyncio.Event] = [asyncio.Event(), asyncio.Event()]  # first, second

    def on_signal() -> None:
        (signals[1] if signals[0].is_set() else signals[0]).set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        starting = asyncio.create_task(server.start(host, port))
        if not await _first(starting, signals[0]):   # stopped while the engines started
            print("parrot-serve: stopped before it was ready", file=sys.stderr, flush=True)
            return
        url = starting.result()
        settle_heap(logging.getLogger("parrot.serve"))  # before the first request
        print(f"parrot-serve ready at {url} with policy {config.policy.name!r} and "
              f"{len(config.engines)} engine(s)", flush=True)
        if server.admin_token_generated:
            # Engine registration and service-wide stats need it; set manager.admin_token.
            print(f"parrot-serve admin token (generated): {server.admin_token}", flush=True)
        await signals[0].wait()
        grace = config.manager.shutdown_grace_s
        print(f"parrot-serve stopping: admitting nothing new, waiting up to {grace:g} s for "
              f"{server.unfinished_outputs()} running output(s); Ctrl-C again stops now",
              flush=True)
        draining = asyncio.create_task(server.shutdown())
        counting = asyncio.create_task(_count_down(server, grace))
        try:
            if not await _first(draining, signals[1]):
                print("parrot-serve: stopping now", flush=True)
        finally:
            counting.cancel()
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        # the port was taken between the check and the bind
        raise PortInUseError(_bind_problem(bind_host, bind_port, exc)) from None
    finally:
        await server.stop()


async def _first(task: asyncio.Task[Any], interrupt: asyncio.Event) -> bool:
    """Wait for `task` unless `interrupt` comes first (then `task` is cancelled): whether the
    task finished. Its error, if any, is raised."""
    interrupted = asyncio.create_task(interrupt.wait())
    try:
        await asyncio.wait({task, interrupted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        interrupted.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    task.result()
    return True


async def _count_down(server: ParrotServer, grace_s: float) -> None:
    left = grace_s
    while left > 0:
        step = min(COUNTDOWN_EVERY_S, left)
        await asyncio.sleep(step)
        left -= step
        running = server.unfinished_outputs()
        if running == 0:
            return
        print(f"parrot-serve draining: {running} output(s) still running, "
              f"{left:g} s left (Ctrl-C again stops now)", flush=True)


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
