"""The HTTP/1.1 face of ``seenstore serve`` on aiohttp (docs/serve.md).

``Server`` owns the store (its single writer), the answer log and the batcher;
``make_app`` routes the endpoints; ``serve`` runs it until SIGTERM or SIGINT,
then stops accepting, commits and answers every request already queued, closes
the store and returns (the command exits 0). Every client error is a 4xx with a
one-line JSON body ``{"error": "...", "status": N}``. A bearer token is required
when one is configured, and one must be configured unless the server listens on
loopback (``check_listen``).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import re
import signal
import time

import numpy as np
import xxhash
from aiohttp import web

from seenstore.errors import InvalidInputError, NotSupportedError, SeenStoreError
from seenstore.serve import page
from seenstore.serve.answers import AnswerLog
from seenstore.serve.batcher import Batcher, Committer, Item, ShuttingDown
from seenstore.serve.urls import url_batch
from seenstore.store import manifest

DEFAULT_MAX_BODY = 64 << 20           # bytes of one request body
DEFAULT_MAX_ITEMS = 4_000_000         # URLs or keys of one request
BATCH_ID_HEADER = "Seenstore-Batch-Id"
_BATCH_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_OPEN_PATHS = {"/healthz"}


def is_loopback(host: str) -> bool:
    """True for a host name or address that only this machine reaches."""
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, token: str | None) -> None:
    """Raise InvalidInputError when listening on ``host`` needs a token and none is given."""
    if token is None and not is_loopback(host):
        raise InvalidInputError(f"listening on {host} (not loopback) needs a bearer token: "
                                f"--token-file FILE")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) -> (host, port); InvalidInputError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidInputError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class ClientError(Exception):
    """A request the server refuses: HTTP ``status`` with a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


def _json_error(status: int, reason: str) -> web.Response:
    reason = " ".join(str(reason).split())
    return web.Response(status=status, text=json.dumps({"error": reason, "status": status}),
                        content_type="application/json")


class Server:
    """The store, its answer log, the committer and the batcher of one server."""

    def __init__(self, store, policy, *, token: str | None = None, max_delay: float = 0.005,
                 max_body: int = DEFAULT_MAX_BODY, max_items: int = DEFAULT_MAX_ITEMS,
                 sync: bool = True):
        self.store = store
        self.policy = policy
        self.token = token
        self.max_body = max_body
        self.max_items = max_items
        doc = manifest.read(store.path)
        self.log = AnswerLog(store.path, doc.get("store_id", ""),
                             int(doc["counters"].get("batches", 0)), sync=sync)
        self.committer = Committer(store, self.log)
        self.max_delay = max_delay
        self.batcher: Batcher | None = None
        self.started = time.time()
        self.requests = 0
        self.client_errors = 0
        self.req_latency = {}

    # ------------------------------------------------------------- plumbing
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body,
                              middlewares=[self._errors, self._auth])
        r = app.router
        r.add_post("/v1/urls/add", self.urls_add)
        r.add_post("/v1/urls/contains", self.urls_contains)
        r.add_post("/v1/keys/add", self.keys_add)
        r.add_post("/v1/keys/contains", self.keys_contains)
        r.add_post("/v1/keys/get", self.keys_get)
        r.add_post("/v1/urls/get", self.urls_get)
        r.add_post("/v1/keys/check_update", self.check_update)
        r.add_post("/v1/urls/check_update", self.check_update)
        r.add_post("/v1/keys/update", self.values_update)
        r.add_post("/v1/urls/update", self.values_update)
        r.add_get("/v1/values/counts", self.values_counts)
        r.add_get("/v1/values/due", self.values_due)
        r.add_get("/v1/values/select", self.values_select)
        r.add_post("/v1/evidence", self.evidence)
        r.add_post("/v1/learn", self.learn)
        r.add_get("/v1/stats", self.stats)
        r.add_get("/v1/series", self.series)
        r.add_get("/metrics", self.metrics)
        r.add_get("/healthz", self.healthz)
        r.add_get("/", self.status_page)
        app.on_startup.append(self._on_startup)
        return app

    async def _on_startup(self, app) -> None:
        self.batcher = Batcher(self.committer, self.max_delay)
        self.batcher.start()

    @web.middleware
    async def _errors(self, request, handler):
        self.requests += 1
        try:
            return await handler(request)
        except ClientError as e:
            self.client_errors += 1
            return _json_error(e.status, str(e))
        except web.HTTPException as e:
            if e.status >= 400:
                if e.status < 500:
                    self.client_errors += 1
                return _json_error(e.status, e.reason)
            raise
        except ShuttingDown as e:
            return _json_error(503, str(e))
        except NotSupportedError as e:  # e.g. due_urls on a store that keeps no URLs
            self.client_errors += 1
            return _json_error(409, str(e))
        except InvalidInputError as e:
            self.client_errors += 1
            return _json_error(400, str(e))
        except SeenStoreError as e:
            return _json_error(500, f"{type(e).__name__}: {e}")

    @web.middleware
    async def _auth(self, request, handler):
        if self.token is not None and request.path not in _OPEN_PATHS:
            got = request.headers.get("Authorization", "")
            tok = got[7:] if got.startswith("Bearer ") else request.query.get("token", "")
            if not hmac.compare_digest(tok.encode(), self.token.encode()):
                raise ClientError(401, "missing or wrong bearer token (Authorization: "
                                       "Bearer TOKEN)")
        return await handler(request)

    async def _body(self, request) -> bytes:
        if request.content_length is not None and request.content_length > self.max_body:
            raise ClientError(413, f"request body of {request.content_length} bytes is over "
                                   f"the limit of {self.max_body}")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ClientError(413, f"request body over the limit of {self.max_body} "
                                   f"bytes") from None

    def _batch_id(self, request, kind: str, body: bytes, extra: str = "") -> tuple[str, int]:
        bid = request.headers.get(BATCH_ID_HEADER) or request.query.get("batch_id")
        if bid is None:
            bid = "server-" + xxhash.xxh3_128_hexdigest(
                f"{time.time_ns()}-{id(request)}".encode())[:32]
        elif not _BATCH_ID.match(bid):
            raise ClientError(400, f"{BATCH_ID_HEADER} must be 1-64 characters of "
                                   f"[A-Za-z0-9._:-]")
        h = xxhash.xxh3_64()
        h.update(f"{kind}\0{extra}\0".encode())
        h.update(body)
        return bid, h.intdigest()

    def _lines(self, body: bytes) -> list[bytes]:
        if not body:
            return []
        lines = body.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        if len(lines) > self.max_items:
            raise ClientError(413, f"{len(lines)} URLs in one request, over the limit of "
                                   f"{self.max_items}")
        return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]

    def _keys(self, body: bytes) -> np.ndarray:
        if len(body) % 8:
            raise ClientError(400, f"a keys body is little-endian uint64s: {len(body)} bytes "
                                   f"is not a multiple of 8")
        if len(body) // 8 > self.max_items:
            raise ClientError(413, f"{len(body) // 8} keys in one request, over the limit of "
                                   f"{self.max_items}")
        return np.frombuffer(body, dtype="<u8").astype(np.uint64)

    def _base(self, request) -> str | None:
        base = request.query.get("base")
        return base or None

    async def _urls(self, request, body: bytes):
        lines = self._lines(body)
        base = self._base(request)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, url_batch, lines, self.store.layout,
                                              self.store.policy, base)
        except InvalidInputError as e:
            raise ClientError(400, str(e)) from None

    @staticmethod
    def _mask_response(mask: np.ndarray, **counts) -> web.Response:
        headers = {f"Seenstore-{k.capitalize()}": str(v) for k, v in counts.items()}
        return web.Response(body=mask.astype(np.uint8).tobytes(), headers=headers,
                            content_type="application/octet-stream")

    # ------------------------------------------------------------ endpoints
    async def urls_add(self, request) -> web.Response:
        answer = request.query.get("answer", "mask")
        if answer not in ("mask", "urls"):
            raise ClientError(400, f"answer must be mask or urls, got {answer!r}")
        body = await self._body(request)
        base = self._base(request) or ""
        bid, digest = self._batch_id(request, "urls", body, base)
        fb = await self._urls(request, body)
        ans = await self.batcher.submit(Item(bid, digest, fb.keys, fb.n, fb.positions,
                                             lines=fb.lines))
        counts = {"items": fb.n, "new": int(ans.mask.sum()), "rejected": len(fb.rejected)}
        if answer == "urls":
            sel = ans.mask[fb.positions] if len(fb.positions) else np.zeros(0, dtype=bool)
            headers = {f"Seenstore-{k.capitalize()}": str(v) for k, v in counts.items()}
            return web.Response(body=fb.lines(sel), headers=headers,
                                content_type="text/plain", charset="utf-8")
        return self._mask_response(ans.mask, **counts)

    async def urls_contains(self, request) -> web.Response:
        body = await self._body(request)
        fb = await self._urls(request, body)
        loop = asyncio.get_running_loop()
        m = await loop.run_in_executor(None, self.committer.contains, fb.keys)
        mask = np.zeros(fb.n, dtype=bool)
        if len(fb.positions):
            mask[fb.positions] = m
        return self._mask_response(mask, items=fb.n, rejected=len(fb.rejected))

    async def keys_add(self, request) -> web.Response:
        body = await self._body(request)
        bid, digest = self._batch_id(request, "keys", body)
        keys = self._keys(body)
        ans = await self.batcher.submit(Item(bid, digest, keys, len(keys)))
        return self._mask_response(ans.mask, items=len(keys), new=int(ans.mask.sum()))

    async def keys_contains(self, request) -> web.Response:
        body = await self._body(request)
        keys = self._keys(body)
        loop = asyncio.get_running_loop()
        m = await loop.run_in_executor(None, self.committer.contains, keys)
        return self._mask_response(m, items=len(keys))

    # --------------------------------------------------------------- values
    # Every value call runs on the commit thread, between two group commits: a value
    # commit (update) or sweep (get, due, select) never meets a batch's commit or a
    # value-file merge half done. An update does not count as a batch, so the answer
    # log's count of committed batches stays the groups'.
    def _need_values(self) -> None:
        if not self.store.values:
            raise ClientError(409, f"the store {self.store.path} keeps no values (serve a "
                                   f"store created with values: seenstore serve --create "
                                   f"--values)")

    async def _on_writer(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.committer.pool, fn,
                                                                *args)

    @staticmethod
    def _records_format(request) -> str:
        fmt = request.query.get("format", "binary")
        if fmt not in ("binary", "json"):
            raise ClientError(400, f"format must be binary or json, got {fmt!r}")
        return fmt

    @staticmethod
    def _records_response(fmt: str, rec: np.ndarray, **counts) -> web.Response:
        from seenstore.serve.values import encode_records, records_json

        counts["present"] = int(rec["present"].sum())
        headers = {f"Seenstore-{k.capitalize()}": str(v) for k, v in counts.items()}
        if fmt == "json":
            return web.json_response(records_json(rec), headers=headers)
        return web.Response(body=encode_records(rec), headers=headers,
                            content_type="application/octet-stream")

    async def keys_get(self, request) -> web.Response:
        """The records of keys (``SeenStore.get``), aligned with the body's keys."""
        self._need_values()
        fmt = self._records_format(request)
        keys = self._keys(await self._body(request))
        rec = await self._on_writer(self.store.get, keys)
        return self._records_response(fmt, rec, items=len(keys))

    async def urls_get(self, request) -> web.Response:
        """The records of URLs under the store's policy, aligned with the body's lines
        (a rejected URL: not present); normalised on the commit thread, so under the
        policy of the moment the records are read (a learn cannot come between)."""
        self._need_values()
        fmt = self._records_format(request)
        lines = self._lines(await self._body(request))
        base = self._base(request)
        rec = await self._on_writer(lambda: self.store.get_urls(lines, base))
        return self._records_response(fmt, rec, items=len(lines))

    async def _value_request(self, request, need_fields: bool) -> tuple:
        """(body, kind, items, base, fields) of an update or check_update request (one
        JSON object, ``serve/values.py: parse_update``) on a store with values; its
        kind must be the path's (``/v1/keys/...`` takes "keys") and its items within
        the request limit."""
        from seenstore.serve.values import parse_update

        self._need_values()
        body = await self._body(request)
        kind, items, base, fields = parse_update(body, need_fields)
        want = request.path.rsplit("/", 2)[-2]  # /v1/keys/... or /v1/urls/...
        if kind != want:
            raise ClientError(400, f"{request.path} takes \"{want}\", not \"{kind}\"")
        if len(items) > self.max_items:
            raise ClientError(413, f"{len(items)} {kind} in one request, over the limit of "
                                   f"{self.max_items}")
        return body, kind, items, base, fields

    async def check_update(self, request) -> web.Response:
        """Admit keys or URLs and give each new one a record (``SeenStore.check_update``):
        one JSON object, as an update, whose fields may be none. A group commit like
        ``/add`` (exactly once by batch id); answers the mask of new items."""
        from seenstore.serve.values import url_lines
        from seenstore.store.values import check_fields
        from seenstore.store.valueurls import fields_at

        body, kind, items, base, fields = await self._value_request(request, False)
        bid, digest = self._batch_id(request, "check_update", body)
        if kind == "keys":
            keys = np.array(items, dtype=np.uint64)
            initial = check_fields(fields, len(keys), "check_update")  # before it queues
            ans = await self.batcher.submit(Item(bid, digest, keys, len(keys),
                                                 initial=initial))
            return self._mask_response(ans.mask, items=len(keys), new=int(ans.mask.sum()))
        loop = asyncio.get_running_loop()
        try:
            fb = await loop.run_in_executor(None, url_batch, url_lines(items),
                                            self.store.layout, self.store.policy, base)
        except InvalidInputError as e:
            raise ClientError(400, str(e)) from None
        initial = check_fields(fields_at(fields, fb.positions, fb.n), len(fb.keys),
                               "check_update")
        ans = await self.batcher.submit(Item(bid, digest, fb.keys, fb.n, fb.positions,
                                             lines=fb.lines, initial=initial))
        return self._mask_response(ans.mask, items=fb.n, new=int(ans.mask.sum()),
                                   rejected=len(fb.rejected))

    async def values_update(self, request) -> web.Response:
        """Set fields of stored keys or URLs (``SeenStore.update``): one JSON object;
        answers the mask of items updated (stored), aligned with them."""
        from seenstore.serve.values import url_lines

        _, kind, items, base, fields = await self._value_request(request, True)
        if kind == "keys":
            keys = np.array(items, dtype=np.uint64)
            mask = await self._on_writer(lambda: self.store.update(keys, **fields))
            return self._mask_response(mask, items=len(keys), updated=int(mask.sum()))
        # normalised on the commit thread (SeenStore.update_urls): the keys are those of
        # the policy the update commits under, even if a learn ran just before it
        lines = url_lines(items)
        mask = await self._on_writer(lambda: self.store.update_urls(lines, base, **fields))
        return self._mask_response(mask, items=len(lines), updated=int(mask.sum()))

    async def values_counts(self, request) -> web.Response:
        """Stored keys per state (``SeenStore.counts``), by state name."""
        self._need_values()
        counts = await self._on_writer(self.store.counts)
        return web.json_response({s.name: int(n) for s, n in counts.items()})

    def _limit(self, request) -> int | None:
        text = request.query.get("limit")
        if text is None or text == "":
            return None
        if not text.isdigit():
            raise ClientError(400, f"limit must be a whole number >= 0, got {text!r}")
        return int(text)

    async def _keys_or_urls(self, request, keys_call, urls_call) -> web.Response:
        answer = request.query.get("answer", "keys")
        if answer == "keys":
            keys = await self._on_writer(keys_call)
            return web.Response(body=np.asarray(keys, dtype="<u8").tobytes(),
                                headers={"Seenstore-Items": str(len(keys))},
                                content_type="application/octet-stream")
        if answer != "urls":
            raise ClientError(400, f"answer must be keys or urls, got {answer!r}")
        urls = await self._on_writer(urls_call)
        body = "".join(u + "\n" for u in urls).encode("utf-8", "surrogatepass")
        return web.Response(body=body, headers={"Seenstore-Items": str(len(urls))},
                            content_type="text/plain", charset="utf-8")

    async def values_due(self, request) -> web.Response:
        """Keys (or kept URLs) whose ``next_due`` is set and <= ``now``, soonest first
        (``SeenStore.due``)."""
        self._need_values()
        now = request.query.get("now", "")
        if not now.lstrip("-").isdigit():
            raise ClientError(400, f"due needs now=SECONDS (a whole number), got {now!r}")
        now, limit = int(now), self._limit(request)
        return await self._keys_or_urls(request, lambda: self.store.due(now, limit),
                                        lambda: self.store.due_urls(now, limit))

    async def values_select(self, request) -> web.Response:
        """Keys (or kept URLs) in one state, ascending (``SeenStore.select``)."""
        from seenstore.frontier.state import parse_state

        self._need_values()
        state = parse_state(request.query.get("state", ""))
        limit = self._limit(request)
        return await self._keys_or_urls(request, lambda: self.store.select(state, limit),
                                        lambda: self.store.select_urls(state, limit))

    async def evidence(self, request) -> web.Response:
        """Fetch evidence, one JSON object per line (``SeenStore.record_fetches``'s
        names; ``body`` as text); answers ``{"recorded": n, "rejected": [[i, why]]}``."""
        body = await self._body(request)
        records = []
        for i, line in enumerate(body.splitlines()):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: nested too deep
                raise ClientError(400, f"evidence line {i + 1} is not JSON") from None
            if not isinstance(rec, dict):
                raise ClientError(400, f"evidence line {i + 1} is not a JSON object")
            if isinstance(rec.get("body"), str):
                rec["body"] = rec["body"].encode("utf-8")
            records.append(rec)
        if len(records) > self.max_items:
            raise ClientError(413, f"{len(records)} records in one request, over the limit "
                                   f"of {self.max_items}")
        loop = asyncio.get_running_loop()
        got = await loop.run_in_executor(None, self.store.record_fetches, records)
        return web.json_response(got)

    async def learn(self, request) -> web.Response:
        """Learn from the evidence (``SeenStore.learn``; ``?apply=0``: report only), on
        the commit thread, between two group commits."""
        apply = request.query.get("apply", "1") not in ("0", "false", "no")
        loop = asyncio.get_running_loop()
        findings = await loop.run_in_executor(self.committer.pool, self.store.learn, apply)
        info = dict(self.store.last_learn or {})
        info.pop("policy", None)
        return web.json_response({
            "policy_id": self.store.policy_id, "policy_version": self.store.policy_version,
            "rebuild": info.get("rebuild"), "fetches": info.get("fetches", 0),
            "findings": [{"host": f.host, "rule": f.kind, "name": f.name,
                          "support": f.support, "counter": f.counter, "paths": f.paths,
                          "status": f.status} for f in findings]})

    async def healthz(self, request) -> web.Response:
        return web.json_response({"ok": True})

    async def _store_stats(self) -> dict:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.committer.pool, self.committer.stats)

    def figures(self, st: dict) -> dict:
        """The server's figures beside the store's (what /v1/stats, /metrics and the
        status page show)."""
        c = self.committer
        with c.lock:
            lat = c.latency
            out = {"keys": c.n_keys, "groups": c.groups, "requests_admitted": c.requests,
                   "keys_offered": c.keys_offered, "keys_new": c.keys_new,
                   "batch_latency_mean_s": lat.sum / lat.count if lat.count else 0.0}
        out.update(store=self.store.path, policy=self.store.policy_id,
                   policy_id=self.store.policy_id, layout=self.store.layout.describe(),
                   uptime_s=time.time() - self.started, queue_depth=self.batcher.depth,
                   requests=self.requests, client_errors=self.client_errors,
                   max_delay_ms=self.max_delay * 1000,
                   answer_log={"records": self.log.records, "ids": len(self.log.answers)},
                   store_stats=st)
        return out

    async def stats(self, request) -> web.Response:
        return web.json_response(self.figures(await self._store_stats()))

    async def series(self, request) -> web.Response:
        with self.committer.lock:
            pts = list(self.committer.series)
        return web.json_response({"t": [p[0] for p in pts], "keys": [p[1] for p in pts],
                                  "latency_ms": [p[2] * 1000 for p in pts],
                                  "group_keys": [p[3] for p in pts]})

    async def metrics(self, request) -> web.Response:
        from seenstore.serve.metrics import prometheus

        return web.Response(text=prometheus(self.figures(await self._store_stats()),
                                            self.committer.latency),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Format": "prometheus-0.0.4"})

    async def status_page(self, request) -> web.Response:
        return web.Response(text=page.HTML, content_type="text/html", charset="utf-8")


async def serve(server: Server, host: str, port: int, announce=print) -> None:
    """Listen on ``host:port`` until SIGTERM or SIGINT; then drain and return.
    ``announce(url)`` is called once listening. Raises OSError when the address
    cannot be bound."""
    runner = web.AppRunner(server.app(), handle_signals=False, access_log=None,
                           shutdown_timeout=30)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    sock = runner.addresses[0] if runner.addresses else (host, port)
    shown = f"[{host}]" if ":" in host else host
    announce(f"http://{shown}:{sock[1]}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await site.stop()          # no new connections
    await server.batcher.drain()  # every queued request committed and answered
    await runner.cleanup()     # in-flight handlers finish writing their answers
