"""`python -m ctx_magic.offline --port N --window TOKENS [--max-output T] [--min-cacheable T] [--auth-token TOKEN]
[--unit U] [--account new|old] [--max-seconds S]`.

Runs the offline stand-in for the Anthropic Messages API on 127.0.0.1 and prints one line
with its URL. Point a client at it with ANTHROPIC_BASE_URL=<url> and any API key, or, with
`--auth-token`, as at an LLM gateway: ANTHROPIC_AUTH_TOKEN=<that token> (any other credential is a 401).
`--unit` makes it count tokens otherwise than the real API, on purpose (x1.3, x0.8, noisy).
`--account old` answers as to an account created before 2026-08-31: thinking blocks that fail the
prefix check of the models with preserved thinking are let through instead of refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
from collections.abc import Sequence

from ctx_magic.offline.app import OfflineAPI
from ctx_magic.offline.counting import UNIT_VARIABLE, UNITS
from ctx_magic.offline.server import start_server
from ctx_magic.offline.shapes import ACCOUNTS, DEFAULT_MAX_OUTPUT, DEFAULT_WINDOW, OfflineConfig


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ctx_magic.offline",
        description="A local, deterministic stand-in for the Anthropic Messages API (no model behind it).",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 picks a free one)")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="context window in tokens")
    parser.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT, help="largest max_tokens accepted")
    parser.add_argument(
        "--min-cacheable", type=int, default=None,
        help="shortest prefix the prompt cache stores, in tokens (default: the model's own minimum, e.g. 1024)",
    )
    parser.add_argument(
        "--auth-token", default=None,
        help="accept only this credential, as a bearer token or x-api-key, like a gateway (default: any)",
    )
    parser.add_argument(
        "--unit", choices=list(UNITS), default=None,
        help="how tokens are counted: like the real API (calibrated, the default) or on purpose otherwise, "
             f"to test a client that counts differently (default: ${UNIT_VARIABLE}, else calibrated)",
    )
    parser.add_argument(
        "--account", choices=list(ACCOUNTS), default=OfflineConfig.account,
        help="the account's age for the prefix check on thinking blocks: new (created on or after 2026-08-31: "
             "a failing block is a 400) or old (not enforced unless the request asks) (default: new)",
    )
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop by itself after this many seconds (tests use it)"
    )
    args = parser.parse_args(argv)
    if args.window < 1 or args.max_output < 1:
        parser.error("--window and --max-output must be positive")
    if args.min_cacheable is not None and args.min_cacheable < 0:
        parser.error("--min-cacheable must not be negative")
    if args.max_seconds is not None and args.max_seconds <= 0:
        parser.error("--max-seconds must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = OfflineConfig(window=args.window, max_output=args.max_output, min_cacheable_tokens=args.min_cacheable,
                           credential=args.auth_token, account=args.account)
    if args.unit is not None:
        config = dataclasses.replace(config, unit=args.unit)
    api = OfflineAPI(config)
    server, stop = start_server(api, args.port)
    print(
        f"{server.url} offline stand-in for the Anthropic Messages API (deterministic policy, not a model; "
        f"window {args.window} tokens, {config.unit} unit)",
        flush=True,
    )
    try:
        threading.Event().wait(args.max_seconds)  # None waits until interrupted
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
