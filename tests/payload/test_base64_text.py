"""The base64 text of encoded payloads is the same whichever encoder writes it: pybase64's
when installed (the extras that compress or encrypt install it), else the standard
library's. Each reads the other's text and both refuse the same malformed text, so
entries decode alike on every consumer, whatever it has installed."""

from __future__ import annotations

import base64
import os

import pytest

from streamq.payload.wire import Decode, Encode, StepFailed, base64_functions, from_text, to_text

BOTH = [pytest.param(False, id="stdlib"), pytest.param(True, id="pybase64")]
# lengths around every padding case, and a payload of the size the benchmark publishes
VALUES = [os.urandom(n) for n in (*range(0, 9), 255, 256, 257, 13_337)]
MALFORMED = [
    b"YQ", b"YQ=", b"Y", b"=", b"==", b"YQ===", b"YQ==YQ==", b"YW=j", b" YQ==", b"YQ==\n",
    b"{not base64}", b"-_-_", b"\xff\xfe", "é",
]  # fmt: skip


def _functions(fast: bool) -> tuple[Encode, Decode]:
    if fast:
        pytest.importorskip("pybase64")
    return base64_functions(fast=fast)


@pytest.mark.parametrize("fast", BOTH)
def test_both_write_the_standard_text_and_read_it_back(fast: bool) -> None:
    encode, decode = _functions(fast)
    for raw in VALUES:
        text = encode(raw)
        assert text == base64.b64encode(raw)
        assert decode(text) == raw
        assert decode(text.decode()) == raw  # meta values are read as str


@pytest.mark.parametrize("fast", BOTH)
@pytest.mark.parametrize("text", MALFORMED, ids=repr)
def test_both_refuse_malformed_text(fast: bool, text: bytes | str) -> None:
    _encode, decode = _functions(fast)
    with pytest.raises(ValueError):  # binascii.Error is a ValueError
        decode(text)


@pytest.mark.parametrize("text", MALFORMED, ids=repr)
def test_malformed_text_fails_the_base64_step(text: bytes | str) -> None:
    with pytest.raises(StepFailed) as failed:
        from_text(text)
    assert failed.value.step == "base64"


def test_the_wire_text_round_trips() -> None:
    for raw in VALUES:
        assert to_text(raw) == base64.b64encode(raw)
        assert from_text(to_text(raw)) == raw
