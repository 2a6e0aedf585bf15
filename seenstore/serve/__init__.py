"""``seenstore serve``: one process owns a store and answers many clients (docs/serve.md).

``server.py`` is the HTTP/1.1 face (aiohttp), ``batcher.py`` the group commit that
merges every client's requests into one store batch and answers each batch id
exactly once, ``answers.py`` the small durable log of recent batch ids and their
answers (a retried batch gets the same answer, across a SIGKILL too), ``urls.py``
the URL calls over a store (``add_urls`` / ``contains_urls``), ``values.py`` the wire
forms of the per-URL value calls (records, update bodies), ``page.py`` the
status page, ``client.py`` the clients (``seenstore.Client``, ``seenstore.AsyncClient``).
Nothing here is imported by ``import seenstore``; aiohttp only by the server and
``AsyncClient``.
"""
