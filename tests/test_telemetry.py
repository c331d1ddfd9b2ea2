"""GPU telemetry (P8) against a real Prometheus (Debian's `prometheus`, its remote-write receiver on):
what `bcd` pushes is queried back with PromQL; the spill buffer holds a bounded number of samples
while Prometheus is down, drops the oldest and counts them, and delivers the rest oldest first when
it is back; a batch Prometheus refuses is dropped and counted; nothing reaches PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from types import SimpleNamespace
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from better_compute.daemon.drivers import Reading, fake
from better_compute.daemon.drivers.fake import Driver as FakeDriver
from better_compute.daemon.drivers.nvidia_smi import parse_sample_csv
from better_compute.daemon.drivers.nvml import XidCounter, readings
from better_compute.daemon.telemetry import MAX_SERIES, OVERFLOW, REJECTED, Telemetry

from fleet import H200_MODEL
from gateway_support import running_gateway, running_worker_process
from iam_server import statement, write_static_iam
from node_support import bcd, converged, join_node, running_bcd, wait_until
from relay_support import running_relay, static_iam

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-h200"
NODE = "node-under-test"
GPU_A, GPU_B = "GPU-aaaaaaaa-0000-4000-8000-000000000001", "GPU-bbbbbbbb-0000-4000-8000-000000000002"
MIG_B = "MIG-bbbbbbbb-0000-4000-8000-0000000000b1"
READY_SECONDS = 20.0
TENANT = "cccccccc-0000-4000-8000-000000000013"
TOKEN = "token-of-the-operator"


def free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prometheus:
    """A real `prometheus` on 127.0.0.1 with the remote-write receiver, started when asked."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed: run scripts/install-system-deps.sh")
        self.binary, self.directory, self.port = binary, directory, free_port()
        self.process: subprocess.Popen[bytes] | None = None
        (directory / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def write_url(self) -> str:
        return f"{self.url}/api/v1/write"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, f"--config.file={self.directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.directory / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--web.enable-remote-write-receiver"],
            stdout=subprocess.DEVNULL, stderr=(self.directory / "prometheus.log").open("wb"))
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, (self.directory / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """The result of an instant PromQL query (at `at`, seconds since the epoch, else now)."""
        answer = httpx.get(f"{self.url}/api/v1/query",
                           params={"query": promql} | ({} if at is None else {"time": f"{at:.3f}"}), timeout=10)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["data"]["result"])


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    """Not started: a test starts it when the endpoint should be up."""
    server = Prometheus(tmp_path)
    try:
        yield server
    finally:
        server.stop()


class Clock:
    """Wall-clock seconds a test moves by hand."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def telemetry(url: str, bookings: list[dict[str, Any]] | None = None, **options: Any) -> Telemetry:
    driver = FakeDriver(FIXTURES / "inventory.json", hostname="telemetry-host")
    return Telemetry(url, NODE, driver, lambda: bookings or [], **options)


def flushed(sender: Telemetry) -> None:
    """Push what the sender spilled, as its task does after each sample."""
    async def flush() -> None:
        async with httpx.AsyncClient() as client:
            await sender.flush(client, budget=30)
    asyncio.run(flush())


def many_gpus(count: int, temperature: float) -> list[Reading]:
    return [Reading(gpu_uuid=f"GPU-00000000-0000-4000-8000-{gpu:012d}", temperature_celsius=temperature,
                    power_watts=300, utilization_ratio=0.5, memory_used_bytes=1 << 30, ecc_uncorrected=0)
            for gpu in range(count)]


def test_pushed_metrics_are_queried_back_with_promql(prometheus: Prometheus) -> None:
    prometheus.start()
    bookings = [{"kind": "gpu", "device_uuid": GPU_A, "reservation_id": "r-whole"},
                {"kind": "mig", "device_uuid": GPU_B, "mig_uuid": MIG_B, "reservation_id": "r-mig"},
                {"kind": "gpu", "device_uuid": "GPU-not-on-this-node", "reservation_id": "r-elsewhere"}]
    sender = telemetry(prometheus.write_url, bookings)
    sender.record([
        Reading(gpu_uuid=GPU_A, utilization_ratio=0.75, memory_used_bytes=2 ** 34, temperature_celsius=41.5,
                power_watts=512.25, ecc_corrected=3, ecc_uncorrected=1, xid_errors=2),
        Reading(gpu_uuid=GPU_B, temperature_celsius=38, power_watts=90),
        Reading(gpu_uuid=GPU_B, mig_uuid=MIG_B, memory_used_bytes=2 ** 30),
    ])
    flushed(sender)
    assert (sender.sent, sender.spilled, sender.dropped) == (1, 0, {OVERFLOW: 0, REJECTED: 0})

    [temperature] = prometheus.query(f'bc_gpu_temperature_celsius{{gpu_uuid="{GPU_A}"}}')
    assert temperature["metric"] == {"__name__": "bc_gpu_temperature_celsius", "node": NODE, "gpu_uuid": GPU_A,
                                     "reservation": "r-whole"}
    assert float(temperature["value"][1]) == 41.5
    [mig] = prometheus.query(f'bc_gpu_memory_used_bytes{{mig_uuid="{MIG_B}"}}')
    assert mig["metric"] == {"__name__": "bc_gpu_memory_used_bytes", "node": NODE, "gpu_uuid": GPU_B,
                                  "mig_uuid": MIG_B, "reservation": "r-mig"}
    assert float(mig["value"][1]) == 2 ** 30
    free = prometheus.query(f'bc_gpu_power_watts{{node="{NODE}", reservation=""}}')
    assert [(series["metric"]["gpu_uuid"], float(series["value"][1])) for series in free] == [(GPU_B, 90.0)]
    ecc = prometheus.query(f'sum by (type) (bc_gpu_ecc_errors_total{{gpu_uuid="{GPU_A}"}})')
    assert {series["metric"]["type"]: float(series["value"][1]) for series in ecc} == {"corrected": 3, "uncorrected": 1}
    assert float(prometheus.query("bc_gpu_xid_errors_total")[0]["value"][1]) == 2
    assert float(prometheus.query("bc_gpu_utilization_ratio")[0]["value"][1]) == 0.75
    # Label values only from the node's own readings: the booking of another node's GPU made none.
    assert prometheus.query('{reservation="r-elsewhere"}') == []
    assert prometheus.query(f'count({{node="{NODE}", __name__=~"bc_gpu_.*"}})')[0]["value"][1] == "10"  # 7 + 2 + 1


def test_the_spill_buffer_is_bounded_and_delivered_oldest_first_when_prometheus_is_back(
        prometheus: Prometheus) -> None:
    per_batch = 40 * 5 + 2  # 40 GPUs × 5 metrics, and the two drop counters
    clock = Clock(time.time() - 60)
    sender = telemetry(prometheus.write_url, spill_samples=3 * per_batch, clock=clock)
    for second in range(5):  # Prometheus is down: nothing listens on its port yet
        clock.now += 1
        sender.record(many_gpus(40, temperature=second))
        flushed(sender)
        assert sender.spilled <= 3 * per_batch
    assert (len(sender.spill), sender.spilled, sender.sent) == (3, 3 * per_batch, 0)
    assert sender.dropped[OVERFLOW] == 2 * per_batch  # the two oldest batches

    prometheus.start()
    flushed(sender)
    assert (sender.sent, sender.spilled) == (3, 0)
    gpu = many_gpus(1, 0)[0].gpu_uuid
    [kept] = prometheus.query(f'bc_gpu_temperature_celsius{{gpu_uuid="{gpu}"}}[5m]', at=clock.now)
    assert [float(value) for _, value in kept["values"]] == [2, 3, 4]  # the newest three, in order
    [overflow] = prometheus.query(f'{{__name__="bc_telemetry_samples_dropped_total", reason="overflow"}}', at=clock.now)
    assert float(overflow["value"][1]) == 2 * per_batch


def test_the_running_task_spills_while_prometheus_is_down_and_delivers_once_it_is_up(
        prometheus: Prometheus) -> None:
    sender = telemetry(prometheus.write_url, interval=0.1)
    gpu = sender.driver.sample()[0].gpu_uuid

    async def scenario() -> float:
        task = asyncio.create_task(sender.run())
        try:
            while len(sender.spill) < 5:  # down: nothing listens yet
                await asyncio.sleep(0.05)
            first = sender.spill[0].timestamp_ms / 1000
            await asyncio.to_thread(prometheus.start)
            while sender.spill or sender.sent < 6:
                await asyncio.sleep(0.05)
            return first
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    first = asyncio.run(asyncio.wait_for(scenario(), 60))
    [delivered] = prometheus.query(f'bc_gpu_temperature_celsius{{gpu_uuid="{gpu}"}}[5m]')
    assert delivered["values"][0][0] == first  # the oldest spilled sample arrived, first
    assert sender.dropped == {OVERFLOW: 0, REJECTED: 0}


def test_a_batch_prometheus_refuses_is_dropped_and_counted(prometheus: Prometheus) -> None:
    prometheus.start()
    clock = Clock(time.time() - 30)
    sender = telemetry(prometheus.write_url, clock=clock)
    sender.record(many_gpus(2, temperature=50))
    flushed(sender)
    clock.now -= 10  # older than what Prometheus holds: out of order, 400
    sender.record(many_gpus(2, temperature=60))
    flushed(sender)
    assert (sender.sent, sender.spilled, sender.dropped[REJECTED]) == (1, 0, 2 * 5 + 2)
    clock.now += 20
    sender.record(many_gpus(2, temperature=70))
    flushed(sender)
    [rejected] = prometheus.query('bc_telemetry_samples_dropped_total{reason="rejected"}', at=clock.now)
    assert float(rejected["value"][1]) == 12
    temperatures = prometheus.query("bc_gpu_temperature_celsius", at=clock.now)
    assert {float(series["value"][1]) for series in temperatures} == {70}


def test_an_endpoint_that_never_answers_times_out_and_the_batch_is_spilled() -> None:
    with closing(socket.socket()) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog; nothing ever answers
        sender = telemetry(f"http://127.0.0.1:{silent.getsockname()[1]}/api/v1/write", push_seconds=0.5)
        sender.record(many_gpus(1, 40))
        flushed(sender)
    assert (sender.sent, len(sender.spill), sender.dropped) == (0, 1, {OVERFLOW: 0, REJECTED: 0})


def test_series_per_batch_and_label_values_are_bounded() -> None:
    long = "r" * 1000
    sender = telemetry("http://127.0.0.1:9/api/v1/write",
                       [{"kind": "gpu", "device_uuid": many_gpus(1, 0)[0].gpu_uuid, "reservation_id": long}])
    batch = sender.record(many_gpus(200, 40))  # 1000 series read
    assert len(batch.series) == MAX_SERIES + 2
    assert max(len(value) for labels, _ in batch.series for _, value in labels) == 256


def test_the_fake_driver_reads_each_gpu_and_the_nvidia_smi_driver_parses_its_query() -> None:
    driver = FakeDriver(FIXTURES / "inventory.json", hostname="telemetry-host")
    [reading] = driver.sample()
    assert (reading.temperature_celsius, reading.power_watts, reading.ecc_uncorrected) == (30, 100, 0)
    driver.readings[reading.gpu_uuid, None] = Reading(gpu_uuid=reading.gpu_uuid, temperature_celsius=88)
    assert driver.sample()[0].temperature_celsius == 88
    [captured] = parse_sample_csv((FIXTURES / "nvidia-smi-query.csv").read_text())
    assert captured == Reading(gpu_uuid="GPU-fa1e3565-6f0b-4506-b6d4-3b9b3e1f32a9", utilization_ratio=0.0,
                               temperature_celsius=33, ecc_uncorrected=0)
    assert parse_sample_csv("uuid, memory.used [MiB], power.draw [W], ecc.errors.corrected.volatile.total\n"
                            "GPU-1, 512 MiB, 77.80 W, [N/A]\n") == [
        Reading(gpu_uuid="GPU-1", memory_used_bytes=512 << 20, power_watts=77.8)]


def test_bcd_run_refuses_a_metrics_url_that_is_not_http(tmp_path: Path) -> None:
    refused = bcd("run", "--gateway", "wss://127.0.0.1:1", "--state-dir", str(tmp_path),
                  "--metrics-url", "udp://127.0.0.1:9090")
    words = " ".join(word for word in refused.stderr.split() if word.strip("│╭╮╰╯─"))  # out of rich's box
    assert refused.returncode == 2
    assert "the metrics endpoint is an http(s):// URL" in words, refused.stderr


class StandInNvml:
    """The pynvml calls the nvml driver's sampling makes, with pynvml's signatures and units (mW, %),
    answering for two GPUs: GPU 0 with MIG enabled and one MIG device, GPU 1 refusing what a virtual
    GPU refuses. The live library needs a GPU; this checks the driver's use of it."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
        pass

    class NVMLError_Timeout(NVMLError):  # noqa: N801
        pass

    NVML_TEMPERATURE_GPU, NVML_VOLATILE_ECC = 0, 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        self.pending = [SimpleNamespace(device="gpu0", eventType=8, eventData=79)] * 2
        self.initialised = 0

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return {"gpu0": GPU_A, "gpu1": GPU_B, "mig0": MIG_B}[handle]

    def refuse_on(self, handle: str, *refusing: str) -> None:
        if handle in refusing:
            raise self.NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        self.refuse_on(handle, "mig0")
        return SimpleNamespace(gpu=75, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(used={"gpu0": 2 ** 33, "gpu1": 0, "mig0": 2 ** 30}[handle])

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        self.refuse_on(handle, "mig0")
        return 41

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self.refuse_on(handle, "mig0", "gpu1")
        return 512250  # mW

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        self.refuse_on(handle, "mig0", "gpu1")
        return 3 if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        self.refuse_on(handle, "gpu1")
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        if index:
            raise self.NVMLError("Not Found")
        return "mig0"

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None:
        self.refuse_on(handle, "gpu1")

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.pending:
            raise self.NVMLError_Timeout("Timeout")
        return self.pending.pop()


def test_the_nvml_driver_reads_gpus_mig_devices_and_xids_in_their_units() -> None:
    nvml: Any = StandInNvml()
    assert readings(nvml) == [
        Reading(gpu_uuid=GPU_A, utilization_ratio=0.75, memory_used_bytes=2 ** 33, temperature_celsius=41,
                power_watts=512.25, ecc_corrected=3, ecc_uncorrected=1),
        Reading(gpu_uuid=GPU_A, mig_uuid=MIG_B, memory_used_bytes=2 ** 30),
        Reading(gpu_uuid=GPU_B, utilization_ratio=0.75, memory_used_bytes=0, temperature_celsius=41)]
    xids = XidCounter(nvml)
    assert nvml.initialised == 1  # kept initialised for the event set
    assert xids.drain(nvml) == {GPU_A: 2}  # GPU B refused the registration: unknown, not 0
    assert xids.drain(nvml) == {GPU_A: 2}


def table_rows(db_dsn: str) -> dict[str, int]:
    """Rows of every table of the product's schemas."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables").fetchall()
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for (table,) in tables}


def metric_rows(db_dsn: str) -> list[str]:
    """Tables with a row that mentions a metric name anywhere."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables").fetchall()
        mentions = "SELECT EXISTS (SELECT FROM {} t WHERE t::text LIKE '%bc_gpu_%')"
        return [table for (table,) in tables if conn.execute(mentions.format(table)).fetchone()[0]]


def test_bcd_run_pushes_to_prometheus_and_writes_no_metric_to_postgresql(
        prometheus: Prometheus, db_dsn: str, tmp_path: Path) -> None:
    prometheus.start()
    iam = write_static_iam(tmp_path / "iam.toml", [(TOKEN, "user:operator", TENANT, [statement("allow")])])
    with (running_relay(db_dsn, static_iam(iam)) as relay, running_gateway(db_dsn, tmp_path / "keys") as gateway,
          running_worker_process(db_dsn, gateway.keys), psycopg.connect(db_dsn, autocommit=True) as sql):
        def call(method: str, document: dict[str, object]) -> Any:
            return relay.data(method, document, TOKEN, TENANT)
        site = call("sites.create", {"name": "lab"})
        pool = str(call("pools.create", {"site_id": site["site_id"], "name": "h200",
                                         "gpu_model": H200_MODEL})["pool_id"])
        call("offerings.create", {"pool_id": pool, "shape": "gpu", "max_count": 8, "max_duration_seconds": 86400})
        node = join_node(gateway, str(call("joinTokens.create", {"pool_id": pool})["token"]), tmp_path, "metrics-node")
        gpu = fake.gpu_uuid(node.hostname, 0)
        with running_bcd(gateway, node.state_dir, node.hostname, node.cdi_path,
                         ["--metrics-url", prometheus.write_url, "--metrics-interval", "0.2"]) as daemon:
            wait_until(lambda: converged(sql, node, []), "the first spec observed", daemon.log)
            end = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
            reservation = str(call("reservations.create", {"pool_id": pool, "shape": "gpu", "count": 1,
                                                             "end": end})["reservation_id"])
            held = f'bc_gpu_temperature_celsius{{gpu_uuid="{gpu}", reservation="{reservation}"}}'
            [series] = wait_until(lambda: prometheus.query(held), "the booked GPU's temperature in Prometheus",
                                  daemon.log)
            assert series["metric"]["node"] == str(node.node_id)
            assert float(series["value"][1]) == 30  # the fake driver's GPU 0

            def samples() -> int:
                found = prometheus.query(f'sum(count_over_time(bc_gpu_temperature_celsius{{gpu_uuid="{gpu}"}}[5m]))')
                return int(found[0]["value"][1]) if found else 0
            before, pushed = table_rows(db_dsn), samples()
            wait_until(lambda: samples() >= pushed + 5, "five more pushes", daemon.log)
            assert table_rows(db_dsn) == before  # no table grew while metrics flowed
            assert metric_rows(db_dsn) == []  # and none holds a metric, from the session or anywhere
