"""The node wire protocol (docs/nodes.md), shared by the gateway and the daemon.

One WebSocket per node, JSON text frames. Every message is an object `{"v": 1, "type": ..., ...}`;
each type is a small frozen dataclass here, with the most bytes one frame of it may have (P12): a
frame is at most NODE_MESSAGE_BYTES (compute.limits node_message_bytes), and types that never
carry a document are bounded far lower, so a peer cannot make the other side parse a megabyte of
"heartbeat". `decode` refuses what is not a message of this protocol with a ProtocolError, which
the receiver answers as an `error` message and otherwise ignores (an unknown version or type is
UNSUPPORTED: a newer peer is told, not disconnected). Fields a type does not know are ignored,
so a newer peer can add optional fields within version 1.

Signed envelopes travel as plain dicts: what they say is checked with pki.open_envelope by
whoever acts on them, never here. What a node reports on a session (inventory, observed, result,
key) is a report envelope: its body is `{node_id, epoch, seq, ...}` (`report_body`), signed by the
node's registered key; the gateway appends it as received (node_api.report) and the worker
verifies and applies it (worker/node_reports.py), in increasing (epoch, seq) per node.
"""

from __future__ import annotations

import base64
import binascii
import json
import types
import typing
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, Union

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from better_compute import strictjson

VERSION = 1
NODE_MESSAGE_BYTES = 1 << 20  # = compute.limits node_message_bytes (tests/test_gateway.py keeps them equal)
SMALL_BYTES = 1024  # hello, heartbeat
PEM_BYTES = 16 * 1024  # a CSR (pki.csr.CSR_BYTES_MAX) or a certificate, JSON-escaped, with room
JOINED_BYTES = 64 * 1024  # a certificate, the CA, the intent key, names

JOIN_PATH = "/join"
SESSION_PATH = "/session"
AGENT_PATH = "/agent"  # a site agent's session (its certificate)
AGENT_CERTIFICATE_PATH = "/agent/certificate"  # a site agent asks for its certificate
FENCED = 4001  # close code: a newer session of this node exists (or this one ended)
GOING_AWAY = 1001  # close code: the gateway is stopping; dial again (another gateway, or this one later)

INVALID_ARGUMENT = "INVALID_ARGUMENT"
UNSUPPORTED = "UNSUPPORTED"

Envelope = dict[str, Any]  # {"v": 1, "purpose", "body", "sig"}: see pki.signing

# The purposes of what a node reports on a session (sql/640_node_reports.sql applies each).
INVENTORY_REPORT = "node.inventory"  # {inventory}
OBSERVED_REPORT = "node.observed"  # {generation, conditions, devices, withdrawal}
RESULT_REPORT = "node.result"  # {command_id, status, output}
KEY_REPORT = "node.key"  # {public_key (base64 DER), proof (pki.key_proof)}, signed by the old key
REPORTS = frozenset({INVENTORY_REPORT, OBSERVED_REPORT, RESULT_REPORT, KEY_REPORT})


def report_body(node_id: str, epoch: int, seq: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A report's body: the node, the session epoch and the report's number in that session (both
    signed, so a relay can neither replay a report nor move it to another session or node)."""
    return {"node_id": node_id, "epoch": epoch, "seq": seq, **payload}


class ProtocolError(Exception):
    """A frame that is not a message of this protocol; `error()` is the answer to send."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.hint = hint

    def error(self) -> Error:
        return Error(self.code, self.message, self.hint)


# -- join (path /join, TLS without a client certificate) -----------------------------------------

@dataclass(frozen=True)
class Join:
    """node: its token bound to its key (pki/binding.py: token_ref and proof, base64; the token itself
    never crosses the gateway), CSR (PEM) and inventory, the envelope signed with the CSR's key."""

    TYPE: ClassVar[str] = "join"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    token_ref: str
    proof: str
    csr: str
    inventory: Envelope


@dataclass(frozen=True)
class Joined:
    """gateway: the node's id and SVID, the CA to trust, the intent key (intent_key_text)."""

    TYPE: ClassVar[str] = "joined"
    LIMIT: ClassVar[int] = JOINED_BYTES
    node_id: str
    certificate: str
    ca: str
    intent_key: str
    trust_domain: str


# -- session (path /session, mutual TLS with the node's SVID) ------------------------------------

@dataclass(frozen=True)
class Hello:
    """gateway: the session is open under `epoch` (what the node's reports carry); heartbeat every
    `heartbeat_seconds`."""

    TYPE: ClassVar[str] = "hello"
    LIMIT: ClassVar[int] = SMALL_BYTES
    epoch: int
    heartbeat_seconds: float


@dataclass(frozen=True)
class Heartbeat:
    TYPE: ClassVar[str] = "heartbeat"
    LIMIT: ClassVar[int] = SMALL_BYTES


@dataclass(frozen=True)
class Inventory:
    """node: envelope("node.inventory", report_body(..., {inventory}))."""

    TYPE: ClassVar[str] = "inventory"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Spec:
    """gateway: envelope("spec", {node_id, generation, spec}), signed by the control plane's intent key."""

    TYPE: ClassVar[str] = "spec"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Observed:
    """node: envelope("node.observed", report_body(..., {generation, conditions}))."""

    TYPE: ClassVar[str] = "observed"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Command:
    """gateway: envelope("command", {command_id, node_id, kind, args}), signed by the intent key."""

    TYPE: ClassVar[str] = "command"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Result:
    """node: envelope("node.result", report_body(..., {command_id, status, output}))."""

    TYPE: ClassVar[str] = "result"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Key:
    """node: envelope("node.key", report_body(..., {public_key, proof})) signed by its old key: the
    key it signs with from the next report on (send it before using a renewed SVID's new key)."""

    TYPE: ClassVar[str] = "key"
    LIMIT: ClassVar[int] = PEM_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Renew:
    """node: a CSR (PEM) for its next SVID (the same key or a new one), and the node.renew envelope
    signed by its registered key (pki/binding.py), which the signer verifies."""

    TYPE: ClassVar[str] = "renew"
    LIMIT: ClassVar[int] = PEM_BYTES
    csr: str
    proof: Envelope


@dataclass(frozen=True)
class Certificate:
    """gateway: the renewed SVID (PEM)."""

    TYPE: ClassVar[str] = "certificate"
    LIMIT: ClassVar[int] = PEM_BYTES
    certificate: str


@dataclass(frozen=True)
class Error:
    """Either side: a contract code (docs/architecture.md §13), a message and a hint."""

    TYPE: ClassVar[str] = "error"
    LIMIT: ClassVar[int] = PEM_BYTES
    code: str
    message: str
    hint: str | None = None


# -- site agents (docs/bare-metal.md): /agent/certificate (TLS without a client certificate), then
# /agent (mutual TLS with the agent's certificate) ------------------------------------------------

@dataclass(frozen=True)
class AgentCertify:
    """agent: a CSR (PEM) for its TLS key and the agent.certificate envelope over its agent id and
    that key, signed by its registered Ed25519 signing key (pki/binding.py); answered `certificate`."""

    TYPE: ClassVar[str] = "agent_certify"
    LIMIT: ClassVar[int] = PEM_BYTES
    agent_id: str
    csr: str
    proof: Envelope


@dataclass(frozen=True)
class AgentHello:
    """gateway: the agent's session is open under `epoch`; it runs at most `bmc_sessions` operations
    at once; `now` is the control plane's time (the operations' deadlines are in it)."""

    TYPE: ClassVar[str] = "agent_hello"
    LIMIT: ClassVar[int] = SMALL_BYTES
    epoch: int
    bmc_sessions: int
    now: str


@dataclass(frozen=True)
class Claim:
    """agent: claim up to `limit` queued BMC operations (it has room for that many)."""

    TYPE: ClassVar[str] = "claim"
    LIMIT: ClassVar[int] = SMALL_BYTES
    limit: int


@dataclass(frozen=True)
class Ops:
    """gateway: the operations claimed (each as the database answers it, with the worker's signed
    envelope), and the control plane's time of the claim."""

    TYPE: ClassVar[str] = "ops"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    ops: list[dict[str, Any]]
    now: str


@dataclass(frozen=True)
class Wake:
    """gateway: operations of this agent were queued: claim."""

    TYPE: ClassVar[str] = "wake"
    LIMIT: ClassVar[int] = SMALL_BYTES


@dataclass(frozen=True)
class BmcResult:
    """agent: a result envelope (purpose bmc.result) signed by its signing key, relayed as it is."""

    TYPE: ClassVar[str] = "bmc_result"
    LIMIT: ClassVar[int] = NODE_MESSAGE_BYTES
    envelope: Envelope


@dataclass(frozen=True)
class Relayed:
    """gateway: the result of operation `op_id` was relayed (a worker verifies it); an `error` says otherwise."""

    TYPE: ClassVar[str] = "relayed"
    LIMIT: ClassVar[int] = SMALL_BYTES
    op_id: int
    answer: str


Message = Union[Join, Joined, Hello, Heartbeat, Inventory, Spec, Observed, Command, Result, Key, Renew, Certificate,
                Error, AgentCertify, AgentHello, Claim, Ops, Wake, BmcResult, Relayed]
TYPES: dict[str, type[Message]] = {cls.TYPE: cls for cls in typing.get_args(Message)}
# Each type's fields and their types, for decode (resolved once: annotations are strings here).
FIELD_TYPES: dict[type[Message], dict[str, Any]] = {
    cls: {field.name: typing.get_type_hints(cls)[field.name] for field in fields(cls)} for cls in TYPES.values()
}


def encode(message: Message) -> str:
    """The frame of a message; ProtocolError when it is larger than its type allows."""
    text = json.dumps({"v": VERSION, "type": message.TYPE, **asdict(message)}, separators=(",", ":"),
                      ensure_ascii=False)
    size = len(text.encode("utf-8"))
    if size > message.LIMIT:
        raise ProtocolError(INVALID_ARGUMENT, f"a {message.TYPE} message has {size} bytes, more than {message.LIMIT}")
    return text


def decode(frame: str | bytes) -> Message:
    """The message in a frame, checked: a text frame of JSON, version 1, a known type within its
    size bound, every field present with its type. ProtocolError otherwise."""
    if not isinstance(frame, str):
        raise ProtocolError(INVALID_ARGUMENT, "node messages are JSON text frames, not binary ones")
    size = len(frame.encode("utf-8", "replace"))
    if size > NODE_MESSAGE_BYTES:
        raise ProtocolError(INVALID_ARGUMENT, f"a message has {size} bytes, more than {NODE_MESSAGE_BYTES}",
                            "Limit node_message_bytes.")
    try:
        document = strictjson.loads(frame)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(INVALID_ARGUMENT, f"a message is not JSON: {error}"[:300]) from None
    if not isinstance(document, dict):
        raise ProtocolError(INVALID_ARGUMENT, "a message is a JSON object")
    if strictjson.holds_nul(document):
        raise ProtocolError(INVALID_ARGUMENT, "a string of the message holds \\u0000",
                            "PostgreSQL text cannot hold NUL characters; leave them out.")
    version = document.get("v")
    if type(version) is not int or version != VERSION:
        raise ProtocolError(UNSUPPORTED, f"protocol version {version!r:.20} is not supported",
                            f"This side speaks version {VERSION}.")
    kind = document.get("type")
    cls = TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(UNSUPPORTED, f"message type {kind!r:.60} is not supported",
                            f"Known types: {', '.join(sorted(TYPES))}.")
    if size > cls.LIMIT:
        raise ProtocolError(INVALID_ARGUMENT, f"a {kind} message has {size} bytes, more than {cls.LIMIT}")
    values: dict[str, Any] = {}
    for field in fields(cls):
        if field.name not in document:
            if field.default is not MISSING:  # has a default: optional
                continue
            raise ProtocolError(INVALID_ARGUMENT, f"a {kind} message needs the field {field.name}")
        value = document[field.name]
        if not accepts(FIELD_TYPES[cls][field.name], value):
            raise ProtocolError(INVALID_ARGUMENT, f"field {field.name} of a {kind} message has the wrong type")
        values[field.name] = value
    return cls(**values)


def accepts(hint: Any, value: Any) -> bool:
    """Whether a JSON value fits a field's type: str, int, float, dict[...] and unions of them with None."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(accepts(member, value) for member in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if isinstance(value, bool):  # JSON true is not a number here
        return hint is bool
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, typing.get_origin(hint) or hint)


# -- the intent key, as `joined` carries it ------------------------------------------------------

def intent_key_text(key: Ed25519PublicKey) -> str:
    """The control plane's Ed25519 intent key as `joined.intent_key`: base64 of its 32 raw bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def read_intent_key(text: str) -> Ed25519PublicKey:
    """The intent key of `joined.intent_key` (what a node checks specs and commands with)."""
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError) as error:
        raise ProtocolError(INVALID_ARGUMENT, f"intent_key is not a base64 Ed25519 public key: {error}") from None
