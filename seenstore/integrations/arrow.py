"""Arrow arrays and Parquet columns into the fast path (extra ``[arrow]``: pyarrow).

An Arrow string (or binary) array already has the URLBuffer layout (offsets +
bytes), so a column goes to url/fastpath.py ``normalise_buffer`` with no Python object
per URL: ``buffer_from_arrow(urls, bases=None)`` wraps the Arrow buffers (a
``bases`` array gives each URL its own base; a null base means none), and
``iter_parquet_buffers(path, column, base_column)`` does it batch by batch for a
Parquet file, so memory is bounded by the batch. ``admit_arrow(store, urls)``
normalises, fingerprints and admits one array. Errors: InvalidInputError for a
missing column, a column that is not strings, or a file that is not Parquet;
StoreNotFoundError for a missing file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from seenstore.errors import InvalidInputError, StoreNotFoundError
from seenstore.url.buffer import URLBuffer

DEFAULT_BATCH_ROWS = 1_000_000


def require_pyarrow():
    """pyarrow, or InvalidInputError naming the [arrow] extra when it is missing."""
    try:
        import pyarrow as pa
    except ImportError:
        raise InvalidInputError(
            "Arrow/Parquet input needs the [arrow] extra (pip install 'seenstore[arrow]')"
        ) from None
    return pa


def _as_strings(array, what: str):
    """``array`` (Array or ChunkedArray) as a (large_)string Array, zero-copy for
    string/binary (binary bytes go through as they are, as file lines do)."""
    pa = require_pyarrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if not isinstance(array, pa.Array):
        raise InvalidInputError(f"{what}: expected an Arrow array, got {type(array).__name__}")
    t = array.type
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type)
                                      or pa.types.is_large_string(t.value_type)):
        array = array.dictionary_decode()
    elif pa.types.is_binary(t):
        array = array.view(pa.string())
    elif pa.types.is_large_binary(t):
        array = array.view(pa.large_string())
    elif not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise InvalidInputError(f"{what} has type {t}, not a string column")
    return array


def buffer_from_arrow(urls, bases=None, base: str | None = None) -> URLBuffer:
    """A URLBuffer over the bytes of ``urls`` (nulls become empty URLs, which are
    rejected); ``bases``: an array aligned with ``urls``, each URL's own base;
    else ``base``, one base for all."""
    ub = URLBuffer.from_arrow(_as_strings(urls, "urls"), base=None if bases is not None else base)
    if bases is None:
        return ub
    b = _as_strings(bases, "bases")
    if len(b) != len(ub):
        raise InvalidInputError(f"bases has {len(b)} entries for {len(ub)} URLs")
    ids = np.arange(len(b), dtype=np.int64)
    if b.null_count:
        ids[np.asarray(b.is_null())] = -1
    return URLBuffer(ub.data, ub.offsets, URLBuffer.from_arrow(b), ids)


def _open_parquet(path: str, columns: list[str]):
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise StoreNotFoundError(f"no such file: {path}")
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise InvalidInputError(f"{path}: not a Parquet file ({str(e).splitlines()[0]})") from None
    names = pf.schema_arrow.names
    for c in columns:
        if c not in names:
            raise InvalidInputError(f"{path}: no column {c!r} (columns: {', '.join(names)})")
    return pf


def iter_parquet_buffers(path: str, column: str = "url", base_column: str | None = None, *,
                         batch_rows: int = DEFAULT_BATCH_ROWS, base: str | None = None
                         ) -> Iterator[URLBuffer]:
    """URLBuffers of up to ``batch_rows`` rows of ``column`` (with per-row bases from
    ``base_column``, else ``base`` for all), read one Parquet batch at a time."""
    pa = require_pyarrow()
    columns = [column] + ([base_column] if base_column else [])
    pf = _open_parquet(path, columns)
    schema = pf.schema_arrow
    for c in columns:
        _as_strings(pa.array([], type=schema.field(c).type), f"{path}: column {c!r}")
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            bases = batch.column(base_column) if base_column else None
            yield buffer_from_arrow(batch.column(column), bases, base)
    except (pa.ArrowInvalid, pa.ArrowException) as e:
        raise InvalidInputError(f"{path}: unreadable Parquet data "
                                f"({str(e).splitlines()[0]})") from None


def admit_arrow(store, urls, bases=None, policy=None, max_length=None):
    """Normalise, fingerprint and admit the URLs of an Arrow array into ``store``
    (a writable SeenStore); return the FastBatch and the store's mask over its keys
    (True = new). ``fb.lines(mask)`` gives the new canonical URLs."""
    from seenstore.url.fastpath import normalise_buffer
    from seenstore.url.normalise import DEFAULT_MAX_LENGTH

    fb = normalise_buffer(buffer_from_arrow(urls, bases), policy, store.layout,
                          max_length or DEFAULT_MAX_LENGTH)
    return fb, store.add(fb.keys)


__all__ = ["buffer_from_arrow", "iter_parquet_buffers", "admit_arrow"]
