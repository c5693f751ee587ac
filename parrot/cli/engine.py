"""`parrot-engine`: run one engine as an HTTP process.

    parrot-engine --kind simulated|builtin --name NAME [--config FILE.yaml | --params JSON]
                  [--host 127.0.0.1] [--port 0] [--register-url MANAGER_URL]

Prints exactly one line `READY <url>` on stdout once it listens (port 0 picks a free port; the
line has the real one), then serves until SIGTERM/SIGINT. With --register-url it then POSTs
`{name, url}` to `<manager>/v1/engines` (best effort: a failure is logged, the engine keeps
serving). Configuration errors exit with status 2 and a message on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from typing import Any, Sequence

import aiohttp
import yaml
from aiohttp import web

from parrot.engines.factory import create_engine
from parrot.engines.server import DEFAULT_MAX_BODY_BYTES, create_app
from parrot.errors import ParrotError

log = logging.getLogger("parrot.engine")

SERVED_KINDS = ("simulated", "builtin")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parrot-engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", required=True, choices=SERVED_KINDS)
    parser.add_argument("--name", required=True)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", metavar="FILE.yaml", help="engine params as a YAML mapping")
    source.add_argument("--params", metavar="JSON", help="engine params as a JSON object")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--advertise-host", default=None,
                        help="host put in the READY line and registration (default: --host, "
                             "or 127.0.0.1 when listening on all interfaces)")
    parser.add_argument("--register-url", default=None, metavar="MANAGER_URL")
    parser.add_argument("--admin-token", default=None,
                        help="the manager's admin token for --register-url (default: the "
                             "PARROT_ADMIN_TOKEN environment variable)")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--log-level", default="INFO")
    return parser


def load_params(args: argparse.Namespace) -> dict[str, Any]:
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            params = yaml.safe_load(f)
        source = args.config
    elif args.params:
        params = json.loads(args.params)
        source = "--params"
    else:
        return {}
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ValueError(f"{source}: engine params must be a mapping, got {type(params).__name__}")
    return params


async def serve(args: argparse.Namespace, params: dict[str, Any]) -> None:
    engine = create_engine(args.kind, args.name, params)
    runner = web.AppRunner(create_app(engine, max_body_bytes=args.max_body_bytes),
                           handle_signals=False, access_log=None)
    await runner.setup()  # starts the engine
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://{_url_host(args.advertise_host or args.host)}:{port}"
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"READY {url}", flush=True)
        log.info("engine %s (%s) serving at %s", args.name, args.kind, url)
        if args.register_url:
            await register(args.register_url, args.name, url,
                           args.admin_token or os.environ.get("PARROT_ADMIN_TOKEN"))
        await stop.wait()
        log.info("engine %s stopping", args.name)
    finally:
        await runner.cleanup()  # closes the engine


async def register(manager_url: str, name: str, url: str, admin_token: str | None = None) -> bool:
    target = manager_url.rstrip("/") + "/v1/engines"
    headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.post(target, json={"name": name, "url": url},
                                    headers=headers) as resp:
                if resp.status >= 400:
                    raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:500]}")
    except Exception as exc:  # best effort: the engine serves anyway
        log.warning("could not register engine %s at %s: %s", name, target, exc)
        return False
    log.info("registered engine %s at %s", name, target)
    return True


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _loop_factory() -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        params = load_params(args)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"parrot-engine: bad engine params: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(args, params))
    except ParrotError as exc:
        print(f"parrot-engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        print(f"parrot-engine: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
