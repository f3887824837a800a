"""MkDocs hook: links from a docs page to the repository's files outside docs/ (`../bench/RESULTS.md`,
`../config/settings.py`), written so that they work on GitHub, and checked here too: a target that does not
exist is a warning, which `mkdocs build --strict` turns into a failure. In the built site a mirrored file
(bench/RESULTS.md, which the site includes as a page of its own) is linked to its page; any other repository
file becomes its path as code, since an offline site has no copy of the source tree to link to."""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.repo_links")
MIRRORED = ("bench/RESULTS.md",)  # repository files the site includes as pages, at the same path
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files, config, **_):
    for path in MIRRORED:
        files.append(File.generated(config, path, abs_src_path=str(_root(config) / path)))
    return files


def on_page_markdown(markdown: str, page, config, **_) -> str:
    docs = Path(config.docs_dir).resolve()
    root = _root(config)
    here = (docs / page.file.src_uri).parent

    def rewrite(match: re.Match) -> str:
        text, target = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target) or page.file.generated_by:
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = Path(posixpath.normpath((here / path).as_posix()))
        if resolved.is_relative_to(docs):
            return match.group(0)  # a docs page: MkDocs checks it
        if not resolved.is_relative_to(root) or not resolved.exists():
            log.warning(f"Doc file '{page.file.src_uri}' links to '{target}', which is not in the repository")
            return match.group(0)
        rel = resolved.relative_to(root).as_posix()
        if rel in MIRRORED:
            url = posixpath.relpath(rel, posixpath.dirname(page.file.src_uri) or ".")
            return f"[{text}]({url}{'#' + anchor if anchor else ''})"
        return text if text.startswith("`") else f"`{text}`"

    fenced = [(m.start(), m.end()) for m in FENCE.finditer(markdown)]
    out, last = [], 0
    for start, end in fenced:  # links inside code blocks are left as they are
        out.append(LINK.sub(rewrite, markdown[last:start]))
        out.append(markdown[start:end])
        last = end
    out.append(LINK.sub(rewrite, markdown[last:]))
    return "".join(out)
