"""``python -m demo.destinations --dir D --smtp-port P --bank-port Q [--lookup-port L]
[--host H] [--hang-seconds S] [--keys F]``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .runner import serve


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the destinations until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m demo.destinations",
        description=(
            "Run the demo destinations: a loopback SMTP sink, and a fake bank, a publisher and "
            "a source server on one HTTP port."
        ),
    )
    parser.add_argument("--dir", required=True, help="directory for their SQLite files")
    parser.add_argument("--smtp-port", type=int, required=True, help="SMTP port on 127.0.0.1")
    parser.add_argument(
        "--bank-port",
        type=int,
        required=True,
        help="HTTP port on 127.0.0.1 of the bank, the publisher and the sources",
    )
    parser.add_argument(
        "--lookup-port", type=int, default=0,
        help="HTTP port of the SMTP sink's lookup, GET /messages/<id> (default: any free port)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="address every server listens on (default: 127.0.0.1; 0.0.0.0 for other machines)",
    )
    parser.add_argument(
        "--hang-seconds",
        type=float,
        default=120.0,
        help="how long hang.test deliveries wait before answering (default: 120)",
    )
    parser.add_argument(
        "--keys", default=None,
        help="JWKS file (the JSON of the console's GET /api/v1/keys/): the bank and the "
             "publisher then verify every write's permit token (docs/permit-tokens.md)",
    )
    args = parser.parse_args(argv)
    serve(
        args.dir,
        smtp_port=args.smtp_port,
        bank_port=args.bank_port,
        lookup_port=args.lookup_port,
        host=args.host,
        hang_seconds=args.hang_seconds,
        keys_file=args.keys,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
