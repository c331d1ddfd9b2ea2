"""The HTTP relay (`better-compute serve api`, docs/architecture.md §2, §7): HTTP into stored procedures.

It holds no per-method code: the method catalog comes from the database at start-up, every call
goes through one admission flow (api.prepare → one IAM decision → api.admit or api.read), and the
rules live in SQL. Modules: `catalog` (methods and their input schemas), `envelope` (the {data}
and {error} answers), `inbound` (body, credential, tenant), `admission` (the flow), `sse` (the
event stream), `openapi`, `metrics`, `app` (the Starlette application) and `server` (uvicorn,
signals, the listening line).
"""
