"""gRPC channels with the settings' TLS and token (common/security.h's client side)."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import grpc

from .errors import ConfigError
from .settings import Settings, read_pem

__all__ = ["make_channel", "call_metadata"]

# Messages up to this size are accepted (a label read of 65536 ids x l labels, a Job with
# its history); the services cap what they send.
MAX_RECEIVE_BYTES = 256 << 20


def make_channel(address: str, settings: Settings) -> grpc.Channel:
    """A channel to ``address``: TLS verified against ``tls_ca`` (the system roots without
    one) with the client certificate when set, plaintext when neither a CA nor a certificate
    is set. :class:`ConfigError` for unreadable or incomplete TLS files."""
    options = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
    if not settings.tls:
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
