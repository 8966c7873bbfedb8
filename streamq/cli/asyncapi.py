"""``streamq asyncapi module:attr``: print the AsyncAPI 3.0 document of a queue or App
(:mod:`streamq._asyncapi`), as JSON or, with ``--yaml``, as YAML (needs PyYAML)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._asyncapi import asyncapi_document
from ..errors import ConfigError
from ..wire.urls import redact
from .outcome import EXIT_FAILED, EXIT_USAGE


def add_asyncapi_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="module:attr, a MessageQueue, an App or a function returning one")
    p.add_argument("--yaml", action="store_true", help="YAML instead of JSON (needs PyYAML)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--app-dir", default=".", help="where to import the module from (.)")
    p.add_argument("--title", help="the document's title (default: the App's name or target)")


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from ..run.target import load_target  # imports the App machinery only for this command

    try:
        app = load_target(args.target, args.app_dir)
        text = _render(asyncapi_document(app, title=args.title or _title(app.name)), args.yaml)
    except ConfigError as e:
        print(f"streamq: {redact(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as e:  # a local file: not the server's fault
            print(f"streamq: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
            return EXIT_FAILED
    else:
        sys.stdout.write(text)
    return 0


def _render(document: dict[str, object], as_yaml: bool) -> str:
    if not as_yaml:
        return json.dumps(document, indent=2) + "\n"
    try:
        import yaml  # optional: only --yaml needs it
    except ImportError:
        raise ConfigError("--yaml needs PyYAML: pip install pyyaml (or leave --yaml out)") from None
    return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))


def _title(name: str) -> str:
    return name if name != "streamq" else "streamq service"
