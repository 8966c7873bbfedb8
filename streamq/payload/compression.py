"""Compression of ``data``: ``zstd`` (the ``zstandard`` package, extra ``[zstd]``) and
``gzip`` (the standard library).

Decompression is bounded (:data:`MAX_DECODED_BYTES`): a small entry that would expand to
gigabytes is refused, not decoded into memory. A truncated or corrupted payload raises
:class:`StepFailed`, which the reader turns into a dead letter naming the step.
"""

from __future__ import annotations

import os
import zlib
from typing import Any, Final

from ..errors import ConfigError
from .wire import COMPRESSIONS, StepFailed

# The most a compressed payload may expand to: far above what a stream entry should hold
# (Redis refuses arguments over 512 MB), low enough that one entry cannot exhaust memory.
MAX_DECODED_BYTES: Final = 64 * 1024 * 1024
GZIP_LEVEL: Final = 6
# Level 1, not zstd's default 3: on 10 KB JSON payloads it compressed 17% faster to a size 1%
# larger (bench/payloads.py's orders: 0.217 of the JSON against 0.215).
ZSTD_LEVEL: Final = 1
# publish_many compresses its payloads together on this many threads (one call into zstd,
# which runs them without the GIL): 10 KB orders took 20 µs each on two threads against 27
# on one and 30 one call each, on a 2-core machine whose server was idle meanwhile
COMPRESS_THREADS: Final = max(1, min(4, os.cpu_count() or 1))


def _zstandard() -> Any:
    """The ``zstandard`` module, or ImportError naming the extra that installs it."""
    try:
        import zstandard
    except ImportError:
        raise ImportError("zstd needs the zstandard package: pip install 'streamq[zstd]'") from None
    return zstandard


def check_compression(compression: object, compress_over: object) -> Any:
    """``compression`` if it is None, ``"zstd"`` or ``"gzip"`` (with the package zstd
    needs installed) and ``compress_over`` a non-negative int; else ConfigError."""
    if compression is not None and compression not in COMPRESSIONS:
        raise ConfigError(f"compression must be None, 'zstd' or 'gzip', got {compression!r}")
    if isinstance(compress_over, bool) or not isinstance(compress_over, int) or compress_over < 0:
        raise ConfigError(f"compress_over must be a number of bytes >= 0, got {compress_over!r}")
    if compression == "zstd":
        try:
            _zstandard()
        except ImportError as e:
            raise ConfigError(f"compression='zstd': {e} (or use compression='gzip')") from None
    return compression


class _Zstd:
    """One compressor and one decompressor per process (neither holds state between
    calls of ``compress``/``decompress``)."""

    def __init__(self) -> None:
        zstandard = _zstandard()
        self.error = zstandard.ZstdError
        self._frame_content_size = zstandard.frame_content_size
        self._compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._decompressor = zstandard.ZstdDecompressor()

    def compress(self, raw: bytes) -> bytes:
        return bytes(self._compressor.compress(raw))

    def compress_many(self, raws: list[bytes]) -> list[bytes]:
        """Each of ``raws`` compressed (a frame each, in order), on several threads."""
        frames = self._compressor.multi_compress_to_buffer(raws, threads=COMPRESS_THREADS)
        return [frames[i].tobytes() for i in range(len(frames))]

    def decompress(self, packed: bytes) -> bytes:
        try:
            # a frame that declares its size is decoded to that size whatever the bound:
            # refused first when it declares too much
            declared = self._frame_content_size(packed)
            if declared > MAX_DECODED_BYTES:
                raise StepFailed("zstd", f"expands to more than {MAX_DECODED_BYTES} bytes")
            return bytes(
                self._decompressor.decompress(
                    packed, max_output_size=MAX_DECODED_BYTES, allow_extra_data=False
                )
            )
        except self.error as e:
            raise StepFailed("zstd", f"not valid zstd data ({e})") from None


_zstd: _Zstd | None = None


def _zstd_codec() -> _Zstd:
    global _zstd
    if _zstd is None:
        try:
            _zstd = _Zstd()
        except ImportError as e:
            raise StepFailed("zstd", str(e)) from None
    return _zstd


def _gzip_compress(raw: bytes) -> bytes:
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: the gzip container
    return packer.compress(raw) + packer.flush()


def _gzip_decompress(packed: bytes) -> bytes:
    unpacker = zlib.decompressobj(31)
    try:
        raw = unpacker.decompress(packed, MAX_DECODED_BYTES)
    except zlib.error as e:
        raise StepFailed("gzip", f"not valid gzip data ({e})") from None
    if unpacker.unconsumed_tail:
        raise StepFailed("gzip", f"expands to more than {MAX_DECODED_BYTES} bytes")
    if not unpacker.eof:
        raise StepFailed("gzip", "truncated gzip data")
    if unpacker.unused_data:
        raise StepFailed("gzip", "data after the end of the gzip stream")
    return raw


def compress(name: str, raw: bytes) -> bytes:
    """``raw`` compressed with ``name`` (``"zstd"`` or ``"gzip"``)."""
    if name == "zstd":
        return _zstd_codec().compress(raw)
    return _gzip_compress(raw)


def compress_many(name: str, raws: list[bytes]) -> list[bytes]:
    """Each of ``raws`` compressed with ``name``, in order: zstd's together (one call, on
    :data:`COMPRESS_THREADS` threads), gzip's one by one."""
    if name == "zstd" and len(raws) > 1:
        return _zstd_codec().compress_many(raws)
    return [compress(name, raw) for raw in raws]


def decompress(name: str, packed: bytes) -> bytes:
    """``packed`` decompressed with ``name``; StepFailed if it is not whole, valid data."""
    if name == "zstd":
        return _zstd_codec().decompress(packed)
    return _gzip_decompress(packed)
