"""Stream entries -> Spark rows: raw rows as Arrow record batches, typed rows as tuples.

A partition is read with ``XRANGE`` in chunks, packed and parsed without redis-py's reply
callbacks (an entry stays the parser's flat ``[field, value, ...]`` list). Raw rows are
built column by column: the fields are gathered into lists of bytes, and UTF-8 checking,
the ``published_at`` timestamps and the type filter are Arrow kernels.

On a partitioned topic the ``id`` names the partition (``"3:<ms>-<seq>"``, as
``Message.id`` does) and a last column ``partition`` holds its index. On a topic with
priorities the ``id`` names the stream's index (a level's partitions after another's) and
the last two columns are the ``partition`` and the level, ``priority``.

An encoded ``data`` (an ``enc`` field: docs/reference/wire-format.md) is decoded:
decompressed, and decrypted with the keyring of option ``keyringEnv``, as are the
encrypted ``meta`` values. The column ``ver`` is the entry's schema version. A raw row
whose ``data`` cannot be decoded (no keyring, an unknown key, damage) has a null ``data``
and says why in ``meta["streamq_data_error"]``; a typed read fails naming the entry, as
for an entry that does not fit the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ..errors import MessageFormatError
from ..payload.display import shown_meta
from ..payload.keyring import Keyring
from ..payload.versions import entry_version
from ..payload.wire import ENC, KID, VER, StepFailed, decoded_data
from ..wire import resp
from ..wire.replies import standard_fields, usual_length
from ..wire.replies import text as _text
from .offsets import connect
from .options import ReadOptions

TRAILING = ("partition", "priority")  # the last columns' names, as many as a row has

XRANGE_CHUNK = 2000


def read_range(
    opts: ReadOptions, lo: str, hi: str, stream: str | None = None, partition: int | None = None,
    trailing: tuple[int, ...] | None = None,
) -> Iterator[Any]:  # fmt: skip
    """Rows of ``(lo, hi]`` of ``stream`` (default: the option's), which is stream
    ``partition`` of a partitioned topic (``trailing``: the values of the rows' last
    columns, default the partition): Arrow batches for raw rows, tuples for typed ones."""
    stream = stream or opts.stream
    keyring = opts.keyring()  # before connecting: a keyring that cannot be is the error
    client = connect(opts.url, stream)
    try:
        model = opts.model()
        cursor = f"({lo}" if lo != "0-0" else "-"
        while True:
            command = resp.pack("XRANGE", stream, cursor, hi, "COUNT", str(XRANGE_CHUNK))
            (rows,) = resp.execute_sync(client, command, 1)
            if not rows:
                return
            if model is None:
                yield arrow_batch(rows, opts.type, partition, keyring, trailing)
            else:
                yield from typed_rows(rows, opts.type, model, partition, keyring, trailing)
            if len(rows) < XRANGE_CHUNK:
                return
            cursor = "(" + _text(rows[-1][0])
    finally:
        client.close()


def _meta(raw: bytes | None) -> list[tuple[str, str]] | None:
    if not raw:
        return None
    import pydantic_core

    try:
        values = pydantic_core.from_json(raw)
    except ValueError:
        return [("streamq_invalid_meta", raw.decode("utf-8", "replace"))]
    if not isinstance(values, dict):
        return [("streamq_invalid_meta", raw.decode("utf-8", "replace"))]
    return [(str(k), str(v)) for k, v in values.items()]


class Entry:
    """The payload fields of one entry as sent (``[field, value, ...]``), ``data`` and
    ``meta`` decoded: the usual layouts (type, data, meta only) without building a dict."""

    __slots__ = ("data", "error", "kind", "meta", "ver")

    def __init__(self, flat: list[bytes], keyring: Keyring | None) -> None:
        kind, data, meta = standard_fields(flat)
        self.kind, self.data, self.meta = kind, data, meta
        self.ver: int | None = 1
        self.error: str | None = None
        if not _usual_layout(flat):  # ver, enc, kid or other fields
            pairs = iter(flat)
            self._decode(dict(zip(pairs, pairs, strict=True)), keyring)

    def _decode(self, fields: dict[bytes, bytes], keyring: Keyring | None) -> None:
        try:
            self.ver = entry_version(fields.get(VER))
        except StepFailed:
            self.ver = None
        try:
            if ENC in fields and self.data is not None:
                self.data = decoded_data(fields, self.data, keyring)
        except StepFailed as e:
            self.data, self.error = None, f"cannot decode ({e.step}): {e}"
        if keyring is not None and KID in fields and self.meta:
            self.meta, said = shown_meta(fields, keyring)
            self.error = self.error or said.get("meta_error")


def _usual_layout(flat: list[bytes]) -> bool:
    """Whether the fields are ``type``, ``data`` and maybe ``meta``, in that order (then
    maybe the publisher's marker, which a row does not show)."""
    n = usual_length(flat)
    if n not in (4, 6) or flat[0] != b"type" or flat[2] != b"data":
        return False
    return n == 4 or flat[4] == b"meta"


def _meta_of(entry: Entry) -> list[tuple[str, str]] | None:
    pairs = _meta(entry.meta)
    if entry.error is not None:
        pairs = [*(pairs or []), ("streamq_data_error", entry.error)]
    return pairs


def arrow_batch(
    rows: list[Any],
    type_filter: str | None,
    partition: int | None = None,
    keyring: Keyring | None = None,
    trailing: tuple[int, ...] | None = None,
) -> Any:
    """Columns id, type, data, meta, published_at, ver of ``rows`` (those of
    ``type_filter``), and ``partition`` for a partition of a partitioned topic (``trailing``:
    the values of the last columns, partition and priority, when not ``(partition,)``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids, types, datas, metas, vers = [], [], [], [], []
    for entry_id, flat in rows:
        entry = Entry(flat, keyring)
        ids.append(entry_id)
        types.append(entry.kind)
        datas.append(entry.data)
        metas.append(_meta_of(entry))
        vers.append(entry.ver)
    id_column = _text_column(ids)
    millis = pc.cast(pc.list_element(pc.split_pattern(id_column, "-"), 0), pa.int64())
    meta_type = pa.map_(pa.string(), pa.string())
    columns = [
        id_column if partition is None else pc.binary_join_element_wise(
            f"{partition}:", id_column, ""
        ),
        _text_column(types),
        _text_column(datas),
        pa.array(metas, meta_type) if any(metas) else pa.nulls(len(metas), meta_type),
        pc.cast(pc.multiply(millis, 1000), pa.timestamp("us", tz="UTC")),
        pa.array(vers, pa.int32()),
    ]  # fmt: skip
    names = ["id", "type", "data", "meta", "published_at", "ver"]
    for name, value in zip(TRAILING, _trailing(partition, trailing), strict=False):
        columns.append(pa.array([value] * len(ids), pa.int32()))
        names.append(name)
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    if type_filter is not None:
        batch = batch.filter(pc.fill_null(pc.equal(batch.column(1), type_filter), False))
    return batch


def _trailing(partition: int | None, trailing: tuple[int, ...] | None) -> tuple[int, ...]:
    """The values of a row's last columns (:data:`TRAILING`): ``trailing`` when given,
    else the partition's index (nothing for a plain stream)."""
    if trailing is not None:
        return trailing
    return () if partition is None else (partition,)


def _text_column(values: list[bytes | None]) -> Any:
    """UTF-8 bytes as a string column; undecodable bytes are replaced, as ``decode`` does."""
    import pyarrow as pa

    column = pa.array(values, pa.binary())
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8 somewhere: the slow path, per value
        return pa.array(
            [v.decode("utf-8", "replace") if v is not None else None for v in values], pa.string()
        )


def typed_rows(
    rows: list[Any],
    type_name: str | None,
    model: Any,
    partition: int | None = None,
    keyring: Keyring | None = None,
    trailing: tuple[int, ...] | None = None,
) -> Iterator[tuple[Any, ...]]:
    """Rows with ``data`` decoded, validated by ``model`` and spread into its fields'
    columns, then meta, published_at, ver (and the partition last, for a partition of a
    partitioned topic)."""
    wanted = type_name.encode() if type_name else None
    qualifier = "" if partition is None else f"{partition}:"
    extra = _trailing(partition, trailing)
    names = list(model.model_fields)
    for entry_id, flat in rows:
        entry = Entry(flat, keyring)
        if wanted is not None and entry.kind != wanted:
            continue
        text_id = _text(entry_id)
        if entry.error is not None:
            raise MessageFormatError(
                f"entry {qualifier}{text_id} of type {type_name!r}: {entry.error}; "
                "read without option('model') to see raw rows"
            )
        data = entry.data
        try:
            value = model.model_validate_json(data if data is not None else b"null")
        except ValueError as e:
            raise MessageFormatError(
                f"entry {qualifier}{text_id} of type {type_name!r} does not fit "
                f"{model.__name__}: {e}; "
                "read without option('model') to see raw rows"
            ) from e
        dumped = value.model_dump(mode="python")
        published = datetime.fromtimestamp(int(text_id.partition("-")[0]) / 1000, tz=UTC)
        pairs = _meta(entry.meta)
        yield (
            qualifier + text_id,
            type_name,
            *[dumped[n] for n in names],
            dict(pairs) if pairs else None,
            published,
            entry.ver,
            *extra,
        )
