"""Text helpers."""

import re


def slugify(title):
    """Lower-case words joined by single hyphens: 'Hello, World!' -> 'hello-world'."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))
