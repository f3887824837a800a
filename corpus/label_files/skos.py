"""SKOS vocabularies (Turtle, N-Triples or RDF/XML), read through rdflib: each skos:Concept is a label.

id = the concept's URI (an Annif corpus names its subjects so: corpus/files.py); name = its skos:prefLabel in the
chosen language (English by default), else a language-less one, else the first by language tag; alt_labels = its
skos:altLabel in that language or none; description = its skos:definition, else its skos:scopeNote; broader =
skos:broader, and the inverse of skos:narrower. A parse error names FILE:LINE; a concept without a prefLabel, a
broader concept the file does not define, and a broader cycle name the concept's URI.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from xtag.models.errors import XtagError
from xtag.models.label_texts import LabelText, LabelTexts

RDF_SUFFIXES = (".ttl", ".n3", ".nt", ".rdf", ".owl", ".xml", ".skos")
SYNTAX_BY_SUFFIX = {".ttl": "turtle", ".n3": "turtle", ".nt": "nt", ".rdf": "xml", ".owl": "xml", ".xml": "xml"}


def rdf_syntax(head: bytes) -> str | None:
    """ "xml" or "turtle" when the file's first bytes look like RDF/XML or Turtle, else None."""
    head = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith((b"<?xml", b"<rdf:RDF")):
        return "xml"
    if head[:8].lower().startswith((b"@prefix", b"@base", b"prefix", b"base")):
        return "turtle"
    return None


def read_skos(path: Path, language: str = "en") -> LabelTexts:
    """The file's concepts, sorted by URI (a graph has no order); `language` chooses among the labels."""
    import rdflib  # imported here: only a SKOS file needs it
    from rdflib.namespace import RDF, SKOS

    data = _read_bytes(path)
    name = path.name.lower().removesuffix(".gz")
    syntax = SYNTAX_BY_SUFFIX.get(Path(name).suffix) or rdf_syntax(data) or "turtle"
    graph = rdflib.Graph()
    try:
        graph.parse(data=data, format=syntax)
    except Exception as exc:  # (rdflib's parsers raise SyntaxError, SAXParseException, ValueError, ...)
        raise XtagError(f"{path}{_where(exc)}: not valid {_SYNTAX_NAMES[syntax]} ({_why(exc)})") from exc
    concepts = sorted(set(graph.subjects(RDF.type, SKOS.Concept)), key=str)
    known = {str(c) for c in concepts}
    broader: dict[str, set[str]] = {str(c): set() for c in concepts}
    for concept, parent in graph.subject_objects(SKOS.broader):
        broader.setdefault(str(concept), set()).add(str(parent))
    for parent, concept in graph.subject_objects(SKOS.narrower):
        broader.setdefault(str(concept), set()).add(str(parent))
    labels = []
    for concept in concepts:
        uri = str(concept)
        if not isinstance(concept, rdflib.URIRef):
            raise XtagError(f"{path}: a skos:Concept without a URI (a blank node); a label needs one as its id")
        chosen = _best(graph.objects(concept, SKOS.prefLabel), language)
        if chosen is None:
            raise XtagError(f"{path}: concept <{uri}> has no skos:prefLabel")
        lang = chosen.language
        alts = sorted({str(a) for a in graph.objects(concept, SKOS.altLabel) if a.language in (lang, None)})
        notes = _best(graph.objects(concept, SKOS.definition), language) or _best(
            graph.objects(concept, SKOS.scopeNote), language
        )
        outside = sorted(broader.get(uri, set()) - known)
        if outside:
            raise XtagError(
                f"{path}: concept <{uri}> has broader <{outside[0]}>, which is not a skos:Concept of the file"
            )
        description = None if notes is None else str(notes)
        labels.append(LabelText(uri, str(chosen), description, tuple(alts), tuple(sorted(broader[uri]))))
    if not labels:
        raise XtagError(f"{path}: no skos:Concept in the file")
    return LabelTexts(labels, source=str(path))  # a broader cycle is refused there, naming its concepts' URIs


_SYNTAX_NAMES = {"turtle": "Turtle", "nt": "N-Triples", "xml": "RDF/XML"}


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError) as exc:
        raise XtagError(f"{path}: cannot read the label file ({exc})") from exc


def _best(literals, language: str):
    """The literal to show: in `language` (or a regional variant of it), else without a language, else the first
    by language tag and text; None when there is none. Only literals: a URI as a label is no label."""
    import rdflib

    found = [x for x in literals if isinstance(x, rdflib.Literal) and str(x).strip()]

    def rank(x) -> tuple:
        tag = (x.language or "").lower()
        return (0 if tag.split("-")[0] == language else 1 if not tag else 2, tag, str(x))

    return min(found, key=rank, default=None)


def _where(exc: Exception) -> str:
    """`:LINE` of a parse error, where the parser says it (rdflib's Turtle parser counts lines from 0)."""
    line = getattr(exc, "getLineNumber", None)
    if callable(line):
        return f":{line()}"
    lines = getattr(exc, "lines", None)
    return f":{lines + 1}" if isinstance(lines, int) else ""


def _why(exc: Exception) -> str:
    why = getattr(exc, "_why", None) or getattr(exc, "getMessage", lambda: None)() or str(exc)
    return str(why).strip().splitlines()[0] if str(why).strip() else type(exc).__name__
