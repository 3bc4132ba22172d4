"""`canon/1`: conformance vectors, refusals with pointers, defaults, and encoding properties."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.canonical import (
    CANON_VERSION,
    MAX_DEPTH,
    MAX_DIGITS,
    CanonicalizationError,
    canonicalize,
    digest,
    digest_bytes,
    materialize_defaults,
    parse_json,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "canonical"
SAFE = 2**53 - 1


def _vectors(filename: str) -> list[dict[str, Any]]:
    document = json.loads((VECTORS / filename).read_text(encoding="utf-8"))
    assert document["version"] == CANON_VERSION
    vectors: list[dict[str, Any]] = document["vectors"]
    return vectors


ACCEPTED = _vectors("accepted.json")
REFUSED = _vectors("refused.json")


def _input_value(vector: dict[str, Any]) -> Any:
    if vector.get("numbers", "json") == "decimal":
        return json.loads(vector["input"], parse_float=Decimal, parse_int=Decimal)
    return parse_json(vector["input"].encode("utf-8"))


def _by_name(vectors: list[dict[str, Any]]) -> Callable[..., Any]:
    return pytest.mark.parametrize("vector", vectors, ids=[v["name"] for v in vectors])


# --- conformance vectors -------------------------------------------------------------------


def test_vector_files_are_large_enough_and_names_unique() -> None:
    assert len(ACCEPTED) >= 30
    assert len(REFUSED) >= 8
    names = [v["name"] for v in ACCEPTED + REFUSED]
    assert len(names) == len(set(names))


@_by_name(ACCEPTED)
def test_accepted_vector_bytes_and_digest(vector: dict[str, Any]) -> None:
    expected = vector["canonical"].encode("utf-8")
    value = _input_value(vector)
    assert canonicalize(value) == expected
    assert digest(value) == vector["digest"]
    assert digest_bytes(expected) == vector["digest"]
    if "canonical_hex" in vector:
        assert bytes.fromhex(vector["canonical_hex"]) == expected


@_by_name([v for v in ACCEPTED if "$" not in v["canonical"]])
def test_tag_free_vector_agrees_with_rfc8785(vector: dict[str, Any]) -> None:
    assert rfc8785.dumps(parse_json(vector["input"])) == vector["canonical"].encode("utf-8")


@_by_name(REFUSED)
def test_refused_vector_error_and_pointer(vector: dict[str, Any]) -> None:
    if "input_hex" in vector:
        body = bytes.fromhex(vector["input_hex"])
    else:
        body = vector["input"].encode("utf-8")
    if vector["stage"] == "parse":
        with pytest.raises(CanonicalizationError) as caught:
            parse_json(body)
    else:
        value = parse_json(body)
        with pytest.raises(CanonicalizationError) as caught:
            canonicalize(value)
    assert caught.value.pointer == vector["pointer"]
    assert vector["reason"] in caught.value.reason


def test_rfc8785_sample_matches_the_rfc_text() -> None:
    (sample,) = [v for v in ACCEPTED if v["name"] == "rfc8785_sample_3_2_2"]
    assert canonicalize(parse_json(sample["input"])) == (
        b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


# --- canonicalize: refusals with pointers ------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "pointer", "reason"),
    [
        (b"bytes", "", "unsupported type bytes"),
        ({"a": (1, 2)}, "/a", "unsupported type tuple"),
        ({"s": [{1, 2}]}, "/s/0", "unsupported type set"),
        ({"t": {"u": frozenset()}}, "/t/u", "unsupported type frozenset"),
        ([datetime(2030, 1, 1, tzinfo=UTC)], "/0", "unsupported type datetime.datetime"),
        ({"o": [1, object()]}, "/o/1", "unsupported type object"),
        ({"x": Opaque()}, "/x", "Opaque"),
        ({"c": 1j}, "/c", "unsupported type complex"),
        ({1: "one"}, "", "object keys must be strings, not int"),
        ({"a": {None: 1}}, "/a", "object keys must be strings, not NoneType"),
        ({"a": [[1.0, float("nan")]]}, "/a/0/1", "NaN is not allowed"),
        ([float("inf")], "/0", "Infinity is not allowed"),
        ({"m": float("-inf")}, "/m", "-Infinity is not allowed"),
        ({"d": [Decimal("NaN")]}, "/d/0", "NaN is not allowed"),
        ({"d": Decimal("sNaN")}, "/d", "NaN is not allowed"),
        ({"d": Decimal("-Infinity")}, "/d", "-Infinity is not allowed"),
        ({"v": ["ok", "x\ud800"]}, "/v/1", "lone surrogate U+D800"),
        ({"k": {"\udfff": 1}}, "/k", "lone surrogate U+DFFF"),
        ({"a~b/c": {"$decimal": "1"}}, "/a~0b~1c/$decimal", "reserved for type tags"),
        ({"$": 1}, "/$", "reserved for type tags"),
        ([10**MAX_DIGITS], "/0", f"more than {MAX_DIGITS} digits"),
        ([-(10**MAX_DIGITS)], "/0", f"more than {MAX_DIGITS} digits"),
        ({"d": Decimal(f"1E+{MAX_DIGITS}")}, "/d", f"more than {MAX_DIGITS} digits"),
        ({"d": Decimal(f"1E-{MAX_DIGITS}")}, "/d", f"more than {MAX_DIGITS} digits"),
        ({"d": Decimal("1E+999999999")}, "/d", f"more than {MAX_DIGITS} digits"),
    ],
)
def test_canonicalize_refuses_with_pointer(value: object, pointer: str, reason: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        canonicalize(value)
    assert caught.value.pointer == pointer
    assert reason in caught.value.reason


def test_error_is_a_value_error_and_prints_its_pointer() -> None:
    error = CanonicalizationError("/a/0", "NaN is not allowed")
    assert isinstance(error, ValueError)
    assert str(error) == "/a/0: NaN is not allowed"
    assert str(CanonicalizationError("", "bad")) == "(root): bad"


def test_digit_limits_are_inclusive() -> None:
    assert canonicalize(10**MAX_DIGITS - 1) == b'{"$int":"' + b"9" * MAX_DIGITS + b'"}'
    assert canonicalize(Decimal(f"1E+{MAX_DIGITS - 1}")).count(b"0") == MAX_DIGITS - 1
    assert canonicalize(Decimal(f"1E-{MAX_DIGITS - 1}")).endswith(b'1"}')


def test_nesting_limit_is_max_depth() -> None:
    deepest: Any = []
    for _ in range(MAX_DEPTH - 1):
        deepest = [deepest]
    assert canonicalize(deepest) == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    with pytest.raises(CanonicalizationError) as caught:
        canonicalize([deepest])
    assert caught.value.pointer == "/0" * MAX_DEPTH
    with pytest.raises(CanonicalizationError) as parsed:
        parse_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert parsed.value.pointer == "/0" * MAX_DEPTH
    with pytest.raises(CanonicalizationError) as hostile:
        parse_json("[" * 100_000 + "]" * 100_000)
    assert hostile.value.pointer == ""


def test_tags_read_back_from_canonical_bytes_are_refused() -> None:
    text = canonicalize({"n": 2**60, "d": Decimal("1.5")})
    assert text == b'{"d":{"$decimal":"1.5"},"n":{"$int":"1152921504606846976"}}'
    with pytest.raises(CanonicalizationError) as caught:
        canonicalize(parse_json(text))
    assert caught.value.pointer == "/d/$decimal"


class Colour(StrEnum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


def test_subclasses_encode_as_their_base_value() -> None:
    assert canonicalize({"c": Colour.RED, "l": Level.HIGH}) == b'{"c":"red","l":3}'
    assert canonicalize({Colour.RED: 1}) == b'{"red":1}'


def test_numbers_have_one_encoding() -> None:
    assert canonicalize([1, 1.0, -0.0, 0, 10.0, 1e1]) == b"[1,1,0,0,10,10]"
    big = b'{"$int":"1152921504606846976"}'
    assert canonicalize([2**60, 2.0**60]) == b"[" + big + b"," + big + b"]"
    assert canonicalize([1e21, 1e300]) == b"[1e+21,1e+300]"
    assert canonicalize([True, 1]) == b"[true,1]"
    assert canonicalize([2**53 - 1, -(2**53 - 1)]) == b"[9007199254740991,-9007199254740991]"
    assert canonicalize(Decimal("-0E+3")) == b'{"$decimal":"0"}'


def test_digest_format() -> None:
    assert digest_bytes(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert digest({"a": 1}) == "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()


# --- parse_json ----------------------------------------------------------------------------


def test_parse_json_types() -> None:
    parsed = parse_json('{"i": 12345678901234567890123, "z": -0, "f": 1.0, "e": 1E2, "s": "é"}')
    assert parsed == {"i": 12345678901234567890123, "z": 0, "f": 1.0, "e": 100.0, "s": "é"}
    assert [type(parsed[k]) for k in "izfes"] == [int, int, float, float, str]


def test_parse_json_accepts_str_and_bytes_alike() -> None:
    text = '{"k": ["\\ud83d\\ude00", "😀", 1.5]}'
    assert parse_json(text) == parse_json(text.encode("utf-8")) == {"k": ["😀", "😀", 1.5]}


@pytest.mark.parametrize(
    ("body", "pointer", "reason"),
    [
        ('"\ud800"', "", "lone surrogate U+D800"),
        ('{"a": {"\udc00": 1}}', "/a", "lone surrogate U+DC00"),
        ("1" * (MAX_DIGITS + 1), "", f"more than {MAX_DIGITS} digits"),
        ('{"n": [-' + "9" * (MAX_DIGITS + 1) + "]}", "/n/0", f"more than {MAX_DIGITS} digits"),
        ('{"a": 1, "b": {"c": NaN}, "a": 2}', "/b/c", "NaN"),
        ('{"a": 1, "a": NaN}', "/a", "duplicate key"),
        ("", "", "invalid JSON"),
    ],
)
def test_parse_json_refuses_with_pointer(body: str, pointer: str, reason: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        parse_json(body)
    assert caught.value.pointer == pointer
    assert reason in caught.value.reason


def test_parse_json_digit_limit_is_inclusive() -> None:
    assert parse_json("-" + "9" * MAX_DIGITS) == -(10**MAX_DIGITS - 1)


# --- materialize_defaults -----------------------------------------------------------------

DRAFT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "array", "items": {"type": "string"}},
        "cc": {"type": "array", "default": []},
        "subject": {"type": "string", "default": ""},
        "options": {
            "type": "object",
            "default": {},
            "properties": {
                "retries": {"type": "integer", "default": 3},
                "tags": {"type": "array", "default": ["a"]},
            },
        },
        "attachments": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"inline": {"default": False}, "meta": {"default": None}},
            },
        },
    },
}


def test_defaults_fill_missing_members_recursively() -> None:
    value = {"to": ["x@example.test"], "attachments": [{}, {"inline": True}]}
    assert materialize_defaults(DRAFT_SCHEMA, value) == {
        "to": ["x@example.test"],
        "cc": [],
        "subject": "",
        "options": {"retries": 3, "tags": ["a"]},
        "attachments": [{"inline": False, "meta": None}, {"inline": True, "meta": None}],
    }


def test_defaults_never_replace_present_members() -> None:
    value = {"cc": ["y@example.test"], "subject": "hi", "options": {"retries": 0}}
    result = materialize_defaults(DRAFT_SCHEMA, value)
    assert result["cc"] == ["y@example.test"]
    assert result["subject"] == "hi"
    assert result["options"] == {"retries": 0, "tags": ["a"]}


def test_defaults_do_not_mutate_or_alias_inputs() -> None:
    schema = copy.deepcopy(DRAFT_SCHEMA)
    value: dict[str, Any] = {"to": ["x@example.test"], "attachments": [{}]}
    original = copy.deepcopy(value)
    result = materialize_defaults(schema, value)
    assert value == original
    result["cc"].append("z@example.test")
    result["options"]["tags"].append("b")
    result["to"].append("w@example.test")
    result["attachments"][0]["inline"] = True
    assert schema == DRAFT_SCHEMA
    assert value == original


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"properties": {"a": {"default": 1}}}, [1, 2]),
        ({"properties": {"a": {"default": 1}}}, "text"),
        ({"items": {"properties": {"a": {"default": 1}}}}, {"b": 2}),
        ({"properties": {"a": True, "b": {"properties": {"c": {"default": 1}}}}}, {"b": 5}),
        ({"items": [{"default": 1}]}, [{}]),
        ({}, {"x": None}),
    ],
)
def test_defaults_leave_values_without_matching_schema_alone(schema: Any, value: Any) -> None:
    assert materialize_defaults(schema, value) == value


# --- properties ------------------------------------------------------------------------------

KEYS = st.text(st.characters(exclude_categories=["Cs"]), max_size=6).filter(
    lambda key: not key.startswith("$"))
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
DECIMALS = st.builds(
    lambda digits, exponent: Decimal(f"{digits}E{exponent}"),
    st.integers(-(10**30), 10**30),
    st.integers(-12, 12),
)
# Floats from 2**53 below 1e21 are encoded as `$int` (see the module docstring).
TAG_FREE_FLOATS = FLOATS.filter(lambda number: not SAFE < abs(number) < 1e21)
TAG_FREE_SCALARS = st.none() | st.booleans() | st.integers(-SAFE, SAFE) | TAG_FREE_FLOATS | TEXT
SCALARS = TAG_FREE_SCALARS | st.integers() | DECIMALS


def _trees(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4)
        ),
        max_leaves=16,
    )


VALUES = _trees(SCALARS)
TAG_FREE_VALUES = _trees(TAG_FREE_SCALARS)

# A small domain, so that equal and unequal pairs are both common.
NEAR_SCALARS = st.sampled_from(
    [None, True, False, 0, -0.0, 0.0, 1, 1.0, -1, 0.1, "", "1", "a", 2**53 - 1, float(2**53 - 1),
     2**53, float(2**53), 2**53 + 1, 10**20, 1e20, 2**60, 2.0**60, 1152921504606847000,
     10**21, 1e21, -1e21, Decimal(1), Decimal("1.0"), Decimal("1E+1"), Decimal(10),
     Decimal("-0"), Decimal("0.1"), Decimal(2**53)])
NEAR_VALUES = st.recursive(
    NEAR_SCALARS,
    lambda children: st.lists(children, max_size=2)
    | st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2),
    max_leaves=4,
)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    """The same value with every object's insertion order shuffled."""
    if isinstance(value, list):
        return [_shuffled(item, rnd) for item in value]
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: _shuffled(item, rnd) for key, item in items}
    return value


def _meaning(value: Any) -> Any:
    """What `canon/1` promises to preserve: JSON data, numbers compared by value within each of
    the kinds they are encoded as. Bare numbers: safe integers and floats outside [2**53, 1e21)
    (so -0.0 == 0 and 1.0 == 1). `$int`: other integers and floats in [2**53, 1e21), by exact
    value. `$decimal`: decimals. A bool is not a number here, unlike in Python."""
    if isinstance(value, list):
        return ("array", tuple(_meaning(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _meaning(item)) for key, item in value.items()))
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return (type(value).__name__, value)  # None, bool, str
    if isinstance(value, Decimal):
        return ("$decimal", value)  # Decimal("10.0") == Decimal("1E+1")
    if abs(value) > SAFE and (isinstance(value, int) or abs(value) < 1e21):
        return ("$int", int(value))
    return ("number", value)


def _untag(value: Any) -> Any:
    """Read tags back: `{"$int": s}` is `int(s)`, `{"$decimal": s}` is `Decimal(s)`."""
    if isinstance(value, list):
        return [_untag(item) for item in value]
    if isinstance(value, dict):
        if value.keys() == {"$int"}:
            return int(value["$int"])
        if value.keys() == {"$decimal"}:
            return Decimal(value["$decimal"])
        return {key: _untag(item) for key, item in value.items()}
    return value


@given(VALUES)
def test_canonical_bytes_are_a_fixed_point_once_tags_are_read_back(value: Any) -> None:
    encoded = canonicalize(value)
    assert canonicalize(_untag(parse_json(encoded))) == encoded


@settings(max_examples=500)
@given(NEAR_VALUES, NEAR_VALUES)
def test_equal_bytes_exactly_when_equal_meaning(left: Any, right: Any) -> None:
    assert (canonicalize(left) == canonicalize(right)) == (_meaning(left) == _meaning(right))


@given(VALUES, VALUES)
def test_distinct_values_give_distinct_bytes(left: Any, right: Any) -> None:
    assert (canonicalize(left) == canonicalize(right)) == (_meaning(left) == _meaning(right))


def _sorted_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert keys == sorted(keys, key=lambda key: key.encode("utf-16-be"))
    assert len(set(keys)) == len(keys)
    return dict(pairs)


@given(VALUES)
def test_output_is_utf8_jcs_with_sorted_keys(value: Any) -> None:
    encoded = canonicalize(value)
    text = encoded.decode("utf-8")  # strict: raises on anything but valid UTF-8
    parsed = json.loads(text, object_pairs_hook=_sorted_pairs)
    assert rfc8785.dumps(parsed) == encoded  # a JCS fixed point: no whitespace, one form
