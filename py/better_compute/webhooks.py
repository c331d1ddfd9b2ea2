"""Webhook signing and sending (docs/architecture.md §9): HMAC-SHA256 over `timestamp.body`, one POST per attempt.

The body is the delivery's JSON, compact. Headers:
  Content-Type: application/json
  X-Better-Compute-Event: <event type>
  X-Better-Compute-Delivery: <delivery id, the same on every attempt: receivers deduplicate by it>
  X-Better-Compute-Timestamp: <unix seconds, from the Clock (business time)>
  X-Better-Compute-Signature: v1=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>
A receiver checks the signature and the timestamp's age with `verify_signature`.

Any 2xx answer is delivered; anything else (another status, a redirect, a timeout, a refused
connection, a URL that does not parse, a host that resolves to a non-public address) is a failed
attempt with its reason. Retries and dead letters are the database's.

The host is resolved once per attempt and the POST goes to that address: unless the sender is
told otherwise (`serve worker --webhooks-to-private-addresses`), every address must be public, so
a tenant's URL cannot reach loopback, the operator's private networks or cloud metadata.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from better_compute.clock import Clock

SIGNATURE_VERSION = "v1"
EVENT_HEADER = "X-Better-Compute-Event"
DELIVERY_HEADER = "X-Better-Compute-Delivery"
TIMESTAMP_HEADER = "X-Better-Compute-Timestamp"
SIGNATURE_HEADER = "X-Better-Compute-Signature"
USER_AGENT = "better-compute-webhooks/1"
RESPONSE_BYTES_READ = 4096  # the answer's body is not used; read a little so the connection ends cleanly
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address in the last 32 bits
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: where the IPv4 address sits is the network's choice
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # RFC 4291 (deprecated): the IPv4 address in the last 32 bits


@dataclass(frozen=True)
class Delivery:
    """One attempt's input: a row of worker_api.webhook_due and its secret, opened by the worker."""

    delivery_id: UUID
    event_type: str
    url: str
    secret: str
    body: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any], secret: str) -> Delivery:
        return cls(row["delivery_id"], row["event_type"], row["url"], secret, row["body"])


@dataclass(frozen=True)
class DeliveryResult:
    ok: bool
    status: int | None
    error: str | None


def encode_body(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify_signature(secret: str, timestamp: str | int, body: bytes, header: str, tolerance: float,
                     now: float | None = None) -> bool:
    """For receivers: the signature header matches the body and timestamp, and the timestamp is
    within `tolerance` seconds of `now` (the receiver's own clock when not given)."""
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - sent_at) > tolerance:
        return False
    # bytes, as compare_digest refuses str with non-ASCII characters; "?" never makes a match (hex digits)
    return hmac.compare_digest(signature(secret, sent_at, body).encode(), header.encode("utf-8", "replace"))


def signed_headers(delivery: Delivery, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: delivery.event_type,
        DELIVERY_HEADER: str(delivery.delivery_id),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(delivery.secret, timestamp, body),
    }


class RefusedAddress(Exception):
    """The webhook's host is, or resolves to, an address the sender may not reach."""


@dataclass(frozen=True)
class Target:
    """Where one POST goes: the URL's parts, and the addresses (checked) it may connect to."""

    https: bool
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]

    @classmethod
    def resolve(cls, url: str, private_addresses: bool) -> Target:
        """Parse the URL and resolve its host. Unless `private_addresses`, every address the host
        resolves to must be a public unicast one (SSRF: a tenant's URL must not reach the control
        plane's own network, loopback or cloud metadata at 169.254.169.254)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url[:200]}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = tuple(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(parts.hostname, port,
                                                                                   type=socket.SOCK_STREAM)))
        if not private_addresses:
            for address in addresses:
                if not is_public(address):
                    where = address if address == parts.hostname else f"{parts.hostname} resolves to {address}, which"
                    raise RefusedAddress(f"{where} is not a public address")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme == "https", parts.hostname, port, path, addresses)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the resolved addresses (not a second lookup that could answer otherwise),
        with the URL's host in the Host header and, for https, in SNI and the certificate check."""
        connection: http.client.HTTPConnection
        if self.https:
            connection = http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                                     context=ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        connection._create_connection = self.connect  # type: ignore[attr-defined]  # what connect() calls
        return connection

    def connect(self, _host_port: tuple[str, int], timeout: float, source: tuple[str, int] | None) -> socket.socket:
        """The first of the checked addresses that answers (as socket.create_connection tries a name's)."""
        error: OSError = OSError(f"{self.host} has no address")
        for address in self.addresses:
            try:
                return socket.create_connection((address, self.port), timeout, source)
            except OSError as refused:
                error = refused
        raise error


def is_public(address: str) -> bool:
    """A global unicast address. An IPv6 address that embeds an IPv4 one (IPv4-mapped, NAT64, 6to4,
    IPv4-compatible) reaches that IPv4 address through a translator or tunnel, so it is judged as it."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is link-local anyway
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in LOCAL_NAT64:
            return False
        ip = embedded_ipv4(ip) or ip
    return ip.is_global and not ip.is_multicast


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64 or ip in IPV4_COMPATIBLE:  # ::1 and :: too: 0.0.0.1 and 0.0.0.0 are not public either
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


class WebhookSender:
    def __init__(self, clock: Clock, private_addresses: bool = False):
        """`private_addresses`: whether webhooks may reach loopback, private, link-local and other
        non-public addresses (off in production; on for endpoints inside the operator's network)."""
        self.clock = clock
        self.private_addresses = private_addresses

    def send(self, delivery: Delivery, timeout: float) -> DeliveryResult:
        connection: http.client.HTTPConnection | None = None
        try:
            target = Target.resolve(delivery.url, self.private_addresses)
            body = encode_body(delivery.body)
            headers = signed_headers(delivery, int(self.clock.now().timestamp()), body)
            connection = target.connection(timeout)
            connection.request("POST", target.path, body=body, headers=headers)
            response = connection.getresponse()  # a redirect is an answer too: never followed with the signed body
            response.read(RESPONSE_BYTES_READ)
            if 200 <= response.status < 300:
                return DeliveryResult(True, response.status, None)
            return DeliveryResult(False, response.status, f"HTTP {response.status} {response.reason}")
        except RefusedAddress as error:
            return DeliveryResult(False, None, f"refused: {error}")
        except (OSError, http.client.HTTPException, ValueError) as error:  # ValueError: a URL that does not parse
            return DeliveryResult(False, None, f"{type(error).__name__}: {error}")
        finally:
            if connection is not None:
                connection.close()
