"""The Python client's transport rule against a real label store serving plaintext on loopback
with a tokens file (pyclient_plaintext_test.cc starts it): a token goes only over TLS, or in
plaintext to a loopback address with ``insecure=True`` (``MLCD_INSECURE_TOKEN=1``).

Environment: MLCD_LABELSTORE (the store), MLCD_TOKEN_FILE (a viewer token), no MLCD_TLS_*,
PYTHONPATH holding the package with its generated stubs; the helpers come from
client_check.py beside this file. Prints what it checked; exits 1 on the first failure, and
prints "plaintext: all checks passed" at the end.
"""
import os
import sys
import warnings

import mlcd
from client_check import check, raises  # this script's folder is on sys.path

STORE = os.environ["MLCD_LABELSTORE"]


def client(**overrides):
    """A client of the store; the coordinator is given the store's loopback address too, so
    that making its channel follows the same rule (it is never called)."""
    return mlcd.Client(coordinator=STORE, labelstore=STORE, **overrides)


def main():
    # A token and no TLS: refused when the channel is made, naming the fix.
    e = raises(mlcd.ConfigError, client, "a token in plaintext to loopback without insecure")
    check(e.field_path == "tls_ca", "the setting named is tls_ca")
    check(f"in plaintext to {STORE}" in e.message and "insecure=True" in e.message
          and "MLCD_INSECURE_TOKEN=1" in e.message, "the message says what to pass")
    # insecure=True on loopback: sent with a warning, and the store accepts the viewer token.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with client(insecure=True) as c:
            sets = list(c.list_label_sets())
    check(isinstance(sets, list), f"insecure=True lists the store's label sets ({len(sets)})")
    check(any(issubclass(w.category, RuntimeWarning) and "in plaintext to loopback address"
              in str(w.message) for w in caught), "a RuntimeWarning says the token goes in plaintext")
    # The environment's opt-in does the same.
    os.environ["MLCD_INSECURE_TOKEN"] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with client() as c:
            check(isinstance(list(c.list_label_sets()), list), "MLCD_INSECURE_TOKEN=1 lists")
    os.environ["MLCD_INSECURE_TOKEN"] = "0"
    raises(mlcd.ConfigError, client, "MLCD_INSECURE_TOKEN=0 is no opt-in")
    # Off loopback insecure=True is no opt-in: refused before connecting (TEST-NET-1).
    for address in ("192.0.2.1:7610", "mlcd-labelstore:7610", "dns:///127.0.0.1:7610"):
        e = raises(mlcd.ConfigError, lambda: mlcd.Client(coordinator=address, insecure=True),
                   f"a token in plaintext to {address}")
        check("only to a loopback address" in e.message, "the message says loopback only")
    # No token: nothing to protect; the store itself asks for one.
    with client(token_file=None) as c:
        e = raises(mlcd.UnauthenticatedError, lambda: list(c.list_label_sets()), "no token")
    print("plaintext: all checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}")
        sys.exit(1)
