"""A real Redfish BMC for tests and `make demo-bare-metal`: sushy-tools' emulator with its fake driver (no hypervisor), served by
werkzeug on 127.0.0.1, port 0, in a process of its own (tests kill it). It prints its port.

A WSGI wrapper injects faults, set by `POST /_fault` with JSON: `{"status": 503}` answers every
Redfish request with that status until `{"status": null}`; `{"power_seconds": 11}` makes every power
change land that many seconds later (the fake driver draws 1-11 s otherwise).

    python scripts/bmc_emulator.py STATE_DIR SYSTEM_UUID USERNAME PASSWORD [PORT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import bcrypt
from werkzeug.serving import make_server

FAULT: dict[str, Any] = {"status": None}


def faulty(app: Any) -> Any:
    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"] == "/_fault":
            FAULT.update(json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))))
            if FAULT.get("power_seconds"):
                from sushy_tools.emulator.resources.systems import fakedriver
                fakedriver.random.randint = lambda _low, _high: int(FAULT["power_seconds"])
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(FAULT).encode()]
        if FAULT["status"]:
            start_response(f"{FAULT['status']} Injected", [("Content-Type", "application/json")])
            return [b'{"error": {"code": "Base.1.0.GeneralError", "message": "injected"}}']
        return app(environ, start_response)
    return wsgi


def main(state_dir: str, system_uuid: str, username: str, password: str, port: str = "0") -> None:
    from sushy_tools.emulator import main as emulator

    Path(state_dir).mkdir(parents=True, exist_ok=True)
    auth = Path(state_dir) / "htpasswd"
    auth.write_text(f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    emulator.app.configure(extra_config={
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_STATE_DIR": state_dir,
        "SUSHY_EMULATOR_AUTH_FILE": str(auth),
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [{"uuid": system_uuid, "name": "bm", "power_state": "On", "nics": []}],
    })
    server = make_server("127.0.0.1", int(port), faulty(emulator.app), threaded=True)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:6])
