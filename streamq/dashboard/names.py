"""Stream and group names in the pages' forms, encoded so that any name comes back as it
was.

A stream or group name may hold any character, NUL, CR and LF included. A browser does
not send such a value back from a form as the page held it: the HTML parser turns NUL into
U+FFFD and CR into LF, and a submitted form turns every line break into CR LF. So the
dashboard's forms carry names as base64url of their UTF-8 bytes, in the fields
``stream64`` and ``group64``, decoded here. Links need no such thing: a name in a query
string is percent-encoded (:func:`~.render.href`), which a browser keeps as it is.

Scripts may send the plain fields ``stream`` and ``group`` as before; an encoded field
wins over a plain one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from starlette.exceptions import HTTPException

ENCODED = "64"  # suffix of an encoded field's name: stream64, group64


def encoded(name: str) -> str:
    """``name`` as a form carries it: base64url of its UTF-8 bytes, without padding."""
    raw = name.encode("utf-8", "surrogatepass")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decoded(text: str, field: str) -> str:
    """The name a form's field ``field`` carries encoded; 400 if it is not one."""
    try:
        padded = text + "=" * (-len(text) % 4)
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
        return raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        message = f"the {field!r} given is not a name encoded by the dashboard"
        raise HTTPException(400, message) from e


def name_in(values: Mapping[str, object], field: str) -> str | None:
    """The name in ``field`` of a form or query string: its encoded form
    (``<field>64``) if given, else the plain one; None if neither is given or empty."""
    text = values.get(field + ENCODED)
    if isinstance(text, str) and text:
        return decoded(text, field + ENCODED)
    plain = values.get(field)
    return plain if isinstance(plain, str) and plain else None
