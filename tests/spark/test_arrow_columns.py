"""Arrow columns both ways: the writer's column-wise encoding says exactly what the row
path says, and entries read back become the right columns.

No SparkSession here: Arrow batches go to the encoder and the packed XADD commands are
read back with a RESP parser; reply rows go to the reader's batch builder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow", reason="the Arrow writer needs the [spark] extra")

import hiredis  # noqa: E402  (a dependency of redis[hiredis])

from streamq.errors import MessageFormatError  # noqa: E402
from streamq.spark import arrow_encoding  # noqa: E402
from streamq.spark.idempotent import RowKeys  # noqa: E402
from streamq.spark.options import WriteOptions  # noqa: E402
from streamq.spark.writing import RowEncoder  # noqa: E402
from streamq.wire import resp  # noqa: E402

pytestmark = pytest.mark.spark


def options(**kw: Any) -> WriteOptions:
    base: dict[str, Any] = dict(url="", stream="s", type="email", type_column="type",
                                data_column=None, meta_column="meta", chunk=1000)  # fmt: skip
    return WriteOptions(**{**base, **kw})


def commands(packed: bytes) -> list[list[bytes]]:
    reader = hiredis.Reader()
    reader.feed(packed)
    out = []
    while (command := reader.gets()) is not False:
        out.append(command)
    return out


def row_path(batch: Any, encoder: RowEncoder, prefix: str, first: int) -> list[list[bytes]]:
    rows = zip(*(column.to_pylist() for column in batch.columns), strict=True)
    fields = [encoder.encode(row, f"{prefix}:{first + i}") for i, row in enumerate(rows)]
    return commands(resp.pack_xadds("s", fields)[0])


def decoded(command: list[bytes]) -> tuple[Any, ...]:
    """XADD s * type T data D meta M -> (head, type, parsed data, parsed meta)."""
    assert command[:3] == [b"XADD", b"s", b"*"] and command[3::2] == [b"type", b"data", b"meta"]
    return command[4], json.loads(command[6]), json.loads(command[8])


def test_columnar_encoding_matches_the_row_path(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = pa.RecordBatch.from_pydict({
        "to": ['quote " and backslash \\', "unicode é ü 漢", None, ""],
        "n": [1, -2, None, 2**53],
        "x": [0.0, 1.5, 1e20, None],
        "ok": [True, False, None, True],
    })  # fmt: skip
    encoder = RowEncoder(options(), batch.schema.names)
    columnar = arrow_encoding._columnar(
        batch, encoder, "s", "job:7:1", arrow_encoding.row_numbers(batch, 10)
    )
    assert columnar is not None, "this batch should not need the per-row path"
    got, want = commands(columnar), row_path(batch, encoder, "job:7:1", 10)
    assert [decoded(c) for c in got] == [decoded(c) for c in want]
    assert decoded(got[3])[2] == {"streamq_producer_id": "job:7:1:13"}


@pytest.mark.parametrize(
    "keys", [RowKeys("idmp"), RowKeys("script", "ab" * 20)], ids=["idmp", "script"]
)
def test_idempotent_commands_are_the_same_both_ways(keys: RowKeys) -> None:
    """Rows 150..153 of a task: the same head (IDMP producer and ID, or the script's
    record key) whether packed by Arrow kernels or row by row."""
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3, 4]})
    encoder = RowEncoder(options(), batch.schema.names)
    numbers = pa.array([150, 151, 152, 153], pa.int64())
    columnar = arrow_encoding._columnar(batch, encoder, "s", "job:7:1", numbers, keys)
    assert columnar is not None
    rows = [encoder.encode((n,), f"job:7:1:{150 + i}") for i, n in enumerate([1, 2, 3, 4])]
    assert commands(columnar) == commands(keys.pack("s", "job:7:1", [150, 151, 152, 153], rows))
    first = commands(columnar)[0]
    if keys.mode == "idmp":  # producer: a run of 100 rows; ID: the row
        assert first[:6] == [b"XADD", b"s", b"IDMP", b"job:7:1:1", b"150", b"*"]
    else:  # the fallback script's record of the row's name, for an hour
        assert first[:7] == [b"EVALSHA", b"ab" * 20, b"2", b"s", b"streamq:{s}:idmp:job:7:1:150",
                             b"3600000", b""]  # fmt: skip


@pytest.mark.parametrize(
    "column",
    [
        ["line\nbreak", "tab\there"],  # control characters: JSON escapes them per row
        [float("nan"), 1.0],  # NaN is not JSON: the row path writes null
        [{"a": 1}, {"a": 2}],  # nested values
    ],
)
def test_batches_the_kernels_cannot_encode_take_the_row_path(column: list[Any]) -> None:
    batch = pa.RecordBatch.from_pydict({"v": column})
    encoder = RowEncoder(options(), batch.schema.names)
    numbers = arrow_encoding.row_numbers(batch, 0)
    assert arrow_encoding._columnar(batch, encoder, "s", "p", numbers) is None
    packed = arrow_encoding.encode_batch(batch, encoder, "s", "p", 0)
    assert [decoded(c) for c in commands(packed)] == [
        decoded(c) for c in row_path(batch, encoder, "p", 0)
    ]


def test_type_column_is_validated() -> None:
    opts = options(type=None)
    good = pa.RecordBatch.from_pydict({"type": ["email", "sms"], "v": [1, 2]})
    encoder = RowEncoder(opts, good.schema.names)
    packed = arrow_encoding.encode_batch(good, encoder, "s", "p", 0)
    assert [c[4] for c in commands(packed)] == [b"email", b"sms"]
    bad = pa.RecordBatch.from_pydict({"type": ["email", "not a type!"], "v": [1, 2]})
    with pytest.raises(MessageFormatError, match="not a type!"):
        arrow_encoding.encode_batch(bad, encoder, "s", "p", 0)


def test_entries_become_arrow_columns_whatever_their_field_layout() -> None:
    from streamq.spark.rows import arrow_batch

    rows = [
        [b"1700000000123-0", [b"type", b"email", b"data", b'{"a":1}']],
        [b"1700000000124-5", [b"type", b"sms", b"data", b"2", b"meta", b'{"k":"v"}']],
        [b"1700000000125-0", [b"data", b'"x"', b"extra", b"1", b"type", b"email"]],
        [b"1700000000126-0", [b"type", b"email", b"data", b"\xff not utf-8"]],
        [b"1700000000127-0", [b"data", b"3"]],  # a foreign entry with no type
    ]
    batch = arrow_batch(rows, None)
    assert batch.column("id").to_pylist()[1] == "1700000000124-5"
    assert batch.column("type").to_pylist() == ["email", "sms", "email", "email", None]
    assert batch.column("data").to_pylist() == ['{"a":1}', "2", '"x"', "\ufffd not utf-8", "3"]
    assert batch.column("meta").to_pylist() == [None, [("k", "v")], None, None, None]
    published = batch.column("published_at").to_pylist()
    assert published[0].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    only_email = arrow_batch(rows, "email")
    assert only_email.column("id").to_pylist() == [
        "1700000000123-0", "1700000000125-0", "1700000000126-0"
    ]  # fmt: skip


def test_encoded_entries_are_decoded_and_say_their_version() -> None:
    from streamq.payload.encoding import PayloadCodec
    from streamq.spark.rows import arrow_batch
    from tests.payload.helpers import keyring

    ring = keyring()
    zipped = PayloadCodec("zstd", compress_over=10).entry("order", {"n": "x" * 50})
    sealed = PayloadCodec(encryption=ring, encrypt_meta=["email"]).entry(
        "order", {"n": 2}, meta={"email": "ada@example.org"}
    )
    sealed[b"ver"] = "2"

    def flat(fields: dict[Any, Any]) -> list[bytes]:
        return [v if isinstance(v, bytes) else v.encode() for pair in fields.items() for v in pair]

    rows = [
        [b"1700000000123-0", flat(zipped)],
        [b"1700000000124-0", flat(sealed)],
        [b"1700000000125-0", [b"type", b"order", b"data", b"eA==", b"enc", b"lz4"]],
        [b"1700000000126-0", [b"type", b"order", b"data", b"1", b"ver", b"two"]],
    ]
    batch = arrow_batch(rows, None, keyring=ring)
    assert batch.column("data").to_pylist() == ['{"n":"' + "x" * 50 + '"}', '{"n":2}', None, "1"]
    assert batch.column("ver").to_pylist() == [1, 2, 1, None]
    metas = batch.column("meta").to_pylist()
    assert metas[1] == [("email", "ada@example.org")]
    assert metas[2] == [("streamq_data_error", "cannot decode (enc): unknown encoding 'lz4' in "
                                               "enc 'lz4' (known: zstd, gzip, aesgcm)")]  # fmt: skip
    without = arrow_batch(rows[1:2], None)
    assert without.column("data").to_pylist() == [None]
    (error,) = [v for k, v in without.column("meta").to_pylist()[0] if k == "streamq_data_error"]
    assert error == "cannot decode (aesgcm): encrypted with key 'k1', and no keyring was given here"
