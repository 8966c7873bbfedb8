"""The Spark source and sink refuse what the rest of streamq refuses (stream names with
braces) and write meta as publishing does (a map of strings to strings)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import streamq.spark
from streamq.errors import ConfigError
from streamq.spark.options import ReadOptions, WriteOptions
from tests.helpers.clients import sync_client

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

BRACED = ["orders{1}", "a{b", "b}"]
REFUSED = r"option 'stream' .* contains '\{' or '\}'"


@pytest.mark.parametrize("name", BRACED)
def test_options_refuse_stream_names_with_braces(name: str) -> None:
    options = {"url": "redis://127.0.0.1:1/0", "stream": name}
    with pytest.raises(ConfigError, match=REFUSED):
        ReadOptions.parse(options, {})
    with pytest.raises(ConfigError, match=REFUSED):
        WriteOptions.parse(options)


def test_reads_and_writes_refuse_a_stream_name_with_braces(spark: Any, redis_url: str) -> None:
    streamq.spark.register(spark)
    with pytest.raises(Exception, match=REFUSED):
        spark.read.format("streamq").option("url", redis_url).option(
            "stream", "orders{1}"
        ).load().collect()
    with pytest.raises(Exception, match=REFUSED):
        spark.readStream.format("streamq").option("url", redis_url).option(
            "stream", "orders{1}"
        ).load()
    df = spark.createDataFrame([("x",)], "note string")
    with pytest.raises(Exception, match=REFUSED):
        df.write.format("streamq").option("url", redis_url).option("stream", "orders{1}").option(
            "type", "note"
        ).mode("append").save()


def test_null_meta_values_are_left_out(spark: Any, redis_url: str, stream: str) -> None:
    streamq.spark.register(spark)
    df = spark.createDataFrame(
        [("a", {"source": "crm", "region": None}), ("b", None)],
        "note string, meta map<string,string>",
    )
    df.write.format("streamq").option("url", redis_url).option("stream", stream).option(
        "type", "note"
    ).mode("append").save()
    with sync_client(redis_url, stream) as r:
        entries = r.xrange(stream)
    metas = {json.loads(f[b"data"])["note"]: json.loads(f[b"meta"]) for _, f in entries}
    assert {k: v for k, v in metas["a"].items() if k != "streamq_producer_id"} == {
        "source": "crm"
    }, metas["a"]
    assert list(metas["b"]) == ["streamq_producer_id"], metas["b"]
