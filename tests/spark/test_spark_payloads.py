"""Encoded payloads through format("streamq") (a real local SparkSession): reads decode
``enc`` (decompressed; decrypted with the keyring of option ``keyringEnv``) and show each
entry's ``ver``; writes compress with option ``compression`` and encrypt with the keyring
of option ``keyringEnv``, as a queue does, so a queue with the keyring consumes them."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

import streamq.spark
from handlers.order_handler import Order
from streamq.payload.encoding import PayloadCodec
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for
from tests.payload.helpers import KEY1, keeping, keyring
from tests.spark.conftest import KEYRING_VARIABLE

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def reader(spark: Any, url: str, stream: str) -> Any:
    return spark.read.format("streamq").option("url", url).option("stream", stream)


def test_a_compressed_write_reads_back_decoded(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    df = spark.createDataFrame(
        [(f"o{i}", "c" * 2000, Decimal(i)) for i in range(3)],
        "order_id string, customer string, amount decimal(10,2)",
    )
    (df.write.format("streamq").option("url", redis_url).option("stream", stream)
     .option("type", "order").option("compression", "zstd").mode("append").save())  # fmt: skip
    entries = r.xrange(stream)
    assert [f[b"enc"] for _, f in entries] == [b"zstd"] * 3
    assert all(len(f[b"data"]) < 500 for _, f in entries), "not compressed"
    rows = reader(spark, redis_url, stream).load().orderBy("id").collect()
    assert [json.loads(row.data)["order_id"] for row in rows] == ["o0", "o1", "o2"]
    assert [row.ver for row in rows] == [1, 1, 1]
    streamq.spark.register(spark, models={"order": Order})
    typed = reader(spark, redis_url, stream).option("type", "order").load().orderBy("order_id")
    first = typed.collect()[0]
    assert (first.order_id, first.customer, first.ver) == ("o0", "c" * 2000, 1)


def test_encrypted_entries_decrypt_with_the_keyring_of_an_environment_variable(
    spark: Any, redis_url: str, stream: str, r: Any
) -> None:
    codec = PayloadCodec("zstd", compress_over=10, encryption=keyring(), encrypt_meta=["email"])
    order = Order(order_id="o1", customer="ada", amount=Decimal("1.50"))
    fields = codec.entry("order", order, meta={"email": "ada@example.org"})
    fields[b"ver"] = "2"
    r.xadd(stream, fields)
    sealed = reader(spark, redis_url, stream).option("keyringEnv", KEYRING_VARIABLE).load()
    (row,) = sealed.collect()
    assert Order.model_validate_json(row.data) == order and row.ver == 2
    assert row.meta == {"email": "ada@example.org"}
    (plain,) = reader(spark, redis_url, stream).load().collect()
    assert plain.data is None and plain.ver == 2
    assert plain.meta["streamq_data_error"] == (
        "cannot decode (aesgcm): encrypted with key 'k1', and no keyring was given here"
    )
    streamq.spark.register(spark, models={"order": Order})
    typed = reader(spark, redis_url, stream).option("type", "order").load()
    with pytest.raises(Exception, match=r"cannot decode \(aesgcm\): encrypted with key 'k1'"):
        typed.collect()


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("compression", "lz4", "option 'compression': compression must be None, 'zstd' or 'gzip'"),
        ("keyringEnv", "MTExMTEx+/=", r"not one \(not shown"),
        ("keyringEnv", "NO_SUCH_VARIABLE_HERE", "NO_SUCH_VARIABLE_HERE is not set"),
    ],
)
def test_payload_options_that_cannot_be_are_clear_errors(
    spark: Any, redis_url: str, stream: str, r: Any, option: str, value: str, said: str
) -> None:
    r.xadd(stream, {"type": "order", "data": "{}"})
    df = spark.createDataFrame([("o1",)], "order_id string")
    with pytest.raises(Exception, match=said) as raised:
        if option == "compression":
            (df.write.format("streamq").option("url", redis_url).option("stream", stream)
             .option("type", "order").option(option, value).mode("append").save())  # fmt: skip
        else:
            reader(spark, redis_url, stream).option(option, value).load().collect()
    assert "MTExMTEx" not in str(raised.value) and KEY1.decode() not in str(raised.value)


@pytest.mark.anyio
async def test_an_encrypted_write_is_consumed_by_a_queue_with_the_keyring(
    spark: Any, redis_url: str, stream: str, r: Any, make_queue: QueueFactory
) -> None:
    df = spark.createDataFrame(
        [("o1", "c" * 500, Decimal("1.50"), {"email": "ada@example.org", "lang": "fr"}),
         ("o2", "bob", Decimal("2.25"), {"lang": "en"})],
        "order_id string, customer string, amount decimal(10,2), meta map<string,string>",
    )  # fmt: skip
    (df.coalesce(1).write.format("streamq").option("url", redis_url).option("stream", stream)
     .option("type", "order").option("keyringEnv", KEYRING_VARIABLE)
     .option("encryptMeta", "email").option("compression", "zstd")
     .option("compressOver", "100").mode("append").save())  # fmt: skip
    big, small = (fields for _, fields in r.xrange(stream))
    assert (big[b"enc"], small[b"enc"]) == (b"zstd+aesgcm", b"aesgcm")
    assert big[b"kid"] == small[b"kid"] == b"k1"
    assert b"ccc" not in big[b"data"] and b"bob" not in small[b"data"]
    meta = json.loads(big[b"meta"])
    assert meta["email"].startswith("aesgcm:") and meta["lang"] == "fr"
    assert "streamq_producer_id" in meta
    consumer = make_queue(encryption=keyring())
    handled = keeping(consumer, "order")
    async with consumer.running():
        await wait_for(lambda: len(handled) == 2, what="2 orders handled")
    first, second = sorted(handled, key=lambda m: m.data["order_id"])
    assert Order.model_validate(first.data) == Order(order_id="o1", customer="c" * 500,
                                                     amount=Decimal("1.50"))  # fmt: skip
    assert second.data["customer"] == "bob"
    assert first.meta["email"] == "ada@example.org" and first.meta["lang"] == "fr"
    read = reader(spark, redis_url, stream).option("keyringEnv", KEYRING_VARIABLE).load()
    assert sorted(json.loads(row.data)["order_id"] for row in read.collect()) == ["o1", "o2"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"keyringEnv": "NO_SUCH_VARIABLE_HERE"}, r"NO_SUCH_VARIABLE_HERE is not set.*encrypt"),
        ({"encryptMeta": "email"}, "option 'encryptMeta' needs option 'keyringEnv'"),
        ({"keyringEnv": "MTExMTEx+/="}, r"not one \(not shown"),
    ],
)
def test_encrypted_writes_that_cannot_be_are_clear_errors(
    spark: Any, redis_url: str, stream: str, r: Any, options: dict[str, str], said: str
) -> None:
    df = spark.createDataFrame([("o1",)], "order_id string")
    writer = df.write.format("streamq").option("url", redis_url).option("stream", stream)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=said):
        writer.option("type", "order").mode("append").save()
    assert r.xlen(stream) == 0, "nothing written unencrypted"
