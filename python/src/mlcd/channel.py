"""gRPC channels with the settings' TLS and token (common/security.h's client side)."""
from __future__ import annotations

import ipaddress
import warnings
from typing import Optional, Sequence, Tuple

import grpc

from .errors import ConfigError
from .settings import Settings, read_pem

__all__ = ["make_channel", "call_metadata", "check_plaintext_token", "is_loopback_address"]

# Messages up to this size are accepted (a label read of 65536 ids x l labels, a Job with
# its history); the services cap what they send.
MAX_RECEIVE_BYTES = 256 << 20


def is_loopback_address(address: str) -> bool:
    """Whether ``address`` is ``HOST:PORT`` with a loopback host: 127.0.0.0/8, ``::1``
    (``[::1]:PORT``) or ``localhost``. Anything else, a gRPC target scheme included, is not."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return False
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return False  # an IPv6 host is written in brackets
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plaintext_token(address: str, settings: Settings) -> None:
    """The transport rule (common/security.h, CheckChannelSecurity): a token goes only over
    TLS, or in plaintext to a loopback address with ``insecure`` (with a warning).
    :class:`ConfigError` naming ``tls_ca`` otherwise, before anything connects."""
    if settings.tls or not settings.has_token:
        return
    refusing = (f"refusing to send the bearer token in plaintext to {address}: set tls_ca "
                "(MLCD_TLS_CA) to use TLS")
    if not is_loopback_address(address):
        raise ConfigError("tls_ca", refusing + "; a token goes in plaintext only to a loopback "
                          "address (127.0.0.0/8, ::1, localhost) with insecure=True "
                          "(MLCD_INSECURE_TOKEN=1)")
    if not settings.insecure:
        raise ConfigError("tls_ca", refusing + ", or, as it is a loopback address, pass "
                          "insecure=True (MLCD_INSECURE_TOKEN=1) to send the token in plaintext")
    warnings.warn(f"insecure: sending the bearer token in plaintext to loopback address "
                  f"{address}; any process that can read this host's loopback traffic can "
                  "read it", RuntimeWarning, stacklevel=3)


def make_channel(address: str, settings: Settings) -> grpc.Channel:
    """A channel to ``address``: TLS verified against ``tls_ca`` (the system roots without
    one) with the client certificate when set, plaintext when neither a CA nor a certificate
    is set. :class:`ConfigError` for unreadable or incomplete TLS files, and for a token
    without TLS unless :func:`check_plaintext_token` allows it."""
    options = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
    if not settings.tls:
        check_plaintext_token(address, settings)
        return grpc.insecure_channel(address, options=options)
    if bool(settings.tls_cert) != bool(settings.tls_key):
        missing = "tls_key (MLCD_TLS_KEY)" if settings.tls_cert else "tls_cert (MLCD_TLS_CERT)"
        raise ConfigError(missing.split()[0], f"set {missing} too: a client certificate and its "
                          "key come together")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read_pem(settings.tls_ca, "tls_ca"),
        private_key=read_pem(settings.tls_key, "tls_key"),
        certificate_chain=read_pem(settings.tls_cert, "tls_cert"))
    return grpc.secure_channel(address, credentials, options=options)


def call_metadata(token: Optional[str]) -> Sequence[Tuple[str, str]]:
    """The metadata of every call: ``authorization: Bearer TOKEN`` when there is a token."""
    return (("authorization", f"Bearer {token}"),) if token else ()
