"""One PNG per HUD page into docs/screenshots/, taken in headless Chromium.

Usage (after `make demo`, so the database holds the demo history; `make screenshots` does both):

    .venv/bin/python bench/screenshots.py                # starts its own server on a free port
    .venv/bin/python bench/screenshots.py --base-url http://127.0.0.1:8010

Not a test: the browser tests live in tests/pages/test_browser.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.chromium
OUT = ROOT / "docs" / "screenshots"


def browser(width: int = 1400, height: int = 1000):
    """Headless Debian Chromium driven by chromedriver, as the browser tests launch it."""
    from tests.support import chromium

    return chromium.driver(width, height, flags=("--hide-scrollbars",))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"server did not answer at {url}")


def shoot(driver: webdriver.Chrome, url: str, name: str, open_details: str = "") -> None:
    """Load `url`, let the charts draw, and save the full page as docs/screenshots/<name>.png.

    `open_details`: a CSS selector of <details> elements to open first (the first match).
    """
    driver.get(url)
    time.sleep(1.0)
    if open_details:
        driver.execute_script(
            "const d = document.querySelector(arguments[0]); if (d) { d.open = true; }",
            open_details,
        )
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(height, 800), 6000))
    time.sleep(0.3)
    path = OUT / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT)}  ({url})")


def run(base: str) -> None:
    """Walk the pages the way a reader would and shoot each one."""
    OUT.mkdir(parents=True, exist_ok=True)
    driver = browser()
    try:
        shoot(driver, f"{base}/", "landing")
        shoot(driver, f"{base}/crcr", "summary")
        driver.set_window_size(1400, 1000)
        driver.get(f"{base}/crcr")
        backend = driver.find_element(By.CSS_SELECTOR, "#summary tbody tr[data-backend] a")
        backend_url = backend.get_attribute("href")
        shoot(driver, backend_url, "backend")
        driver.get(backend_url)
        # A PR with a failing job, so the tour shows our verdicts and a blocking gate.
        failing = driver.find_elements(
            By.XPATH, "//table[@id='pr-matrix']//tr[td[@data-status='failure'] and th/a]"
        )
        row = failing[0] if failing else driver.find_element(By.CSS_SELECTOR, "#pr-matrix tbody tr")
        pr_url = row.find_element(By.CSS_SELECTOR, ".rowhead a").get_attribute("href")
        commit_url = row.find_element(By.CSS_SELECTOR, "td a[href^='/crcr/commit/']").get_attribute(
            "href"
        )
        shoot(driver, pr_url, "pr", open_details="[data-our-verdict] details.evidence")
        shoot(driver, commit_url, "commit", open_details="[data-our-verdict] details.evidence")
        driver.get(pr_url)
        delivery_url = driver.find_element(
            By.CSS_SELECTOR, "a[href^='/crcr/delivery/']"
        ).get_attribute("href")
        shoot(driver, delivery_url, "delivery")
        shoot(driver, f"{base}{urlsplit(backend_url).path}/tests", "tests")
        shoot(driver, f"{base}/crcr/metrics", "metrics")
        shoot(driver, f"{base}/crcr/metrics?tab=nightly", "metrics-nightly")
        shoot(driver, f"{base}/crcr/admin", "admin")
        shoot(driver, f"{base}/crcr/no/such-backend", "not-found")
    finally:
        driver.quit()


def main() -> None:
    """Parse arguments; start a local server unless --base-url is given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="a running HUD (default: start one)")
    args = parser.parse_args()
    if args.base_url:
        run(args.base_url.rstrip("/"))
        return
    port = _free_port()
    env = {**os.environ, "DEBUG": "1"}
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(f"{base}/healthz")
        run(base)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
