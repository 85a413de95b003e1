"""The pages in headless Chromium: demo data loads, no console errors, links lead onward."""

import re
from urllib.parse import urlparse

import pytest

from hud.core import clock
from hud.ops import demo
from tests.attribution.conftest import HOUR

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo_data(settings):
    """The demo history, ending now (the pages read the real clock in a live server)."""
    settings.DEBUG = False
    demo.build(clock.now(), log=lambda _: None)


def console_errors(driver) -> list[str]:
    """SEVERE browser-console entries since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _drawn(driver) -> bool:
    return driver.execute_script(
        "return document.readyState === 'complete' && "
        "[...document.querySelectorAll('[data-figure]')]"
        ".every(el => el.dataset.drawn === 'true')"
    )


def load(driver, url: str):
    """Open `url`, waiting until the document and any charts are drawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 20).until(_drawn)


def follow(driver, act) -> None:
    """Do `act` (a click, a submit) and wait until the page it leads to is drawn: the address
    read before the browser has left the current page is still that page's."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    act()
    # Mid-navigation Chromium may answer "Node with given id does not belong to the
    # document" rather than "stale element": asked again, it says stale.
    wait = WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,))
    wait.until(expected_conditions.staleness_of(page))
    wait.until(_drawn)


def test_every_page_loads_with_demo_data_and_no_console_errors(browser, live_server, demo_data):
    from selenium.webdriver.common.by import By

    base = live_server.url
    load(browser, f"{base}/crcr")
    rows = browser.find_elements(By.CSS_SELECTOR, "#summary tr[data-backend]")
    assert len(rows) == len(demo.PROFILES) + 2  # and the L1 backend and the relay probe
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
    follow(browser, browser.find_element(By.LINK_TEXT, "ascend/torch-npu").click)
    assert urlparse(browser.current_url).path == "/crcr/ascend/torch-npu"

    pr_link = browser.find_element(By.CSS_SELECTOR, "#pr-matrix .rowhead a")
    number = pr_link.text.lstrip("#")
    follow(browser, pr_link.click)
    assert urlparse(browser.current_url).path == f"/crcr/pr/{number}"
    sections = browser.find_elements(By.CSS_SELECTOR, "section.backend-results")
    assert len(sections) >= 4
    assert browser.find_elements(By.CSS_SELECTOR, "span.status")

    commit = browser.find_element(
        By.CSS_SELECTOR, "section.backend-results a[href^='/crcr/commit/']"
    )
    follow(browser, commit.click)
    assert urlparse(browser.current_url).path.startswith("/crcr/commit/")

    jump = browser.find_element(By.ID, "jump")
    jump.send_keys(number)
    follow(browser, jump.submit)
    assert urlparse(browser.current_url).path == f"/crcr/pr/{number}"
    assert console_errors(browser) == []

    # A page frames the compact view and shows the badge (X-Frame-Options DENY, sent by every
    # other page, would block even a same-origin frame).
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script(
        "const frame = document.createElement('iframe'); frame.id = 'crcr';"
        "frame.src = arguments[0]; document.body.appendChild(frame);"
        "const badge = new Image(); badge.id = 'badge'; badge.src = arguments[1];"
        "document.body.appendChild(badge);",
        f"/crcr/pr/{number}/embed",
        f"/crcr/pr/{number}/badge.svg",
    )
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script(
            "const doc = document.getElementById('crcr').contentDocument;"
            "return doc !== null && doc.querySelector('#embed-backends tr[data-backend]') !== null"
            " && document.getElementById('badge').naturalWidth === 190"
        )
    )
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

    follow(browser, lines[0].find_element(By.LINK_TEXT, "test_ops.TestOps::test_add").click)
    assert urlparse(browser.current_url).path == f"/crcr/{L4}/tests/test_ops.TestOps::test_add"
    assert "test_ops.TestOps::test_add" in browser.find_element(By.TAG_NAME, "h1").text


def click_and_wait(driver, element) -> None:
    """Click a link or submit button and wait until the next page has loaded."""
    follow(driver, element.click)


def sign_in_as(driver, base: str, login: str, next_url: str) -> None:
    """Use the sign-in page's demo button for `login`, landing on `next_url`."""
    from selenium.webdriver.common.by import By

    load(driver, f"{base}/accounts/login/?next={next_url}")
    row = driver.find_element(By.CSS_SELECTOR, f"#demo-sign-ins tr[data-login='{login}']")
    click_and_wait(driver, row.find_element(By.TAG_NAME, "button"))
    assert urlparse(driver.current_url).path == next_url
    assert login in driver.find_element(By.CSS_SELECTOR, ".topbar .who").text


def test_maintainer_requests_l3_and_admin_approves_it(browser, live_server, demo_data, settings):
    from selenium.webdriver.common.by import By

    from hud.models import PromotionRequest

    settings.CRCR_SHOW_DEMO_SIGN_INS = True
    demo.ensure_demo_users()
    base, name = live_server.url, "tenstorrent/tt-torch"

    load(browser, f"{base}/crcr/admin")
    click_and_wait(browser, browser.find_element(By.ID, "admin-sign-in"))
    assert browser.find_elements(By.CSS_SELECTOR, "#demo-sign-ins tr[data-login]")

    sign_in_as(browser, base, "tt-maintainer", f"/crcr/{name}")
    click_and_wait(browser, browser.find_element(By.ID, "request-change"))
    form = browser.find_element(By.ID, "request-form")
    assert "required" in form.find_element(By.CSS_SELECTOR, "label[for=id_to_level]").get_attribute(
        "class"
    )
    assert "%" in browser.find_element(By.ID, "gate-table").text
    form.find_element(By.ID, "id_device").clear()
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    # Refused at the field: the device error sits right before the device's input.
    error = browser.find_element(By.ID, "id_device_error")
    assert "needs a device" in error.text
    assert browser.find_element(By.ID, "id_device").get_attribute("aria-invalid") == "true"
    refusals = console_errors(browser)  # the 400 of the refused form, and nothing else
    assert refusals and all("/request" in entry and "400" in entry for entry in refusals)
    browser.find_element(By.ID, "id_device").send_keys("wormhole")
    browser.find_element(By.ID, "id_oncalls").clear()
    browser.find_element(By.ID, "id_oncalls").send_keys("tt-oncall")
    click_and_wait(
        browser, browser.find_element(By.CSS_SELECTOR, "#request-form button[type=submit]")
    )
    item = PromotionRequest.objects.get(downstream__full_name=name, status="pending")
    request_path = f"/crcr/admin/requests/{item.pk}"
    assert urlparse(browser.current_url).path == request_path
    evidence = browser.find_element(By.ID, "evidence-table").text
    assert "%" in evidence and not re.search(r"\b0\.\d{4}\b", evidence)

    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, ".topbar .who button"))
    assert urlparse(browser.current_url).path == "/crcr"
    sign_in_as(browser, base, "admin", request_path)
    approve = browser.find_element(By.CSS_SELECTOR, f"form[action='{request_path}/approve']")
    approve.find_element(By.NAME, "comment").send_keys("green for a month")
    click_and_wait(browser, approve.find_element(By.TAG_NAME, "button"))
    assert "approved" in browser.find_element(By.TAG_NAME, "h1").text
    allowlist = browser.find_element(By.CSS_SELECTOR, "pre").text
    assert "wormhole:" in allowlist and f"{name}: [tt-oncall]" in allowlist

    load(browser, f"{base}/crcr")
    row = browser.find_element(By.CSS_SELECTOR, f"#summary tr[data-backend='{name}']")
    assert "L3" in row.text and "pending upstream" in row.text
    window_start = browser.find_element(By.CSS_SELECTOR, "p.lead time[datetime]")
    assert window_start.text.endswith(" UTC")
    assert "your time: " in window_start.get_attribute("title")
    assert console_errors(browser) == []


def test_reviewer_sees_relay_health_nightly_tab_levels_then_authors_and_compact_matrix(
    browser, live_server, demo_data
):
    import datetime as dt

    from selenium.webdriver.common.by import By

    from hud.models import Delivery

    base = live_server.url
    load(browser, f"{base}/crcr")
    card = browser.find_element(By.ID, "relay-health")
    assert card.get_attribute("data-state") in ("healthy", "failing", "stale")
    assert demo.PROBE.repo in card.text
    cells = card.find_elements(By.CSS_SELECTOR, ".probe-cell")
    assert cells and all(c.get_attribute("title") for c in cells)  # the word on hover

    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "nav.tabs a[data-tab=nightly]"))
    assert "tab=nightly" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "#nightly-summary tr[data-backend]")
    nightly = {row.get_attribute("data-backend"): row for row in rows}
    for profile in demo.PROFILES[:3]:  # the demo backends that send nightlies
        sha = nightly[profile.repo].find_element(By.CSS_SELECTOR, "code.nightly-sha").text
        assert re.fullmatch(r"[0-9a-f]{7,12}", sha)
        assert nightly[profile.repo].get_attribute("data-result") in ("success", "failure")
    assert "No nightly" in nightly["furiosa/torch-rngd"].text
    assert browser.find_element(By.ID, "relay-health")

    # An old PR, from before ascend/torch-npu went L3 → L4 (ten days ago in the demo).
    old = (
        Delivery.objects.filter(
            event_type="pull_request", received_at__lt=clock.now() - dt.timedelta(days=15)
        )
        .order_by("-received_at")
        .first()
    )
    load(browser, f"{base}/crcr/pr/{old.pr_number}")
    section = browser.find_element(
        By.CSS_SELECTOR, "section.backend-results[data-backend='ascend/torch-npu']"
    )
    assert section.find_element(By.CSS_SELECTOR, ".level-then").text == "L3"
    assert section.find_element(By.CSS_SELECTOR, ".level-now").text == "now L4"
    assert f"@{old.pr_author}" in browser.find_element(By.TAG_NAME, "h1").text

    load(browser, f"{base}/crcr/ascend/torch-npu")
    author = browser.find_element(By.CSS_SELECTOR, "#pr-matrix .rowhead .author")
    assert author.text.startswith("@") and author.text[1:] in demo.AUTHORS
    click_and_wait(browser, browser.find_element(By.ID, "compact-toggle"))
    assert "compact=1" in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, "#pr-matrix tr.groups th.group[data-group=test]")
    links = browser.find_elements(By.CSS_SELECTOR, "#pr-matrix td.cell a")
    assert links and all(len(a.text) == 1 for a in links)  # one character: the symbol
    title = links[0].find_element(By.XPATH, "..").get_attribute("title")
    assert re.search(r": (success|failure|timed out|cancelled|in progress|stuck)", title)
    pin = browser.find_element(By.CSS_SELECTOR, "#pr-matrix th.job[data-job='test-nn'] a.pin")
    click_and_wait(browser, pin)
    assert "pin=test-nn" in browser.current_url and "compact=1" in browser.current_url
    first = browser.find_element(By.CSS_SELECTOR, "#pr-matrix th.job")
    assert first.get_attribute("data-job") == "test-nn" and "pinned" in first.get_attribute("class")
    # The shared link opens the same layout.
    load(browser, browser.current_url)
    assert browser.find_element(By.CSS_SELECTOR, "#pr-matrix").get_attribute("data-compact") == "1"
    assert console_errors(browser) == []


def test_an_open_page_reloads_whole_when_a_deploy_changed_its_scripts(
    browser, live_server, monkeypatch
):
    """Swapped-in content is drawn by the scripts already running; after a deploy they may not
    read it (the charts' JSON changed shape once), so new script names mean a full reload."""
    from config.storage import StaticStorage
    from hud.models import Level
    from tests.support import builders

    builders.downstream("org/first", Level.L2)
    load(browser, f"{live_server.url}/crcr")
    browser.execute_script("window.notReloaded = true")
    served = StaticStorage.url
    monkeypatch.setattr(StaticStorage, "url", lambda self, name: served(self, name) + "?v=next")
    refresh = "window.crcrHud.refreshNow().then(arguments[arguments.length - 1])"

    assert browser.execute_async_script(refresh) is True

    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 20).until(
        lambda driver: driver.execute_script("return window.notReloaded === undefined")
        and _drawn(driver)
    )
    assert "?v=next" in browser.execute_script(
        "return document.querySelector('script[src]').getAttribute('src')"
    )


def test_open_pages_refresh_in_place_and_the_off_toggle_is_remembered(browser, live_server):
    from selenium.webdriver.common.by import By

    from hud.models import Level
    from tests.support import builders

    builders.downstream("org/first", Level.L2)
    load(browser, f"{live_server.url}/crcr")
    toggle = browser.find_element(By.ID, "auto-refresh")
    assert toggle.is_displayed() and toggle.is_selected()  # on by default
    assert browser.execute_script("return window.crcrHud.autoRefreshOn()")
    assert browser.find_element(By.ID, "main").get_attribute("data-refresh-seconds") == "60"
    browser.execute_script("window.notReloaded = true")
    refresh = "window.crcrHud.refreshNow().then(arguments[arguments.length - 1])"
    # Nothing new: the content is left alone (twice, in case a minute boundary moved a time).
    assert any(browser.execute_async_script(refresh) is False for _ in range(2))

    builders.downstream("org/second", Level.L2)
    assert browser.execute_async_script(refresh) is True
    assert browser.find_elements(By.CSS_SELECTOR, "#summary tr[data-backend='org/second']")
    assert browser.execute_script("return window.notReloaded === true")  # swapped, not reloaded
    assert browser.find_element(By.CSS_SELECTOR, "p.lead time[datetime]").get_attribute(
        "data-local"
    )  # swapped-in times are localised again

    toggle.click()
    assert not browser.execute_script("return window.crcrHud.autoRefreshOn()")
    load(browser, f"{live_server.url}/crcr/org/first")
    assert not browser.find_element(By.ID, "auto-refresh").is_selected()
    assert not browser.execute_script("return window.crcrHud.autoRefreshOn()")
    # Pages without live content offer no toggle.
    load(browser, f"{live_server.url}/crcr/metrics")
    assert not browser.find_element(By.ID, "auto-refresh").is_displayed()
    assert console_errors(browser) == []
