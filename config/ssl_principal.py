"""Principals from client certificates, as a Kafka broker names them (issue 16).

Kafka's DefaultKafkaPrincipalBuilder names an SSL client `User:` + its certificate's subject
as Java's X500Principal.getName() writes it (RFC 2253), passed through the rules of
ssl.principal.mapping.rules (SslPrincipalMapper): `RULE:pattern/replacement/[LU]` and
`DEFAULT`, the first rule whose pattern matches the whole name wins, and a name no rule
matches fails the client's authentication. Both halves are here, because the rules are
written against exactly that string: every escape and attribute keyword of Java's form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.name import _ASN1Type

# SslPrincipalMapper.RULE_PATTERN and its splitter, as Java's regex engine reads them
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule names this certificate: Kafka fails the client's authentication."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None = None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        replacement = _literal_back_references(self.replacement, self.pattern.groups)
        result = self.pattern.sub(lambda m: _java_replacement(replacement, m), name)
        if self.lower:
            return result.lower()
        return result.upper() if self.upper else result

    def __str__(self) -> str:
        """Kafka's Rule.toString, which its own tests of rule splitting compare."""
        if self.pattern is None:
            return "DEFAULT"
        flag = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


class SslPrincipalMapper:
    """ssl.principal.mapping.rules; an invalid rule raises ValueError naming it, as Kafka's
    constructor does."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        parsed = [_parse(rule) for rule in _split(rules)]
        self.rules = [rule for rule in parsed if rule is not None]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self}")

    def __str__(self) -> str:
        return "[" + ", ".join(str(rule) for rule in self.rules) + "]"


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _SPLITTER.finditer(rules.strip())]


def _parse(rule: str) -> _Rule | None:
    match = _PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`")
    if match.group(1) is not None:
        return _Rule()
    if match.group(2) is None:
        return None  # empty rules are ignored
    try:
        # Java's \w, \d, \s and (?i) are ASCII unless a pattern asks otherwise
        pattern = re.compile(match.group(2), re.ASCII)
    except re.error as exc:
        raise ValueError(f"Invalid rule: {rule}: {exc}") from exc
    flag = match.group(6)
    return _Rule(pattern, match.group(4), flag == "L", flag == "U")


def _literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's escapeLiteralBackReferences: `$n` past the pattern's groups is literal text
    (a number that is too large first loses its last digits). Kafka finds the references in
    the replacement as written and inserts at those offsets into the text it is changing,
    so a second escape lands one place early per escape before it: kept, as Kafka does."""
    if groups == 0:
        return replacement
    value = replacement
    for match in _BACK_REFERENCE.finditer(replacement):
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher.appendReplacement: `$n` takes as many digits as still name a group,
    and a backslash makes the next character literal."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$":
            if i + 1 == len(replacement) or not replacement[i + 1].isdigit():
                raise ValueError(f"Illegal group reference in {replacement!r}")
            group, i = int(replacement[i + 1]), i + 2
            while i < len(replacement) and replacement[i].isdigit():
                wider = group * 10 + int(replacement[i])
                if wider > match.re.groups:
                    break
                group, i = wider, i + 1
            if group > match.re.groups:
                raise ValueError(f"No group {group}")
            out.append(match.group(group) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


#: the attribute keywords Java's RFC 2253 form writes; every other attribute is written as
#: its OID with the value's DER in hex
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: the string types Java writes as text (AVA.isDerString, not canonical)
_TEXT_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
#: how each string type's content octets carry its characters
_CODECS = {0x1E: "utf-16-be", 0x1C: "utf-32-be"}
_ESCAPED = ',=+<>#;"\\'


def distinguished_name(certificate_der: bytes) -> str:
    """A certificate's subject as Java's X500Principal.getName() writes it (RFC 2253): the
    last RDN first, multi-valued RDNs joined by '+' in their order."""
    subject = x509.load_der_x509_certificate(certificate_der).subject
    return ",".join(
        "+".join(_attribute(attribute) for attribute in rdn) for rdn in reversed(subject.rdns)
    )


def _attribute(attribute: x509.NameAttribute[str | bytes]) -> str:
    oid = attribute.oid.dotted_string
    # cryptography keeps the value's ASN.1 string type only here, and Java's form needs it
    tag = attribute._type.value if isinstance(attribute._type, _ASN1Type) else 0x0C
    value = attribute.value
    content = value if isinstance(value, bytes) else value.encode(_CODECS.get(tag, "utf-8"))
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _TEXT_TAGS:
        return f"{keyword or oid}=#{_der(tag, content).hex()}"
    # Java reads every text type's content octets as UTF-8 (a BMPString's too), then escapes
    text = "".join(_escaped(c) for c in content.decode("utf-8", "replace"))
    lead = len(text) - len(text.lstrip(" \r"))
    trail = len(text.rstrip(" \r"))
    return f"{keyword}=" + "".join(
        f"\\{c}" if i < lead or i >= trail else c for i, c in enumerate(text)
    )


def _escaped(c: str) -> str:
    if c in _ESCAPED:
        return f"\\{c}"
    return "\\00" if c == "\x00" else c


def _der(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content
