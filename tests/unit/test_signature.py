"""Input signatures: sha256 of the canonical JSON of a tool input (docs/semantics.md)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest

from ledger.errors import SignatureError
from ledger.signature import canonical_json, input_signature

COMPOSED = "\u00e9"  # é as one code point (NFC)
DECOMPOSED = "e\u0301"  # e + combining acute accent (NFD)


def test_the_signature_is_the_hex_sha256_of_the_canonical_json() -> None:
    value = {"to": "a@x.io", "n": [1, 2]}
    expected = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    assert input_signature(value) == expected


def test_the_signature_is_64_lowercase_hex_characters() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", input_signature({"to": "a@x.io"}))


def test_key_order_does_not_change_the_signature() -> None:
    assert input_signature({"a": 1, "b": 2, "c": 3}) == input_signature({"c": 3, "a": 1, "b": 2})


def test_key_order_of_nested_objects_does_not_change_the_signature() -> None:
    one = {"outer": {"x": 1, "y": {"p": True, "q": None}}, "list": [{"k": 1, "j": 2}]}
    two = {"list": [{"j": 2, "k": 1}], "outer": {"y": {"q": None, "p": True}, "x": 1}}
    assert input_signature(one) == input_signature(two)


def test_an_integer_and_its_integral_float_have_one_signature() -> None:
    assert input_signature(1) == input_signature(1.0)
    assert input_signature({"n": -3}) == input_signature({"n": -3.0})
    assert input_signature(0) == input_signature(-0.0)


def test_an_integer_and_its_integral_float_have_one_signature_at_any_magnitude() -> None:
    """One number form (docs/semantics.md) also holds past 1e21, where ECMAScript switches to
    exponent form."""
    assert input_signature(10**21) == input_signature(1e21)
    assert input_signature(2**70) == input_signature(2.0**70)


def test_different_numbers_have_different_signatures() -> None:
    assert input_signature(1) != input_signature(1.5)
    assert input_signature({"amount": 10}) != input_signature({"amount": 10.01})
    assert input_signature(1e-7) != input_signature(1e-8)


def test_booleans_are_not_confused_with_one_and_zero() -> None:
    assert input_signature(True) != input_signature(1)
    assert input_signature(False) != input_signature(0)
    assert input_signature({"flag": True}) != input_signature({"flag": 1})
    assert canonical_json([True, False, None]) == "[true,false,null]"


def test_nfc_and_nfd_forms_of_a_string_value_have_one_signature() -> None:
    assert COMPOSED != DECOMPOSED
    assert input_signature({"name": f"caf{COMPOSED}"}) == input_signature(
        {"name": f"caf{DECOMPOSED}"}
    )


def test_nfc_and_nfd_forms_of_an_object_key_have_one_signature() -> None:
    assert input_signature({f"r{COMPOSED}sum{COMPOSED}": 1}) == input_signature(
        {f"r{DECOMPOSED}sum{DECOMPOSED}": 1}
    )


def test_list_order_changes_the_signature() -> None:
    assert input_signature([1, 2, 3]) != input_signature([3, 2, 1])
    assert input_signature({"to": ["a", "b"]}) != input_signature({"to": ["b", "a"]})


def test_nested_structures_with_dicts_in_lists_sign_by_content() -> None:
    one = {"items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}], "meta": {"tags": ["x"]}}
    same = {"meta": {"tags": ["x"]}, "items": [{"qty": 1, "sku": "A"}, {"qty": 2, "sku": "B"}]}
    other_value = {
        "items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 3}],
        "meta": {"tags": ["x"]},
    }
    swapped = {"items": [{"sku": "B", "qty": 2}, {"sku": "A", "qty": 1}], "meta": {"tags": ["x"]}}
    assert input_signature(one) == input_signature(same)
    assert input_signature(one) != input_signature(other_value)
    assert input_signature(one) != input_signature(swapped)


def test_a_tuple_signs_like_the_list_it_stands_for() -> None:
    assert input_signature((1, "a", None)) == input_signature([1, "a", None])


def test_long_inputs_differing_only_in_their_last_character_have_different_signatures() -> None:
    body = "x" * 100_000
    assert input_signature({"body": body + "a"}) != input_signature({"body": body + "b"})


def test_a_json_text_formatted_two_ways_gives_one_signature() -> None:
    compact = '{"to":"a@x.io","cc":["b@x.io"],"n":1.0,"opts":{"html":false}}'
    spread = """
        {
            "opts" : { "html" : false },
            "n"    : 1,
            "cc"   : [ "b@x.io" ],
            "to"   : "a@x.io"
        }
    """
    assert input_signature(json.loads(compact)) == input_signature(json.loads(spread))


def test_canonical_json_has_sorted_keys_and_no_insignificant_whitespace() -> None:
    value = {"b": [1, 2, {"d": None, "c": "x y"}], "a": {"z": True, "y": 2.5}}
    assert canonical_json(value) == '{"a":{"y":2.5,"z":true},"b":[1,2,{"c":"x y","d":null}]}'


def test_canonical_json_keeps_non_ascii_characters_unescaped_and_in_nfc() -> None:
    assert canonical_json({"k": f"caf{DECOMPOSED}"}) == f'{{"k":"caf{COMPOSED}"}}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_nan_and_infinity_raise_a_signature_error(value: float) -> None:
    with pytest.raises(SignatureError):
        input_signature({"x": [value]})


@pytest.mark.parametrize(
    "value",
    [{1, 2}, object(), b"bytes", {"nested": {"s": frozenset()}}, {1: "int key"}],
    ids=["set", "object", "bytes", "nested-frozenset", "int-key"],
)
def test_a_value_with_no_json_form_raises_a_signature_error(value: Any) -> None:
    with pytest.raises(SignatureError):
        input_signature(value)


def test_keys_that_collide_once_normalized_raise_a_signature_error() -> None:
    with pytest.raises(SignatureError, match="collide"):
        input_signature({"\u00e9": 1, "e\u0301": 2})


def test_a_lone_surrogate_raises_a_signature_error() -> None:
    with pytest.raises(SignatureError, match="surrogate"):
        input_signature({"text": "\ud800"})


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-5, "0.00001"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (123.456, "123.456"), (-0.5, "-0.5")],
)
def test_fractions_print_as_ecmascript_numbers(value: float, text: str) -> None:
    assert canonical_json(value) == text
