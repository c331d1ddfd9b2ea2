"""The plans of the statements a session runs, nested ones included, from auto_explain as NOTICEs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def nested_plans(conn: psycopg.Connection) -> Iterator[list[str]]:
    """While the block runs, auto_explain logs every statement on `conn` (nested ones too) as a NOTICE;
    after it, the list holds those NOTICEs' texts, each with its "Query Text:"."""
    notices: list[str] = []
    conn.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_nested_statements = on", "auto_explain.log_level = notice",
                    "auto_explain.log_min_duration = 0", "client_min_messages = notice"):
        conn.execute(f"SET {setting}")
    plans: list[str] = []
    try:
        yield plans
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
        plans.extend(notice for notice in notices if "Query Text:" in notice)
