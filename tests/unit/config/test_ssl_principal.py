"""ssl.principal.mapping.rules replayed on Kafka's own test vectors (SslPrincipalMapperTest),
and certificate subjects named as Java 17's X500Principal.getName() names them (the expected
strings are that method's output for the same certificates)."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from config.ssl_principal import NoMatchingRule, SslPrincipalMapper, distinguished_name

A = x509.NameAttribute


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_the_first_matching_rule_names_the_principal() -> None:
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
            "/DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
        ),
    ],
)
def test_rules_are_split_as_kafka_splits_them(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper(rules)) == expected


def test_an_escaped_comma_in_a_name() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_a_back_reference_past_the_groups_is_literal() -> None:
    """Kafka's escapeLiteralBackReferences: $4 with three groups is the text "$4"."""
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$4/")
    assert mapper.name("CN=a,OU=b,O=c") == "a@$4"


def test_classes_are_ascii_as_in_java() -> None:
    """Java's \\w is [a-zA-Z_0-9]: a name with other letters falls through to DEFAULT."""
    mapper = SslPrincipalMapper("RULE:^CN=(\\w+),OU=apps$/$1/, DEFAULT")
    assert mapper.name("CN=jose,OU=apps") == "jose"
    assert mapper.name("CN=josé,OU=apps") == "CN=josé,OU=apps"


def test_a_name_no_rule_matches_fails() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x")


def certificate(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )


@pytest.mark.parametrize(
    ("subject", "java"),
    [
        (
            [
                A(NameOID.COUNTRY_NAME, "US"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "MD"),
                A(NameOID.LOCALITY_NAME, "Fulton"),
                A(NameOID.ORGANIZATION_NAME, "mycp"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "SME"),
                A(NameOID.COMMON_NAME, "Duke"),
            ],
            "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US",
        ),
        (
            [A(NameOID.ORGANIZATION_NAME, 'a=b+c;d<e>"f\\g'), A(NameOID.COMMON_NAME, "Tkac, Adam")],
            'CN=Tkac\\, Adam,O=a\\=b\\+c\\;d\\<e\\>\\"f\\\\g',
        ),
        (
            [
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "  two lead"),
                A(NameOID.COMMON_NAME, "#hash trail  "),
            ],
            "CN=\\#hash trail\\ \\ ,OU=\\ \\ two lead",
        ),
        (
            [
                A(NameOID.COMMON_NAME, "svc"),
                A(NameOID.EMAIL_ADDRESS, "svc@example.com"),
                A(NameOID.SERIAL_NUMBER, "42"),
            ],
            "2.5.4.5=#13023432,1.2.840.113549.1.9.1=#160f737663406578616d706c652e636f6d,CN=svc",
        ),
        (
            [
                x509.RelativeDistinguishedName([A(NameOID.DOMAIN_COMPONENT, "com")]),
                x509.RelativeDistinguishedName([A(NameOID.DOMAIN_COMPONENT, "example")]),
                x509.RelativeDistinguishedName(
                    [A(NameOID.USER_ID, "u1"), A(NameOID.COMMON_NAME, "app")]
                ),
            ],
            "CN=app+UID=u1,DC=example,DC=com",
        ),
        (
            [
                A(NameOID.COMMON_NAME, "Zoë Müller", _type=_ASN1Type.UTF8String),
                A(NameOID.ORGANIZATION_NAME, "Bmp", _type=_ASN1Type.BMPString),
            ],
            "O=\\00B\\00m\\00p,CN=Zoë Müller",  # Java reads a BMPString's octets as UTF-8
        ),
    ],
)
def test_a_subject_is_named_as_java_names_it(
    subject: list[x509.NameAttribute[str]] | list[x509.RelativeDistinguishedName], java: str
) -> None:
    assert distinguished_name(certificate(x509.Name(subject))) == java
