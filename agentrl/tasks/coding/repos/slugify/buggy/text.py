"""Text helpers."""


def slugify(title):
    """Lower-case words joined by single hyphens: 'Hello, World!' -> 'hello-world'."""
    return title.strip().lower().replace(" ", "-")
