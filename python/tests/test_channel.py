"""The transport rule and the channels' TLS settings (python/src/mlcd/channel.py): a token goes
only over TLS, or in plaintext to a loopback address with ``insecure``; incomplete or unreadable
TLS files are refused before anything connects. Making a channel connects to nothing, so none
of these needs a server."""
import re
import shutil
import subprocess
import warnings

import grpc
import pytest

import mlcd
from mlcd.channel import (call_metadata, check_plaintext_token, is_loopback_address,
                          make_channel)

TOKEN = "abcdefghijklmnop0123"


@pytest.mark.parametrize("address", [
    "127.0.0.1:7600", "127.0.0.2:1", "127.255.255.254:65535", "localhost:7610", "[::1]:7600"])
def test_loopback_addresses(address):
    assert is_loopback_address(address)


@pytest.mark.parametrize("address", [
    "192.0.2.1:7600", "10.0.0.1:7600", "0.0.0.0:7600", "mlcd-coordinator:7600",
    "localhost.example:7600", "[::2]:7600", "[::ffff:192.0.2.1]:7600", "::1:7600",
    "127.0.0.1", "127.0.0.1:", ":7600", "127.0.0.1:port", "dns:///127.0.0.1:7600",
    "ipv4:127.0.0.1:7600", "unix:/tmp/mlcd.sock", "[::1]", ""])
def test_not_loopback_addresses(address):
    assert not is_loopback_address(address)


def test_no_token_goes_anywhere_in_plaintext():
    check_plaintext_token("192.0.2.1:7600", mlcd.Settings())


def test_a_token_with_tls_passes_the_rule():
    check_plaintext_token("192.0.2.1:7600", mlcd.Settings(tls_ca="ca.pem", token=TOKEN))
    check_plaintext_token("192.0.2.1:7600", mlcd.Settings(tls_cert="c", tls_key="k",
                                                          token_file="t"))


@pytest.mark.parametrize("settings", [mlcd.Settings(token=TOKEN),
                                      mlcd.Settings(token_file="/nonexistent/token")])
def test_a_token_in_plaintext_to_loopback_needs_insecure(settings):
    with pytest.raises(mlcd.ConfigError) as e:
        check_plaintext_token("127.0.0.1:7610", settings)
    err = e.value
    assert err.field_path == "tls_ca" and err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "in plaintext to 127.0.0.1:7610" in err.message
    assert "insecure=True" in err.message and "MLCD_INSECURE_TOKEN=1" in err.message


@pytest.mark.parametrize("address", ["192.0.2.1:7610", "mlcd-labelstore:7610",
                                     "dns:///127.0.0.1:7610", "[::2]:7610"])
@pytest.mark.parametrize("insecure", [False, True])
def test_a_token_in_plaintext_off_loopback_is_refused_even_with_insecure(address, insecure):
    with pytest.raises(mlcd.ConfigError) as e:
        check_plaintext_token(address, mlcd.Settings(token=TOKEN, insecure=insecure))
    assert e.value.field_path == "tls_ca"
    assert "only to a loopback address" in e.value.message and address in e.value.message


@pytest.mark.parametrize("address", ["127.0.0.1:7610", "localhost:7610", "[::1]:7610"])
def test_insecure_on_loopback_warns(address):
    with pytest.warns(RuntimeWarning, match=re.escape(f"in plaintext to loopback address {address}")):
        check_plaintext_token(address, mlcd.Settings(token=TOKEN, insecure=True))


def test_call_metadata():
    assert call_metadata(TOKEN) == (("authorization", f"Bearer {TOKEN}"),)
    assert call_metadata(None) == () and call_metadata("") == ()


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory):
    """A self-signed certificate and its key, made by the openssl tool (scripts/setup.sh
    installs it), as the CA bundle and the client certificate."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl tool is needed to make the certificates (apt-get install openssl)")
    folder = tmp_path_factory.mktemp("pem")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=mlcd-pytest", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def test_make_channel_plaintext_without_a_token():
    channel = make_channel("192.0.2.1:7600", mlcd.Settings())
    assert isinstance(channel, grpc.Channel)
    channel.close()


def test_make_channel_with_tls(pem_files):
    cert, key = pem_files
    for settings in (mlcd.Settings(tls_ca=cert, token=TOKEN),
                     mlcd.Settings(tls_ca=cert, tls_cert=cert, tls_key=key, token=TOKEN),
                     mlcd.Settings(tls_cert=cert, tls_key=key)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no plaintext warning: the token goes over TLS
            channel = make_channel("192.0.2.1:7600", settings)
        assert isinstance(channel, grpc.Channel)
        channel.close()


@pytest.mark.parametrize("given,missing", [("tls_cert", "tls_key"), ("tls_key", "tls_cert")])
def test_make_channel_certificate_and_key_come_together(pem_files, given, missing):
    cert, key = pem_files
    settings = mlcd.Settings(tls_ca=cert, **{given: cert if given == "tls_cert" else key})
    with pytest.raises(mlcd.ConfigError) as e:
        make_channel("127.0.0.1:7600", settings)
    assert e.value.field_path == missing
    assert f"set {missing} (MLCD_{missing.upper()}) too" in e.value.message


@pytest.mark.parametrize("setting", ["tls_ca", "tls_cert", "tls_key"])
def test_make_channel_refuses_an_unreadable_or_non_pem_file(tmp_path, pem_files, setting):
    cert, key = pem_files
    fields = {"tls_ca": cert, "tls_cert": cert, "tls_key": key}
    fields[setting] = str(tmp_path / "absent.pem")
    with pytest.raises(mlcd.ConfigError) as e:
        make_channel("127.0.0.1:7600", mlcd.Settings(**fields))
    assert e.value.field_path == setting and "cannot read it" in e.value.message
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("plain text\n")
    fields[setting] = str(not_pem)
    with pytest.raises(mlcd.ConfigError) as e:
        make_channel("127.0.0.1:7600", mlcd.Settings(**fields))
    assert e.value.field_path == setting and "not a PEM file" in e.value.message


def test_client_applies_the_rule_to_the_coordinator_before_connecting():
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.Client(coordinator="192.0.2.1:7600", token=TOKEN, insecure=True)
    assert "only to a loopback address" in e.value.message
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.Client(token=TOKEN)
    assert e.value.field_path == "tls_ca"


def test_client_reads_the_environment_and_its_token_file_once(monkeypatch, tmp_path):
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    monkeypatch.setenv("MLCD_COORDINATOR", "127.0.0.1:1")
    monkeypatch.setenv("MLCD_TOKEN_FILE", str(token))
    monkeypatch.setenv("MLCD_INSECURE_TOKEN", "1")
    with pytest.warns(RuntimeWarning, match=re.escape("in plaintext to loopback address 127.0.0.1:1")):
        client = mlcd.Client(timeout=3)
    token.unlink()  # read when the client was made, not at each call
    with client:
        assert client.settings == mlcd.Settings(coordinator="127.0.0.1:1", token_file=str(token),
                                                insecure=True, timeout=3)
        assert client._metadata == (("authorization", f"Bearer {TOKEN}"),)


def test_client_overrides_apply_to_given_settings():
    with mlcd.Client(mlcd.Settings(coordinator="127.0.0.1:1"), timeout=4) as client:
        assert (client.settings.coordinator, client.settings.timeout) == ("127.0.0.1:1", 4)


def test_client_refuses_a_bad_token_file_before_connecting(tmp_path):
    token = tmp_path / "token"
    token.write_text("two words")
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.Client(token_file=str(token))
    assert e.value.field_path == "MLCD_TOKEN_FILE"
