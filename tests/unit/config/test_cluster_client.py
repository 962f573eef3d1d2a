"""The proxy's own client: SASL's client side on the RFCs' vectors, secrets read from where
the config points, and a [cluster] section that never holds or shows a password."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import load_config
from config.secrets import Secret, SecretError
from protocol.errors import ProtocolError
from protocol.sasl_client import SaslClient


def test_scram_sha_256_follows_rfc_7677s_example() -> None:
    client = SaslClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.next_token(None) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.next_token(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert client.next_token(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.done


def test_a_server_that_cannot_prove_the_password_is_refused() -> None:
    client = SaslClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.next_token(None)
    client.next_token(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(ProtocolError, match="does not verify"):
        client.next_token(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    other = SaslClient("SCRAM-SHA-512", "a,b=c", "x", nonce="n")
    assert other.next_token(None) == b"n,,n=a=2Cb=3Dc,r=n"  # Kafka's saslname escapes
    with pytest.raises(ProtocolError, match="unexpected SCRAM"):
        other.next_token(b"r=someone-elses-nonce,s=AA==,i=1")
    plain = SaslClient("PLAIN", "kqp", "secret")
    assert plain.next_token(None) == b"\0kqp\0secret"
    assert plain.next_token(b"") is None and plain.done


def test_secrets_are_read_from_the_environment_a_properties_file_or_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KQP_TEST_SECRET", "from-env")
    assert Secret("${env:KQP_TEST_SECRET}").value() == "from-env"
    properties = tmp_path / "cluster.properties"
    properties.write_text("# the proxy's own credentials\nusername = kqp\npassword = s3cr=t\n")
    assert Secret(f"${{file:{properties}:password}}").value() == "s3cr=t"
    mounted = tmp_path / "credentials"  # a Kubernetes Secret mounted as a volume
    mounted.mkdir()
    (mounted / "password").write_text("s3cr=t # not a comment\n")
    assert Secret(f"${{directory:{mounted}:password}}").value() == "s3cr=t # not a comment"
    for reference, problem in (
        ("${env:KQP_NOT_SET}", "the environment variable KQP_NOT_SET is not set"),
        (f"${{file:{properties}:missing}}", "has no key 'missing'"),
        (f"${{file:{tmp_path / 'none'}:password}}", "cannot read"),
        (f"${{directory:{mounted}:username}}", "cannot read"),
        (f"${{directory:{mounted}:../credentials/password}}", "is not a file name"),
    ):
        with pytest.raises(SecretError, match=problem):
            Secret(reference).value()


def test_a_cluster_section_refuses_literal_secrets_without_showing_them(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(
        '[cluster]\nsecurity.protocol = "SASL_PLAINTEXT"\nsasl.mechanism = "GSSAPI"\n'
        'sasl.password = "hunter2"\nssl.key.password = "hunter3"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "hunter2" not in text and "hunter3" not in text
    assert f"{path}: [cluster] key 'sasl.password': write where the secret is" in text
    assert f"{path}: [cluster] key 'ssl.key.password': write where the secret is" in text
    assert "[cluster] key 'sasl.mechanism': expected one of PLAIN, SCRAM-SHA-256" in text
    assert "[cluster] key 'sasl.username': required with SASL" in text


def test_without_a_cluster_section_the_proxys_client_is_upstreams_without_sasl(
    tmp_path: Path,
) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text("[proxy]\nbootstrap_port = 19192\n")
    cluster = load_config(path).cluster
    assert not cluster.configured and not cluster.sasl
    assert cluster.aiokafka_options() == {"security_protocol": "PLAINTEXT", "ssl_context": None}
    sasl_upstream = tmp_path / "sasl.toml"
    sasl_upstream.write_text(
        '[upstream]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
        '[listener]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
        '[usage]\nkafka_topic = "usage"\n'
    )
    with pytest.raises(ConfigError, match=r"give it some in \[cluster\]"):
        load_config(sasl_upstream)
