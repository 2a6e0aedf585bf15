"""Clients of ``seenstore serve``: ``Client`` (stdlib http.client) and ``AsyncClient``
(aiohttp), with the store's calls (docs/serve.md).

``add(keys)`` / ``contains(keys)`` take uint64 keys, ``add_urls(urls, base=None)`` /
``contains_urls(urls, base=None)`` take URLs (normalised by the server under the
store's policy); each returns a bool mask aligned with its input. On a store with
values, ``check_update``/``check_update_urls`` (admitting, exactly once by batch id),
``get``/``get_urls``, ``update``/``update_urls``, ``counts``, ``due``/``due_urls``
and ``select``/``select_urls`` are the store's value calls (updates set fields, so a
resent one changes nothing more). Every admitting
call carries a new batch id; after a connection failure, or a 503 from a server
that is shutting down, the call is sent again with the same id until
``retry_seconds`` pass, and the server answers a batch id it has seen with the
answer it gave (its answer log survives a crash), so each URL is answered new
exactly once across retries. One keep-alive connection per client; a client is
not for two threads at once.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from seenstore.errors import InvalidInputError, SeenStoreError

DEFAULT_RETRY_SECONDS = 60.0
RETRY_PAUSE = (0.05, 1.0)  # first pause between attempts, longest pause


class ServerError(SeenStoreError):
    """The server refused a request (a 4xx: the reason it gave) or failed (5xx), or
    could not be reached within ``retry_seconds``."""

    exit_code = 6

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _keys_array(keys) -> np.ndarray:
    arr = np.asarray(keys)
    if arr.dtype != np.uint64:
        if arr.size and arr.dtype.kind not in "iu":
            raise InvalidInputError(f"keys must be unsigned 64-bit integers, got {arr.dtype}")
        if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
            raise InvalidInputError("keys must be unsigned 64-bit integers, got a negative one")
        arr = arr.astype(np.uint64)
    return arr.reshape(-1)


def _keys_body(keys) -> tuple[bytes, int]:
    arr = _keys_array(keys)
    return arr.astype("<u8", copy=False).tobytes(), len(arr)


def _url_items(urls) -> list:
    """``urls`` (one URL, or any iterable of them) as a list of str and bytes;
    InvalidInputError for an item that is neither."""
    if isinstance(urls, (str, bytes)):
        return [urls]
    out = list(urls)
    for u in out:
        if not isinstance(u, (str, bytes)):
            raise InvalidInputError(f"URLs must be str or bytes, got {type(u).__name__}")
    return out


def _url_list(urls) -> list[str]:
    """URLs for a JSON body: bytes that are not UTF-8 decoded with ``surrogateescape``
    (the server encodes them back to the same bytes: serve/values.py ``url_lines``)."""
    return [u.decode("utf-8", "surrogateescape") if isinstance(u, bytes) else u
            for u in _url_items(urls)]


def _key_items(keys) -> list[int]:
    return [int(k) for k in _keys_array(keys)]


def _update_body(kind: str, items: list, base: str | None, fields: dict) -> bytes:
    from seenstore.serve.values import update_body

    return update_body(kind, items, base, fields)


def _records(body: bytes, n: int) -> np.ndarray:
    from seenstore.serve.values import decode_records

    try:
        return decode_records(body, n)
    except ValueError as e:
        raise ServerError(f"the server answered {e}") from None


def _counts(body: bytes) -> dict:
    from seenstore.frontier.state import State

    got = json.loads(body)
    return {s: int(got.get(s.name, 0)) for s in State}


def _now(now) -> int:
    from seenstore.store.values import check_now

    return check_now(now)


def _state_arg(state) -> str:
    from seenstore.frontier.state import parse_state

    return parse_state(state).name


class _Req(NamedTuple):
    """One call of the clients: what to send, and how to read the answer's body."""

    method: str
    path: str
    body: bytes | None
    parse: Callable[[bytes], object]
    new_id: bool = False  # an admitting call: a new batch id, kept across retries


def _json_req(method: str, path: str, body: bytes | None = None) -> _Req:
    return _Req(method, path, body, json.loads)


def _keys_req(op: str, keys, parse=None, new_id: bool = False) -> _Req:
    """POST /v1/keys/OP with ``keys`` as the body; ``parse(body, n)`` (default: a mask)."""
    body, n = _keys_body(keys)
    return _Req("POST", f"/v1/keys/{op}", body, lambda b: (parse or _mask)(b, n), new_id)


def _urls_req(op: str, urls, base: str | None, parse=None, new_id: bool = False) -> _Req:
    """POST /v1/urls/OP with ``urls`` as the body (lines); as ``_keys_req``."""
    body, n = _urls_body(urls)
    return _Req("POST", _url_path("urls", op, base), body, lambda b: (parse or _mask)(b, n),
                new_id)


def _update_req(op: str, kind: str, items: list, base: str | None, fields: dict,
                new_id: bool) -> _Req:
    """POST /v1/KIND/OP (update, check_update) with one JSON object; a mask."""
    return _Req("POST", f"/v1/{kind}/{op}", _update_body(kind, items, base, fields),
                lambda b: _mask(b, len(items)), new_id)


def _listing_req(op: str, urls: bool, **query) -> _Req:
    """GET /v1/values/OP (due, select): keys, or with ``urls`` the kept URLs."""
    q = {k: v for k, v in query.items() if v is not None}
    if urls:
        q["answer"] = "urls"
    return _Req("GET", f"/v1/values/{op}?" + urllib.parse.urlencode(q), None,
                _urls_answer if urls else _keys_answer)


def _keys_answer(body: bytes) -> np.ndarray:
    if len(body) % 8:
        raise ServerError(f"the server answered {len(body)} bytes of keys")
    return np.frombuffer(body, dtype="<u8").astype(np.uint64)


def _urls_answer(body: bytes) -> list[str]:
    text = body.decode("utf-8", "surrogateescape")
    return text.split("\n")[:-1] if text else []


def _urls_body(urls) -> tuple[bytes, int]:
    out = []
    for u in _url_items(urls):
        if isinstance(u, str):
            u = u.encode("utf-8", "surrogatepass")
        # a line break would split the item in two: send an empty line (rejected: False)
        out.append(b"" if b"\n" in u or b"\r" in u else u)
    return (b"\n".join(out) + b"\n" if out else b""), len(out)


def _mask(body: bytes, n: int) -> np.ndarray:
    if len(body) != n:
        raise ServerError(f"the server answered {len(body)} items for {n}")
    return np.frombuffer(body, dtype=np.uint8).astype(bool)


def _url_path(kind: str, op: str, base: str | None) -> str:
    q = "?" + urllib.parse.urlencode({"base": base}) if base else ""
    return f"/v1/{kind}/{op}{q}"


def _split(url: str) -> tuple[str, str, int, str]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InvalidInputError(f"a server URL is http://HOST:PORT, got {url!r}")
    return u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80), u.path.rstrip("/")


class Client:
    """``Client("http://HOST:PORT", token=None)``: a blocking client of one server."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 120.0,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS):
        self.url = url
        self.scheme, self.host, self.port, self.prefix = _split(url)
        self.token = token
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.retries = 0  # attempts sent again after a failure (all calls)
        self._conn: http.client.HTTPConnection | None = None

    # -------------------------------------------------------------- calls
    # each builds its request with the module's _*_req (shared with AsyncClient)
    def add(self, keys) -> np.ndarray:
        """Admit uint64 ``keys``; True where the key is new (first occurrence, never
        answered new to any client before)."""
        return self._send(_keys_req("add", keys, new_id=True))

    def contains(self, keys) -> np.ndarray:
        return self._send(_keys_req("contains", keys))

    def add_urls(self, urls, base: str | None = None) -> np.ndarray:
        """Admit ``urls`` (normalised by the server); True where the canonical URL is
        new; False where seen or rejected."""
        return self._send(_urls_req("add", urls, base, new_id=True))

    def contains_urls(self, urls, base: str | None = None) -> np.ndarray:
        return self._send(_urls_req("contains", urls, base))

    def stats(self) -> dict:
        return self._send(_json_req("GET", "/v1/stats"))

    # ------------------------------------------------- values (docs/serve.md)
    def get(self, keys) -> np.ndarray:
        """The records of ``keys`` (``SeenStore.get``): a structured array aligned with
        them, ``present`` and the value fields (absent keys: all zero)."""
        return self._send(_keys_req("get", keys, _records))

    def get_urls(self, urls, base: str | None = None) -> np.ndarray:
        """``get`` of URLs under the server's policy (rejected URLs: not present)."""
        return self._send(_urls_req("get", urls, base, _records))

    def check_update(self, keys, **initial) -> np.ndarray:
        """Admit ``keys`` as ``add`` does and give each new key a record (the fields
        named, scalars or arrays aligned with ``keys``; others 0): one group commit,
        exactly once by batch id. True where new."""
        return self._send(_update_req("check_update", "keys", _key_items(keys), None,
                                      initial, True))

    def check_update_urls(self, urls, base: str | None = None, **initial) -> np.ndarray:
        """``check_update`` of URLs (normalised by the server); mask aligned with them."""
        return self._send(_update_req("check_update", "urls", _url_list(urls), base,
                                      initial, True))

    def update(self, keys, **fields) -> np.ndarray:
        """Set the named fields (scalars or arrays aligned with ``keys``) of stored
        ``keys`` (``SeenStore.update``); the mask of keys updated. Safe to resend."""
        return self._send(_update_req("update", "keys", _key_items(keys), None, fields,
                                      False))

    def update_urls(self, urls, base: str | None = None, **fields) -> np.ndarray:
        """``update`` of URLs under the server's policy; mask aligned with ``urls``."""
        return self._send(_update_req("update", "urls", _url_list(urls), base, fields,
                                      False))

    def counts(self) -> dict:
        """{State: number of stored keys in it}, summing to the store's keys."""
        return self._send(_Req("GET", "/v1/values/counts", None, _counts))

    def due(self, now: int, limit: int | None = None) -> np.ndarray:
        """Stored keys whose ``next_due`` is set and <= ``now``, soonest first."""
        return self._send(_listing_req("due", False, now=_now(now), limit=limit))

    def due_urls(self, now: int, limit: int | None = None) -> list[str]:
        return self._send(_listing_req("due", True, now=_now(now), limit=limit))

    def select(self, state, limit: int | None = None) -> np.ndarray:
        """Stored keys in ``state`` (a State or its name), ascending."""
        return self._send(_listing_req("select", False, state=_state_arg(state),
                                       limit=limit))

    def select_urls(self, state, limit: int | None = None) -> list[str]:
        return self._send(_listing_req("select", True, state=_state_arg(state), limit=limit))

    def record_fetches(self, records) -> dict:
        """Send fetch evidence (dicts with ``SeenStore.record_fetches``'s names; a
        ``body`` as bytes or text) to the server's store."""
        return self._send(_json_req("POST", "/v1/evidence", _evidence_body(records)))

    def learn(self, apply: bool = True) -> dict:
        """The server's store learns from its evidence (``SeenStore.learn``); the
        findings, the policy's identity and version."""
        return self._send(_json_req("POST", f"/v1/learn?apply={int(bool(apply))}", b""))

    def healthz(self) -> bool:
        return self._send(_json_req("GET", "/healthz")).get("ok", False)

    # ---------------------------------------------------------- transport
    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (http.client.HTTPSConnection if self.scheme == "https"
                   else http.client.HTTPConnection)
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _send(self, req: _Req):
        return req.parse(self._call(req.method, req.path, req.body, req.new_id))

    def _call(self, method: str, path: str, body: bytes | None, new_id: bool = False,
              batch_id: str | None = None) -> bytes:
        """One request, sent again (same batch id) after a connection failure or a 503
        until ``retry_seconds`` pass; the body of a 200."""
        batch_id = batch_id or (uuid.uuid4().hex if new_id else None)
        headers = _headers(self.token, batch_id)
        deadline = time.monotonic() + self.retry_seconds
        pause, attempt = RETRY_PAUSE[0], 0
        while True:
            why = None
            try:
                conn = self._connect()
                conn.request(method, self.prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status == 200:
                    return data
                if resp.status != 503:
                    raise ServerError(_reason(resp.status, data), resp.status)
                why = _reason(resp.status, data)
                self._drop()
            except (ConnectionError, http.client.HTTPException, TimeoutError, OSError) as e:
                if isinstance(e, ServerError):
                    raise
                why = f"{type(e).__name__}: {e}"
                self._drop()
            if time.monotonic() + pause > deadline:
                raise ServerError(f"{self.url}: no answer within {self.retry_seconds:g} s "
                                  f"({attempt + 1} attempts; last: {why})")
            time.sleep(pause)
            pause = min(pause * 2, RETRY_PAUSE[1])
            attempt += 1
            self.retries += 1

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _headers(token: str | None, batch_id: str | None) -> dict:
    h = {"Content-Type": "application/octet-stream"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    if batch_id:
        h["Seenstore-Batch-Id"] = batch_id
    return h


def _reason(status: int, data: bytes) -> str:
    try:
        return f"HTTP {status}: {json.loads(data)['error']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {data[:200]!r}"


class AsyncClient:
    """``AsyncClient("http://HOST:PORT", token=None)``: the calls of ``Client``,
    awaitable, on an aiohttp session (keep-alive, any number of calls at once).
    Use ``async with`` or ``await close()``."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 120.0,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS):
        _split(url)
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.retries = 0
        self._session = None

    def _sess(self):
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def add(self, keys) -> np.ndarray:
        return await self._send(_keys_req("add", keys, new_id=True))

    async def contains(self, keys) -> np.ndarray:
        return await self._send(_keys_req("contains", keys))

    async def add_urls(self, urls, base: str | None = None) -> np.ndarray:
        return await self._send(_urls_req("add", urls, base, new_id=True))

    async def contains_urls(self, urls, base: str | None = None) -> np.ndarray:
        return await self._send(_urls_req("contains", urls, base))

    async def stats(self) -> dict:
        return await self._send(_json_req("GET", "/v1/stats"))

    async def record_fetches(self, records) -> dict:
        return await self._send(_json_req("POST", "/v1/evidence", _evidence_body(records)))

    async def learn(self, apply: bool = True) -> dict:
        return await self._send(_json_req("POST", f"/v1/learn?apply={int(bool(apply))}", b""))

    async def get(self, keys) -> np.ndarray:
        return await self._send(_keys_req("get", keys, _records))

    async def get_urls(self, urls, base: str | None = None) -> np.ndarray:
        return await self._send(_urls_req("get", urls, base, _records))

    async def check_update(self, keys, **initial) -> np.ndarray:
        return await self._send(_update_req("check_update", "keys", _key_items(keys), None,
                                            initial, True))

    async def check_update_urls(self, urls, base: str | None = None, **initial) -> np.ndarray:
        return await self._send(_update_req("check_update", "urls", _url_list(urls), base,
                                            initial, True))

    async def update(self, keys, **fields) -> np.ndarray:
        return await self._send(_update_req("update", "keys", _key_items(keys), None,
                                            fields, False))

    async def update_urls(self, urls, base: str | None = None, **fields) -> np.ndarray:
        return await self._send(_update_req("update", "urls", _url_list(urls), base,
                                            fields, False))

    async def counts(self) -> dict:
        return await self._send(_Req("GET", "/v1/values/counts", None, _counts))

    async def due(self, now: int, limit: int | None = None) -> np.ndarray:
        return await self._send(_listing_req("due", False, now=_now(now), limit=limit))

    async def due_urls(self, now: int, limit: int | None = None) -> list[str]:
        return await self._send(_listing_req("due", True, now=_now(now), limit=limit))

    async def select(self, state, limit: int | None = None) -> np.ndarray:
        return await self._send(_listing_req("select", False, state=_state_arg(state),
                                             limit=limit))

    async def select_urls(self, state, limit: int | None = None) -> list[str]:
        return await self._send(_listing_req("select", True, state=_state_arg(state),
                                             limit=limit))

    async def _send(self, req: _Req):
        return req.parse(await self._call(req.method, req.path, req.body, req.new_id))

    async def _call(self, method: str, path: str, body: bytes | None,
                    new_id: bool = False) -> bytes:
        import asyncio

        import aiohttp

        headers = _headers(self.token, uuid.uuid4().hex if new_id else None)
        deadline = time.monotonic() + self.retry_seconds
        pause, attempt = RETRY_PAUSE[0], 0
        while True:
            try:
                async with self._sess().request(method, self.url + path, data=body,
                                                headers=headers) as resp:
                    data = await resp.read()
                    if resp.status == 200:
                        return data
                    if resp.status != 503:
                        raise ServerError(_reason(resp.status, data), resp.status)
                    why = _reason(resp.status, data)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                why = f"{type(e).__name__}: {e}"
            if time.monotonic() + pause > deadline:
                raise ServerError(f"{self.url}: no answer within {self.retry_seconds:g} s "
                                  f"({attempt + 1} attempts; last: {why})")
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_PAUSE[1])
            attempt += 1
            self.retries += 1

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _evidence_body(records) -> bytes:
    lines = []
    for r in records:
        r = dict(r)
        if isinstance(r.get("body"), (bytes, bytearray)):
            r["body"] = bytes(r["body"]).decode("utf-8", "replace")
        lines.append(json.dumps(r))
    return ("\n".join(lines) + "\n").encode("utf-8")
