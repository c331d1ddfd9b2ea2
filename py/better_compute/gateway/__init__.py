"""The node gateway (`better-compute serve gateway`, docs/architecture.md §2, §8, §11; docs/nodes.md).

Nodes dial out (P5) to a gateway over one WebSocket with TLS: `/join` (a join token, a CSR and a
signed inventory: the node gets its SVID) and `/session` (mutual TLS with the SVID: heartbeats,
signed reports up, signed intent down). The gateway relays between nodes and the database's
node_api as role bc_gateway; it never calls IAM (P7) and cannot forge what it relays (P14).
Gateways hold no state that matters: sessions live in compute.node_sessions, so any number of them
can run against one PostgreSQL and a node may dial any.
"""

from better_compute.gateway.server import Gateway, GatewaySettings, serve_until_signalled

__all__ = ["Gateway", "GatewaySettings", "serve_until_signalled"]
