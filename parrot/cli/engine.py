"""`parrot-engine`: run one engine as an HTTP process.

    parrot-engine --kind simulated|builtin|openai|vllm --name NAME
                  [--config FILE.yaml | --params JSON]
                  [--host 127.0.0.1] [--port 0] [--register-url MANAGER_URL]

Prints exactly one line `READY <url>` on stdout once it listens (port 0 picks a free port; the
line has the real one), then serves until SIGTERM/SIGINT. Configuration errors exit with
status 2 and a message on stderr.

Secret: the engine's protocol routes need `Authorization: Bearer <secret>`; the secret comes
from the environment variable PARROT_ENGINE_SECRET (never argv: other users can read that).
parrot-serve sets it for the engines it launches. An engine started by hand either gets the
same secret as the manager's config (`kind: remote`, `params: {secret: ...}`), or is started with
--register-url: then, without PARROT_ENGINE_SECRET, it makes a random one and hands it to the
manager in its registration `POST <manager>/v1/engines {name, url, secret}` (authorised with
PARROT_ADMIN_TOKEN), retrying with backoff until the manager accepts it.

--exit-with-parent (what parrot-serve's launcher passes): the engine is gone within moments
when its parent dies, even by SIGKILL and even when the engine is busy or stopped:
PR_SET_PDEATHSIG with SIGKILL on Linux, and everywhere a watchdog on stdin (a pipe from the
parent that only closes when the parent is gone) that stops the engine, at most
PARENT_GONE_GRACE_S later.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import secrets
import signal
import sys
import threading
from typing import Any
from collections.abc import Sequence

import aiohttp
import yaml
from aiohttp import web

from parrot.cli.logs import configure_logging
from parrot.engines.factory import create_engine
from parrot.cli.limits import raise_file_limit
from parrot.engines.server import DEFAULT_MAX_BODY_BYTES, GuardedRunner, create_app
from parrot.errors import ParrotError, UnauthorizedError
from parrot.types import EngineKind

log = logging.getLogger("parrot.engine")

SERVED_KINDS = tuple(k.value for k in EngineKind if k.runs_in_engine_process)
SECRET_ENV = "PARROT_ENGINE_SECRET"
ADMIN_TOKEN_ENV = "PARROT_ADMIN_TOKEN"
PARENT_PID_ENV = "PARROT_PARENT_PID"  # set by the launcher for --exit-with-parent
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_GONE_GRACE_S = 1.0  # after the parent's stdin pipe closes, at most this long to stop


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
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="stop when the parent process dies (set by parrot-serve; stdin "
                             "must be a pipe the parent holds open)")
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


async def serve(args: argparse.Namespace, params: dict[str, Any], secret: str) -> None:
    engine = create_engine(args.kind, args.name, params)
    runner = GuardedRunner(create_app(engine, secret=secret, max_body_bytes=args.max_body_bytes),
                           handle_signals=False, access_log=None)
    await runner.setup()  # starts the engine
    tasks: list[asyncio.Task[Any]] = []
    try:
        # a burst opens many connections at once: a short backlog would drop SYNs (1 s retries)
        site = web.TCPSite(runner, args.host, args.port, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://{_url_host(args.advertise_host or args.host)}:{port}"
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if args.exit_with_parent:
            tasks.append(asyncio.create_task(_stop_on_stdin_eof(stop)))
        print(f"READY {url}", flush=True)
        log.info("engine %s (%s) serving at %s", args.name, args.kind, url)
        stopping = asyncio.create_task(stop.wait())
        tasks.append(stopping)
        registering = None
        if args.register_url:
            admin_token = args.admin_token or os.environ.get(ADMIN_TOKEN_ENV)
            registering = asyncio.create_task(
                register_until_accepted(args.register_url, args.name, url, secret, admin_token))
            tasks.append(registering)
        # Stop on a signal, or when registration is refused for good (it raises then; once
        # registered, the engine just serves on).
        watched = {stopping} | ({registering} if registering is not None else set())
        while not stopping.done():
            done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if registering in done:
                registering.result()
        log.info("engine %s stopping", args.name)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()  # closes the engine


# A manager that answered 401 this many times in a row will not take the token: a wrong
# token never becomes right (a restarted manager generates a new one, never the old).
MAX_REFUSED_REGISTRATIONS = 3


class RegistrationRefusedError(UnauthorizedError):
    """The manager refused the engine's admin token: retrying cannot help."""


async def register(manager_url: str, name: str, url: str, secret: str | None = None,
                   admin_token: str | None = None) -> bool:
    """One registration attempt; False (logged) when the manager did not accept it, or
    RegistrationRefusedError when it refused the admin token (401/403)."""
    target = manager_url.rstrip("/") + "/v1/engines"
    headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
    body = {"name": name, "url": url} | ({"secret": secret} if secret else {})
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            async with session.post(target, json=body, headers=headers) as resp:
                if resp.status in (401, 403):
                    raise RegistrationRefusedError(
                        f"the manager at {manager_url} refused the admin token "
                        f"({'none given' if not admin_token else 'wrong token'}; HTTP "
                        f"{resp.status}): set {ADMIN_TOKEN_ENV} or --admin-token to the token "
                        "parrot-serve printed (or manager.admin_token in its config)")
                if resp.status >= 400:
                    raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:500]}")
    except RegistrationRefusedError:
        raise
    except Exception as exc:  # the engine serves anyway; the caller decides about retrying
        log.warning("could not register engine %s at %s: %s", name, target, exc)
        return False
    log.info("registered engine %s at %s", name, target)
    return True


async def register_until_accepted(manager_url: str, name: str, url: str, secret: str,
                                  admin_token: str | None = None,
                                  max_delay_s: float = 10.0) -> None:
    """The manager may start after the engine, or restart: keep trying, with backoff. A
    refused admin token is retried MAX_REFUSED_REGISTRATIONS times in all (the manager may be
    restarting), then RegistrationRefusedError ends the engine."""
    delay, refused = 0.5, 0
    while True:
        try:
            if await register(manager_url, name, url, secret, admin_token):
                return
            refused = 0
        except RegistrationRefusedError as exc:
            refused += 1
            log.warning("engine %s: %s (attempt %d of %d)", name, exc, refused,
                        MAX_REFUSED_REGISTRATIONS)
            if refused >= MAX_REFUSED_REGISTRATIONS:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)


async def _stop_on_stdin_eof(stop: asyncio.Event) -> None:
    """The launcher holds the write end of our stdin and never writes: EOF means it is gone."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    log.warning("parent process gone (stdin closed): stopping")
    # A graceful stop that a busy engine drags out is cut short: a timer thread, which needs
    # nothing of the (maybe busy) event loop, ends the process after PARENT_GONE_GRACE_S.
    timer = threading.Timer(PARENT_GONE_GRACE_S, os._exit, (1,))
    timer.daemon = True
    timer.start()
    stop.set()


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL us when the parent dies (also on its SIGKILL).

    SIGKILL, not SIGTERM: an engine must be gone within moments whatever it is doing, and a
    graceful stop is what a busy engine delays (in-flight requests drain: a generating engine
    lived 62 s after its manager) and what a stopped one (SIGSTOP, a debugger) never runs
    (SIGTERM waits for SIGCONT; only SIGKILL ends a stopped process). An orphaned engine has
    nobody to finish work for; the kernel frees its memory, GPU memory and ports.
    """
    if not sys.platform.startswith("linux"):
        return  # the stdin watchdog covers other systems
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    # The parent may have died before the signal was armed: then we were re-parented already.
    # (Compared with the pid the launcher passed: parrot-serve may itself be pid 1.)
    expected = os.environ.get(PARENT_PID_ENV)
    if expected is not None and str(os.getppid()) != expected:
        sys.exit(1)


def engine_secret(args: argparse.Namespace) -> str:
    secret = os.environ.get(SECRET_ENV)
    if secret:
        return secret
    if args.register_url:
        return secrets.token_urlsafe(32)  # handed to the manager at registration
    raise ValueError(f"set {SECRET_ENV} (the manager's config must carry the same secret) "
                     "or pass --register-url so that the engine registers with one")


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
    if not configure_logging("parrot-engine", args.log_level):
        sys.exit(2)
    if args.exit_with_parent:
        die_with_parent()
    raise_file_limit(log)
    try:
        params = load_params(args)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"parrot-engine: bad engine params: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        secret = engine_secret(args)
    except ValueError as exc:
        print(f"parrot-engine: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(args, params, secret))
    except RegistrationRefusedError as exc:
        print(f"parrot-engine: {exc}; stopped after {MAX_REFUSED_REGISTRATIONS} refusals",
              file=sys.stderr)
        sys.exit(2)
    except ParrotError as exc:
        print(f"parrot-engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        print(f"parrot-engine: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        sys.exit(1)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """Exit without finalizing the interpreter. The engine has closed (its files, sockets
    and trace flushed): what is left is garbage-collecting the model's object graph, which
    took 3-4 s with SmolLM2 loaded on a 2-core VM, past the launcher's 5-s grace under load
    (it then kills the engine, and a Ctrl-C waits that long)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
