"""The gateway's side of certificate issuance (issue 20): it holds no CA key. It records a request
in the database (node_api.join_request, renew_request, gateway_certificate_request) and waits for
the signer's answer (node_api.certificate_get); the trust bundle it serves and verifies client
certificates with is the database's (node_api.trust_bundle).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from uuid import UUID

from cryptography import x509

from better_compute.db import AsyncDatabase
from better_compute.nodeproto import ProtocolError

ACCESS_DENIED = "ACCESS_DENIED"
UNAVAILABLE = "UNAVAILABLE"
FIRST_POLL_SECONDS = 0.02
LAST_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Issuance:
    db: AsyncDatabase
    wait_seconds: float = 30.0  # as the database's svid_request_seconds: then it refuses the request

    async def certificate(self, request_id: UUID) -> str:
        """The PEM the signer issued for the request; ProtocolError when refused or not in time."""
        pause = FIRST_POLL_SECONDS
        try:
            async with asyncio.timeout(self.wait_seconds):
                while True:
                    answer = await self.db.call("node_api.certificate_get", request_id)
                    if answer["state"] == "issued":
                        certificate: str = answer["certificate"]
                        return certificate
                    if answer["state"] == "refused":
                        raise ProtocolError(ACCESS_DENIED, f"no certificate: {answer['reason']}",
                                            "Join again with a new token if the node was quarantined or removed.")
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, LAST_POLL_SECONDS)
        except TimeoutError:
            raise ProtocolError(UNAVAILABLE, "no signer answered the certificate request in time",
                                "Retry later; the operator runs `better-compute serve signer`.") from None

    async def bundle(self) -> list[x509.Certificate]:
        """The node CAs to trust now, the issuing one first (empty until a signer published one)."""
        return [x509.load_pem_x509_certificate(pem.encode("ascii"))
                for pem in await self.db.call("node_api.trust_bundle")]
