"""Throw-away TLS certificates for the tests' redis-servers, made with the ``openssl`` command.

``make_certificates(directory)`` writes a CA and one certificate it signs, for ``127.0.0.1`` and
``localhost``, usable both ways (``serverAuth`` and ``clientAuth``): redis-server presents it to
its clients and, with ``tls-replication yes``, to the servers it connects to (a replica to its
master, a sentinel to the nodes it monitors and to the other sentinels); a client presents it
where servers ask for a client certificate (``tls-auth-clients``, on by default). P-256 keys,
valid two days: making them takes a few milliseconds.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.dev.redis_server import RedisServerError

#: days the certificates are valid
DAYS = 2
#: the leaf certificate's extensions: a server's and a client's, for the loopback names
LEAF_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certificates:
    """A CA's certificate, and a certificate it signed with its key (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    def server_options(self) -> list[tuple[str, str]]:
        """redis-server's options (name, value) to serve, and connect, with them."""
        return [
            ("tls-cert-file", str(self.cert)),
            ("tls-key-file", str(self.key)),
            ("tls-ca-cert-file", str(self.ca)),
            ("tls-replication", "yes"),
        ]

    def client_options(self) -> dict[str, Any]:
        """redis-py's keyword arguments of a client that checks the server and presents the
        certificate."""
        return {
            "ssl": True,
            "ssl_ca_certs": str(self.ca),
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
        }


def make_certificates(directory: Path) -> Certificates:
    """A new CA and a certificate for ``127.0.0.1``/``localhost`` in ``directory``."""
    openssl = shutil.which("openssl")
    if not openssl:
        raise RedisServerError("openssl is not installed (apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    made = Certificates(directory / "ca.crt", directory / "redis.crt", directory / "redis.key")
    ca_key, request, extensions = (directory / n for n in ("ca.key", "redis.csr", "leaf.ext"))
    extensions.write_text(LEAF_EXTENSIONS)
    ca = ["-subj", "/CN=dres test CA", "-addext", "basicConstraints=critical,CA:TRUE"]
    signing = ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    signed_by_ca = ["-CA", made.ca, "-CAkey", ca_key, "-CAcreateserial", "-extfile", extensions]
    steps = [
        ["req", "-x509", *KEY, "-keyout", ca_key, "-out", made.ca, "-days", DAYS, *ca, *signing],
        ["req", "-new", *KEY, "-keyout", made.key, "-out", request, "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", request, "-out", made.cert, "-days", DAYS, *signed_by_ca],
    ]
    for step in steps:
        done = subprocess.run(
            [openssl, *map(str, step)], capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise RedisServerError(f"openssl {step[0]} failed: {done.stderr.strip()}")
    return made
