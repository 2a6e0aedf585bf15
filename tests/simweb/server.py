"""A real HTTP/1.1 server on 127.0.0.1 serving every host of a simulated ``Web``.

Owns: the socket and the wire format. A request's Host header picks the host, the
request target the page; the answer (status, Location, Link, HTML body) is
``Web.respond(url, clock)``, where ``clock`` counts the requests served (the time
stamped into timestamped pages). Persistent connections (HTTP/1.1 keep-alive),
a daemon thread per connection (``ThreadingHTTPServer``), in a child process of
its own (the same web: ``Web(seed, pages_per_host)`` is deterministic), so the
server and the crawler do not take turns on one GIL.

    with SimServer(web) as server:
        server.port            # connect to 127.0.0.1:port, send Host: <simulated host>
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from simweb.web import SEED, Web


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms waits
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        host = self.headers.get("Host", "")
        r = self.server.web.respond(f"http://{host}{self.path}", next(self.server.clock))
        self.send_response(r.status)
        for name, value in r.headers:
            if name != "Content-Length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(r.body)))
        self.end_headers()
        self.wfile.write(r.body)

    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, web: Web):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.web = web
        self.clock = itertools.count()


class SimServer:
    """Serves ``web`` on 127.0.0.1 (a free port: ``port``) from a child process
    (``python -m simweb.server``) between ``start()`` and ``stop()`` (or as a
    context manager)."""

    def __init__(self, web: Web):
        self.web = web
        self._proc: subprocess.Popen | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        assert self._port is not None, "the server is not started"
        return self._port

    def start(self) -> SimServer:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "simweb.server", "--seed", str(self.web.seed),
             "--pages-per-host", str(self.web.pages_per_host)],
            stdout=subprocess.PIPE, env=env, text=True)
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the simulated web's server did not start: {line!r}")
        self._port = int(line.split()[1])
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()  # our own child, by its handle
            self._proc.wait(10)
            self._proc.stdout.close()
            self._proc = self._port = None

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    """``python -m simweb.server [--seed S] [--pages-per-host N]``: print ``port N``
    and serve until terminated."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--pages-per-host", type=int, default=30)
    args = ap.parse_args()
    server = _Server(Web(args.seed, args.pages_per_host))
    print("port", server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()


__all__ = ["SimServer"]
