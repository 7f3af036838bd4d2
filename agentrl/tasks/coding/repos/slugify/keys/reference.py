"""The answer key of the slugify task: the reference implementation the random cases are checked
against. It never enters the workspace; the sandbox hands it to the test process alone."""

import re


def slugify(title):
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))
