#!/usr/bin/env python3
"""Runs kosoku with one fix to its vendored Autobahn cases 12.x/13.x.

Those cases (py2-era) hash and `.decode()` the echoed message, which kosoku
hands to `onMessage` as `str` for text messages (every text case -- 12.1,
12.4, all of 13 -- would die with "Strings must be encoded before hashing"
before looking at what the server sent), and also as `str`, one character
per byte, for binary messages that arrived uncompressed (RSV1 clear, as a
server may send any message). Turning the `str` back into the bytes it
stands for (UTF-8 for text, Latin-1 -- byte value = code point -- for
binary) restores the py2 behaviour, where both arrived as bytes; nothing
else is changed. Arguments are kosoku's.
"""
import sys

from kosoku import _caseindex
from kosoku._cli import main


def _bytes_for_text(on_message):
    def patched(self, msg, binary):
        if isinstance(msg, str):
            msg = msg.encode("latin-1" if binary else "utf-8")
        return on_message(self, msg, binary)

    return patched


def patch_compression_cases():
    _caseindex.initialize_shims()
    import case12_x_x  # on sys.path once the shims are initialised

    for cls in case12_x_x.Case12_X_X + case12_x_x.Case13_X_X:
        cls.onMessage = _bytes_for_text(cls.onMessage)


if __name__ == "__main__":
    patch_compression_cases()
    sys.argv[0] = "kosoku"
    sys.exit(main())
