"""Arrow record batches -> packed XADD commands, column by column (no per-row Python).

The Arrow writers hand us whole column batches. For the common case (a fixed type or a
valid type column; payload columns of strings, integers, finite floats, booleans) every
step is an Arrow compute kernel: JSON-escape the strings, format the numbers, join each
row's ``{"col":value,...}``, its meta with the producer id, and finally its RESP-encoded
``XADD``. Anything else (nested values, timestamps, a ``dataColumn`` to validate, a meta
column, strings with control characters, NaN) takes the per-row path of
:class:`~streamq.spark.writing.RowEncoder` for that batch, with the same result.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..message import TYPE_PATTERN
from ..publish import idempotency
from ..wire import resp
from .idempotent import IDMP_ROWS, PLAIN, WINDOW_MS, RowKeys


class RowEncoder(Protocol):
    """What a batch's encoding reads of the row encoder (:class:`.writing.RowEncoder`)."""

    payload_columns: list[str]
    payload_index: list[int]
    type_index: int
    meta_index: int
    data_index: int
    fixed_type: bytes | None
    transforming: bool

    def encode(self, row: Any, producer_id: str) -> dict[bytes | str, bytes | str]: ...


PRODUCER_ID = "streamq_producer_id"

_SIMPLE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer,
           pa.types.is_floating, pa.types.is_boolean)  # fmt: skip
_CONTROL = r"[\x00-\x1f]"


def encode_batch(
    batch: pa.RecordBatch,
    encoder: RowEncoder,
    stream: str,
    producer_prefix: str,
    first: int = 0,
    numbers: pa.Array | None = None,
    keys: RowKeys = PLAIN,
) -> bytes:
    """``XADD stream * type .. data .. meta ..`` for every row of ``batch``, packed (with
    ``keys``: idempotent, see :mod:`.idempotent`).

    Row ``i`` gets producer id ``<producer_prefix>:<n>``, ``n`` being ``numbers[i]`` if
    given (rows picked out of a batch for one partition), else ``first + i``.
    """
    if numbers is None:
        numbers = row_numbers(batch, first)
    packed = _columnar(batch, encoder, stream, producer_prefix, numbers, keys)
    if packed is not None:
        return packed
    rows = zip(*(column.to_pylist() for column in batch.columns), strict=True)
    ns = numbers.to_pylist()
    fields = [
        encoder.encode(row, f"{producer_prefix}:{n}") for n, row in zip(ns, rows, strict=True)
    ]
    return keys.pack(stream, producer_prefix, ns, fields)


def row_numbers(batch: pa.RecordBatch, first: int) -> pa.Array:
    """``first``, ``first + 1``, ... for the rows of ``batch`` (a running sum of ones: no
    Python int per row)."""
    ones = pc.fill_null(pa.nulls(batch.num_rows, pa.int64()), 1)
    return pc.cumulative_sum(ones, start=first - 1)


def _columnar(
    batch: pa.RecordBatch,
    encoder: RowEncoder,
    stream: str,
    producer_prefix: str,
    numbers: pa.Array,
    keys: RowKeys = PLAIN,
) -> bytes | None:
    """The vectorised encoding, or None when this batch needs the per-row path (each row's
    number in ``numbers``, as in :func:`encode_batch`)."""
    if encoder.data_index >= 0 or encoder.meta_index >= 0 or batch.num_rows == 0:
        return None
    if encoder.transforming:  # each row's data compressed or encrypted: the per-row path
        return None
    type_values = _type_values(batch, encoder)
    if type_values is None:
        return None
    parts: list[Any] = []
    for n, (name, index) in enumerate(zip(encoder.payload_columns, encoder.payload_index,
                                          strict=True)):  # fmt: skip
        value = _json_values(batch.column(index))
        if value is None:
            return None
        parts += [("{" if n == 0 else ",") + json.dumps(name) + ":", value]
    data = pc.binary_join_element_wise(*parts, "}", "") if parts else pa.scalar("{}")
    # the prefix is made of IDs, digits and colons: nothing to escape
    meta = pc.binary_join_element_wise(
        '{"' + PRODUCER_ID + '":"' + producer_prefix + ":", pc.cast(numbers, pa.string()), '"}', ""
    )
    command = pc.binary_join_element_wise(
        *_head(keys, stream, producer_prefix, numbers),
        resp.bulk(b"type").decode(), *_bulk(type_values),
        resp.bulk(b"data").decode(), *_bulk(data),
        resp.bulk(b"meta").decode(), *_bulk(meta), "",
    )  # fmt: skip
    everything = pa.ListArray.from_arrays([0, len(command)], pc.cast(command, pa.binary()))
    return pc.binary_join(everything, b"")[0].as_py()  # type: ignore[no-any-return]


def _head(keys: RowKeys, stream: str, prefix: str, rows: pa.Array) -> list[Any]:
    """Each row's command up to its 6 field arguments, as :meth:`RowKeys.head` makes it."""
    options = keys.options
    if keys.mode == "plain":
        return [_array_header(3 + len(options)) + _bulks("XADD", stream, *options, "*")]
    numbers = pc.cast(rows, pa.string())
    if keys.mode == "idmp":
        run = pc.cast(pc.divide(rows, IDMP_ROWS), pa.string())  # integer division
        producer = pc.binary_join_element_wise(prefix + ":", run, "")
        head = _array_header(6 + len(options)) + _bulks("XADD", stream, *options, "IDMP")
        return [head, *_bulk(producer), *_bulk(numbers), _bulks("*")]
    record = pc.binary_join_element_wise(idempotency.record_key(stream, prefix + ":"), numbers, "")
    head = _array_header(7) + _bulks("EVALSHA", keys.sha, "2", stream)
    return [head, *_bulk(record), _bulks(str(WINDOW_MS), keys.script_flag)]


def _array_header(head_args: int) -> str:
    return f"*{head_args + 6}\r\n"  # and type, data, meta with their values


def _bulks(*args: str) -> str:
    return "".join(resp.bulk(a).decode() for a in args)


def _type_values(batch: pa.RecordBatch, encoder: RowEncoder) -> Any:
    if encoder.fixed_type is not None:
        return encoder.fixed_type.decode()
    column = batch.column(encoder.type_index)
    if not _is_string(column.type) or column.null_count:
        return None
    valid = pc.match_substring_regex(column, f"^{TYPE_PATTERN.pattern}$")
    return column if pc.all(valid).as_py() else None  # else: the row path names the bad one


def _json_values(column: pa.Array) -> Any:
    """Each value as JSON text, or None if this column needs the per-row path."""
    kind = column.type
    if not any(test(kind) for test in _SIMPLE):
        return None
    if _is_string(kind):
        if pc.any(pc.match_substring_regex(column, _CONTROL)).as_py():
            return None
        escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise('"', escaped, '"', "")
    else:
        if pa.types.is_floating(kind) and not pc.all(pc.is_finite(column)).as_py():
            return None  # NaN and infinities are not JSON
        text = pc.cast(column, pa.string())
    return pc.fill_null(text, "null")


def _bulk(values: Any) -> list[Any]:
    """RESP bulk string parts: ``$<byte length>\\r\\n<value>\\r\\n``."""
    if isinstance(values, str):
        return [resp.bulk(values).decode()]
    length = pc.cast(pc.binary_length(values), pa.string())
    return ["$", length, "\r\n", values, "\r\n"]


def _is_string(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))
