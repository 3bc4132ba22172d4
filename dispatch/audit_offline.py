"""`manage.py audit_verify --file F --keys K [--checkpoint C]` (docs/audit-seal.md#export): the
offline check of an export, with only the public keys and, when given, a witness's checkpoints.

`manage.py` runs it before Django is set up: it reads no database and no settings (so it needs
no `SECRET_KEY`, nor anything else a deployment must set), only the three files. No Django import
here; the verifier is `protocols.auditseal`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def wanted(argv: Sequence[str]) -> bool:
    """Whether `manage.py`'s arguments ask for the offline check (`audit_verify --file`)."""
    return argv[:1] == ["audit_verify"] and any(
        arg == "--file" or arg.startswith("--file=") for arg in argv[1:])


def verify_files(export: str, keys: str | None, checkpoint: str | None) -> tuple[bool, str]:
    """(True, what verified) or (False, the first problem)."""
    from protocols.auditseal import parse_checkpoints, verify_export

    if not keys:
        return False, "--file needs --keys (the JSON of GET /api/v1/keys/)"
    try:
        with open(keys, encoding="utf-8") as jwks_file:
            jwks = json.load(jwks_file)
        with open(export, encoding="utf-8", newline="") as export_file:
            text = export_file.read()
        checkpoints = []
        if checkpoint:
            with open(checkpoint, encoding="utf-8") as checkpoint_file:
                checkpoints = parse_checkpoints(checkpoint_file.read())
    except (OSError, ValueError) as exc:
        return False, f"cannot read: {exc}"
    problem = verify_export(text, jwks, checkpoints)
    if problem:
        return False, f"{export}: {problem}"
    held = f", and holds the chain of each of {len(checkpoints)} checkpoints" if checkpoints \
        else ""
    return True, f"{export} verifies{held}"


def main(argv: Sequence[str]) -> int:
    """The command line after `audit_verify`; the exit status (0 verifies, 1 does not)."""
    parser = argparse.ArgumentParser(
        prog="manage.py audit_verify",
        description="Verify an audit_export file with only the public keys (no database).")
    parser.add_argument("--tenant", help="ignored offline: the export names its tenant")
    parser.add_argument("--file", required=True, help="the audit_export file")
    parser.add_argument("--keys", help="the JWKS file of GET /api/v1/keys/")
    parser.add_argument("--checkpoint", help="a checkpoint's JSON, or a checkpoint log")
    args = parser.parse_args(list(argv))
    ok, message = verify_files(args.file, args.keys, args.checkpoint)
    if not ok:
        sys.stderr.write(f"CommandError: {message}\n")
        return 1
    sys.stdout.write(message + "\n")
    return 0
