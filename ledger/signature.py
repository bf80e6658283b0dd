"""Input signatures (docs/semantics.md): sha256 of the canonical JSON of a tool input.

The canonical form follows RFC 8785 (JCS) where it matters for matching: object keys sorted by
their UTF-16 code units, no insignificant whitespace, one form per number (so ``1`` and ``1.0``
are the same), strings in Unicode NFC. Key order or formatting never changes a signature; any
difference in a value does, however long the input.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from decimal import Decimal
from typing import Any

from ledger.errors import SignatureError

_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def _number(value: float) -> str:
    """ECMAScript's Number#toString form of a float, except that integral values print whole."""
    if math.isnan(value) or math.isinf(value):
        raise SignatureError(f"{value!r} has no JSON form")
    if value.is_integer():
        return str(int(value))  # the same text as the equal int: 1.0 and 1 are one number
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    assert isinstance(exponent, int)
    point = len(digits) + exponent  # value = 0.<text> * 10**point
    if 0 < point <= 21:
        body = (
            text[:point] + "." + text[point:]
            if point < len(text)
            else text + "0" * (point - len(text))
        )
    elif -6 < point <= 0:
        body = "0." + "0" * -point + text
    else:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'+' if point - 1 > 0 else '-'}{abs(point - 1)}"
    return ("-" if sign else "") + body


def _key_order(key: str) -> bytes:
    return key.encode("utf-16-be")


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_string(unicodedata.normalize("NFC", value)))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, dict):
        _write_object(value, out)
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise SignatureError(f"a value of type {type(value).__name__} has no canonical JSON form")


def _write_object(value: dict[Any, Any], out: list[str]) -> None:
    items: dict[str, Any] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise SignatureError(f"object key {k!r} is not a string")
        key = unicodedata.normalize("NFC", k)
        if key in items:
            raise SignatureError(f"object keys {key!r} collide once normalized to NFC")
        items[key] = v
    out.append("{")
    for i, k in enumerate(sorted(items, key=_key_order)):
        if i:
            out.append(",")
        out.append(_encode_string(k))
        out.append(":")
        _write(items[k], out)
    out.append("}")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON-compatible value."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def input_signature(value: Any) -> str:
    """Hex sha256 of ``canonical_json(value)``."""
    try:
        data = canonical_json(value).encode()
    except UnicodeEncodeError as e:
        raise SignatureError(f"a string holds a lone surrogate: {e}") from None
    return hashlib.sha256(data).hexdigest()
