"""Ports (P10): what the core calls outside itself (IAM, ledger, drivers), each a Protocol with adapters."""
