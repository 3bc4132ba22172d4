"""The logs' backstop (config/logging.py, docs/design.md#logs): whatever reaches a line, a bearer
token, a permit id or a secret-named field does not come out, and an exception is its type and
frames, never its message."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from config.logging import logging_config

TOKEN_SECRET = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
                       min_size=8, max_size=43)
ID_TAIL = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                  min_size=8, max_size=22)


@pytest.fixture(scope="module")
def emit() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    config = logging_config("json", "INFO")
    formatter = config["formatters"]["structured"]
    factory = formatter.pop("()")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(factory(**formatter))
    logger = logging.getLogger("tests.redaction")
    logger.handlers, logger.propagate, logger.level = [handler], False, logging.INFO
    yield logger, stream
    logger.handlers, logger.propagate = [], True


def last_line(stream: io.StringIO) -> dict[str, object]:
    record = json.loads(stream.getvalue().splitlines()[-1])
    assert isinstance(record, dict)
    return record


@given(lookup=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
       secret=TOKEN_SECRET, permit=ID_TAIL)
def test_tokens_and_permit_ids_are_masked_wherever_they_appear(
    emit: tuple[logging.Logger, io.StringIO], lookup: str, secret: str, permit: str,
) -> None:
    logger, stream = emit
    token, permit_id = f"eac_{lookup}_{secret}", f"prm_{permit}"
    # Ids another test bound to this thread's context would share the line and, by chance, a
    # generated value (a timestamp's digits, "proposal" in `proposal_id`): only the line's
    # own words are searched.
    structlog.contextvars.clear_contextvars()
    logger.warning("called with %s and %s (Authorization: Bearer %s)", token, permit_id, token)
    line = json.dumps({k: v for k, v in last_line(stream).items() if k != "timestamp"})
    assert secret not in line and permit not in line
    assert last_line(stream)["event"] == (
        "called with eac_[redacted] and prm_[redacted] (Authorization: Bearer [redacted])")


def test_secret_named_fields_lose_their_values(emit: tuple[logging.Logger, io.StringIO]) -> None:
    _, stream = emit
    structlog.get_logger("tests.redaction").info(
        "event", password="hunter2-x", arguments={"to": "a@b.example"}, permit_id="prm_x",
        nested={"api_key": "k-123", "ok": "prm_abcdefgh1"}, operation_id="op_1", count=3)
    record = last_line(stream)
    assert record["password"] == record["arguments"] == record["permit_id"] == "[redacted]"
    assert record["nested"] == {"api_key": "[redacted]", "ok": "prm_[redacted]"}
    assert (record["operation_id"], record["count"]) == ("op_1", 3)


def test_an_exception_is_its_type_and_frames_never_its_message(
    emit: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = emit
    try:
        try:
            raise KeyError("customer-secret@example.com")
        except KeyError as inner:
            raise ValueError("amount 1234.56 refused") from inner
    except ValueError:
        logger.exception("handler failed")
    line = stream.getvalue().splitlines()[-1]
    assert "customer-secret" not in line and "1234.56" not in line
    chain = last_line(stream)["exception_chain"]
    assert isinstance(chain, list)
    assert [link["type"] for link in chain] == ["builtins.ValueError", "builtins.KeyError"]
    assert all(link["frames"] for link in chain)
