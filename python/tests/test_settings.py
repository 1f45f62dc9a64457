"""mlcd.Settings and the token and PEM files: read as mlcdctl reads them, refused with the
setting named (python/src/mlcd/settings.py)."""
import dataclasses

import grpc
import pytest

import mlcd
from mlcd.settings import MAX_TOKEN_CHARS, MIN_TOKEN_CHARS, read_pem

TOKEN = "abcdefghijklmnop0123"  # 20 printable characters


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def test_defaults():
    s = mlcd.Settings()
    assert (s.coordinator, s.labelstore) == ("127.0.0.1:7600", "127.0.0.1:7610")
    assert (s.tls_ca, s.tls_cert, s.tls_key, s.token_file, s.token) == (None,) * 5
    assert s.timeout == 30.0 and s.insecure is False
    assert not s.tls and not s.has_token and s.bearer_token() is None


def test_from_env_reads_every_variable():
    env = {"MLCD_COORDINATOR": "coord:1", "MLCD_LABELSTORE": "store:2", "MLCD_TLS_CA": "ca.pem",
           "MLCD_TLS_CERT": "c.pem", "MLCD_TLS_KEY": "k.pem", "MLCD_TOKEN_FILE": "token",
           "MLCD_INSECURE_TOKEN": "1", "MLCD_UNRELATED": "x"}
    s = mlcd.Settings.from_env(env)
    assert s == mlcd.Settings(coordinator="coord:1", labelstore="store:2", tls_ca="ca.pem",
                              tls_cert="c.pem", tls_key="k.pem", token_file="token",
                              insecure=True)


def test_from_env_empty_variables_count_as_unset():
    s = mlcd.Settings.from_env({"MLCD_COORDINATOR": "", "MLCD_TLS_CA": "", "MLCD_TOKEN_FILE": ""})
    assert s == mlcd.Settings()


@pytest.mark.parametrize("value", ["0", "", "true", "yes", "01", " 1"])
def test_from_env_insecure_only_by_one(value):
    assert mlcd.Settings.from_env({"MLCD_INSECURE_TOKEN": value}).insecure is False


def test_from_env_keyword_arguments_win():
    env = {"MLCD_COORDINATOR": "coord:1", "MLCD_TOKEN_FILE": "token", "MLCD_INSECURE_TOKEN": "1"}
    s = mlcd.Settings.from_env(env, coordinator="other:3", token_file=None, insecure=False,
                               timeout=2.5)
    assert (s.coordinator, s.token_file, s.insecure, s.timeout) == ("other:3", None, False, 2.5)


def test_from_env_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("MLCD_COORDINATOR", "from-os:7600")
    monkeypatch.setenv("MLCD_LABELSTORE", "")
    s = mlcd.Settings.from_env()
    assert s.coordinator == "from-os:7600" and s.labelstore == "127.0.0.1:7610"


def test_from_env_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError):
        mlcd.Settings.from_env({}, coordinatr="x:1")


@pytest.mark.parametrize("fields,tls", [
    ({}, False), ({"tls_ca": "ca.pem"}, True), ({"tls_cert": "c.pem", "tls_key": "k.pem"}, True),
    ({"tls_cert": "c.pem"}, True), ({"tls_key": "k.pem"}, False), ({"tls_ca": ""}, False)])
def test_tls_is_on_with_a_ca_or_a_certificate(fields, tls):
    assert mlcd.Settings(**fields).tls is tls


def test_settings_are_frozen_and_replace_copies():
    s = mlcd.Settings(coordinator="a:1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.coordinator = "b:2"
    t = s.replace(coordinator="b:2", token_file="t")
    assert (s.coordinator, s.token_file) == ("a:1", None)
    assert (t.coordinator, t.token_file) == ("b:2", "t")


def test_has_token_does_not_read_the_file():
    assert mlcd.Settings(token_file="/nonexistent/token").has_token
    assert mlcd.Settings(token=TOKEN).has_token


def test_bearer_token_prefers_the_token_over_the_file(tmp_path):
    path = write(tmp_path, "token", "zyxwvutsrqponmlk9876\n")
    assert mlcd.Settings(token_file=path).bearer_token() == "zyxwvutsrqponmlk9876"
    assert mlcd.Settings(token=TOKEN, token_file=path).bearer_token() == TOKEN
    assert mlcd.Settings(token=TOKEN, token_file="/nonexistent").bearer_token() == TOKEN


@pytest.mark.parametrize("token", ["short", "a" * (MIN_TOKEN_CHARS - 1),
                                   "a" * (MAX_TOKEN_CHARS + 1), "abcdefgh ijklmnop",
                                   "abcdefghijklmnop\x7f", "abcdefghijklmnopé"])
def test_bearer_token_refuses_a_bad_token(token):
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.Settings(token=token).bearer_token()
    assert e.value.field_path == "token"
    assert f"{MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} printable characters" in e.value.message


@pytest.mark.parametrize("length", [MIN_TOKEN_CHARS, MAX_TOKEN_CHARS])
def test_token_length_bounds_are_inclusive(tmp_path, length):
    token = ("0123456789abcdef" * 20)[:length]
    assert mlcd.Settings(token=token).bearer_token() == token
    assert mlcd.read_token_file(write(tmp_path, "t", token)) == token


@pytest.mark.parametrize("text", [TOKEN, f"\n  {TOKEN}  \n", f"\t{TOKEN}\r\n"])
def test_read_token_file_ignores_white_space_around(tmp_path, text):
    assert mlcd.read_token_file(write(tmp_path, "token", text)) == TOKEN


@pytest.mark.parametrize("data,why", [
    (b"", "one token"), (b"  \n\n", "one token"), (f"{TOKEN} {TOKEN}".encode(), "one token"),
    (f"{TOKEN}\nsecond-line-here".encode(), "one token"), (b"short", "printable characters"),
    (b"a" * (MAX_TOKEN_CHARS + 1), "printable characters"),
    (b"abcdefghijklmnop\xff\xfe", "printable characters"),
    (b"a" * (MAX_TOKEN_CHARS * 4 + 10), "printable characters")])
def test_read_token_file_refuses_anything_but_one_token(tmp_path, data, why):
    path = write(tmp_path, "token", data)
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.read_token_file(path)
    err = e.value
    assert err.field_path == "MLCD_TOKEN_FILE" and err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert path in err.message and why in err.message


def test_read_token_file_missing_names_the_file(tmp_path):
    path = str(tmp_path / "absent")
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.read_token_file(path)
    assert e.value.field_path == "MLCD_TOKEN_FILE"
    assert f"{path}: cannot read it (No such file or directory)" in e.value.message


def test_bearer_token_from_a_bad_file_names_the_variable(tmp_path):
    with pytest.raises(mlcd.ConfigError) as e:
        mlcd.Settings(token_file=write(tmp_path, "t", "two words")).bearer_token()
    assert e.value.field_path == "MLCD_TOKEN_FILE"


def test_read_pem(tmp_path):
    pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert read_pem(write(tmp_path, "ca.pem", pem), "tls_ca") == pem
    assert read_pem(None, "tls_ca") is None and read_pem("", "tls_ca") is None


def test_read_pem_refusals_name_the_setting(tmp_path):
    with pytest.raises(mlcd.ConfigError) as e:
        read_pem(write(tmp_path, "ca.pem", b"not a certificate\n"), "tls_ca")
    assert e.value.field_path == "tls_ca" and "not a PEM file" in e.value.message
    with pytest.raises(mlcd.ConfigError) as e:
        read_pem(str(tmp_path / "absent.pem"), "tls_key")
    assert e.value.field_path == "tls_key" and "cannot read it" in e.value.message

