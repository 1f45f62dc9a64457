"""Where the services are and how to prove who we are: the same settings, with the same
environment variables and meaning, as ``mlcdctl`` (client/main.cc, common/security.h).

=================  ======================  ===============================================
field              environment             meaning
=================  ======================  ===============================================
coordinator        ``MLCD_COORDINATOR``    coordinator ``HOST:PORT`` (127.0.0.1:7600)
labelstore         ``MLCD_LABELSTORE``     label store ``HOST:PORT`` (127.0.0.1:7610)
tls_ca             ``MLCD_TLS_CA``         PEM CA bundle the servers are verified with;
                                           TLS is on when it is set
tls_cert           ``MLCD_TLS_CERT``       PEM certificate presented to the servers (mTLS)
tls_key            ``MLCD_TLS_KEY``        its private key (with ``tls_cert``)
token_file         ``MLCD_TOKEN_FILE``     file holding the bearer token sent with every
                                           call: the token alone, white space around it
                                           ignored, 16 to 256 printable characters
insecure           ``MLCD_INSECURE_TOKEN`` ``True`` (the variable ``1``): without TLS, send
                                           the token in plaintext anyway, to a loopback
                                           address only (mlcdctl ``--insecure``)
=================  ======================  ===============================================

An empty variable counts as unset. As in mlcdctl, a certificate without a CA still means
TLS (the servers are then verified against the system's roots), never plaintext. A token
goes only over TLS: without it, making a channel with a token raises :class:`ConfigError`,
unless ``insecure`` and the address is a loopback host (127.0.0.0/8, ``::1``,
``localhost``).
``mlcdctl local up`` writes all of them to ``<dir>/env``.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from .errors import ConfigError

__all__ = ["Settings", "read_token_file", "DEFAULT_COORDINATOR", "DEFAULT_LABELSTORE"]

DEFAULT_COORDINATOR = "127.0.0.1:7600"
DEFAULT_LABELSTORE = "127.0.0.1:7610"
# A token's length bounds (common/tokens.h: kMinTokenChars, kMaxTokenChars).
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 256
# Deadline of unary calls, seconds (mlcdctl --timeout).
DEFAULT_TIMEOUT_SECONDS = 30.0

_ENV = {"coordinator": "MLCD_COORDINATOR", "labelstore": "MLCD_LABELSTORE",
        "tls_ca": "MLCD_TLS_CA", "tls_cert": "MLCD_TLS_CERT", "tls_key": "MLCD_TLS_KEY",
        "token_file": "MLCD_TOKEN_FILE"}


@dataclass(frozen=True)
class Settings:
    """Connection settings; :meth:`from_env` reads them as mlcdctl does."""

    coordinator: str = DEFAULT_COORDINATOR
    """Coordinator address, ``HOST:PORT``."""
    labelstore: str = DEFAULT_LABELSTORE
    """Label store address, ``HOST:PORT`` (label-set reads)."""
    tls_ca: Optional[str] = None
    """PEM CA bundle; TLS is on when set."""
    tls_cert: Optional[str] = None
    """PEM client certificate (mTLS), with ``tls_key``."""
    tls_key: Optional[str] = None
    """Private key of ``tls_cert``."""
    token_file: Optional[str] = None
    """File holding the bearer token (``token`` wins when both are set)."""
    token: Optional[str] = None
    """The bearer token itself."""
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Deadline of each unary call, seconds."""
    insecure: bool = False
    """Without TLS, send the token in plaintext to a loopback address (never elsewhere)."""

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **overrides) -> "Settings":
        """Settings from ``MLCD_*`` variables (``os.environ`` by default); keyword arguments
        (the field names) win over the environment."""
        env = os.environ if environ is None else environ
        values = {}
        for field, var in _ENV.items():
            if env.get(var):
                values[field] = env[var]
        if env.get("MLCD_INSECURE_TOKEN") == "1":
            values["insecure"] = True
        values.update({k: v for k, v in overrides.items()})
        return cls(**values)

    @property
    def tls(self) -> bool:
        """Whether calls use TLS (a CA or a client certificate is set)."""
        return bool(self.tls_ca or self.tls_cert)

    @property
    def has_token(self) -> bool:
        """Whether a token is configured (``token`` or ``token_file``), read or not."""
        return bool(self.token or self.token_file)

    def bearer_token(self) -> Optional[str]:
        """The token to send: ``token``, else the one in ``token_file``, else ``None``."""
        if self.token:
            _check_token(self.token, "token")
            return self.token
        if self.token_file:
            return read_token_file(self.token_file)
        return None

    def replace(self, **changes) -> "Settings":
        """A copy with ``changes`` applied (e.g. another token file)."""
        return dataclasses.replace(self, **changes)


def _check_token(token: str, setting: str, where: str = "") -> None:
    if not (MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS) or not all(
            0x20 < ord(c) < 0x7F for c in token):
        raise ConfigError(setting, f"{where}must be one token of {MIN_TOKEN_CHARS} to "
                          f"{MAX_TOKEN_CHARS} printable characters without spaces")


def read_token_file(path: str) -> str:
    """The token a token file holds (the token alone; white space around it ignored).
    :class:`ConfigError` naming ``MLCD_TOKEN_FILE`` when it cannot be read or is not one token."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOKEN_CHARS * 4 + 1)
    except OSError as e:
        raise ConfigError("MLCD_TOKEN_FILE", f"{path}: cannot read it ({e.strerror})") from None
    words = data.decode("ascii", errors="replace").split()
    if len(words) != 1:
        raise ConfigError("MLCD_TOKEN_FILE", f"{path}: must hold one token ({MIN_TOKEN_CHARS} to "
                          f"{MAX_TOKEN_CHARS} printable characters, no spaces) and nothing else")
    _check_token(words[0], "MLCD_TOKEN_FILE", f"{path}: ")
    return words[0]


def read_pem(path: Optional[str], setting: str) -> Optional[bytes]:
    """The bytes of a PEM file, or None; :class:`ConfigError` naming ``setting``."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(setting, f"{path}: cannot read it ({e.strerror})") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(setting, f"{path}: not a PEM file (no '-----BEGIN' line)")
    return data
