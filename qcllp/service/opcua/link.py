"""A session with the line's PLC: an asyncua client connected as ``connectors.opcua`` says.

asyncua (FreeOpcUa's opcua-asyncio, the maintained pure-Python OPC UA stack) holds the
protocol: secure channel, session, user token, the request timeouts. One :class:`PlcLink` is
one connection attempt and the session it opens; the flag writer (:mod:`.flag_writer`) makes a
new one after every loss, with its own backoff, rather than asyncua's reconnect: a new session
reads the PLC's variable types again, and the writer's loop stays the one place that decides
what happens after a loss.

* **Identity**: application name ``qcllp``; with a certificate, its URI (the subject
  alternative name) as the application URI, which servers check against the certificate.
* **Security**: ``security`` (``None``, ``Basic256Sha256``, ...) and ``security_mode``, the
  client certificate and key; the PLC's certificate pinned with ``server_certificate``, else
  the one its endpoint presents.
* **User**: ``username`` with the password of ``QCLLP_OPCUA_PASSWORD`` or
  ``QCLLP_OPCUA_PASSWORD_FILE`` (:func:`qcllp.store.credentials.secret_from_env`); anonymous
  without one.
* **Timeouts**: every request within ``timeout_s`` (a PLC that does not answer is away); the
  session lives ``session_timeout_s`` without requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto import security_policies
from cryptography import x509

from qcllp.plant.config import OpcuaConnector
from qcllp.store.credentials import OPCUA, secret_from_env

__all__ = ["PlcLink"]

APPLICATION_URI = "urn:qcllp:flags"  # without a certificate that names another
# asyncua logs a traceback for each failed close of a session the PLC already dropped; the
# writer logs every loss itself, once, with its reason (plc_lost)
logging.getLogger("asyncua").setLevel(logging.CRITICAL)


class PlcLink:
    """One connection to the PLC's OPC UA server (module docstring): :meth:`open`, then
    ``client`` for requests, then :meth:`close`."""

    def __init__(self, settings: OpcuaConnector):
        self.settings = settings
        client = Client(settings.endpoint, timeout=settings.timeout_s)
        client.name = client.description = "qcllp"
        client.application_uri = APPLICATION_URI
        client.product_uri = "urn:qcllp"
        client.session_timeout = settings.session_timeout_s * 1000
        if settings.username is not None:
            client.set_user(settings.username)
            password = secret_from_env(OPCUA)
            if password is not None:
                client.set_password(password)
        self.client = client

    async def open(self) -> None:
        """Secure channel and session (a frozen PLC that accepts the socket but never answers
        fails after a few timeouts, not never)."""
        settings = self.settings
        if settings.security != "None":
            self.client.application_uri = _certificate_uri(settings.certificate) or APPLICATION_URI
            await asyncio.wait_for(
                self.client.set_security(
                    getattr(security_policies, f"SecurityPolicy{settings.security}"),
                    settings.certificate,
                    settings.private_key,
                    server_certificate=settings.server_certificate,
                    mode=getattr(ua.MessageSecurityMode, settings.security_mode),
                ),
                timeout=4 * settings.timeout_s,
            )
        await asyncio.wait_for(self.client.connect(), timeout=4 * settings.timeout_s)

    async def close(self) -> None:
        """Close the session if the PLC still answers; drop the socket in any case."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.disconnect(), timeout=self.settings.timeout_s)
        with contextlib.suppress(Exception):
            self.client.disconnect_socket()


def _certificate_uri(path: str | None) -> str | None:
    """The application URI a client certificate names (its subject alternative name), if any."""
    if path is None:
        return None
    data = Path(path).read_bytes()
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        cert = x509.load_der_x509_certificate(data)
    with contextlib.suppress(x509.ExtensionNotFound):
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = names.get_values_for_type(x509.UniformResourceIdentifier)
        return uris[0] if uris else None
    return None
