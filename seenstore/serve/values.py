"""Per-URL values over ``seenstore serve``: the wire forms of records and of updates,
shared by the server (server.py) and the clients (client.py) (docs/serve.md,
"Values").

A record on the wire is ``WIRE_DTYPE``, 29 bytes, packed, little-endian:
``present`` (u8, 0 or 1), then the store's value fields in their order (``state``
u8, ``retries`` u8, ``status`` u16, ``fetched_at`` i64, ``next_due`` i64,
``digest`` u64): ``SeenStore.get``'s structured array in a fixed byte order. An
update (and a ``check_update``) is one JSON object: ``keys`` (integers 0..2^64-1)
or ``urls`` (strings, with an optional ``base``), and the fields to set (none: a
``check_update`` that only admits), each a number (for every item) or a list of
numbers aligned with the items (``state`` also by name: "DONE").

Imports only numpy and the value files' field list (no numba, no aiohttp), so a
client loads it cheaply.
"""

from __future__ import annotations

import json

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.store.valuefiles import FIELDS, GET_DTYPE as RECORD_DTYPE, VALUE_DTYPE

WIRE_DTYPE = np.dtype([("present", "u1")] + [(f, VALUE_DTYPE[f].newbyteorder("<"))
                                              for f in FIELDS])
MAX_KEY = (1 << 64) - 1


def encode_records(rec: np.ndarray) -> bytes:
    """``SeenStore.get``'s answer as wire bytes (``WIRE_DTYPE`` per item)."""
    out = np.zeros(len(rec), dtype=WIRE_DTYPE)
    for name in WIRE_DTYPE.names:
        out[name] = rec[name]
    return out.tobytes()


def decode_records(body: bytes, n: int) -> np.ndarray:
    """Wire bytes of ``n`` records -> a structured array like ``SeenStore.get``'s;
    ValueError when the body does not hold exactly ``n`` records."""
    if len(body) != n * WIRE_DTYPE.itemsize:
        raise ValueError(f"{len(body)} bytes of records for {n} items "
                         f"({WIRE_DTYPE.itemsize} bytes each)")
    wire = np.frombuffer(body, dtype=WIRE_DTYPE)
    out = np.zeros(n, dtype=RECORD_DTYPE)
    for name in RECORD_DTYPE.names:
        out[name] = wire[name]
    return out


def records_json(rec: np.ndarray) -> list[dict]:
    """The records as JSON-ready objects (``?format=json``)."""
    cols = {name: rec[name].tolist() for name in RECORD_DTYPE.names}
    return [{name: cols[name][i] for name in RECORD_DTYPE.names} for i in range(len(rec))]


def update_body(kind: str, items: list, base: str | None, fields: dict) -> bytes:
    """A client's update request: ``kind`` "keys" (ints) or "urls" (str)."""
    doc: dict = {kind: items}
    if base:
        doc["base"] = base
    for name, v in fields.items():
        a = np.asarray(v)
        if a.ndim == 0:
            doc[name] = a.item()
        elif a.ndim == 1:
            doc[name] = a.tolist()
        else:
            raise InvalidInputError(f"field {name!r} must be a scalar or a 1-d array")
    return json.dumps(doc).encode("utf-8")


def parse_update(body: bytes, need_fields: bool = True) -> tuple[str, list, str | None, dict]:
    """An update (or ``check_update``: ``need_fields`` False) request -> (kind, items,
    base, fields); InvalidInputError with the reason for anything else. ``fields``
    are numbers or lists aligned with the items (names and ranges are the store's to
    check); ``items`` are checked: keys integers in range, URLs strings."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        raise InvalidInputError("an update body is one JSON object: {\"keys\": [...] or "
                                "\"urls\": [...], \"FIELD\": value, ...}") from None
    if not isinstance(doc, dict):
        raise InvalidInputError("an update body is one JSON object, not "
                                f"{type(doc).__name__}")
    kinds = [k for k in ("keys", "urls") if k in doc]
    if len(kinds) != 1:
        raise InvalidInputError("an update names its items in exactly one of \"keys\" "
                                "and \"urls\"")
    kind = kinds[0]
    items = doc.pop(kind)
    base = doc.pop("base", None)
    if not isinstance(items, list):
        raise InvalidInputError(f"\"{kind}\" must be a JSON array")
    if base is not None and (kind != "urls" or not isinstance(base, str)):
        raise InvalidInputError("\"base\" is a string, with \"urls\" only")
    if kind == "keys":
        if not all(type(k) is int and 0 <= k <= MAX_KEY for k in items):
            raise InvalidInputError("\"keys\" must be integers 0..2^64-1")
    elif not all(isinstance(u, str) for u in items):
        raise InvalidInputError("\"urls\" must be strings")
    if not doc and need_fields:
        raise InvalidInputError(f"an update needs at least one field to set (fields: "
                                f"{', '.join(FIELDS)})")
    from seenstore.store.values import named_states

    fields = {}
    for name, v in doc.items():
        if name == "state":  # a state may be named: "DONE", "in_flight"
            v = named_states(v)
        if isinstance(v, list):
            if len(v) != len(items):
                raise InvalidInputError(f"field {name!r}: {len(v)} values for "
                                        f"{len(items)} {kind}")
            if not all(type(x) in (int, float) for x in v):
                raise InvalidInputError(f"field {name!r} must be numbers")
        elif type(v) not in (int, float):
            raise InvalidInputError(f"field {name!r} must be a number or an array of them")
        fields[name] = v
    return kind, items, base, fields


def url_lines(urls: list[str]) -> list[bytes]:
    """URLs as the server's URL batch takes them (a URL holding a line break becomes
    an empty line: rejected, never split in two). A client sends bytes that are not
    UTF-8 decoded with ``surrogateescape``; they are the same bytes again here."""
    out = []
    for u in urls:
        try:
            b = u.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            b = u.encode("utf-8", "surrogatepass")
        out.append(b"" if b"\n" in b or b"\r" in b else b)
    return out
