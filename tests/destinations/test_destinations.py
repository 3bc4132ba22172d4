"""The demo destinations, run as a real subprocess and reached through their clients."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from demo.destinations import (
    SOURCE_DOCUMENTS,
    DefiniteFailure,
    Fault,
    LookupFailedError,
    UncertainOutcome,
    bank_lookup,
    bank_transfer,
    fetch_source,
    list_all,
    list_messages,
    list_publications,
    list_sources,
    list_transfers,
    lookup_message,
    publication_lookup,
    publish,
    read_source,
    replace_source,
    send_email,
    sink_lookup,
)
from demo.destinations.faults import fault_for_addresses, fault_for_memo, fault_for_title
from demo.destinations.sources import ROUTE as SOURCES_ROUTE
from protocols.canonical import digest_bytes
from tests.support.destinations import Destinations, free_port, read_line

PROJECT_ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 2.0
CLIENT_TIMEOUT = 5.0
SHORT_TIMEOUT = 0.5
START_TIMEOUT = 15.0


def _read_ready_line(process: subprocess.Popen[str], deadline: float) -> str:
    """Return the first stdout line of ``process``, failing if it does not come in time."""
    line = read_line(process, deadline)
    if line is None:
        pytest.fail("destinations did not print their ready line in time")
    return line


@pytest.fixture(scope="module")
def destinations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Destinations]:
    """Run ``python -m demo.destinations`` for the module; stop it with SIGTERM after."""
    directory = tmp_path_factory.mktemp("destinations")
    smtp_port, bank_port, lookup_port = free_port(), free_port(), free_port()
    stderr_path = directory / "stderr.log"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "demo.destinations",
                "--dir",
                str(directory),
                "--smtp-port",
                str(smtp_port),
                "--bank-port",
                str(bank_port),
                "--lookup-port",
                str(lookup_port),
                "--hang-seconds",
                str(HANG_SECONDS),
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        line = _read_ready_line(process, time.monotonic() + START_TIMEOUT)
        http = f"http://127.0.0.1:{bank_port}"
        expected = (
            f"destinations ready smtp=127.0.0.1:{smtp_port} "
            f"smtp_lookup=http://127.0.0.1:{lookup_port} bank={http} publisher={http} "
            f"sources={http}/sources dir={directory.resolve()}\n"
        )
        assert line == expected, stderr_path.read_text()
        yield Destinations(directory, smtp_port, bank_port, lookup_port)
    finally:
        process.terminate()
        try:
            returncode = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        finally:
            assert process.stdout is not None
            process.stdout.close()
    assert returncode == 0, stderr_path.read_text()


def _unique(prefix: str) -> str:
    """Return an identifier no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _send(
    destinations: Destinations,
    message_id: str,
    *,
    to: list[str],
    cc: list[str] | None = None,
    timeout: float = CLIENT_TIMEOUT,
) -> None:
    """Send a small message with ``message_id`` to the running sink."""
    send_email(
        "127.0.0.1",
        destinations.smtp_port,
        message_id=message_id,
        sender="owner@example.test",
        to=to,
        cc=cc or [],
        subject="Quarterly report ✓",
        body="Hello,\n.leading dot stays\nBye\n",
        timeout=timeout,
    )


def _stored(destinations: Destinations, message_id: str) -> list[dict[str, Any]]:
    """Return every stored delivery of ``message_id``."""
    return [m for m in list_messages(destinations.directory) if m["message_id"] == message_id]


def _transfer(
    destinations: Destinations, key: str, *, memo: str = "", timeout: float = CLIENT_TIMEOUT
) -> dict[str, Any]:
    """Make a transfer of 10.00 EUR under ``key`` through the client."""
    return bank_transfer(
        destinations.bank_url,
        key=key,
        from_account="acct-owner",
        to_account="acct-payee",
        amount="10.00",
        currency="EUR",
        memo=memo,
        timeout=timeout,
    )


def _recorded(destinations: Destinations, key: str) -> list[dict[str, Any]]:
    """Return every recorded transfer under ``key``."""
    return [t for t in list_transfers(destinations.directory) if t["key"] == key]


def _post_raw(destinations: Destinations, body: bytes, path: str = "/transfers") -> tuple[int, Any]:
    """POST ``body`` to ``path`` without a client; return status and decoded JSON."""
    port = destinations.bank_port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _transfer_body(key: str, memo: str = "") -> bytes:
    """Return a valid ``POST /transfers`` body."""
    return json.dumps(
        {
            "key": key,
            "from_account": "acct-owner",
            "to_account": "acct-payee",
            "amount": "10.00",
            "currency": "EUR",
            "memo": memo,
        }
    ).encode()


# --- fault selection (pure) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        (["a@example.test"], None),
        (["a@FAIL-BEFORE.test"], Fault.FAIL_BEFORE),
        (["a@x.hang.test"], None),
        (["a@hang.test", "b@lose-response.test"], Fault.LOSE_RESPONSE),
        (["a@hang.test", "b@fail-before.test"], Fault.FAIL_BEFORE),
        (["<a@lose-response-once.test>"], Fault.LOSE_RESPONSE_ONCE),
        (["a@lose-response.test", "b@no-record.test"], Fault.NO_RECORD),
        (["a@no-record.test", "b@fail-before.test"], Fault.FAIL_BEFORE),
    ],
)
def test_recipient_domains_select_faults(addresses: list[str], expected: Fault | None) -> None:
    assert fault_for_addresses(addresses) is expected


def test_memo_selects_fault_only_when_equal_to_a_trigger() -> None:
    assert fault_for_memo(" hang.test ") is Fault.HANG
    assert fault_for_memo("rent, hang.test") is None


def test_title_selects_fault_only_when_equal_to_a_trigger() -> None:
    assert fault_for_title("Lose-Response.test") is Fault.LOSE_RESPONSE
    assert fault_for_title("fail-before.test") is Fault.FAIL_BEFORE
    assert fault_for_title("Why hang.test hangs") is None


def test_no_record_is_a_fault_of_email_only() -> None:
    # The bank and the publisher have no such fault: a memo or title naming it is plain text.
    assert fault_for_memo("no-record.test") is None
    assert fault_for_title("no-record.test") is None


# --- SMTP sink ----------------------------------------------------------------------------


def test_normal_email_is_stored_and_found_by_lookup(destinations: Destinations) -> None:
    message_id = _unique("normal")
    _send(destinations, message_id, to=["approver@example.test"], cc=["outsider@example.test"])

    found = lookup_message(destinations.directory, f"<{message_id}>")
    assert found is not None
    assert found["message_id"] == message_id
    assert found["from"] == "owner@example.test"
    assert found["to"] == ["approver@example.test"]
    assert found["cc"] == ["outsider@example.test"]
    assert found["subject"] == "Quarterly report ✓"
    assert found["body"] == "Hello,\n.leading dot stays\nBye\n"
    assert found["received_at"]
    assert lookup_message(destinations.directory, _unique("never-sent")) is None
    # The sink's own lookup over HTTP, beside the SMTP port, answers the same: no folder needed.
    assert sink_lookup(destinations.smtp_lookup_url, f"<{message_id}>", timeout=5) == found
    assert sink_lookup(destinations.smtp_lookup_url, _unique("never-sent"), timeout=5) is None


def test_second_send_of_a_message_id_stores_a_second_row(destinations: Destinations) -> None:
    message_id = _unique("twice")
    _send(destinations, message_id, to=["approver@example.test"])
    _send(destinations, message_id, to=["approver@example.test"])

    assert len(_stored(destinations, message_id)) == 2


def test_fail_before_email_is_definite_and_stores_nothing(destinations: Destinations) -> None:
    message_id = _unique("fail-before")
    with pytest.raises(DefiniteFailure, match="550"):
        _send(destinations, message_id, to=["approver@example.test"], cc=["x@fail-before.test"])

    assert _stored(destinations, message_id) == []


def test_no_record_email_is_uncertain_and_leaves_no_trace(destinations: Destinations) -> None:
    message_id = _unique("no-record")
    with pytest.raises(UncertainOutcome, match="451"):
        _send(destinations, message_id, to=["approver@no-record.test"])

    assert _stored(destinations, message_id) == []
    assert lookup_message(destinations.directory, message_id) is None
    assert sink_lookup(destinations.smtp_lookup_url, message_id, timeout=5) is None


def test_lose_response_email_is_uncertain_and_stored_once(destinations: Destinations) -> None:
    message_id = _unique("lose")
    with pytest.raises(UncertainOutcome):
        _send(destinations, message_id, to=["approver@lose-response.test"])

    assert len(_stored(destinations, message_id)) == 1


def test_lose_response_once_email_is_accepted_on_retry_without_a_second_row(
    destinations: Destinations,
) -> None:
    message_id = _unique("lose-once")
    with pytest.raises(UncertainOutcome):
        _send(destinations, message_id, to=["approver@lose-response-once.test"])
    _send(destinations, message_id, to=["approver@lose-response-once.test"])

    assert len(_stored(destinations, message_id)) == 1


def test_hanging_email_is_uncertain_and_stored(destinations: Destinations) -> None:
    message_id = _unique("hang")
    started = time.monotonic()
    with pytest.raises(UncertainOutcome, match="timed out"):
        _send(destinations, message_id, to=["approver@hang.test"], timeout=SHORT_TIMEOUT)

    assert time.monotonic() - started < HANG_SECONDS
    assert len(_stored(destinations, message_id)) == 1


def test_email_to_a_closed_port_is_definite() -> None:
    with pytest.raises(DefiniteFailure, match="refused"):
        send_email(
            "127.0.0.1",
            free_port(),
            message_id=_unique("nowhere"),
            sender="owner@example.test",
            to=["approver@example.test"],
            cc=[],
            subject="s",
            body="b",
            timeout=CLIENT_TIMEOUT,
        )


# --- fake bank ----------------------------------------------------------------------------


def test_new_transfer_is_201_and_a_repeat_is_200_without_a_second_row(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    first_status, first = _post_raw(destinations, _transfer_body(key))
    second_status, second = _post_raw(destinations, _transfer_body(key))

    assert (first_status, second_status) == (201, 200)
    assert first == second
    assert _transfer(destinations, key) == first
    assert len(_recorded(destinations, key)) == 1


def test_concurrent_requests_with_one_key_record_one_transfer(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    body = _transfer_body(key)
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(
            status for status, _ in pool.map(lambda _: _post_raw(destinations, body), range(8))
        )

    assert statuses == [200] * 7 + [201]
    assert len(_recorded(destinations, key)) == 1


def test_transfer_client_returns_the_recorded_transfer(destinations: Destinations) -> None:
    key = _unique("op")
    transfer = _transfer(destinations, key, memo="rent")

    assert {k: transfer[k] for k in ("key", "amount", "currency", "memo")} == {
        "key": key,
        "amount": "10.00",
        "currency": "EUR",
        "memo": "rent",
    }
    assert bank_lookup(destinations.bank_url, key, CLIENT_TIMEOUT) == transfer


def test_fail_before_transfer_is_definite_and_records_nothing(destinations: Destinations) -> None:
    key = _unique("op")
    status, payload = _post_raw(destinations, _transfer_body(key, Fault.FAIL_BEFORE))
    with pytest.raises(DefiniteFailure, match="422"):
        _transfer(destinations, key, memo=Fault.FAIL_BEFORE)

    assert status == 422
    assert "error" in payload
    assert _recorded(destinations, key) == []


def test_lose_response_transfer_is_uncertain_every_time_and_recorded_once(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    for _ in range(2):
        with pytest.raises(UncertainOutcome):
            _transfer(destinations, key, memo=Fault.LOSE_RESPONSE)

    assert len(_recorded(destinations, key)) == 1
    assert bank_lookup(destinations.bank_url, key, CLIENT_TIMEOUT) is not None


def test_lose_response_once_transfer_retry_returns_the_existing_transfer(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    with pytest.raises(UncertainOutcome):
        _transfer(destinations, key, memo=Fault.LOSE_RESPONSE_ONCE)
    retried = _transfer(destinations, key, memo=Fault.LOSE_RESPONSE_ONCE)

    assert retried["key"] == key
    assert len(_recorded(destinations, key)) == 1


def test_hanging_transfer_is_uncertain_and_recorded(destinations: Destinations) -> None:
    key = _unique("op")
    with pytest.raises(UncertainOutcome, match="timed out"):
        _transfer(destinations, key, memo=Fault.HANG, timeout=SHORT_TIMEOUT)

    assert len(_recorded(destinations, key)) == 1


def test_lookup_of_an_unknown_key_is_none(destinations: Destinations) -> None:
    assert bank_lookup(destinations.bank_url, _unique("op"), CLIENT_TIMEOUT) is None


def test_lookup_finds_a_key_with_reserved_characters(destinations: Destinations) -> None:
    key = _unique("op/ü?#%")
    _transfer(destinations, key)

    found = bank_lookup(destinations.bank_url, key, CLIENT_TIMEOUT)

    assert found is not None
    assert found["key"] == key
    assert bank_lookup(destinations.bank_url, key + "/", CLIENT_TIMEOUT) is None


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        json.dumps({"key": "k", "from_account": "a", "to_account": "b"}).encode(),
        json.dumps(
            {"key": "k", "from_account": "a", "to_account": "b", "amount": 10, "currency": "EUR"}
        ).encode(),
    ],
)
def test_malformed_transfer_is_400(destinations: Destinations, body: bytes) -> None:
    status, payload = _post_raw(destinations, body)

    assert status == 400
    assert "error" in payload


def test_transfer_to_a_closed_port_is_definite() -> None:
    with pytest.raises(DefiniteFailure, match="refused"):
        bank_transfer(
            f"http://127.0.0.1:{free_port()}",
            key=_unique("op"),
            from_account="a",
            to_account="b",
            amount="1.00",
            currency="EUR",
            memo="",
            timeout=CLIENT_TIMEOUT,
        )


# --- source server ------------------------------------------------------------------------


def _source_url(destinations: Destinations, name: str) -> str:
    return f"{destinations.sources_url}/{name}"


def test_each_source_is_served_and_listed_with_the_digest_of_its_bytes(
    destinations: Destinations,
) -> None:
    listed = list_sources(destinations.directory)

    assert [source["name"] for source in listed] == list(SOURCE_DOCUMENTS)
    for source in listed:
        content = fetch_source(source["url"], CLIENT_TIMEOUT)
        assert source["url"] == _source_url(destinations, source["name"])
        assert content == SOURCE_DOCUMENTS[source["name"]]
        assert source["digest"] == digest_bytes(content)


def test_an_unknown_source_is_404_and_a_definite_failure(destinations: Destinations) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", destinations.bank_port, timeout=5)
    try:
        connection.request("GET", "/sources/unicorns")
        assert connection.getresponse().status == 404
    finally:
        connection.close()
    with pytest.raises(DefiniteFailure, match="no such source"):
        fetch_source(_source_url(destinations, "unicorns"), CLIENT_TIMEOUT)


def test_a_replaced_source_is_served_with_its_new_bytes(destinations: Destinations) -> None:
    url = _source_url(destinations, "bees")
    before = fetch_source(url, CLIENT_TIMEOUT)
    changed = before.replace(b"waggle dance", b"square dance")
    assert changed != before
    try:
        replace_source(destinations.directory, "bees", changed)

        assert fetch_source(url, CLIENT_TIMEOUT) == changed
        assert read_source(destinations.directory, "bees") == changed
        assert {"url": url, "digest": digest_bytes(changed)} in list_all(destinations.directory)[
            "sources"
        ]
    finally:
        replace_source(destinations.directory, "bees", before)


def test_replacing_a_source_that_is_not_stored_is_a_lookup_error(
    destinations: Destinations, tmp_path: Path
) -> None:
    with pytest.raises(LookupError):
        replace_source(destinations.directory, "unicorns", b"x")
    with pytest.raises(LookupError):
        replace_source(tmp_path, "bees", b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_restarted_source_server_moves_its_urls_and_keeps_changed_bytes(
    tmp_path: Path,
) -> None:
    SOURCES_ROUTE.prepare(tmp_path, "http://127.0.0.1:1/sources")
    replace_source(tmp_path, "tides", b"changed")
    SOURCES_ROUTE.prepare(tmp_path, "http://127.0.0.1:2/sources")

    assert read_source(tmp_path, "tides") == b"changed"
    assert [s["url"] for s in list_sources(tmp_path)] == [
        f"http://127.0.0.1:2/sources/{name}" for name in SOURCE_DOCUMENTS
    ]


def test_a_fetch_that_times_out_is_a_definite_failure() -> None:
    """A read has no effect: even a request that may have arrived leaves nothing to settle."""
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/sources/tides"
        with pytest.raises(DefiniteFailure, match="timed out"):
            fetch_source(url, SHORT_TIMEOUT)


def test_a_fetch_from_a_closed_port_is_definite() -> None:
    with pytest.raises(DefiniteFailure, match="refused"):
        fetch_source(f"http://127.0.0.1:{free_port()}/sources/tides", CLIENT_TIMEOUT)


# --- publisher ----------------------------------------------------------------------------


def _publish(
    destinations: Destinations,
    key: str,
    *,
    title: str = "Tides, briefly",
    timeout: float = CLIENT_TIMEOUT,
) -> dict[str, Any]:
    """Publish revision 2 of a report under ``key`` through the client."""
    return publish(
        destinations.publisher_url,
        key=key,
        report_id="rep_1",
        revision=2,
        digest="sha256:" + "ab" * 32,
        title=title,
        body="Two high tides a day.",
        timeout=timeout,
    )


def _publication_body(key: str, **changes: object) -> bytes:
    """Return a ``POST /publications`` body, with ``changes`` applied (``None`` removes)."""
    fields: dict[str, object] = {
        "key": key,
        "report_id": "rep_1",
        "revision": 2,
        "digest": "sha256:" + "ab" * 32,
        "title": "Tides, briefly",
        "body": "Two high tides a day.",
    }
    fields.update(changes)
    return json.dumps({k: v for k, v in fields.items() if v is not None}).encode()


def _publications(destinations: Destinations, key: str) -> list[dict[str, Any]]:
    """Return every recorded publication under ``key``."""
    return [p for p in list_publications(destinations.directory) if p["key"] == key]


def test_new_publication_is_201_and_a_repeat_is_200_without_a_second_row(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    first_status, first = _post_raw(destinations, _publication_body(key), "/publications")
    second_status, second = _post_raw(
        destinations, _publication_body(key, title="Another title"), "/publications"
    )

    assert (first_status, second_status) == (201, 200)
    assert first == second
    assert first["title"] == "Tides, briefly"
    assert _publish(destinations, key) == first
    assert len(_publications(destinations, key)) == 1


def test_concurrent_publications_with_one_key_record_one(destinations: Destinations) -> None:
    key = _unique("op")
    body = _publication_body(key)
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(
            status
            for status, _ in pool.map(
                lambda _: _post_raw(destinations, body, "/publications"), range(8)
            )
        )

    assert statuses == [200] * 7 + [201]
    assert len(_publications(destinations, key)) == 1


def test_publish_client_returns_the_record_that_lookup_finds(destinations: Destinations) -> None:
    key = _unique("op/ü?#%")
    published = _publish(destinations, key)

    assert {k: published[k] for k in ("key", "report_id", "revision", "digest", "title")} == {
        "key": key,
        "report_id": "rep_1",
        "revision": 2,
        "digest": "sha256:" + "ab" * 32,
        "title": "Tides, briefly",
    }
    assert published["body"] == "Two high tides a day."
    assert published["published_at"]
    assert publication_lookup(destinations.publisher_url, key, CLIENT_TIMEOUT) == published


def test_publication_lookup_of_an_unknown_key_is_none(destinations: Destinations) -> None:
    assert publication_lookup(destinations.publisher_url, _unique("op"), CLIENT_TIMEOUT) is None


def test_fail_before_publication_is_definite_and_records_nothing(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    status, payload = _post_raw(
        destinations, _publication_body(key, title=Fault.FAIL_BEFORE), "/publications"
    )
    with pytest.raises(DefiniteFailure, match="422"):
        _publish(destinations, key, title=Fault.FAIL_BEFORE)

    assert status == 422
    assert "error" in payload
    assert _publications(destinations, key) == []
    assert publication_lookup(destinations.publisher_url, key, CLIENT_TIMEOUT) is None


def test_lose_response_publication_is_uncertain_every_time_and_recorded_once(
    destinations: Destinations,
) -> None:
    key = _unique("op")
    for _ in range(2):
        with pytest.raises(UncertainOutcome):
            _publish(destinations, key, title=Fault.LOSE_RESPONSE)

    assert len(_publications(destinations, key)) == 1
    found = publication_lookup(destinations.publisher_url, key, CLIENT_TIMEOUT)
    assert found is not None
    assert found["key"] == key


def test_hanging_publication_is_uncertain_and_recorded(destinations: Destinations) -> None:
    key = _unique("op")
    started = time.monotonic()
    with pytest.raises(UncertainOutcome, match="timed out"):
        _publish(destinations, key, title=Fault.HANG, timeout=SHORT_TIMEOUT)

    assert time.monotonic() - started < HANG_SECONDS
    assert len(_publications(destinations, key)) == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"revision": "2"},
        {"revision": True},
        {"revision": 0},
        {"revision": None},
        {"title": ""},
        {"digest": None},
        {"body": None},
        {"body": ["text"]},
    ],
)
def test_malformed_publication_is_400_and_records_nothing(
    destinations: Destinations, changes: dict[str, object]
) -> None:
    key = _unique("op")
    status, payload = _post_raw(destinations, _publication_body(key, **changes), "/publications")

    assert status == 400
    assert "error" in payload
    assert _publications(destinations, key) == []


def test_publication_to_a_closed_port_is_definite_and_its_lookup_fails() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DefiniteFailure, match="refused"):
        publish(
            url,
            key=_unique("op"),
            report_id="rep_1",
            revision=1,
            digest="sha256:" + "00" * 32,
            title="t",
            body="b",
            timeout=CLIENT_TIMEOUT,
        )
    with pytest.raises(LookupFailedError):
        publication_lookup(url, _unique("op"), CLIENT_TIMEOUT)


# --- together -----------------------------------------------------------------------------


def test_list_all_has_exactly_the_documented_keys(destinations: Destinations) -> None:
    _send(destinations, _unique("listed"), to=["approver@example.test"])
    _transfer(destinations, _unique("op"))
    _publish(destinations, _unique("op"))

    everything = list_all(destinations.directory)

    assert set(everything) == {"email", "bank", "sources", "publications"}
    assert everything["email"]
    assert everything["bank"]
    assert everything["sources"]
    assert everything["publications"]
    for message in everything["email"]:
        assert set(message) == {"message_id", "from", "to", "cc", "subject", "body"}
    for transfer in everything["bank"]:
        assert set(transfer) == {"key", "from_account", "to_account", "amount", "currency", "memo"}
    for source in everything["sources"]:
        assert set(source) == {"url", "digest"}
    for publication in everything["publications"]:
        assert set(publication) == {"key", "report_id", "revision", "digest", "title"}


def test_destinations_command_prints_what_list_all_finds(
    destinations: Destinations, settings: Any
) -> None:
    _publish(destinations, _unique("op"))
    settings.DESTINATIONS = destinations.settings()
    as_json, as_text = io.StringIO(), io.StringIO()

    call_command("destinations", "--json", stdout=as_json)
    call_command("destinations", stdout=as_text)

    assert json.loads(as_json.getvalue()) == list_all(destinations.directory)
    assert f"{destinations.sources_url}/tides" in as_text.getvalue()
    assert "publications (" in as_text.getvalue()


def test_readers_of_an_empty_directory_find_nothing(tmp_path: Path) -> None:
    assert list_all(tmp_path) == {"email": [], "bank": [], "sources": [], "publications": []}
    assert read_source(tmp_path, "tides") is None
    assert lookup_message(tmp_path, "anything") is None
    assert list(tmp_path.iterdir()) == []


def test_a_port_taken_before_the_child_binds_it_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first lookup port handed out is already bound (as when a concurrent test's outgoing
    connection takes it): the start is tried again on fresh ports and the destinations run."""
    from tests.support import destinations as support

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    fresh = support.free_port
    ports = iter([fresh(), fresh(), taken.getsockname()[1]])
    monkeypatch.setattr(support, "free_port", lambda: next(ports, None) or fresh())
    try:
        with support.running_destinations(tmp_path / "dest") as found:
            assert found.lookup_port != taken.getsockname()[1]
            with socket.create_connection(("127.0.0.1", found.smtp_port), timeout=5):
                pass
    finally:
        taken.close()
