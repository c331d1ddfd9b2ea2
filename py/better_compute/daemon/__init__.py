"""`bcd`, the node daemon. It dials out to a gateway (P5): `join` once with a token, then `run`
(the session and reconciler, runtime.py). `inventory` prints what its inventory drivers see."""

import asyncio
import json
import logging
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from better_compute.daemon.cdi import DEFAULT_PATH as DEFAULT_CDI_PATH
from better_compute.daemon.drivers import DRIVERS, InventoryDriver, InventoryError, driver
from better_compute.daemon.join import AlreadyJoined, JoinRefused, join
from better_compute.daemon.journal import DEFAULT_BOUND, JournalError
from better_compute.daemon.runtime import DRIFT_SECONDS, UNREACHABLE, Daemon, endpoint, run_until_signalled
from better_compute.daemon.state import DEFAULT_STATE_DIR, NodeState, NotJoined
from better_compute.daemon.telemetry import DEFAULT_INTERVAL_SECONDS, Telemetry, check_url
from better_compute.nodeproto import ProtocolError
from better_compute.pki import PkiError

if TYPE_CHECKING:
    from better_compute.daemon.hypervisor import Hypervisor

app = typer.Typer(no_args_is_help=True, help="bcd: the Better Compute node daemon.")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DRIVER_HELP = f"One of: {', '.join(DRIVERS)}."
OPTION_HELP = "KEY=VALUE for the driver, e.g. path=… (and hostname=…) for fake."
STATE_HELP = "Where the node keeps its key, certificates, identity and journal."


@app.callback()
def main() -> None:
    """bcd: the Better Compute node daemon (commands below)."""


def chosen_driver(name: str, options: list[str], hint: str) -> InventoryDriver:
    """The driver `name` made with KEY=VALUE `options`; a usage error names the options at `hint`."""
    settings = dict(option.split("=", 1) for option in options if "=" in option)
    if len(settings) != len(options):
        raise typer.BadParameter("write each option as KEY=VALUE", param_hint=hint)
    try:
        return driver(name, **settings)
    except (ValueError, TypeError, OSError) as error:  # unknown driver or option, unreadable recording
        raise typer.BadParameter(str(error), param_hint=f"'--driver' / {hint}") from error


def gateway_url(url: str) -> str:
    """A `--gateway` is checked before anything runs: nodes dial only wss:// (TLS)."""
    try:
        endpoint(url, "")
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return url


def gateway_urls(urls: list[str]) -> list[str]:
    """Every `--gateway` of `bcd run` is checked as one is."""
    return [gateway_url(url) for url in urls]


def metrics_url_checked(url: str | None) -> str | None:
    """A `--metrics-url` is checked before anything runs, as a `--gateway` is."""
    try:
        return None if url is None else check_url(url)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error


def fail(message: str) -> typer.Exit:
    """Say what went wrong (stderr); the exit, status 1, for the caller to raise."""
    typer.echo(f"bcd: {message}", err=True)
    return typer.Exit(1)


@app.command("version")
def show_version() -> None:
    """Print the daemon's version."""
    typer.echo(f"bcd {version('better-compute')}")


@app.command("inventory")
def show_inventory(
    name: str = typer.Option("nvidia-smi", "--driver", help=DRIVER_HELP),
    options: list[str] = typer.Option([], "--option", help=OPTION_HELP),
) -> None:
    """Print the inventory document the driver reads (JSON), as the daemon would send it."""
    chosen = chosen_driver(name, options, "'--option'")
    try:
        document = chosen.collect()
    except InventoryError as error:
        raise fail(str(error)) from error
    typer.echo(json.dumps(document, indent=2))


@app.command("join")
def join_command(
    gateway: str = typer.Option(..., callback=gateway_url, help="The gateway, wss://HOST:PORT."),
    token: str = typer.Option(..., envvar="BCD_JOIN_TOKEN", help="The single-use join token."),
    ca_file: Path = typer.Option(..., exists=True, dir_okay=False, help="The node CA (PEM) to trust the gateway by."),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, help=STATE_HELP),
    name: str = typer.Option("nvidia-smi", "--driver", help=DRIVER_HELP),
    options: list[str] = typer.Option([], "--driver-option", help=OPTION_HELP),
) -> None:
    """Join a pool: make the node's key and CSR, send the signed inventory, keep the identity answered."""
    chosen = chosen_driver(name, options, "'--driver-option'")
    try:
        credentials = asyncio.run(join(gateway, token, ca_file, NodeState(state_dir), chosen))
    except JoinRefused as refused:
        raise fail(f"the join was refused: {refused}") from refused
    except (AlreadyJoined, InventoryError, PkiError, ProtocolError, ValueError) as error:
        raise fail(str(error)) from error
    except UNREACHABLE as error:
        raise fail(f"cannot reach the gateway at {gateway}: {error or type(error).__name__}") from error
    typer.echo(f"joined as node {credentials.node_id} ({credentials.hostname}) of trust domain "
               f"{credentials.trust_domain}; state in {state_dir}")


def vps_hypervisor(uri: str, directory: Path, images: Path) -> "Hypervisor":
    """The VPS reconciler on libvirt at `uri` (imported here: only hosts that run VMs need libvirt-python)."""
    from better_compute.daemon.drivers.libvirt import HypervisorError, Libvirt
    from better_compute.daemon.hypervisor import Hypervisor

    try:
        return Hypervisor(Libvirt(uri), directory, images)
    except HypervisorError as error:
        raise fail(str(error)) from error


@app.command("run")
def run_command(
    gateways: list[str] = typer.Option(
        ..., "--gateway", callback=gateway_urls, metavar="URL", help="The gateway, wss://HOST:PORT. Repeat it to name several: the "
                                                      "session moves to the next one (in turn) whenever one ends or "
                                                      "cannot be opened."),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, help=STATE_HELP),
    name: str = typer.Option("nvidia-smi", "--driver", help=DRIVER_HELP),
    options: list[str] = typer.Option([], "--driver-option", help=OPTION_HELP),
    cdi_path: Path = typer.Option(DEFAULT_CDI_PATH, help="The CDI spec file this daemon owns (.yaml or .json)."),
    journal_bound: int = typer.Option(DEFAULT_BOUND, min=1, help="Command ids the journal remembers."),
    metrics_url: str | None = typer.Option(
        None, callback=metrics_url_checked, help="Push GPU metrics here with Prometheus remote write, e.g. http://prometheus:9090/api/v1/write "
                   "(off when not given)."),
    metrics_interval: float = typer.Option(DEFAULT_INTERVAL_SECONDS, min=0.1, help="Seconds between metric samples."),
    reconcile_seconds: float = typer.Option(DRIFT_SECONDS, min=0.1, help="Seconds between checks of the CDI file, the "
                                            "GPUs' MIG layouts and their health against the newest spec."),
    hypervisor_uri: str | None = typer.Option(
        None, "--hypervisor", help="Run the spec's VPS instances as libvirt domains here: qemu:///system in production, "
                                   "test:///default for tests (off when not given: the node runs no VMs)."),
    vm_images: Path = typer.Option(Path("/var/lib/better-compute/images"), help="Where the VM images (raw) are."),
    vm_dir: Path = typer.Option(Path("/var/lib/better-compute/instances"), help="Where the VMs' disks and seeds go."),
) -> None:
    """Hold a session with a gateway (the next one named, when one fails) until SIGTERM or SIGINT.

    Converges the CDI file and each GPU's MIG layout to each signed spec, reports GPU health, runs
    each signed command once, renews the SVID, and pushes GPU metrics to --metrics-url when given."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per metrics push otherwise
    chosen = chosen_driver(name, options, "'--driver-option'")
    hypervisor = None if hypervisor_uri is None else vps_hypervisor(hypervisor_uri, vm_dir, vm_images)
    try:
        daemon = Daemon(NodeState(state_dir), chosen, cdi_path, journal_bound=journal_bound,
                        reconcile_seconds=reconcile_seconds, hypervisor=hypervisor)
    except (NotJoined, JournalError, PkiError, ValueError, OSError) as error:
        raise fail(str(error)) from error
    telemetry = None if metrics_url is None else Telemetry(
        metrics_url, str(daemon.node_id), chosen, daemon.bookings, interval=metrics_interval)
    run_until_signalled(daemon, gateways, telemetry)
