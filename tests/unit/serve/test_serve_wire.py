"""The value endpoints' wire forms (seenstore/serve/values.py): records round-trip
through the 29-byte little-endian layout, and update bodies parse back to what the
client meant or are refused with a reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import InvalidInputError
from seenstore.serve.values import (RECORD_DTYPE, WIRE_DTYPE, decode_records, encode_records,
                                    parse_update, update_body, url_lines)

records = st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 255),
                             st.integers(0, 65535), st.integers(-2**63, 2**63 - 1),
                             st.integers(-2**63, 2**63 - 1), st.integers(0, 2**64 - 1)),
                   max_size=40)


@settings(max_examples=60, deadline=None)
@given(records)
def test_records_round_trip_in_29_bytes(rows):
    rec = np.array(rows, dtype=RECORD_DTYPE)
    body = encode_records(rec)
    assert WIRE_DTYPE.itemsize == 29 and len(body) == 29 * len(rows)
    back = decode_records(body, len(rows))
    assert back.dtype == RECORD_DTYPE
    assert [tuple(r) for r in back.tolist()] == [tuple(r) for r in rec.tolist()]
    # the layout is fixed: present, state, retries, status (LE u16), ...
    if rows:
        assert body[0] == int(rows[0][0]) and body[1] == rows[0][1]
        assert int.from_bytes(body[3:5], "little") == rows[0][3]
        assert int.from_bytes(body[21:29], "little") == rows[0][6]


def test_a_body_of_another_length_is_refused():
    body = encode_records(np.zeros(3, dtype=RECORD_DTYPE))
    with pytest.raises(ValueError, match="for 2 items"):
        decode_records(body, 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=20), st.integers(0, 4),
       st.data())
def test_update_bodies_parse_back(keys, state, data):
    statuses = data.draw(st.lists(st.integers(0, 65535), min_size=len(keys),
                                  max_size=len(keys)))
    body = update_body("keys", keys, None, {"state": np.uint8(state),
                                            "status": np.array(statuses, np.uint16)})
    kind, items, base, fields = parse_update(body)
    assert (kind, items, base) == ("keys", keys, None)
    assert fields == {"state": state, "status": statuses}


def test_a_check_update_body_may_name_no_field():
    assert parse_update(b'{"keys": [1, 2]}', need_fields=False) == ("keys", [1, 2], None, {})
    with pytest.raises(InvalidInputError, match="at least one field"):
        parse_update(b'{"keys": [1, 2]}')


def test_update_bodies_by_url_with_a_named_state():
    kind, items, base, fields = parse_update(json.dumps(
        {"urls": ["http://a/"], "base": "http://b/", "state": "in_flight",
         "retries": [2]}).encode())
    assert (kind, items, base, fields) == ("urls", ["http://a/"], "http://b/",
                                           {"state": 1, "retries": [2]})


@pytest.mark.parametrize("body, why", [
    (b"", "one JSON object"), (b"[]", "one JSON object"), (b"\xff", "one JSON object"),
    pytest.param(b"[" * 100_000, "one JSON object", id="nested-past-the-parsers-depth"),
    (b'{"state": 1}', "exactly one"), (b'{"keys": 1, "state": 1}', "JSON array"),
    (b'{"keys": [1.5], "state": 1}', "integers"), (b'{"keys": [true], "state": 1}', "integers"),
    (b'{"keys": [18446744073709551616], "state": 1}', "integers"),
    (b'{"urls": [1], "state": 1}', "strings"), (b'{"keys": [1], "base": "x", "state": 1}',
                                               "base"),
    (b'{"keys": [1]}', "at least one field"), (b'{"keys": [1], "state": [1, 2]}', "2 values"),
    (b'{"keys": [1], "status": true}', "a number"), (b'{"keys": [1], "state": "LOST"}',
                                                      "unknown state"),
])
def test_bad_update_bodies_are_refused_with_a_reason(body, why):
    with pytest.raises(InvalidInputError, match=why):
        parse_update(body)


def test_url_lines_keep_raw_bytes_and_never_split_a_line():
    raw = b"http://a.example/\xff"
    sent = raw.decode("utf-8", "surrogateescape")  # what the client puts in JSON
    assert url_lines([sent, "http://a/\nb", "http://\u00e9.example/"]) == [
        raw, b"", "http://\u00e9.example/".encode()]
