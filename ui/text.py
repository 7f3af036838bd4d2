"""User-written text on a page, shown as typed: run names, task ids, verifier reasons, notes,
tags, error messages and URL parameters never become markdown.

pages -> **ui.text**. Streamlit renders every label, caption and message as markdown, where
`![x](http://host/x.png)` makes the browser fetch a URL, `[a](http://...)`, `<http://...>` and a
bare `http://...` or `www.` become links, and `:material/...:`, `:red[...]`, `$...$` and raw
HTML are drawn. `plain()` escapes each of them (and most emphasis), and leaves the rest of the text
alone so a message reads the same in its source; tests/ui/test_text.py renders the result in
Chromium and finds the text exactly as typed, with no image, link or icon.
"""

from __future__ import annotations

import re

# What starts a link, an image, HTML, math, code or * and ~ emphasis (not _, which paths and ids
# are full of, and which mid-word emphasises nothing); and a colon that could open an
# icon, an emoji or a directive (":material/home:", ":smile:", ":red[...]": a colon before a
# non-space). A colon before a space ("Starting: ...") starts nothing and is left as it is.
_MARKUP = re.compile(r"([\\`*~\[\]<>$]|:(?=\S))")
# Autolinks, icons and emoji shortcodes are found in text after escapes are read: a word joiner
# (U+2060, invisible) after a scheme, "www", "@" or such a colon keeps them from being recognised.
_AUTOLINK = re.compile(r"(?i)(https?|ftp|mailto|www|@|\\:)")
WORD_JOINER = "\u2060"


def plain(text) -> str:
    """`text` (any value: its str()) as markdown that Streamlit shows as the same characters."""
    escaped = _MARKUP.sub(r"\\\1", str(text))
    return _AUTOLINK.sub(lambda match: match.group(1) + WORD_JOINER, escaped)
