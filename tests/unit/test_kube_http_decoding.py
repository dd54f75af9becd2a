"""Decoding of API server answers and watch lines (common/kube/http.py): exactly what `json` reads."""

from __future__ import annotations

import json

import pytest

from common.kube.http import _json_or_message, decode_json

LINES = [
    b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","labels":{"a":"\\u00e9"}},"spec":{"priority":0}}}',
    b'{"type":"MODIFIED","object":{"status":{"podIP":"10.0.0.2","x":1.5e3,"big":-9223372036854775808}}}',
    b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}\n',
]


@pytest.mark.parametrize("line", LINES)
def test_decoded_as_json_reads_it(line: bytes) -> None:
    assert decode_json(line) == json.loads(line)


def test_integers_are_exact_over_the_64_bit_range() -> None:
    # The API server never sends a larger integer: Go decodes one in an unstructured object as a float.
    for n in (-(2**63), 2**63 - 1, 2**64 - 1, 9007199254740993):
        assert decode_json(b'{"n":%d}' % n)["n"] == n


def test_what_orjson_refuses_but_json_reads_falls_back_to_json() -> None:
    line = b'{"message":"lone \\ud800 surrogate"}'
    assert decode_json(line) == json.loads(line)


def test_answers_that_are_not_json_become_a_message() -> None:
    assert _json_or_message(b"") == {}
    assert _json_or_message(b"<html>502 Bad Gateway</html>") == {"message": "<html>502 Bad Gateway</html>"}
    assert _json_or_message(b"\xff\xfe not utf-8") == {"message": "\ufffd\ufffd not utf-8"}
    assert _json_or_message(b'[{"a":1}]') == {"items": [{"a": 1}]}
    with pytest.raises(ValueError):
        decode_json(b'{"a":')
