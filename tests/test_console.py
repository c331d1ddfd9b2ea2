"""The web console (/console) in a real browser: Debian's headless Chromium driven by Selenium,
against the real relay and database (docs/console.md).

Reserving from the timeline (a click in a free stretch fills the form), a bar appearing live when
another client reserves through the API (the page follows the event stream), and tenant isolation
in the page: another tenant's booking is only "busy", and tenant B's page shows nothing of A's.
With BC_CONSOLE_SCREENSHOTS=docs the timeline screenshots are written to docs/ (how they were made).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg.types.json import Jsonb
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from fleet import MIG_2X_3G, WHOLE, make_pool
from iam_server import statement, write_static_iam
from relay_support import Relay, running_relay, static_iam

TENANT_A = "aaaaaaaa-0000-4000-8000-00000000000a"
TENANT_B = "bbbbbbbb-0000-4000-8000-00000000000b"
ALICE = "alice-console-token"
BOB = "bob-console-token"
WAIT_SECONDS = 15
T = TypeVar("T")
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium for the module (a fresh page per test: sessionStorage is per tab)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "apt-get install chromium chromium-driver (scripts/install-system-deps.sh)"
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1500,900", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def pool(db: psycopg.Connection) -> uuid.UUID:
    """Tenant A's pool: one node with GPU 0 whole and GPU 1 split into two 3g.71gb instances."""
    pool_id = make_pool(db, [[WHOLE, MIG_2X_3G]], tenant_id=TENANT_A)
    db.commit()
    return pool_id


@pytest.fixture
def relay(db_dsn: str, pool: uuid.UUID, tmp_path: Path) -> Iterator[Relay]:
    iam = write_static_iam(tmp_path / "iam.toml", [(ALICE, "user:alice", TENANT_A, [statement("allow")]),
                                                   (BOB, "user:bob", TENANT_B, [statement("allow")])])
    with running_relay(db_dsn, static_iam(iam)) as running:
        yield running


def sign_in(browser: WebDriver, relay: Relay, token: str) -> None:
    browser.get(relay.url + "/console/")
    browser.execute_script("window.sessionStorage.clear()")
    browser.get(relay.url + "/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "sign-in").click()
    wait(browser, lambda b: b.find_element(By.ID, "live").text == "live", "the event stream to connect")


def wait(browser: WebDriver, condition: Callable[[WebDriver], T], what: str) -> T:
    """What `condition` answers once it is truthy (a TimeoutException naming `what` otherwise). The
    page draws a view again whenever events come, so an element found a moment ago may be gone:
    the condition is asked again then."""
    return WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)) \
        .until(condition, f"waited {WAIT_SECONDS} s for {what}")


def click(browser: WebDriver, selector: str) -> None:
    """Click what `selector` finds, again if the page drew it anew in between."""
    wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, selector).click() or True, f"a click on {selector}")


def cells(browser: WebDriver, selector: str) -> list[str]:
    """The texts of the cells of the table row `selector` finds."""
    return wait(browser, lambda b: [cell.text for cell in b.find_element(By.CSS_SELECTOR, selector).find_elements(By.TAG_NAME, "td")],
                f"the row {selector}")


def open_timeline(browser: WebDriver) -> None:
    click(browser, "#views button[data-view=timeline]")
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, ".tl-row[data-shape]"), "the timeline's rows")


def bar_classes(browser: WebDriver, reservation_id: str) -> list[str]:
    """The classes of the reservation's bars on the timeline."""
    return [bar.get_attribute("class") or "" for bar in
            browser.find_elements(By.CSS_SELECTOR, f".bar[data-reservation-id='{reservation_id}']")]


def click_in_row(browser: WebDriver, shape: str, fraction: float) -> bool:
    """Click the first row of `shape` at `fraction` of its width (from the left)."""
    track = browser.find_element(By.CSS_SELECTOR, f".tl-row[data-shape='{shape}'] .tl-track")
    offset = int(track.size["width"] * (fraction - 0.5))  # Selenium's offsets are from the element's centre
    ActionChains(browser).move_to_element_with_offset(track, offset, 0).click().perform()
    return True


def screenshot(browser: WebDriver, tmp_path: Path, name: str) -> None:
    """The timeline as a PNG; into docs/ when BC_CONSOLE_SCREENSHOTS=docs."""
    folder = DOCS if os.environ.get("BC_CONSOLE_SCREENSHOTS") == "docs" else tmp_path
    path = folder / name
    assert browser.save_screenshot(str(path)), path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_the_files_are_served_with_a_policy_that_keeps_the_page_to_the_relay(relay: Relay) -> None:
    """No credential is needed for the files (they hold no data); only the three files are served;
    the Content-Security-Policy lets the page run only its own script and talk only to the relay."""
    with relay.client() as client:
        moved = client.get("/console")
        assert (moved.status_code, moved.headers["location"]) == (308, "/console/")
        page = client.get("/console/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy and "connect-src 'self'" in policy
        assert client.get("/console/console.js").headers["content-type"].startswith("text/javascript")
        missing = client.get("/console/app.py")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
        assert 'bc_relay_requests_total{method="console",status="200"}' in client.get("/metrics").text


def test_reserving_from_the_timeline_and_another_clients_reservation_appears_live(
        browser: WebDriver, relay: Relay, pool: uuid.UUID, tmp_path: Path) -> None:
    check_the_files_are_served_with_a_policy_that_keeps_the_page_to_the_relay(relay)
    sign_in(browser, relay, ALICE)
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, f".pool[data-pool-id='{pool}'] tr[data-node-id]"),
         "the fleet view to list the pool and its node")
    open_timeline(browser)
    shapes = wait(browser, lambda b: [row.get_attribute("data-shape") for row in b.find_elements(By.CSS_SELECTOR, ".tl-row[data-shape]")],
                  "the rows' shapes")
    assert shapes == ["gpu", "mig:3g.71gb", "mig:3g.71gb"]

    # A click in the whole GPU's row, in the future (now sits a quarter from the left), fills the form.
    wait(browser, lambda b: click_in_row(b, "gpu", 0.75), "a click in the GPU's row")
    assert browser.find_element(By.ID, "rf-shape").get_attribute("value") == "gpu"
    assert browser.find_element(By.ID, "rf-pool").get_attribute("value") == str(pool)
    start, end = (browser.find_element(By.ID, field).get_attribute("value") for field in ("rf-start", "rf-end"))
    assert start and end and datetime.fromisoformat(end) - datetime.fromisoformat(start) == timedelta(hours=1)
    # The earliest-window search (capacity.earliest) finds the same hour free.
    browser.find_element(By.ID, "rf-earliest").click()
    wait(browser, lambda b: b.find_element(By.ID, "rf-result").text.startswith("Earliest:"), "the earliest window")
    assert datetime.fromisoformat(browser.find_element(By.ID, "rf-start").get_attribute("value") or "") \
        == datetime.fromisoformat(start)

    browser.find_element(By.ID, "rf-submit").click()
    result = wait(browser, lambda b: b.find_element(By.ID, "rf-result").get_attribute("data-reservation-id"),
                  "the reservation to be made")
    assert wait(browser, lambda b: bar_classes(b, result), "the reservation's bar") == ["bar state-active"]

    # Another client reserves an instance through the API: its bar appears without a reload.
    theirs = relay.data("reservations.create", {"pool_id": str(pool), "shape": "mig:3g.71gb", "count": 1,
                                                "end": (datetime.now(UTC) + timedelta(hours=3)).isoformat()}, ALICE)
    wait(browser, lambda b: bar_classes(b, theirs["reservation_id"]), "the other client's reservation to appear live")
    assert browser.find_element(By.CSS_SELECTOR, "#events li[data-type='reservation.activated']")
    screenshot(browser, tmp_path, "console-timeline.png")

    # Reservations: extend one by an hour, release the other; the operator cordons the node with a reason.
    click(browser, "#views button[data-view=reservations]")
    row = f"#reservations tr[data-reservation-id='{result}']"
    end = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, row + " td.end").get_attribute("data-value"), "the end")
    click(browser, row + " button.extend")
    wait(browser, lambda b: datetime.fromisoformat(b.find_element(By.CSS_SELECTOR, row + " td.end").get_attribute("data-value") or "")
         == datetime.fromisoformat(end) + timedelta(hours=1), "the end an hour later")
    other = f"#reservations tr[data-reservation-id='{theirs['reservation_id']}']"
    click(browser, other + " button.release")
    wait(browser, lambda b: cells(b, other)[3] == "ended", "the released reservation to have ended")
    click(browser, "#views button[data-view=operator]")
    wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#op-node option"), "the operator's nodes")
    browser.find_element(By.ID, "op-reason").send_keys("fan failure")
    browser.find_element(By.ID, "op-apply").click()
    wait(browser, lambda b: "cordoned: fan failure" in b.find_element(By.ID, "operator-nodes").text, "the cordon and its reason")


def book_for_another_tenant(db: psycopg.Connection, pool: uuid.UUID) -> str:
    """Tenant B's booking in A's pool (as in a pool several tenants book): compute.reserve while the
    site is an operator's, then the site is A's again."""
    site = db.execute("SELECT site_id FROM compute.pools WHERE pool_id = %s", (pool,)).fetchone()[0]
    db.execute("UPDATE compute.sites SET tenant_id = NULL WHERE site_id = %s", (site,))
    request = {"tenant_id": TENANT_B, "pool_id": str(pool), "shape": "mig:3g.71gb", "count": 1,
               "start": (datetime.now(UTC) + timedelta(hours=2)).isoformat(),
               "end": (datetime.now(UTC) + timedelta(hours=6)).isoformat()}
    reservation = db.execute("SELECT compute.reserve(%s) ->> 'reservation_id'", (Jsonb(request),)).fetchone()[0]
    db.execute("SELECT compute.reservation_activate(%s)", (reservation,))
    db.execute("UPDATE compute.sites SET tenant_id = %s WHERE site_id = %s", (TENANT_A, site))
    db.commit()
    return reservation


def test_another_tenants_booking_is_only_busy_and_tenant_b_sees_nothing_of_a(
        browser: WebDriver, relay: Relay, pool: uuid.UUID, db: psycopg.Connection, tmp_path: Path) -> None:
    mine = relay.data("reservations.create", {"pool_id": str(pool), "shape": "gpu", "count": 1,
                                              "end": (datetime.now(UTC) + timedelta(hours=4)).isoformat()}, ALICE)
    theirs = book_for_another_tenant(db, pool)

    sign_in(browser, relay, ALICE)
    open_timeline(browser)
    busy = wait(browser, lambda b: [bar.text for bar in b.find_elements(By.CSS_SELECTOR, ".bar[data-busy]")], "the busy bar")
    assert busy == ["busy"]
    assert wait(browser, lambda b: bar_classes(b, mine["reservation_id"]), "A's own bar") == ["bar state-active"]
    page = browser.page_source
    assert theirs not in page and TENANT_B not in page, "nothing about whose the busy booking is"
    screenshot(browser, tmp_path, "console-timeline-busy.png")
    Select(browser.find_element(By.ID, "tl-zoom")).select_by_visible_text("30 days")
    wait(browser, lambda b: datetime.fromisoformat(b.find_element(By.ID, "timeline").get_attribute("data-end") or "")
         - datetime.fromisoformat(b.find_element(By.ID, "timeline").get_attribute("data-start") or "") == timedelta(days=30),
         "a 30-day window")

    click(browser, "#sign-out")
    # A token IAM does not know signs nobody in: the page says so and keeps asking (the static IAM file
    # knows no tenant for it, so the relay's answer is "no tenant").
    wait(browser, lambda b: b.find_element(By.ID, "token").is_displayed(), "the sign-in form")
    browser.find_element(By.ID, "token").send_keys("not-a-token")
    browser.find_element(By.ID, "sign-in").click()
    refusal = wait(browser, lambda b: b.find_element(By.ID, "error").text, "the refusal")
    assert refusal.startswith(("UNAUTHENTICATED", "ACCESS_DENIED", "INVALID_ARGUMENT")) and "Check your token" in refusal, refusal
    assert browser.find_element(By.ID, "views").is_displayed() is False
    sign_in(browser, relay, BOB)
    wait(browser, lambda b: "no sites" in b.find_element(By.ID, "fleet").text, "B's empty fleet")
    assert browser.find_elements(By.CSS_SELECTOR, "#tl-pool option") == [], "B has no pool to draw"
    page = browser.page_source
    assert str(pool) not in page and mine["reservation_id"] not in page and TENANT_A not in page

