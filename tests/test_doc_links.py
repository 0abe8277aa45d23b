# SPDX-License-Identifier: MIT
"""Every link into a section of the docs or README (file.md#anchor) names a heading that exists, by the
anchors GitHub makes of headings (lower case, punctuation dropped, spaces to hyphens): a renamed heading or a
moved path in one breaks the links silently otherwise."""

import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))) + [
    os.path.join(REPO, "README.md")
]


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_section_link_names_a_heading():
    anchors = {
        f: {anchor(h) for h in re.findall(r"(?m)^#+ (.*)$", open(f).read())}
        for f in FILES
    }
    broken = []
    for f in FILES:
        for target, name in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", open(f).read()):
            path = (
                os.path.normpath(os.path.join(os.path.dirname(f), target))
                if target
                else f
            )
            if path in anchors and name not in anchors[path]:
                broken.append(f"{os.path.relpath(f, REPO)} -> {target}#{name}")
    assert sum(len(a) for a in anchors.values()) > 100  # the headings were read
    assert broken == []


def test_the_readme_keeps_to_one_screenful_of_sections():
    # the README is the first screen and the commands; details live in docs/ (at most 250 lines)
    lines = open(os.path.join(REPO, "README.md")).read().splitlines()
    assert 100 < len(lines) <= 250, len(lines)
