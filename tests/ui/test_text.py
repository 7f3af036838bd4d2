"""ui.text.plain: user text in a markdown message shows as typed. What Chromium draws from it
is checked on the real pages by tests/app/test_browser_security.py
(test_user_text_full_of_images_and_links_fetches_nothing)."""

from __future__ import annotations

import re

import pytest

from ui.text import WORD_JOINER, plain

HOSTILE = [
    "![x](http://203.0.113.7/x.png)",
    "[link](http://203.0.113.7/l)",
    "<img src=http://203.0.113.7/y.png>",
    "<http://203.0.113.7/a>",
    ":material/home: :red[red] :smile: :red-badge[b]",
    "see http://203.0.113.7/auto, www.example.com or a@b.example",
    "$x^2$ **bold** _it_ ~~gone~~ `code`",
]


def _unescaped(markdown: str) -> str:
    """What CommonMark makes of backslash escapes, without the invisible word joiners."""
    return re.sub(r"\\(.)", r"\1", markdown).replace(WORD_JOINER, "")


@pytest.mark.parametrize("text", HOSTILE)
def test_the_text_reads_back_exactly_as_typed(text):
    assert _unescaped(plain(text)) == text


@pytest.mark.parametrize("text", HOSTILE)
def test_nothing_in_it_can_open_a_link_an_image_html_an_icon_or_math(text):
    markdown = plain(text)
    unescaped_openers = re.findall(r"(?<!\\)[\[\]<>$`*~]", markdown)
    assert unescaped_openers == []
    # a scheme, www, an address or a colon before a word is broken by a word joiner
    assert not re.search(r"(?i)(https?|www|@)(?!\u2060)", markdown)
    assert not re.search(r":(?!\u2060)\S", markdown.replace("\\:", ":"))


def test_plain_prose_keeps_its_words():
    assert plain("Starting: loading the model") == "Starting: loading the model"
    assert plain(42) == "42"
