"""``streamq compat OLD NEW``: the breaking changes between two AsyncAPI documents (made by
``streamq asyncapi``), one a line; exit 1 when there is one, 0 when none (a CI step before
a deploy: docs/guides/payloads.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..payload.compat import breaking_changes
from .outcome import EXIT_FAILED, EXIT_USAGE


def add_compat_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", help="the AsyncAPI document (JSON or YAML) of what runs now")
    p.add_argument("new", help="the AsyncAPI document of what is about to be deployed")


def cmd_compat(args: argparse.Namespace) -> int:
    try:
        old, new = _load(args.old), _load(args.new)
    except ValueError as e:
        print(f"streamq: {e}", file=sys.stderr)
        return EXIT_USAGE
    found = breaking_changes(old, new)
    for change in found:
        print(change)
    if found:
        print(f"{len(found)} breaking change(s)", file=sys.stderr)
        return EXIT_FAILED
    print("no breaking change")
    return 0


def _load(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml  # optional: only YAML documents need it

            document = yaml.safe_load(text)
        else:
            document = json.loads(text)
    except ImportError:
        raise ValueError(f"{path}: YAML needs PyYAML (pip install pyyaml), or use JSON") from None
    except ValueError as e:  # json's and yaml's errors (YAMLError is not one)
        raise ValueError(f"{path} is not JSON: {e}") from None
    except Exception as e:
        raise ValueError(f"{path} is not YAML: {e}") from None
    if not isinstance(document, dict) or "asyncapi" not in document:
        raise ValueError(f"{path} is not an AsyncAPI document (streamq asyncapi makes one)")
    return document
