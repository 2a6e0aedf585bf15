"""A local test site for the crawl tests: ``HtmlHandler`` (a request handler that
answers with an HTML body and logs nothing) and ``serve`` (one of its subclasses on
127.0.0.1 in a thread)."""

from __future__ import annotations

import contextlib
import http.server
import threading


class HtmlHandler(http.server.BaseHTTPRequestHandler):
    """Subclasses answer ``do_GET`` with ``send_html`` (or ``send_error``)."""

    def send_html(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(handler: type, **attrs):
    """Serve a subclass of ``handler`` with the class attributes ``attrs`` (the
    counters a test reads) on 127.0.0.1; yields its ``http://127.0.0.1:PORT``."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type(handler.__name__, (handler,), attrs))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
