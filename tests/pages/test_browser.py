"""The pages in headless Chromium: demo data loads, no console errors, links lead onward."""

import os
import shutil
from urllib.parse import urlparse

import pytest

from hud import clock, demo
from tests.attribution.conftest import HOUR

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


@pytest.fixture
def browser():
    """A headless Chromium with its console log readable."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def demo_data(settings):
    """The demo history, ending now (the pages read the real clock in a live server)."""
    settings.DEBUG = False
    demo.build(clock.now(), log=lambda _: None)


def console_errors(driver) -> list[str]:
    """SEVERE browser-console entries since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def load(driver, url: str):
    """Open `url`, waiting until the document and any charts are drawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && "
            "[...document.querySelectorAll('[data-figure]')]"
            ".every(el => el.dataset.drawn === 'true')"
        )
    )


def test_every_page_loads_with_demo_data_and_no_console_errors(browser, live_server, demo_data):
    from selenium.webdriver.common.by import By

    base = live_server.url
    load(browser, f"{base}/crcr")
    rows = browser.find_elements(By.CSS_SELECTOR, "#summary tr[data-backend]")
    assert len(rows) == len(demo.PROFILES) + 1
    assert "Pass rate" in browser.find_element(By.CSS_SELECTOR, "#summary thead").text

    load(browser, f"{base}/crcr/ascend/torch-npu")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".card.stat")) >= 12
    assert browser.find_elements(By.CSS_SELECTOR, "#pr-matrix td.cell")
    assert browser.find_elements(By.CSS_SELECTOR, "#nightly-matrix td.cell")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-pass-rate + *, [data-figure] svg")

    load(browser, f"{base}/crcr/furiosa/torch-rngd?conclusion=stuck")
    assert browser.find_elements(By.CSS_SELECTOR, "#pr-matrix td[data-status='stuck']")

    load(browser, f"{base}/crcr/metrics")
    assert len(browser.find_elements(By.CSS_SELECTOR, "[data-figure] svg")) >= 3
    load(browser, f"{base}/crcr/metrics?tab=nightly&backend=ibm/torch-spyre")
    load(browser, f"{base}/")
    assert console_errors(browser) == []

    load(browser, f"{base}/crcr/no/such-backend")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text
    # The only console entry is the 404 status of the page itself.
    assert all("no/such-backend" in e for e in console_errors(browser))


def test_reader_clicks_from_summary_to_backend_to_pr_and_commit(browser, live_server, demo_data):
    from selenium.webdriver.common.by import By

    load(browser, f"{live_server.url}/crcr")
    browser.find_element(By.LINK_TEXT, "ascend/torch-npu").click()
    load(browser, browser.current_url)
    assert urlparse(browser.current_url).path == "/crcr/ascend/torch-npu"

    pr_link = browser.find_element(By.CSS_SELECTOR, "#pr-matrix .rowhead a")
    number = pr_link.text.lstrip("#")
    pr_link.click()
    load(browser, browser.current_url)
    assert urlparse(browser.current_url).path == f"/crcr/pr/{number}"
    sections = browser.find_elements(By.CSS_SELECTOR, "section.backend-results")
    assert len(sections) >= 4
    assert browser.find_elements(By.CSS_SELECTOR, "span.status")

    browser.find_element(
        By.CSS_SELECTOR, "section.backend-results a[href^='/crcr/commit/']"
    ).click()
    load(browser, browser.current_url)
    assert urlparse(browser.current_url).path.startswith("/crcr/commit/")

    jump = browser.find_element(By.ID, "jump")
    jump.send_keys(number)
    jump.submit()
    load(browser, browser.current_url)
    assert urlparse(browser.current_url).path == f"/crcr/pr/{number}"
    assert console_errors(browser) == []


def failing_pr_number() -> int:
    """The newest demo PR with a failing job on the L4 backend (so the gate has a say)."""
    from hud import attribution
    from hud.models import Job

    failures = Job.objects.filter(
        event_type="pull_request",
        conclusion="failure",
        downstream__full_name="ascend/torch-npu",
    ).order_by("-placed_at")
    for number in dict.fromkeys(failures.values_list("pr_number", flat=True)[:50]):
        jobs = Job.objects.filter(pr_number=number).select_related("downstream")
        if any(v["verdict"] for v in attribution.verdicts_for(jobs)):
            return number
    raise AssertionError("the demo history has no PR with a judged failure")


def test_pr_page_shows_verdicts_with_evidence_and_the_gate(browser, live_server, demo_data):
    from selenium.webdriver.common.by import By

    from hud import attribution

    number = failing_pr_number()
    load(browser, f"{live_server.url}/crcr/pr/{number}")

    gate = browser.find_element(By.ID, "gate")
    state = gate.find_element(By.CSS_SELECTOR, "[data-gate-state]")
    assert state.get_attribute("data-gate-state") in ("failure", "pending", "success")
    assert state.text.strip() and "crcr/gate" in gate.text
    rule = gate.find_element(By.CSS_SELECTOR, "details.rule")
    rule.find_element(By.TAG_NAME, "summary").click()
    assert "L4" in rule.text

    assert browser.find_elements(By.CSS_SELECTOR, "#verdicts .verdict-count")
    badge = browser.find_element(By.CSS_SELECTOR, "section.backend-results .verdict")
    verdict = badge.get_attribute("data-verdict")
    css, symbol, word, meaning = attribution.BADGES[verdict]
    assert badge.text == f"{symbol} {word}" and badge.get_attribute("title") == meaning
    assert f"status-{css}" in badge.get_attribute("class")

    ours = browser.find_element(By.CSS_SELECTOR, "[data-our-verdict] details.evidence")
    ours.find_element(By.TAG_NAME, "summary").click()
    assert "Rule" in ours.text
    assert browser.find_elements(By.CSS_SELECTOR, "#check-runs-table tr[data-sync]")
    # The gate comes first, then our verdicts, then each backend's jobs.
    script = browser.execute_script
    order = [
        script("return document.querySelector(arguments[0]).getBoundingClientRect().top", sel)
        for sel in ("#gate", "#verdicts", "section.backend-results")
    ]
    assert order == sorted(order)
    assert console_errors(browser) == []


def test_pr_page_answers_is_this_my_fault_in_its_first_screen(browser, live_server, frozen_clock):
    from selenium.webdriver.common.by import By

    from hud.models import Level
    from tests.attribution.conftest import History
    from tests.pages.test_verdicts_and_gate import HEAD, L2, L4, PR, seed_reviewed_pr

    seed_reviewed_pr(frozen_clock)
    green = History(frozen_clock)
    green.backend("acc/green", Level.L3)
    green.job("acc/green", at=frozen_clock() - HOUR, head=HEAD, pr=PR, conclusion="success")
    load(browser, f"{live_server.url}/crcr/pr/{PR}")

    answer = browser.find_element(By.ID, "answer")
    # Within the first screen, above the gate and every backend's table.
    assert answer.location["y"] + answer.size["height"] < 1000
    script = browser.execute_script
    order = [
        script("return document.querySelector(arguments[0]).getBoundingClientRect().top", sel)
        for sel in ("#answer", "#gate", "#verdicts", "section.backend-results")
    ]
    assert order == sorted(order)
    lines = answer.find_elements(By.CSS_SELECTOR, "ol.answers > li")
    assert [line.get_attribute("data-backend") for line in lines] == [L4, L2]
    assert "likely caused by this PR" in lines[0].text
    assert f"{L2} also fail the same test(s) on this SHA" in lines[0].text
    assert "already broken on trunk" in lines[1].text
    passing = answer.find_element(By.ID, "passing-backends")
    assert passing.get_attribute("open") is None and "1 backend passing" in passing.text
    backends = browser.find_elements(By.CSS_SELECTOR, "section.backend-results")
    assert [b.get_attribute("data-backend") for b in backends] == [L4, L2, "acc/green"]
    assert browser.find_element(By.ID, "check-runs-box").get_attribute("open") is None

    lines[0].find_element(By.LINK_TEXT, "test_ops.TestOps::test_add").click()
    load(browser, browser.current_url)
    assert urlparse(browser.current_url).path == f"/crcr/{L4}/tests/test_ops.TestOps::test_add"
    assert "test_ops.TestOps::test_add" in browser.find_element(By.TAG_NAME, "h1").text
    assert console_errors(browser) == []
